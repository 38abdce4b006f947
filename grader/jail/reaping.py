"""Children of a prefork server (the judge server, the jail zygote): woken when one ends, reaped, killed by group."""

from __future__ import annotations

import os
import selectors
import signal


def woken_by_children(*socks) -> tuple[selectors.BaseSelector, int, int]:
    """A selector of socks and of a pipe that a child's end (SIGCHLD) writes
    to: (selector, the pipe's read end, its write end). Also serves the jail
    zygote (grader.jail.server.serve_forks)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD writes to the wakeup pipe
    selector = selectors.DefaultSelector()
    for fileobj in (*socks, wake_r):
        selector.register(fileobj, selectors.EVENT_READ)
    return selector, wake_r, wake_w


def reap(tell) -> None:
    """Call tell(pid, code) for each child of this process that has ended (code
    as subprocess's returncode), until none is left to reap. Also serves the
    jail zygote (grader.jail.server.serve_forks)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        tell(pid, os.waitstatus_to_exitcode(status))


def kill_group(pid: int) -> None:
    """SIGKILL the process group of pid (a judge's or a jail's session), if it is still there."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
