"""Grade katas: each kata's suite runs in its own judge process
(grader.grading.judge), which holds the learner's module in a jail process of its
own (grader.grading.jail_client). Results come back over a pipe this process created, as
grader.grading.events events. Returns plain data; only the CLI prints.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from grader import ONE_BLAS_THREAD
from grader.grading import judge_server
from grader.grading.events import Event, EventKind, Status
from grader.jail import zygote as forks
from grader.kata import target as _target
from grader.kata.registry import Kata, Task

# A judge enforces each check's limit itself; the runner steps in only if the judge stops answering.
JUDGE_GRACE = 20.0


@dataclass(frozen=True)
class Limits:
    test_seconds: float = 60.0  # wall clock one check may take
    kata_seconds: float = 300.0  # wall clock a kata's whole suite may take
    memory_mb: int = 4096  # address space of a grading process
    output_mb: int = 64  # what a grading process may print


@dataclass
class Check:
    id: str  # pytest node id
    name: str  # the test function's name
    task: str = ""  # the task its @pytest.mark.task mark names
    outcome: Status = Status.NOT_RUN
    message: str = ""
    example: str = ""  # Hypothesis's minimal falsifying example, if any
    figures: list[dict] = field(default_factory=list)  # what the check measured against its bar


@dataclass
class TaskResult:
    name: str
    title: str
    status: Status
    score: int
    max_score: int
    checks_passed: int
    checks_total: int
    message: str  # why the first failing check failed, in the learner's words
    hint: str  # shown when the task does not pass: its failing check's own hint, else the task's first
    failures: list[dict] = field(default_factory=list)
    visibility: str = "visible"  # the registry's: "hidden" tasks show on Gradescope after the due date
    figures: list[dict] = field(default_factory=list)  # {name, value, bar, unit, better} its checks measured


@dataclass
class KataResult:
    name: str
    title: str
    score: int
    max_score: int
    duration: float
    tasks: list[TaskResult]


@dataclass
class GradeResult:
    target: str
    seed: int
    score: int
    max_score: int
    duration: float
    katas: list[KataResult]
    interrupted: bool = False  # Ctrl-C stopped the grading: katas holds what was graded so far

    @property
    def passed(self) -> bool:
        return not self.interrupted and all(t.status is Status.PASS for k in self.katas for t in k.tasks)


_LIVE: set[subprocess.Popen] = set()  # every judge running now, for stop_everything()
_LIVE_LOCK = threading.Lock()
_INTERRUPTED = threading.Event()  # Ctrl-C: every kata stops where it is
INTERRUPTED_MESSAGE = "not graded: the grading was interrupted (Ctrl-C)"


def interrupt_all(futures) -> None:
    """After Ctrl-C: every kata being graded stops where it is, the ones not
    started never start, and every judge and jail is killed."""
    _INTERRUPTED.set()
    for future in futures:
        future.cancel()
    stop_everything()


def stop_everything() -> None:
    """Kill every judge (their jails die with them, by their parent-death signal)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


_PYCACHE: list[str] = []  # this process's bytecode cache for its judges, made on first use


