"""A jail's log: the file its stdout and stderr go to, read by the judge
while the jail runs. The jail writes through the same open file, so the
judge reads at offsets (pread) and never moves its position.

What it holds is what the learner's code printed, and, when a jail hangs or
dies, faulthandler's stack: the line a check that timed out was in, the
frames of a crash. `shown` turns what was printed into the capped text a
failing check shows."""

from __future__ import annotations

import os
import re
import signal
import tempfile
import time
import weakref

# What a check shows of the learner's prints (stdout and stderr, as written): at most this many bytes and lines.
PRINTED_BYTES, PRINTED_LINES = 8192, 50
CRASH = b"Fatal Python error: "  # how faulthandler's dump of a dying process starts
_LOGS: weakref.WeakSet = weakref.WeakSet()  # every log of this process's jails (see one_is_full)


class JailLog:
    def __init__(self):
        self.file = tempfile.TemporaryFile()
        self.read_to = 0  # how much of it take() has taken
        self.dump_at: int | None = None  # where the stack dumped on SIGUSR1 starts: not printed
        _LOGS.add(self)

    def fileno(self) -> int:
        return self.file.fileno()

    def close(self) -> None:
        self.file.close()

    def take(self, limit: int = PRINTED_BYTES + 1, *, last: bool = False) -> tuple[bytes, int]:
        """(at most `limit` bytes of what was written since the last take, the first ones or with `last` the
        last ones, how many more were written)."""
        if self.file.closed:
            return b"", 0
        end = os.fstat(self.fileno()).st_size
        if self.dump_at is not None:
            end = min(end, self.dump_at)
        if end <= self.read_to:
            return b"", 0
        size = min(end - self.read_to, limit)
        data = os.pread(self.fileno(), size, end - size if last else self.read_to)
        more, self.read_to = end - self.read_to - len(data), end
        return data, more

    def running_line(self, pid: int, module: str) -> str:
        """' (it was running k.py:5 in f)': the innermost line of `module` that the hung process pid is in,
        from the stack faulthandler writes here on SIGUSR1 (grader.jail.server registers it); '' when the
        process says nothing within a second."""
        self.dump_at = start = os.fstat(self.fileno()).st_size
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            return ""
        dump, quiet = b"", time.monotonic() + 1.0
        while time.monotonic() < quiet:
            time.sleep(0.02)
            grown = os.pread(self.fileno(), 64 * 1024, start)
            if grown != dump:
                dump, quiet = grown, min(time.monotonic() + 0.1, quiet)  # until it stops growing
        frame = re.search(rf'File "[^"]*/{re.escape(module)}\.py", line (\d+) in (\S+)', dump.decode(errors="replace"))
        return f" (it was running {module}.py:{frame[1]} in {frame[2]})" if frame else ""

    def tail(self, size: int = 3000) -> str:
        end = os.fstat(self.fileno()).st_size
        return os.pread(self.fileno(), min(size, end), max(0, end - size)).decode(errors="replace")


def one_is_full(cap: int) -> bool:
    """Whether an open jail log holds cap bytes or more: its process printed all that its limit on a file
    lets it (a write past it fails with EFBIG, as a write past it to any other file does)."""
    return any(not log.file.closed and os.fstat(log.fileno()).st_size >= cap for log in list(_LOGS))


def shown(taken: list[tuple[bytes, int]], last: bool = False) -> str:
    """What the takes of one check's logs (their bytes, how many more) show: the first PRINTED_LINES lines
    and PRINTED_BYTES bytes, then a line saying how much was cut (with `last`, the last ones after such a
    line: takes of the end, for a run whose last part is the one that matters); '' when nothing. A dying
    process's dump is left out (the grader's frames; the check's message names the learner's line).
    Control characters are left for the report to escape (grader.kata.text.printable)."""
    data, more = b"".join(d for d, _ in taken), sum(m for _, m in taken)
    crash = data.find(CRASH)
    if crash >= 0:
        data, more = data[:crash], 0
    if not data:
        return ""
    out = data[-PRINTED_BYTES:] if last else data[:PRINTED_BYTES]
    lines = out.split(b"\n")
    if len(lines) > PRINTED_LINES + (lines[-1] == b""):
        kept = lines[-PRINTED_LINES - (lines[-1] == b"") :] if last else lines[:PRINTED_LINES] + [b""]
        out = b"\n".join(kept)
    cut = len(data) - len(out) + more
    text = out.decode(errors="backslashreplace")
    if cut and last:
        return f"[... {cut:,} earlier bytes printed, not shown]\n" + text
    if cut:
        text += ("" if text.endswith("\n") else "\n") + f"[... {cut:,} more bytes printed, not shown]\n"
    return text
