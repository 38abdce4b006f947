"""CHECKLIST.md, put together from the kata folders: a header, then each kata's checklist.md in order.

Each kata's section lives in its folder (grader/suites/NAME/checklist.md, between `<!-- NAME -->` and
`<!-- end NAME -->`); the file at the top of the checkout is generated from them, and a test fails
when it is not current. `python -m grader.kata.checklist --write` writes it there; without --write
it prints it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from grader.kata.registry import load_registry, registry_folder
from grader.kata.target import ROOT

CHECKLIST_FILE = "checklist.md"  # a kata's section, in its folder
HEADER = """\
# Checklist

The katas in the order to do them. Each task is done when `kata grade KATA`
shows it `pass`; `kata hint KATA TASK` nudges you when it does not. A task
that is correct but too slow shows `slow`.
"""


def checklist_text(registry: Path | None = None) -> str:
    """CHECKLIST.md as the registry's folders (grader/suites/ unless told) make it: the header, then
    each kata's checklist.md in the katas' order, a blank line between them. A ValueError names a
    kata folder without one."""
    folder = registry_folder(registry)
    sections = []
    for kata in load_registry(folder):
        path = folder / kata.name / CHECKLIST_FILE
        if not path.is_file():
            raise ValueError(f"kata {kata.name!r} has no {path}: write its section of CHECKLIST.md there")
        sections.append(path.read_text(encoding="utf-8"))
    return "\n".join([HEADER, *sections])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Put CHECKLIST.md together from the kata folders' checklist.md.")
    parser.add_argument("--write", action="store_true", help=f"write it to {ROOT / 'CHECKLIST.md'} (else print it)")
    args = parser.parse_args(argv)
    text = checklist_text()
    if args.write:
        (ROOT / "CHECKLIST.md").write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
