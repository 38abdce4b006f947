"""Processes stopped for a while: the jails of a judge that are not on the
clock, while a speed check times the one that is. SIGSTOP cannot be caught
or ignored, so no code of a learner's (a signal handler, a timer) can burn
CPU while the baseline is timed, nor a baseline while the learner's is."""

from __future__ import annotations

import contextlib
import os
import signal


@contextlib.contextmanager
def stopped(pids: list[int]):
    """Each process (and its process group: a jail runs in a session of its own, and under bubblewrap its
    child with it) stopped for the body of the with, continued after it however it ends."""
    for pid in pids:
        _signal_group(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            _signal_group(pid, signal.SIGCONT)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        try:
            os.kill(pid, sig)
        except OSError:
            pass  # gone already
