"""A uid-mode jail whose Python packages lie in a folder other users cannot read (a clone in a private
home folder, or in `mktemp -d`, with its virtual environment inside): the jail runs as a uid of its own,
so it has only what its zygote imported before the fork (grader.jail.server.PRELOADED), NumPy's lazily
imported submodules among them."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent.parent
UID_TEST = (
    "tests/grading/test_judge.py::"
    "test_a_uid_mode_jail_raises_and_seeds_from_entropy_where_it_cannot_read_the_standard_library[forked]"
)


def private_venv(folder: Path) -> Path:
    """A virtual environment in folder (made 0700) holding, as links, every package of the one these
    tests run in: its Python reads them, another uid cannot even reach them. Returns its python."""
    folder.mkdir(mode=0o700)
    venv = folder / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if entry.name != "__pycache__":
            (site / entry.name).symlink_to(entry)
    return venv / "bin" / "python"


@pytest.mark.slow  # a virtual environment of its own, and a pytest run in it
@pytest.mark.skipif(os.geteuid() != 0, reason="uid mode needs root")
def test_a_uid_mode_jail_draws_random_numbers_where_the_virtual_environment_is_private(tmp_path):
    python = private_venv(tmp_path / "private")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-n", "0", "-p", "no:randomly", UID_TEST],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