def _pycache() -> str:
    """A private folder (mode 0700) where this process's judges keep the bytecode
    of the suites (as pytest rewrites their asserts) and of the grader: each
    judge would otherwise compile them anew, about 0.15 s per grading (see
    grader.grading.bytecode.use_pycache). Nothing is written beside the sources, whatever
    PYTHONDONTWRITEBYTECODE says, and the folder goes when this process ends. No jail can write to it (another
    uid, or not mounted), except in the plain mode, which guarantees nothing."""
    with _LIVE_LOCK:
        if not _PYCACHE:
            folder = tempfile.mkdtemp(prefix="kata-pycache-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _PYCACHE.append(folder)
        return _PYCACHE[0]


def _judge_env() -> dict[str, str]:
    """The environment a judge runs in: the caller's, one BLAS thread, no plugins,
    the checkout on sys.path, bytecode kept in _pycache(), and where this
    process's jail zygote listens (grader.jail.zygote)."""
    env = dict(
        os.environ,
        PYTHONHASHSEED="0",
        **ONE_BLAS_THREAD,
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYTHONPATH=os.pathsep.join([str(_target.ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
    )
    env[judge_server.PYCACHE_VAR] = _pycache()
    env[forks.VAR] = forks.start() or "off"  # where no zygote forks jails, no judge tries to start one
    return env


class _ServedJudge:
    """A judge the judge server forked: what _Run uses of a Popen (pid, wait, returncode)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self.ended = threading.Event()

    def wait(self, timeout: float | None = None) -> int:
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"judge {self.pid}", timeout)
        return self.returncode


class _JudgeServer:
    """This process's judge server (grader.grading.judge_server): started once, it forks every judge."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-m", "grader.grading.judge_server", str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
            env=_judge_env(),
            cwd="/",  # holds no folder of anyone's; each judge moves to its own
            start_new_session=True,
        )
        theirs.close()
        self.requests = threading.Lock()  # one request at a time: its answer is the next pid or error
        self.state = threading.Lock()  # guards judges, ended and alive, shared with the reading thread
        self.answers: queue.Queue = queue.Queue()
        self.judges: dict[int, _ServedJudge] = {}
        self.ended: dict[int, int] = {}  # judges that ended before their _ServedJudge was made
        self.alive = True
        threading.Thread(target=self._read, name="judge-server", daemon=True).start()

    def spawn(self, argv: list[str], env: dict, cwd: str, log_fd: int, results_fd: int) -> _ServedJudge | None:
        """A judge running argv, or None if the server is gone (the caller starts one itself)."""
        with self.requests:
            if not self.alive:
                return None
            try:
                request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
                socket.send_fds(self.sock, [request], [log_fd, results_fd])
            except OSError:
                return None
            answer = self.answers.get()
            if "pid" not in answer:
                return None
            with self.state:
                judge = self.judges[answer["pid"]] = _ServedJudge(answer["pid"])
                if judge.pid in self.ended:
                    self._end(judge, self.ended.pop(judge.pid))
            return judge

    def _read(self) -> None:
        while True:
            try:
                message = self.sock.recv(1 << 16)
            except OSError:
                message = b""
            if not message:  # the server died, and its judges with it (their parent-death signal)
                self.answers.put({"error": "the judge server is gone"})
                with self.state:
                    self.alive = False
                    for judge in list(self.judges.values()):
                        self._end(judge, -signal.SIGKILL)
                return
            answer = json.loads(message)
            if "exited" not in answer:
                self.answers.put(answer)
                continue
            with self.state:
                judge = self.judges.get(answer["exited"])
                if judge is None:
                    self.ended[answer["exited"]] = answer["code"]
                else:
                    self._end(judge, answer["code"])

    def _end(self, judge: _ServedJudge, code: int) -> None:
        """Judge ended with code (under self.state)."""
        self.judges.pop(judge.pid, None)
        judge.returncode = code
        judge.ended.set()


_SERVER: _JudgeServer | None = None
_SERVER_LOCK = threading.Lock()


def _server() -> _JudgeServer | None:
    """This process's judge server, started on first use; None if it cannot start."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or not _SERVER.alive:
            try:
                _SERVER = _JudgeServer()
            except OSError:
                return None
        return _SERVER


def _judge_argv(kata: Kata, target: str, seed: int, only, limits: Limits, fail_fast: bool, checks, batch) -> list[str]:
    """The judge's command line (grader.grading.judge), its results descriptor named judge_server.RESULTS_FD."""
    argv = ["--kata", kata.name, "--suite", str(kata.suite), "--target", _judge_target(target)]
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


class _Run:
    """One judge process grading part of a kata."""

    def __init__(
        self,
        kata: Kata,
        target: str,
        seed: int,
        only: list[str],
        limits: Limits,
        fail_fast: bool,
        checks: list[str] = (),
        batch: list[dict] | None = None,
    ):
        """only: the tasks whose checks run (all when empty); checks: the names of
        the only checks that run; batch: the judge's --batch gradings instead."""
        self.read_fd, write_fd = os.pipe()
        self.log = tempfile.TemporaryFile()
        self.cwd = tempfile.TemporaryDirectory(prefix="kata-judge-")
        argv = _judge_argv(kata, target, seed, only, limits, fail_fast, checks, batch)
        env = _judge_env()
        server = _server()
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
        with _LIVE_LOCK:
            _LIVE.add(self.proc)
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
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)
        self.selector.close()
        os.close(self.read_fd)
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - 4000))
        tail = self.log.read().decode(errors="replace")
        self.log.close()
        self.cwd.cleanup()
        return code, tail


