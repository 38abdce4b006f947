"""Which implementation a grading run tests, and how its kata modules load.

A target is "katas" (the learner's modules: katas/ in this checkout, or the
directory the KATA_WORKDIR environment variable names), "reference" (the
reference solutions) or a directory holding kata modules named like the
stubs (kv_cache.py, quantization.py, ...), such as a student's submission.

Kata modules are loaded from their file under a private module name, so the
same suite can grade any of the three without touching sys.path.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
KATAS_DIR = ROOT / "katas"  # the stubs as shipped
SOLUTIONS_DIR = ROOT / "reference" / "solutions"

# A learner's module may drive the reference model, never the reference solutions.
_USES_SOLUTIONS = re.compile(r"reference\s*\.\s*solutions|from\s+reference\s+import\s+[^\n]*\bsolutions\b")


class KataLoadError(Exception):
    """The kata module under test could not be loaded; the message says why."""


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
        raise ValueError(f"target must be 'katas', 'reference' or a directory of kata modules; {target!r} is none of these")
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


def load(target: str, kata: str) -> ModuleType:
    """Import the module of `kata` from `target`, once per process.

    Raises KataLoadError with a learner-readable message when the file is
    missing, does not import, or uses the reference solutions.
    """
    name = f"_kata_under_test.{kata}"
    cached = sys.modules.get(name)
    if cached is not None:
        return cached
    path = kata_path(target, kata)
    if not path.is_file():
        raise KataLoadError(f"no module {path.name} in {path.parent}")
    source = path.read_text(encoding="utf-8", errors="replace")
    if target != "reference" and _USES_SOLUTIONS.search(source):
        raise KataLoadError(f"{path.name} uses the reference solution; a kata must be your own code")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_kata_under_test", ModuleType("_kata_under_test"))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        raise KataLoadError(f"{path.name} has a syntax error at line {exc.lineno}: {exc.msg}") from None
    except BaseException as exc:  # SystemExit too: importing must not end the run
        del sys.modules[name]
        raise KataLoadError(f"importing {path.name} raised {type(exc).__name__}: {exc}") from None
    if target != "reference":
        for attr, value in vars(module).items():
            origin = getattr(value, "__module__", None) or getattr(value, "__name__", "")
            if isinstance(origin, str) and origin.startswith("reference.solutions"):
                del sys.modules[name]
                raise KataLoadError(f"{path.name} uses the reference solution ({attr}); a kata must be your own code")
    return module
