"""Which implementation a grading run tests, and how its kata modules load.

A target is "katas" (the learner's modules: their work folder, found by
workdir()), "reference" (the reference solutions) or a directory holding kata
modules named like the stubs (kv_cache.py, quantization.py, ...), such as a
student's submission.

The work folder is $KATA_WORKDIR when that is set (it must be a folder), else
the nearest folder at or above the current one that holds the marker file
`kata init` writes (MARKER), else katas/ of this checkout (a clone, or an
editable install of one). An installed copy (a wheel) has no checkout: there,
outside a folder `kata init` made, there is no work folder, and no command
makes one behind the learner's back.

Kata modules are never imported here: grader.jailer.jail_client copies the file into a
jail process and talks to it.
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KATAS_DIR = ROOT / "katas"  # the stubs as shipped
SOLUTIONS_DIR = ROOT / "reference" / "solutions"
# What `kata init` writes into the folder it fills: commands run there, or in a folder below it, work on it.
MARKER = "kata.toml"
# CHECKLIST.md: at the top of a checkout; a wheel carries it inside this package (setup.py copies it there).
CHECKLISTS = (ROOT / "CHECKLIST.md", Path(__file__).resolve().parent / "CHECKLIST.md")

# A learner's module may drive the reference model, never the reference solutions.
USES_SOLUTIONS = re.compile(r"reference\s*\.\s*solutions|from\s+reference\s+import\s+[^\n]*\bsolutions\b")


class NoKataFolder(LookupError):
    """No work folder could be found: the message says what to run (the CLI makes it a usage error)."""


def _marked_folder(start: Path) -> Path | None:
    """The nearest folder at or above start that holds MARKER, or None."""
    start = start.resolve()
    return next((folder for folder in (start, *start.parents) if (folder / MARKER).is_file()), None)


def workdir(root: Path = ROOT) -> Path:
    """Where the learner's kata modules live: $KATA_WORKDIR, else the nearest folder at or above the
    current one holding MARKER, else katas/ of root when root is a checkout (only a checkout has
    pyproject.toml beside its packages; an installed wheel's root is site-packages). NoKataFolder
    when none of these exists."""
    named = os.environ.get("KATA_WORKDIR")
    if named:
        path = Path(named).expanduser().resolve()
        if not path.is_dir():
            raise NoKataFolder(
                f"KATA_WORKDIR is {named}, which is not a folder: run `kata init {named}` to make it one "
                "with the stubs, or unset KATA_WORKDIR"
            )
        return path
    found = _marked_folder(Path.cwd())
    if found is not None:
        return found
    if (root / "pyproject.toml").is_file() and (root / "katas").is_dir():
        return root / "katas"
    raise NoKataFolder(
        f"no kata folder here ({Path.cwd()} and the folders above it hold no {MARKER}): run `kata init DIR` "
        "to copy the stubs into DIR, then run kata commands inside DIR"
    )


def checklist() -> Path | None:
    """CHECKLIST.md of this copy of the katas (the checkout's, else the one a wheel carries), or None."""
    return next((path for path in CHECKLISTS if path.is_file()), None)


def resolve(target: str) -> Path:
    """The directory a target names, or a ValueError saying what targets exist ('katas' raises
    NoKataFolder where there is no work folder: see workdir)."""
    if target == "katas":
        return workdir()
    if target == "reference":
        return SOLUTIONS_DIR
    path = Path(target).expanduser().resolve()
    if not target or not path.is_dir():  # "" would be the current folder, which nobody named
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


def why_not_a_module(path: Path) -> str:
    """Why the file at path cannot be loaded as a kata's module, in the learner's words, or '' when it
    is a regular file of Python source text (its bytes are read, never run)."""
    where = f"{path.name} in {path.parent}"
    if path.is_symlink():
        return f"no module {where} (is a symlink; submit the file itself)"
    if path.is_dir():
        return f"{where} is a folder, not a file: the kata's module is one Python file of that name"
    if not path.exists():
        return f"no module {where} (does not exist)"
    if not path.is_file():
        return f"{where} is not a regular file: the kata's module is one Python file of that name"
    data = path.read_bytes()
    if b"\0" in data:
        return f"{where} is not a text file of Python source: it holds NUL bytes, as a binary file does"
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError):
        return (
            f"{where} is not a text file of Python source: its bytes are not UTF-8 text "
            "(nor text of an encoding its first lines declare)"
        )
    return ""
