"""The runner's side of the judge processes: the judge server it starts, one
judge grading part of a kata (its command line, its results pipe, its log),
and the Grader that owns what they share in a process (the server, the jail
zygote, the bytecode cache, the judges running now)."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from grader import ONE_BLAS_THREAD
from grader.jailer import zygote as forks
from grader.judge import judge_server
from grader.judge.events import Event
from grader.kata import target as _target
from grader.kata.registry import Kata, RegistryError, suite_modules, suite_tasks, user_cache
from grader.run.results import Limits
from grader.wire.prefork import Child, Client


class JudgeServer:
    """A judge server (grader.judge.judge_server) this process started: it forks every judge."""

    def __init__(self, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-m", "grader.judge.judge_server", str(theirs.fileno())],
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


# Where judges keep bytecode across `kata` commands, in the user's cache: compiling the grader, the model and a
# kata's suite (pytest rewriting its asserts) was a fifth of grading one kata of the reference (1.2 of 5.8 s).
KEPT_BYTECODE = "llm-speed-katas/judge-bytecode"


# What a judge never takes from the caller's environment: options and plugins for pytest (PYTEST_ADDOPTS="-x" or
# "--pdb", meant for one's own tests, would stop or hang a grading; "-p NAME" or PYTEST_PLUGINS would load a module
# into the judge) and warning filters (PYTHONWARNINGS imports the module a filter names, as Python starts).
IGNORED_SETTINGS = frozenset({"PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONWARNINGS"})


def kept_bytecode() -> Path | None:
    """The user's folder of judges' bytecode ($XDG_CACHE_HOME or ~/.cache, then KEPT_BYTECODE), made if missing;
    None unless it is a folder (not a link) of this uid's that no other uid may read or write (mode 0700), for
    judges import what it holds. None as well without a home."""
    folder = user_cache(KEPT_BYTECODE)
    if folder is None:
        return None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
    except OSError:
        return None
    private = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077
    return folder if private else None


class Grader:
    """What the gradings of this process share, each started on first use
    and stopped by close(): the judge server, the jail zygote, the private
    folder of the judges' bytecode, and the judges running now."""

    def __init__(self):
        self._lock = threading.Lock()
        self._server: JudgeServer | None = None
        self._zygote: forks.Zygote | None = None
        self._zygote_failed = False
        self._pycache: str | None = None
        self._pycache_is_ours = False  # a folder of this process's own, removed by close()
        self._runs: set[JudgeRun] = set()
        self._cancels: set[threading.Event] = set()

    def pycache(self) -> str:
        """A private folder (mode 0700) where the judges keep the bytecode of
        the suites (as pytest rewrites their asserts) and of the grader: each
        judge would otherwise compile them anew (see
        grader.judge.bytecode.use_pycache). It is kept_bytecode(), so the
        next `kata` command's judges find it too, or where that cannot be, a
        folder of this process's own, removed by close(). Nothing is written
        beside the sources, whatever PYTHONDONTWRITEBYTECODE says. No jail can
        write to it (another uid, or not mounted), except in the plain mode,
        which guarantees nothing."""
        with self._lock:
            if self._pycache is None:
                kept = kept_bytecode()
                self._pycache = str(kept) if kept else tempfile.mkdtemp(prefix="kata-pycache-")
                self._pycache_is_ours = kept is None
            return self._pycache

    def zygote_address(self) -> str | None:
        """KATA_JAIL_FORKS for the judges: the zygote's address, started on first
        use (and again if it died); None where jails are not forked
        (forks.serves_this_mode) or it cannot start."""
        if not forks.serves_this_mode():
            return None
        with self._lock:
            if self._zygote is not None and self._zygote.proc.poll() is not None:
                self._zygote.stop()
                self._zygote = None
            if self._zygote is None and not self._zygote_failed:
                try:
                    self._zygote = forks.Zygote()
                except OSError:
                    self._zygote_failed = True
            return self._zygote.address() if self._zygote is not None else None

    def judge_env(self) -> dict[str, str]:
        """The environment a judge runs in: the caller's, one BLAS thread, no plugins,
        the checkout on sys.path, bytecode kept in pycache(), and where the
        jail zygote listens (grader.jailer.zygote). Without the caller's
        settings for pytest and warnings (IGNORED_SETTINGS): the judge runs a
        suite the same way whatever a shell exports."""
        env = dict(
            {name: value for name, value in os.environ.items() if name not in IGNORED_SETTINGS},
            PYTHONHASHSEED="0",
            **ONE_BLAS_THREAD,
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
            PYTHONPATH=os.pathsep.join([str(_target.ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        )
        env[judge_server.PYCACHE_VAR] = self.pycache()
        env[forks.VAR] = self.zygote_address() or "off"  # where no zygote forks jails, no judge tries to start one
        return env

    def judge_server(self) -> JudgeServer | None:
        """The judge server, started on first use (and again if it died); None if it cannot start."""
        env = self.judge_env()
        with self._lock:
            if self._server is not None and not self._server.alive:
                self._server.stop()
                self._server = None
            if self._server is None:
                try:
                    self._server = JudgeServer(env)
                except OSError:
                    return None
            return self._server

    def started(self, run: JudgeRun) -> None:
        with self._lock:
            self._runs.add(run)

    def ended(self, run: JudgeRun) -> None:
        with self._lock:
            self._runs.discard(run)

    def grading_started(self, cancel: threading.Event) -> None:
        """A grading in progress, known by its cancel event: cancel() sets it."""
        with self._lock:
            self._cancels.add(cancel)

    def grading_ended(self, cancel: threading.Event) -> None:
        with self._lock:
            self._cancels.discard(cancel)

    def running(self) -> int:
        """How many judges are running now."""
        with self._lock:
            return len(self._runs)

    def cancel(self) -> None:
        """Stop every grading in progress, as Ctrl-C stops one: each judge is killed (its jails die with it)."""
        with self._lock:
            cancels, runs = list(self._cancels), list(self._runs)
        for event in cancels:
            event.set()
        for run in runs:
            run.kill()

    def close(self) -> None:
        """Stop the judges, the judge server and the zygote; remove the bytecode folder if it is this process's own."""
        self.cancel()
        with self._lock:
            server, zygote = self._server, self._zygote
            pycache = self._pycache if self._pycache_is_ours else None
            self._server = self._zygote = self._pycache = None
        if server is not None:
            server.stop()
        if zygote is not None:
            zygote.stop()
        if pycache is not None:
            shutil.rmtree(pycache, ignore_errors=True)


def judge_argv(kata: Kata, target: str, seed: int, only, limits: Limits, fail_fast: bool, checks, batch) -> list[str]:
    """The judge's command line (grader.judge.judge), its results descriptor named judge_server.RESULTS_FD."""
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
    else:
        held = _holding(kata.suite, set(only or ()), set(checks or ())) if only or checks else []
        argv += ["--modules", *held] if held else []
    return argv + (["--fail-fast"] if fail_fast else [])


def _holding(suite: Path, only: set[str], checks: set[str]) -> list[str]:
    """The test modules of a suite folder that hold a check the judge runs for these tasks (all when none is
    named) and check names (all when none is named), as its source marks them (grader.kata.registry.suite_tasks);
    none, and the judge collects the whole suite, for a suite file or when no module holds one or the marks
    cannot be read. A judge that grades one task (kata grade KATA:TASK, kata watch, an interview) then imports
    and collects a module or two, not the kata's four to thirteen."""
    if not suite.is_dir():
        return []
    try:
        held = [
            str(module)
            for module in suite_modules(suite)
            for name, owners in suite_tasks(module).items()
            if owners and (not only or only & set(owners)) and (not checks or name in checks)
        ]
    except RegistryError:
        return []
    return list(dict.fromkeys(held))


def judge_target(target: str) -> str:
    """--target as a judge takes it: 'reference' or a folder's absolute path, the
    learner's work folder too (a judge runs in a folder of its own, where no
    work folder is found; a target that cannot be graded raises here, as
    _target.resolve says)."""
    resolved = _target.resolve(target)
    return target if target == "reference" else str(resolved)


class JudgeRun:
    """One judge process grading part of a kata."""

    def __init__(self, grader: Grader, argv: list[str]):
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
                [sys.executable, "-s", "-m", "grader.judge.judge", *argv],
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
