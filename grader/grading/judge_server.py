"""The judge server: one process per `kata` command that forks the judges.

Every judge is a Python process that imports pytest, Hypothesis and NumPy
before it grades anything: about 0.3 s of the 0.65 s a one-task grading
takes. The server imports them once and forks a judge for each grading, so a
judge starts with them already loaded. Nothing else is loaded in the server:
no suite, no kata module, and no grader module (those read the environment
when they load). A forked judge sets the environment, folder and descriptors
it is given, and then runs `grader.grading.judge.main`, exactly what `python -m
grader.grading.judge` runs.

Protocol, over a SOCK_SEQPACKET socketpair (one message per packet, JSON):

    runner -> server   {"argv": [...], "env": {...}, "cwd": "..."}, with two descriptors
                       attached: the judge's output log and the write end of its results pipe
                       ("{results_fd}" in argv stands for the latter's number in the judge)
    server -> runner   {"pid": N}, or {"error": "..."} when the fork failed
    server -> runner   {"exited": N, "code": C}: judge N ended; C as subprocess's returncode

The server lives in a session of its own (Ctrl-C at the terminal is for
`kata`, which stops the judges itself). When its socket closes, because
`kata` ended or was killed, it kills every judge still running and exits;
each judge also dies with the server, by its parent-death signal.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import traceback

from grader.grading.bytecode import PYCACHE_VAR, use_pycache  # noqa: F401 (PYCACHE_VAR: the runner sets it)
from grader.jail.reaping import kill_group, reap, woken_by_children

PRELOAD = ("numpy", "pytest", "_pytest.assertion.rewrite", "hypothesis", "hypothesis.extra.numpy")
RESULTS_FD = "{results_fd}"  # in a request's argv: the number of the results pipe in the judge
MAX_MESSAGE = 1 << 20  # bytes of one request (the argv holds the kata's test names)


def serve(sock: socket.socket) -> None:
    """Answer requests on sock until it closes, then kill the judges still running and return."""
    selector, wake_r, wake_w = woken_by_children(sock)
    judges: set[int] = set()
    while True:
        for key, _ in selector.select():
            if key.fileobj is wake_r:
                os.read(wake_r, 4096)
                continue
            try:
                message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 2)
            except OSError:
                message, fds = b"", []
            if not message:  # the runner is gone
                for pid in judges:
                    kill_group(pid)
                return
            pid = _start(sock, json.loads(message), fds, (wake_r, wake_w))
            if pid > 0:
                judges.add(pid)
        _reap(sock, judges)


def _start(sock: socket.socket, request: dict, fds: list[int], wake: tuple[int, int]) -> int:
    """Fork a judge for request; say its pid (or why there is none). Returns the pid, or -1."""
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"error": f"fork failed: {exc}"}).encode())
        return -1
    if pid == 0:
        _judge(sock, request, fds, wake)  # never returns
    for fd in fds:
        os.close(fd)
    sock.send(json.dumps({"pid": pid}).encode())
    return pid


def _judge(sock: socket.socket, request: dict, fds: list[int], wake: tuple[int, int]) -> None:
    """In the forked child: become the judge the request describes, run it, exit."""
    code = 1
    try:
        log, results = fds
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = [str(results) if a == RESULTS_FD else a for a in request["argv"]]
        sys.argv = ["grader.grading.judge", *argv]
        use_pycache()
        from grader.grading import judge

        code = judge.main(argv) or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reap(sock: socket.socket, judges: set[int]) -> None:
    """Tell the runner of every judge that has ended."""

    def tell(pid: int, code: int) -> None:
        judges.discard(pid)
        try:
            sock.send(json.dumps({"exited": pid, "code": code}).encode())
        except OSError:
            pass  # the runner is gone: the next read says so

    reap(tell)


def main() -> None:
    fd = int(sys.argv[1])
    for name in PRELOAD:
        __import__(name)
    serve(socket.socket(fileno=fd))
    os._exit(0)


if __name__ == "__main__":
    main()
