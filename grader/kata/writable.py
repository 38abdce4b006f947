"""Whether a command can write the file or folder it was told to, asked before any work (the CLI's
output options, a benchmark's --plot): the words for what is in the way, or '' when nothing is."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