def _judge_target(target: str) -> str:
    """--target as a judge takes it: 'katas', 'reference' or a folder's absolute
    path (a target that cannot be graded raises here, as _target.resolve says)."""
    resolved = _target.resolve(target)
    return target if target in ("katas", "reference") else str(resolved)


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _run_checks(
    kata: Kata,
    target: str,
    seed: int,
    limits: Limits,
    only: list[str],
    on_result: Callable[[dict[str, Check]], None] | None = None,
    fail_fast: bool = False,
    names: list[str] = (),
    batch: list[dict] | None = None,
) -> list[tuple[dict[str, Check], str]]:
    """Run the kata's suite in a judge process until it reports every check.
    Returns the checks and a note for the kata: one pair, or with batch (the
    judge's --batch gradings), one pair per grading of it, in its order.
    on_result(checks) is called after each check's result arrives."""
    jobs = len(batch) if batch else 1
    state = _Progress(started=time.monotonic())
    run = _Run(kata, target, seed, only, limits, fail_fast, names, batch)
    try:
        while len(state.graded) < jobs and not state.stopped(run, limits):
            events = run.events(0.2)
            if events is None:
                break
            for ev in events:
                state.take(ev, jobs, on_result)
    finally:
        code, tail = run.finish()
    return state.conclude(code, tail, jobs)


@dataclass
class _Progress:
    """What a judge reported so far, for _run_checks: the gradings done, the
    current grading's checks, the check running and when it started."""

    started: float  # when the current grading started
    graded: list = field(default_factory=list)  # (checks, note) of each grading done
    checks: dict = field(default_factory=dict)  # check id -> Check, the current grading's
    current: str | None = None  # the check running
    current_start: float = 0.0
    finished: bool = False  # ended by the runner (Ctrl-C, the kata's time), not by the judge's death
    note: str = ""

    def stopped(self, run: "_Run", limits: Limits) -> bool:
        """Whether the grading must end now (Ctrl-C, a check or the kata over its
        time): then the judge is killed and the checks say why."""
        now = time.monotonic()
        if _INTERRUPTED.is_set():
            run.kill()
            self._unrun(Status.ERROR, INTERRUPTED_MESSAGE)
            self.note, self.finished = INTERRUPTED_MESSAGE, True
            return True
        if self.current is not None and now - self.current_start > limits.test_seconds + JUDGE_GRACE:
            run.kill()
            hung = self.checks[self.current]
            hung.outcome, hung.message = Status.TIMEOUT, f"took longer than {limits.test_seconds:g} s"
            return True
        if now - self.started > limits.kata_seconds:
            run.kill()
            self._unrun(Status.TIMEOUT, f"the kata's checks took longer than {limits.kata_seconds:g} s in all")
            if not self.checks:
                self.note = f"timed out after {limits.kata_seconds:g} s before the checks were collected"
            self.finished = True
            return True
        return False

    def _unrun(self, outcome: Status, message: str) -> None:
        for c in self.checks.values():
            if c.outcome is Status.NOT_RUN:
                c.outcome, c.message = outcome, message

    def take(self, ev, jobs: int, on_result) -> None:
        """Fold one event of the judge into the progress."""
        if ev.kind is EventKind.COLLECTED:
            for t in ev.tests:
                self.checks.setdefault(str(t["id"]), Check(str(t["id"]), str(t["name"]), str(t.get("task", ""))))
        elif ev.kind is EventKind.START and ev.id in self.checks:
            self.current, self.current_start = ev.id, time.monotonic()
        elif ev.kind is EventKind.RESULT and ev.id in self.checks:
            c = self.checks[ev.id]
            c.outcome, c.message, c.example, c.figures = ev.outcome, ev.message, ev.example, ev.figures
            self.current = None
            if on_result is not None:
                on_result(self.checks)
        elif ev.kind is EventKind.DONE and len(self.graded) < jobs:
            self.graded.append((self.checks, ""))  # the next grading of a batch starts with its own checks and clock
            self.checks, self.current, self.started = {}, None, time.monotonic()

    def conclude(self, code: int, tail: str, jobs: int) -> list[tuple[dict[str, Check], str]]:
        """The gradings, once the judge has ended with exit code `code` and stderr `tail`."""
        graded, checks, note = self.graded, self.checks, self.note
        death = f"the grader's judge process {_signal_name(code)}"
        if len(graded) == jobs:
            if code != 0 and not graded[-1][0]:  # every grading ended, then the judge failed, having run no check
                graded[-1] = (graded[-1][0], f"{death}: {tail.strip()[-500:]}")
            return graded
        if not self.finished:
            if self.current is not None and checks[self.current].outcome is Status.NOT_RUN:
                checks[self.current].outcome = Status.CRASH
                checks[self.current].message = f"{death} during this check"
            note = note or f"{death}: {tail.strip()[-500:]}"
        elif code != 0 and not checks:
            note = f"{death}: {tail.strip()[-500:]}"
        graded.append((checks, note))
        ended = note or "the judge stopped"
        return graded + [({}, f"not graded: {ended} during an earlier grading of the batch")] * (jobs - len(graded))


