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
    user named is checked first (grader.kata.writable), so that only the grader's own folders are made here."""
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
