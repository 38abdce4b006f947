"""Where `kata play`'s demos run kata code: in jails (grader.jailer.jail_client, as grading
runs it), never in the `kata play` process. A demo calls a kata module through Jailed, which
gives each call its time and turns whatever the code does instead of answering into a
LearnerError of one line, safe to show; jails() stops every jail a demo started however it ends.
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Iterator

from grader.jailer import jail_client
from grader.jailer import zygote as forks
from grader.kata.text import printable

CALL_SECONDS = 60.0  # how long one call of kata code may take in a demo before its jail is stopped
SHOWN_CHARS = 300  # of what kata code's exception says, at most this much is shown


class LearnerError(Exception):
    """Kata code did not answer a demo's call: it raised, returned what cannot cross the jail, could not
    be loaded, crashed its jail or ran past its time. The message is one line, safe to show, that
    follows the name of whose code it is ("raised KeyError: 3 (at kv_cache.py:12 in update)"). not_written: the
    code raised NotImplementedError (a stub's body: its task is still to write)."""

    def __init__(self, message: str, *, not_written: bool = False):
        super().__init__(message)
        self.not_written = not_written


def safe_line(text: str) -> str:
    """text from kata code on one line, every control character escaped, at most SHOWN_CHARS long."""
    text = printable(text, lines=False)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _refusal(exc: BaseException, seconds: float) -> str:
    """What LearnerError says for exc, raised by a call of kata code in its jail."""
    if isinstance(exc, jail_client.JailTimeout):
        running = str(exc).partition(" (it was running ")[2].rstrip(")")
        return f"did not finish within {seconds:g} s" + (f" (it was running {safe_line(running)})" if running else "")
    if isinstance(exc, jail_client.JailCrash):
        return f"crashed its process ({safe_line(str(exc))})"
    if isinstance(exc, jail_client.KataLoadError):
        return f"could not be loaded: {safe_line(str(exc))}"
    if isinstance(exc, jail_client.BadResult):
        return f"returned what a demo cannot use: {safe_line(str(exc))}"
    message, *frames = str(exc).split("\n    at ")  # a mirrored exception: the learner's message, then its frames
    where = f" (at {safe_line(frames[-1])})" if frames else ""
    return f"raised {safe_line(type(exc).__name__)}: {safe_line(message)}{where}"


class Jailed:
    """A kata module in its jail, as a demo calls it: `module.f(...)` and `module.Cls.method(...)` run
    there (arrays come back as data), each given `seconds` to answer; whatever the call does instead
    of answering is a LearnerError. (The deadline stays set after the call, so that nothing the answer
    holds can keep this process waiting either.)"""

    def __init__(self, module: jail_client.ModuleProxy, seconds: float = CALL_SECONDS, path: tuple[str, ...] = ()):
        self._module, self._seconds, self._path = module, seconds, path

    def __getattr__(self, name: str) -> "Jailed":
        if name.startswith("_"):
            raise AttributeError(name)
        return Jailed(self._module, self._seconds, (*self._path, name))

    def __call__(self, *args, **kwargs):
        jail_client.SETTINGS.deadline = time.monotonic() + self._seconds
        try:
            return functools.reduce(getattr, self._path, self._module)(*args, **kwargs)
        except (Exception, jail_client.JailCrash, jail_client.JailTimeout) as exc:
            refusal = _refusal(exc, self._seconds)
            raise LearnerError(refusal, not_written=isinstance(exc, NotImplementedError)) from None

    def __repr__(self) -> str:
        return f"<{'.'.join(self._path) or 'kata module'} in a jail>"


@contextlib.contextmanager
def jails() -> Iterator[None]:
    """Where a demo runs kata code: every jail its sources started is stopped on the way out (its process
    and its folder), whether the demo ended, raised or was interrupted (Ctrl-C). The jails are forked by a
    zygote of this process's own (grader.jailer.zygote.own), started with the first demo, with NumPy and the
    model loaded already: no later demo, and no later run of `kata play --web`'s page, starts a new Python."""
    forks.own()
    settings = jail_client.SETTINGS
    saved = settings.target, settings.deadline
    try:
        yield
    finally:
        jail_client.stop_all()
        settings.target, settings.deadline = saved