def _task_result(task: Task, checks: list[Check], note: str, no_checks: str = "") -> TaskResult:
    """A task passes only when every one of its checks finished and passed.
    no_checks: why there are none, if not for a crash (note)."""
    passed = sum(c.outcome is Status.PASS for c in checks)
    hint = None
    if not checks:
        status = Status.CRASH if note else Status.ERROR
        message = note or no_checks or "the suite has no checks for this task"
    else:

        def outcome(c: Check) -> Status:
            return Status.ERROR if c.outcome is Status.NOT_RUN else c.outcome

        worst = min(checks, key=lambda c: outcome(c).rank)
        status = outcome(worst)
        message = "" if status is Status.PASS else worst.message
        hint = task.hint_for(worst.name)
    failures = [
        {"test": c.id.split("::")[-1], "outcome": c.outcome.value, "message": c.message, "example": c.example}
        for c in checks
        if c.outcome is not Status.PASS
    ]
    return TaskResult(
        name=task.name,
        title=task.title,
        status=status,
        score=task.points if status is Status.PASS else 0,
        max_score=task.points,
        checks_passed=passed,
        checks_total=len(checks),
        message=message,
        hint="" if status is Status.PASS else hint or task.hints[0],
        failures=failures,
        visibility=task.visibility,
        figures=[f for c in checks for f in c.figures],
    )


def grade_kata(
    kata: Kata,
    target: str = "katas",
    *,
    seed: int = 0,
    tasks: list[str] | None = None,
    limits: Limits = Limits(),
    progress: Callable[[Kata, TaskResult], None] | None = None,
    fail_fast: bool = False,
    checks: list[str] | None = None,
) -> KataResult:
    """Grade one kata (or only the named tasks of it) in a child process.
    progress(kata, task_result) is called as each task's last check ends,
    while the rest of the kata is still being graded. fail_fast: stop each
    task at its first check that does not pass (that check's outcome is
    the task's status, and the rest are reported with it, not run).
    checks: run only the checks (test functions) of these names; a chosen
    task that has none of them is an error that says so."""
    _target.resolve(target)
    chosen = [kata.task(t) for t in tasks] if tasks else list(kata.tasks)
    started = time.monotonic()
    only = [t.name for t in chosen] if tasks else []
    told: set[str] = set()

    def finished_tasks(checks: dict[str, Check]) -> None:
        for task in chosen:
            mine = [c for c in checks.values() if c.task == task.name]
            if task.name not in told and mine and all(c.outcome is not Status.NOT_RUN for c in mine):
                told.add(task.name)
                progress(kata, _task_result(task, mine, ""))

    names = list(checks or ())
    [(graded, note)] = _run_checks(
        kata, target, seed, limits, only, finished_tasks if progress else None, fail_fast, names
    )
    return _kata_result(kata, chosen, graded, note, names, time.monotonic() - started, progress, told)


