"""The one way the grader writes a file it keeps: whole or not at all, and never
through a name someone else could have planted.

A file is written to a temporary file that `tempfile.mkstemp` makes beside it
(a random name, created with O_EXCL, so a link or file planted there in advance
is never opened), then renamed over the destination. A rename replaces a link
at the destination itself instead of following it, so a planted
`results.json -> /etc/passwd` is replaced, and /etc/passwd is left alone. A
reader, or a Ctrl-C, never sees half a file.

JSON goes through `write_json`: indented, a newline at the end, and strictly
JSON: a NaN or an infinity (which Python's json would write as the non-JSON
`NaN`) is written as null.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path

MODE = 0o644  # what the file is made as: mkstemp's own 0600 would hide a gradebook from its owner's group


def write_atomically(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write data (text is encoded as UTF-8) to path, creating its folder; returns the path. A path a
    user named is checked first (why_not_writable), so that only the grader's own folders are made here."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def why_not_writable(path: str | os.PathLike) -> str:
    """Why a file cannot be written at path, asked before any work: '' when it can, else what is in the
    way (a folder there, no folder to hold it, a folder that takes no new file). Its folder must exist:
    a command makes no folder it was not asked to."""
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        return f"{path} is a folder; give the path of a file"
    if os.path.lexists(path) and not (path.is_file() or path.is_symlink()):
        return f"{path} is not a regular file"
    return _why_not_into(path.parent)


def why_not_folder(path: str | os.PathLike) -> str:
    """Why a command cannot write into the folder path, which it makes when absent (never the folders
    above it): '' when it can, else what is in the way. Asked before any work."""
    path = Path(path).expanduser().absolute()
    if os.path.lexists(path):
        return _why_not_into(path) if path.is_dir() else f"{path} is a file, not a folder"
    return _why_not_into(path.parent)


def _why_not_into(folder: Path) -> str:
    """Why no new file can be made in folder: '' when one can (tried: a file made and removed at once)."""
    if not folder.is_dir():
        above = folder
        while not os.path.lexists(above):
            above = above.parent
        if above.is_dir():
            return f"the folder {folder} does not exist; create it first"
        return f"{above} is a file, not a folder"
    try:
        fd, probe = tempfile.mkstemp(prefix=".kata-probe-", dir=folder)
    except OSError as exc:
        return f"no file can be made in {folder} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return ""


def json_text(data) -> str:
    """data as strict JSON text: indented, non-finite floats as null, a newline at the end."""
    return json.dumps(_finite(data), indent=1, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, data) -> Path:
    """Write data to path as `json_text`, atomically; returns the path."""
    return write_atomically(path, json_text(data))


def _finite(value):
    """value with every NaN or infinite float, however deep in lists and dicts, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
