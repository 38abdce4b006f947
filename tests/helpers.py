"""What several of the project's test files share: the toy kata's paths,
short grading limits, and finding a grading's leftover processes."""

from __future__ import annotations

import os
from pathlib import Path

from grader.runner import Limits

TOY = Path(__file__).parent / "fixtures" / "toy"  # a tiny kata, its suite and registry, for the grader's own tests
SUBS = TOY / "subs"  # its fixture submissions, one folder each
FAST = Limits(test_seconds=4, kata_seconds=60)  # short, so the hang and loop fixtures finish quickly


def processes_under(folder) -> list[int]:
    """Processes whose command line or working directory lies in folder (a
    grading's TMPDIR: its judges run there and its jails' sys.path names it)."""
    found, mark = [], str(folder).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            cwd = os.readlink(f"/proc/{pid}/cwd").encode()
        except OSError:
            continue
        if mark in cmd or cwd.startswith(mark):
            found.append(int(pid))
    return found
