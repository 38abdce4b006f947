"""The versions the kits pin (constraints.txt, beside this module) and how far
the running grader is from them.

The Gradescope and Classroom kits install the grader's dependencies with
`pip install -c constraints.txt`; `kata grade-all` and `kata gradescope run`
warn, in one line, when the Python, numpy, pytest or Hypothesis they grade
with (grader.output.versions) differ from the pinned ones, since a grade can
change when one of them does.
"""

from __future__ import annotations

import re
from pathlib import Path

CONSTRAINTS = Path(__file__).with_name("constraints.txt")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")
_PYTHON = re.compile(r"^#\s*python:\s*(\d+\.\d+)\s*$")


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path: Path | None = None) -> dict[str, str]:
    """Each package the constraints file (default: CONSTRAINTS) pins (name==version lines, by canonical
    name) -> its version, and "python" -> the X.Y its `# python: X.Y` line names.
    ValueError names a line that is neither a pin, a comment nor blank."""
    path = Path(path or CONSTRAINTS)
    pins = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        python, pin = _PYTHON.match(line.strip()), _PIN.match(line.strip())
        if python:
            pins["python"] = python.group(1)
        elif pin:
            pins[canonical(pin.group(1))] = pin.group(2)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise ValueError(f"{path}:{number}: {line.strip()!r} is not a pin (name==version) or a comment")
    return pins


def drift(installed: dict[str, str], pins: dict[str, str]) -> str:
    """One line saying which of the installed versions (grader.output.versions.installed())
    differ from the pinned ones (Python by its X.Y), or "" when none does."""
    differ = []
    for name, have in installed.items():
        want = pins.get(canonical(name))
        if want is None:
            continue
        same = have == want or (name == "python" and have.startswith(want + "."))
        if not same:
            differ.append(f"{name} {have} (pinned: {want})")
    if not differ:
        return ""
    return (
        f"warning: grading with {', '.join(differ)}; a grade may differ from one made with the versions "
        f"{Path(CONSTRAINTS).name} pins (pip install -c {CONSTRAINTS} ... installs them)"
    )
