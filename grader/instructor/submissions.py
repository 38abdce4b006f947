"""Submissions as an instructor receives them: one folder or one zip file per
student, with the kata modules anywhere inside (a repository's `katas/`
one or more levels down, or the modules at the top).

Nothing here imports or runs a submission; grading does that in the jail.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from pathlib import Path
from typing import Iterable

MAX_DEPTH = 8  # folders below a submission's top that are searched for kata modules
MAX_ZIP_FILES = 5000  # members a submission zip may hold
MAX_ZIP_BYTES = 256 * 1024 * 1024  # what a submission zip may unpack to
SKIPPED = frozenset({"__MACOSX", "__pycache__", "node_modules", "site-packages", ".git", ".venv", "venv"})


class SubmissionError(ValueError):
    """A submission cannot be graded as given; the message says why and what is expected."""


def find_katas_dir(root: Path, names: Iterable[str]) -> Path:
    """The folder under root (root included) that holds the most of the kata
    modules `names` (kv_cache.py, ...) as regular files. Ties go to the
    shallowest folder, then to one called `katas`, then by path. Symlinked
    folders, hidden folders and virtual environments are not searched.
    SubmissionError when no folder holds any."""
    root = Path(root)
    if not root.is_dir():
        raise SubmissionError(f"{root} is not a folder")
    wanted = {f"{n}.py" for n in names}
    best: tuple | None = None
    for here, dirs, files in os.walk(root):
        path = Path(here)
        depth = len(path.relative_to(root).parts)
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIPPED and depth < MAX_DEPTH and not (path / d).is_symlink()
        )
        found = [f for f in files if f in wanted and stat.S_ISREG(os.lstat(path / f).st_mode)]
        if found:
            key = (-len(found), depth, path.name != "katas", str(path))
            if best is None or key < best:
                best = key
    if best is None:
        raise SubmissionError(f"no kata modules ({', '.join(sorted(wanted))}) anywhere in {root}")
    return Path(best[3])


# What unpacking one member can raise besides SubmissionError: a name the file system refuses (too
# long, a file where a folder must go), a corrupt or truncated member, an encrypted one, a compression
# method zipfile lacks.
UNPACK_ERRORS = (OSError, zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError, ValueError)


def unpack_zip(archive: Path, dest: Path) -> Path:
    """Unpack a submission zip into dest (created) and return dest. Refuses,
    with SubmissionError, an archive that is not a zip, holds paths that leave
    dest, links, or more than MAX_ZIP_FILES members or MAX_ZIP_BYTES, and one
    with a member that cannot be unpacked (named in the message): an entry
    that is both a file and a folder, a name too long for the file system, a
    corrupt, encrypted or unsupported member."""
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SubmissionError(f"{archive.name} is not a readable zip file ({exc})") from None
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with zf:
        members = zf.infolist()
        if len(members) > MAX_ZIP_FILES:
            raise SubmissionError(f"{archive.name} holds {len(members)} files; at most {MAX_ZIP_FILES} are unpacked")
        if sum(m.file_size for m in members) > MAX_ZIP_BYTES:
            raise SubmissionError(f"{archive.name} unpacks to more than {MAX_ZIP_BYTES // 2**20} MiB")
        for m in members:
            try:
                _unpack_member(archive, zf, m, dest)
            except UNPACK_ERRORS as exc:
                raise SubmissionError(f"{archive.name}: {m.filename!r} cannot be unpacked ({exc})") from None
    return dest


def _unpack_member(archive: Path, zf: zipfile.ZipFile, m: zipfile.ZipInfo, dest: Path) -> None:
    """Unpack one member of zf into dest, or SubmissionError for a link, a path outside dest or too many bytes."""
    if stat.S_ISLNK(m.external_attr >> 16):
        raise SubmissionError(f"{archive.name} holds a link ({m.filename}); submit the files themselves")
    top = dest.resolve()
    target = (dest / m.filename).resolve()
    if target != top and top not in target.parents:
        raise SubmissionError(f"{archive.name} holds a path outside its folder: {m.filename!r}")
    if m.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with zf.open(m) as src, open(target, "wb") as out:
        written = 0
        while chunk := src.read(1 << 20):
            written += len(chunk)
            if written > MAX_ZIP_BYTES:
                raise SubmissionError(f"{archive.name} unpacks to more than {MAX_ZIP_BYTES // 2**20} MiB")
            out.write(chunk)


def list_students(folder: Path) -> list[tuple[str, Path]]:
    """(student, their folder or zip) for every entry of a submissions folder,
    by name; hidden entries and other files are left out. A zip's student is
    its name without `.zip`. SubmissionError when folder is not a folder or
    two entries name the same student."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SubmissionError(f"{folder} is not a folder of submissions (one folder or .zip per student)")
    out: dict[str, Path] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_dir():
            name = entry.name
        elif entry.suffix.lower() == ".zip" and entry.is_file():
            name = entry.stem
        else:
            continue
        if name in out:
            raise SubmissionError(f"two submissions for student {name!r}: {out[name].name} and {entry.name}")
        out[name] = entry
    return list(out.items())
