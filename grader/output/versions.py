"""The versions a grade is made with: Python, and the packages whose behaviour
decides it (numpy computes the answers, pytest runs the checks, Hypothesis
draws their examples). The JSON grade and Gradescope's results.json record
them; grader.instructor.pins compares them with the versions the kits pin."""

from __future__ import annotations

import functools
import platform

RECORDED = ("numpy", "pytest", "hypothesis")


@functools.cache
def _installed() -> tuple[tuple[str, str], ...]:
    import importlib.metadata  # here, when a grade is recorded, not at every command's start

    found = [("python", platform.python_version())]
    for name in RECORDED:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            found.append((name, "not installed"))
    return tuple(found)


def installed() -> dict[str, str]:
    """{"python": "3.11.7", "numpy": ..., "pytest": ..., "hypothesis": ...}: what this process grades with."""
    return dict(_installed())
