"""What a jail has written, watched from the judge: the cap on all a jail's files together.

RLIMIT_FSIZE caps each file a jail writes, in every mode. In the root mode its working folder is
also a tmpfs of confine.WORK_MB (grader.jail.confine), so the kernel caps all its files together and
its root holds nothing else it can write. The other modes have no such folder (the uid and plain
modes share the grader's file system; bubblewrap binds the working folder from it), so the judge
adds up what the jail's places hold, at most every CHECK_SECONDS while it waits for the learner's
jail and before each request to it (grader.jailer.jail_client), and kills a jail that holds more
than WORK_MB or WORK_ENTRIES files and folders: the check fails as a crash that says so.

Where a jail writes, by mode:

- every mode: its own folder (the judge's tempfile folder for it), which holds its working
  folder, its cwd, HOME and TMPDIR; what the judge put there (its copy of the submission, its
  runtime) is counted once at the start and not held against it;
- uid: also what its uid owns at the top of the folders every user may write (SHARED: /tmp,
  /var/tmp, /dev/shm); removed with the jail. Deeper world-writable folders are not watched: a
  disk quota per uid is the only cap that sees every place;
- plain: anything of the user's too, which is not watched (the plain mode does not stand between
  a learner and their own files; see grader/jail/confine.py).
"""

from __future__ import annotations

import os
import shutil
import stat
import time

from grader.jail import confine

WORK_BYTES = confine.WORK_MB << 20  # all a jail's files together, as the root mode's tmpfs holds
WORK_ENTRIES = 10_000  # files and folders a jail may make
CHECK_SECONDS = 0.1  # how often the judge adds them up while it waits for the jail (at most)
SHARED = ("/tmp", "/var/tmp", "/dev/shm")  # the folders every uid may write, watched in the uid mode


class SpaceExceeded(Exception):
    """A jail wrote more than its cap; the message says so, in the learner's words."""


class Space:
    """The places one jail writes (its folder, and in the uid mode what its uid owns in SHARED)."""

    def __init__(self, folder: str, uid: int | None):
        self.folder, self.uid = folder, uid  # uid: the jail's own (uid mode), whose files in SHARED are its
        self._tops: dict[str, tuple[int, list[str]]] = {}  # shared folder -> (its mtime, the uid's entries)
        self.given = self._usage(WORK_BYTES * 4, WORK_ENTRIES * 4)  # what the judge put there itself
        self.checked = time.monotonic()

    def check(self) -> None:
        """SpaceExceeded if the jail holds more than WORK_BYTES or WORK_ENTRIES (added up at most every
        CHECK_SECONDS, and only until past one)."""
        if time.monotonic() - self.checked < CHECK_SECONDS:
            return
        self.checked = time.monotonic()
        given_bytes, given_entries = self.given
        used, entries = self._usage(WORK_BYTES + given_bytes, WORK_ENTRIES + given_entries)
        if used - given_bytes > WORK_BYTES:
            raise SpaceExceeded(f"your code wrote more than {confine.WORK_MB} MiB of files (the cap on all of them)")
        if entries - given_entries > WORK_ENTRIES:
            raise SpaceExceeded(f"your code made more than {WORK_ENTRIES:,} files and folders (the cap)")

    def _usage(self, max_bytes: int, max_entries: int) -> tuple[int, int]:
        """(bytes on disk, entries) of every place, counted until either passes its maximum."""
        total = [0, 0]
        for place in [self.folder, *self._owned()]:
            if not _add(place, total, max_bytes, max_entries):
                break
        return total[0], total[1]

    def _owned(self) -> list[str]:
        """The entries the jail's uid owns at the top of SHARED (uid mode), each folder listed again only
        when it changed."""
        if self.uid is None:
            return []
        out = []
        for top in SHARED:
            try:
                mtime = os.stat(top).st_mtime_ns
                if self._tops.get(top, (None,))[0] != mtime:
                    with os.scandir(top) as entries:
                        mine = [e.path for e in entries if e.stat(follow_symlinks=False).st_uid == self.uid]
                    self._tops[top] = (mtime, mine)
            except OSError:
                continue
            out += self._tops[top][1]
        return out

    def remove_shared(self) -> None:
        """Remove what the jail's uid left in SHARED (once the jail is dead)."""
        self._tops.clear()
        for path in self._owned():
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.remove(path)
                except OSError:
                    pass


def _add(path: str, total: list[int], max_bytes: int, max_entries: int) -> bool:
    """Add the blocks and entries of path (a folder's all the way down, links not followed) to total;
    False once total passes a maximum."""
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return True
    total[0], total[1] = total[0] + top.st_blocks * 512, total[1] + 1
    stack = [path] if stat.S_ISDIR(top.st_mode) else []
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    try:
                        total[0] += entry.stat(follow_symlinks=False).st_blocks * 512
                    except FileNotFoundError:
                        continue
                    total[1] += 1
                    if total[0] > max_bytes or total[1] > max_entries:
                        return False
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except FileNotFoundError:
            continue
        except OSError:  # a folder it made unreadable (plain and bwrap modes: the judge's own uid)
            raise SpaceExceeded("your code made a folder the grader cannot read, so its files cannot be counted")
    return total[0] <= max_bytes and total[1] <= max_entries
