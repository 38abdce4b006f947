"""The runner's side of the judge processes: the judge server it starts, and
one judge grading part of a kata (its command line, its results pipe, its log).
What they share in a process (the server, the jail zygote, the bytecode
cache) a grader.grading.runner.Grader owns."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING

from grader.grading import judge_server
from grader.grading.events import Event
from grader.grading.results import Limits
from grader.kata import target as _target
from grader.kata.registry import Kata
from grader.wire.prefork import Child, Client

if TYPE_CHECKING:
    from grader.grading.runner import Grader


class JudgeServer:
    """A judge server (grader.grading.judge_server) this process started: it forks every judge."""

    def __init__(self, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-m", "grader.grading.judge_server", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env=env,
                cwd="/",  # holds no folder of anyone's; each judge moves to its own
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.client = Client(ours, "judge")

    @property
    def alive(self) -> bool:
        return not self.client.gone and self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict, cwd: str, log_fd: int, results_fd: int) -> Child | None:
        """A judge running argv, or None if the server is gone (the caller starts one itself)."""
        try:
            return self.client.spawn({"argv": argv, "env": env, "cwd": cwd}, [log_fd, results_fd])
        except OSError:
            return None

    def stop(self) -> None:
        self.client.close()  # the server kills its judges and exits once its socket closes
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def judge_argv(kata: Kata, target: str, seed: int, only, limits: Limits, fail_fast: bool, checks, batch) -> list[str]:
    """The judge's command line (grader.grading.judge), its results descriptor named judge_server.RESULTS_FD."""
    argv = ["--kata", kata.name, "--suite", str(kata.suite), "--target", judge_target(target)]
    argv += ["--fd", judge_server.RESULTS_FD, "--seed", str(seed), "--test-seconds", str(limits.test_seconds)]
    argv += ["--memory-mb", str(limits.memory_mb), "--output-mb", str(limits.output_mb)]
    argv += ["--cpu-seconds", str(int(limits.kata_seconds) + 60)]
    if only:
        argv += ["--tasks", *only]
    if checks:
        argv += ["--checks", *checks]
    if batch:
        argv += ["--batch", json.dumps(batch)]
    return argv + (["--fail-fast"] if fail_fast else [])


def judge_target(target: str) -> str:
    """--target as a judge takes it: 'reference' or a folder's absolute path, the
    learner's work folder too (a judge runs in a folder of its own, where no
    work folder is found; a target that cannot be graded raises here, as
    _target.resolve says)."""
    resolved = _target.resolve(target)
    return target if target == "reference" else str(resolved)


class JudgeRun:
    """One judge process grading part of a kata."""

    def __init__(self, grader: "Grader", argv: list[str]):
        """argv: the judge's command line (judge_argv)."""
        self.grader = grader
        self.read_fd, write_fd = os.pipe()
        self.log = tempfile.TemporaryFile()
        self.cwd = tempfile.TemporaryDirectory(prefix="kata-judge-")
        env = grader.judge_env()
        server = grader.judge_server()
        self.proc = server.spawn(argv, env, self.cwd.name, self.log.fileno(), write_fd) if server else None
        if self.proc is None:  # no server could start: a judge of its own, started from scratch
            argv = [str(write_fd) if a == judge_server.RESULTS_FD else a for a in argv]
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-m", "grader.grading.judge", *argv],
                stdin=subprocess.DEVNULL,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=env,
                cwd=self.cwd.name,
                start_new_session=True,
            )
        grader.started(self)
        os.close(write_fd)
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.read_fd, selectors.EVENT_READ)

    def events(self, timeout: float) -> list[Event] | None:
        """Events that arrived within `timeout` seconds; None at end of stream."""
        if not self.selector.select(timeout):
            return []
        chunk = os.read(self.read_fd, 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        out = []
        for line in lines:
            try:
                out.append(Event.from_line(line))
            except (ValueError, KeyError, TypeError):
                continue  # only the judge writes here; a garbled line is dropped, never guessed at
        return out

    def kill(self) -> None:
        """Kill the judge's session (its jails die with it, by their parent-death signal)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self) -> tuple[int, str]:
        """(exit code, the tail of what the process printed)."""
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        self.grader.ended(self)
        self.selector.close()
        os.close(self.read_fd)
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - 4000))
        tail = self.log.read().decode(errors="replace")
        self.log.close()
        self.cwd.cleanup()
        return code, tail
