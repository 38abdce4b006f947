"""Where an interview reads the time, and how it writes a time or a span of it.

Every reading of the time goes through a Clock, so tests drive a whole
interview with a fake one.
"""

from __future__ import annotations

from datetime import datetime, timezone


class Clock:
    """Where an interview reads the time: the system's clock, in UTC. Tests
    pass a fake one to the CLI as its context object (CliRunner.invoke(...,
    obj=clock))."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


def duration(seconds: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour on."""
    total = int(max(0.0, seconds))
    h, rest = divmod(total, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def minutes_text(n: int) -> str:
    return f"{n} minute{'' if n == 1 else 's'}"


def local_time(when: datetime) -> str:
    """HH:MM on this machine's clock face."""
    return when.astimezone().strftime("%H:%M")


def stamp(when: datetime) -> str:
    """The date and time in UTC, to the second."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
