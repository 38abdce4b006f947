"""Grade katas: each kata's suite runs in its own child process (grader.worker),
watched for hangs, crashes and floods; results come back over a pipe this
process created. Returns plain data; only the CLI prints.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from grader import target as _target
from grader.registry import Kata, Task

# Status of a task, most severe first: a task takes the most severe status of its checks.
STATUSES = ("crash", "timeout", "error", "fail", "todo", "slow", "pass")


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
    speed: bool  # a speed check: failing it grades the task 'slow'
    outcome: str = "not run"  # pass, fail, todo, error, timeout, crash, skip
    message: str = ""
    example: str = ""  # Hypothesis's minimal falsifying example, if any


@dataclass
class TaskResult:
    name: str
    title: str
    status: str
    score: int
    max_score: int
    checks_passed: int
    checks_total: int
    message: str  # why the first failing check failed, in the learner's words
    hint: str  # the task's first hint, shown when the task does not pass
    failures: list[dict] = field(default_factory=list)


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

    @property
    def passed(self) -> bool:
        return all(t.status == "pass" for k in self.katas for t in k.tasks)

    def to_json(self) -> dict:
        return asdict(self)


def _signal_name(code: int) -> str:
    if code == 0:
        return "exited early with code 0 (os._exit?)"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class _Run:
    """One child process grading part of a kata."""

    def __init__(self, kata: Kata, target: str, seed: int, only: list[str], skip: list[str], limits: Limits):
        """only: test function names to run (all when empty); skip: node ids already graded."""
        self.read_fd, write_fd = os.pipe()
        self.log = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "grader.worker", "--kata", kata.name, "--suite", str(kata.suite),
               "--target", target, "--fd", str(write_fd),
               "--seed", str(seed), "--memory-mb", str(limits.memory_mb), "--output-mb", str(limits.output_mb)]
        if only:
            cmd += ["--only", *only]
        if skip:
            cmd += ["--skip", *skip]
        env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
                   PYTHONPATH=os.pathsep.join([str(_target.ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     pass_fds=(write_fd,), env=env, cwd=str(_target.ROOT), start_new_session=True)
        os.close(write_fd)
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.read_fd, selectors.EVENT_READ)

    def events(self, timeout: float):
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
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a garbled line is ignored; the parent trusts only well-formed events
        return out

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self) -> tuple[int, str]:
        """(exit code, the tail of what the process printed)."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        self.selector.close()
        os.close(self.read_fd)
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - 4000))
        tail = self.log.read().decode(errors="replace")
        self.log.close()
        return code, tail


def _run_checks(kata: Kata, target: str, seed: int, limits: Limits, only: list[str]) -> tuple[dict[str, Check], str]:
    """Run the kata's suite until every check has an outcome, restarting the
    child after a crash or a hang. Returns the checks and a note for the kata."""
    checks: dict[str, Check] = {}
    started = time.monotonic()
    note = ""
    while True:
        done = [c.id for c in checks.values() if c.outcome != "not run"]
        run = _Run(kata, target, seed, only, done, limits)
        current, current_start, finished, imported, collected_at = None, None, False, False, None
        while True:
            now = time.monotonic()
            if not imported and collected_at is not None and now - collected_at > limits.test_seconds:
                run.kill()  # importing the kata module hangs: no check can run
                for c in checks.values():
                    c.outcome, c.message = "timeout", f"importing the kata module took longer than {limits.test_seconds:g} s"
                finished = True
                break
            if current is not None and now - current_start > limits.test_seconds:
                run.kill()
                hung = checks[current]
                hung.outcome, hung.message = "timeout", f"took longer than {limits.test_seconds:g} s (an infinite loop?)"
                # The same code would likely hang the task's other checks too: do not wait for each.
                task = kata.task_of_test(hung.name)
                for c in checks.values():
                    if c.outcome == "not run" and task is not None and kata.task_of_test(c.name) is task:
                        c.outcome, c.message = "timeout", f"not run: {hung.name} of this task timed out"
                current = None
                break
            if now - started > limits.kata_seconds:
                run.kill()
                for c in checks.values():
                    if c.outcome == "not run":
                        c.outcome, c.message = "timeout", f"the kata's checks took longer than {limits.kata_seconds:g} s in all"
                if not checks:
                    note = f"timed out after {limits.kata_seconds:g} s before the checks were collected"
                finished = True
                break
            events = run.events(0.2)
            if events is None:
                break
            for ev in events:
                kind = ev.get("event")
                if kind == "collected":
                    collected_at = time.monotonic()
                    for t in ev.get("tests", []):
                        checks.setdefault(t["id"], Check(t["id"], t["name"], bool(t["speed"])))
                elif kind == "imported":
                    imported = True
                elif kind == "start" and ev.get("id") in checks:
                    current, current_start = ev["id"], time.monotonic()
                elif kind == "result" and ev.get("id") in checks:
                    c = checks[ev["id"]]
                    c.outcome, c.message, c.example = ev["outcome"], ev.get("message", ""), ev.get("example", "")
                    current = None
                elif kind == "done":
                    finished = True
        code, tail = run.finish()
        if finished:
            if code != 0 and not any(c.outcome != "not run" for c in checks.values()):
                note = f"the grading process {_signal_name(code)}: {tail.strip()[-500:]}"
            return checks, note
        death = f"the grading process {_signal_name(code)}"
        if current is not None:
            checks[current].outcome, checks[current].message = "crash", f"{death} during this check"
        elif not checks or not imported:
            # Died while collecting the suite or importing the kata: nothing more can run.
            for c in checks.values():
                if c.outcome == "not run":
                    c.outcome, c.message = "crash", f"{death} while importing the kata module"
            return checks, note or f"{death} before any check ran: {tail.strip()[-500:]}"
        if all(c.outcome != "not run" for c in checks.values()):
            return checks, note