def _kata_result(
    kata: Kata,
    chosen: list[Task],
    checks: dict[str, Check],
    note: str,
    names: list[str],
    duration: float,
    progress: Callable[[Kata, TaskResult], None] | None = None,
    told: set[str] = frozenset(),
) -> KataResult:
    """The grade of the chosen tasks from their checks' outcomes (a check that did
    not run is an error); progress is told of each task it was not told of yet."""
    for c in checks.values():
        if c.outcome is Status.NOT_RUN:
            c.outcome, c.message = Status.ERROR, c.message or "the check did not run"
    results = []
    for task in chosen:
        mine = [c for c in checks.values() if c.task == task.name]
        missing = f"the task has no check named {' or '.join(names)}" if names else ""
        results.append(_task_result(task, mine, note, missing))
        if progress is not None and task.name not in told:
            progress(kata, results[-1])
    return KataResult(
        name=kata.name,
        title=kata.title,
        score=sum(t.score for t in results),
        max_score=sum(t.max_score for t in results),
        duration=round(duration, 3),
        tasks=results,
    )


@dataclass(frozen=True)
class Grading:
    """One grading of a batch: a target, and the only tasks and checks of it to grade (all when empty)."""

    target: str
    tasks: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()


def grade_batch(
    kata: Kata, gradings: list[Grading], *, seed: int = 0, limits: Limits = Limits(), fail_fast: bool = False
) -> list[KataResult]:
    """Grade several targets of one kata, one after another in one judge
    process, as grade_kata would grade each (its own jails, fixtures and
    limits, the same seed), but with the suite collected once: for graders
    of many submissions of a kata, such as the project's mutants. A grading
    the judge did not reach (it died during an earlier one) crashes with a
    note that says so. Each result's duration is the batch's average."""
    if not gradings:
        return []
    batch = [{"target": _judge_target(g.target), "tasks": list(g.tasks), "checks": list(g.checks)} for g in gradings]
    # An unknown task stops here, as in grade_kata.
    chosen = [[kata.task(t) for t in g.tasks] or list(kata.tasks) for g in gradings]
    started = time.monotonic()
    graded = _run_checks(kata, gradings[0].target, seed, limits, [], None, fail_fast, [], batch)
    duration = (time.monotonic() - started) / len(gradings)
    return [
        _kata_result(kata, tasks, checks, note, list(g.checks), duration)
        for g, tasks, (checks, note) in zip(gradings, chosen, graded)
    ]


def grade(
    katas: list[Kata],
    target: str = "katas",
    *,
    seed: int = 0,
    jobs: int = 1,
    limits: Limits = Limits(),
    tasks: dict[str, list[str]] | None = None,
    progress: Callable[[Kata, TaskResult], None] | None = None,
    fail_fast: bool = False,
) -> GradeResult:
    """Grade several katas, `jobs` at a time; each in its own process.
    tasks: kata name -> the only tasks of it to grade (all when absent).
    progress(kata, task_result): called as each task is graded (from
    worker threads when jobs > 1). fail_fast: as grade_kata's.

    Ctrl-C (KeyboardInterrupt) kills every judge and jail at once; the
    result then holds what was graded so far, with `interrupted` set."""
    started = time.monotonic()
    _INTERRUPTED.clear()
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [
        pool.submit(
            grade_kata,
            k,
            target,
            seed=seed,
            limits=limits,
            tasks=(tasks or {}).get(k.name),
            progress=progress,
            fail_fast=fail_fast,
        )
        for k in katas
    ]
    interrupted = False
    try:
        for future in futures:
            future.result()
    except KeyboardInterrupt:
        interrupted = True
        interrupt_all(futures)
    pool.shutdown(wait=True)
    results = [f.result() for f in futures if not f.cancelled()]
    return GradeResult(
        target=target,
        seed=seed,
        score=sum(k.score for k in results),
        max_score=sum(k.max_score for k in results),
        duration=round(time.monotonic() - started, 3),
        katas=results,
        interrupted=interrupted,
    )
