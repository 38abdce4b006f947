"""Which implementation a grading run tests, and how its kata modules load.

A target is "katas" (the learner's modules: katas/ in this checkout, or the
directory the KATA_WORKDIR environment variable names), "reference" (the
reference solutions) or a directory holding kata modules named like the
stubs (kv_cache.py, quantization.py, ...), such as a student's submission.

Kata modules are never imported here: grader.grading.jail_client copies the file into a
jail process and talks to it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KATAS_DIR = ROOT / "katas"  # the stubs as shipped
SOLUTIONS_DIR = ROOT / "reference" / "solutions"

# A learner's module may drive the reference model, never the reference solutions.
USES_SOLUTIONS = re.compile(r"reference\s*\.\s*solutions|from\s+reference\s+import\s+[^\n]*\bsolutions\b")


def workdir() -> Path:
    """Where the learner's kata modules live: $KATA_WORKDIR, else katas/ in this checkout."""
    return Path(os.environ.get("KATA_WORKDIR") or KATAS_DIR).expanduser().resolve()


def resolve(target: str) -> Path:
    """The directory a target names, or a ValueError saying what targets exist."""
    if target == "katas":
        return workdir()
    if target == "reference":
        return SOLUTIONS_DIR
    path = Path(target).expanduser().resolve()
    if not path.is_dir():
        raise ValueError(
            f"target must be 'katas', 'reference' or a directory of kata modules; {target!r} is none of these"
        )
    return path


def describe(target: str) -> str:
    """A one-line description of a target for report headers."""
    if target == "katas":
        return f"the learner's katas ({workdir()})"
    if target == "reference":
        return f"the reference solutions ({SOLUTIONS_DIR})"
    return f"the kata modules in {resolve(target)}"


def kata_path(target: str, kata: str) -> Path:
    return resolve(target) / f"{kata}.py"
