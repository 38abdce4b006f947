"""The one build step pyproject.toml cannot say: a wheel carries CHECKLIST.md, which sits at the top of the
checkout outside every package, as grader/kata/CHECKLIST.md, where `kata init` copies it from
(grader.kata.target.checklist). Everything else about the package is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CHECKLIST = Path(__file__).resolve().parent / "CHECKLIST.md"


class BuildWithChecklist(build_py):
    """build_py, then CHECKLIST.md into the built grader/kata/ (an editable install reads the checkout's own)."""

    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):
            self.copy_file(str(CHECKLIST), str(Path(self.build_lib) / "grader" / "kata" / "CHECKLIST.md"))


setup(cmdclass={"build_py": BuildWithChecklist})