def _task_result(task: Task, checks: list[Check], note: str) -> TaskResult:
    counted = [c for c in checks if c.outcome != "skip"]
    passed = sum(c.outcome == "pass" for c in counted)
    if not checks:
        status = "crash" if note else "error"
        message = note or "the suite has no checks for this task"
    else:
        def rank(c: Check) -> int:
            outcome = "slow" if (c.speed and c.outcome == "fail") else c.outcome
            return STATUSES.index(outcome) if outcome in STATUSES else 0
        worst = min(counted, key=rank, default=None)
        status = "pass" if worst is None else STATUSES[rank(worst)]
        message = "" if status == "pass" else worst.message
    failures = [
        {"test": c.id.split("::")[-1], "outcome": c.outcome, "message": c.message, "example": c.example}
        for c in counted if c.outcome != "pass"
    ]
    return TaskResult(
        name=task.name, title=task.title, status=status,
        score=task.points if status == "pass" else 0, max_score=task.points,
        checks_passed=passed, checks_total=len(counted), message=message,
        hint="" if status == "pass" else task.hints[0], failures=failures,
    )


def grade_kata(kata: Kata, target: str = "katas", *, seed: int = 0, tasks: list[str] | None = None,
               limits: Limits = Limits()) -> KataResult:
    """Grade one kata (or only the named tasks of it) in a child process."""
    _target.resolve(target)
    chosen = [kata.task(t) for t in tasks] if tasks else list(kata.tasks)
    started = time.monotonic()
    only = [name for t in chosen for name in t.tests] if tasks else []
    checks, note = _run_checks(kata, target, seed, limits, only)
    for c in checks.values():
        if c.outcome == "not run":
            c.outcome, c.message = "error", "the check did not run"
    results = []
    for task in chosen:
        mine = [c for c in checks.values() if c.name in task.tests]
        results.append(_task_result(task, mine, note))
    return KataResult(
        name=kata.name, title=kata.title,
        score=sum(t.score for t in results), max_score=sum(t.max_score for t in results),
        duration=round(time.monotonic() - started, 3), tasks=results,
    )


def grade(katas: list[Kata], target: str = "katas", *, seed: int = 0, jobs: int = 1,
          limits: Limits = Limits()) -> GradeResult:
    """Grade several katas, `jobs` at a time; each in its own process."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda k: grade_kata(k, target, seed=seed, limits=limits), katas))
    return GradeResult(
        target=target, seed=seed,
        score=sum(k.score for k in results), max_score=sum(k.max_score for k in results),
        duration=round(time.monotonic() - started, 3), katas=results,
    )
