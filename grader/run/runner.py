"""Grade katas: each kata's suite runs in its own judge process
(grader.judge.judge), which holds the learner's module in a jail process of its
own (grader.jailer.jail_client). Results come back over a pipe this process created, as
grader.judge.events events. Returns plain data; only the CLI prints.

A Grader (grader.run.judges) owns what the gradings of a process share: the judge server that
forks the judges, the jail zygote that forks the jails, the judges' bytecode
cache and the judges running now. Each grading (grade_many, and grade,
grade_kata and grade_batch on it) has a cancel event of its own: Ctrl-C, or
the caller setting it, stops that grading and no other.
"""

from __future__ import annotations

import atexit
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable

from grader.judge.events import INTERRUPTED_MESSAGE, EventKind, Status
from grader.kata import target as _target
from grader.kata.registry import Kata
from grader.run.judges import Grader, JudgeRun, judge_argv, judge_target
from grader.run.results import (
    Check,
    GradeResult,
    KataResult,
    Limits,
    TaskResult,
    kata_result,
    task_result,
    with_roots,
)

__all__ = [
    "Grading",
    "Job",
    "default_grader",
    "grade",
    "grade_batch",
    "grade_kata",
    "grade_many",
]

# A judge enforces each check's limit itself; the runner steps in only if the judge stops answering.
JUDGE_GRACE = 20.0


_DEFAULT: list[Grader] = []
_DEFAULT_LOCK = threading.Lock()


def default_grader() -> Grader:
    """The Grader of the module-level functions, made on first use and closed when the process ends."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(Grader())
            atexit.register(_DEFAULT[0].close)
        return _DEFAULT[0]


@dataclass
class _Call:
    """One grading: the Grader it runs on, and its own cancel event."""

    grader: Grader
    cancel: threading.Event

    @classmethod
    def make(cls, grader: Grader | None, cancel: threading.Event | None) -> "_Call":
        return cls(grader or default_grader(), cancel if cancel is not None else threading.Event())


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _run_checks(
    call: "_Call",
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
    run = JudgeRun(call.grader, judge_argv(kata, target, seed, only, limits, fail_fast, names, batch))
    try:
        while len(state.graded) < jobs and not state.stopped(run, limits, call.cancel):
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

    def stopped(self, run: JudgeRun, limits: Limits, cancel: threading.Event) -> bool:
        """Whether the grading must end now (Ctrl-C, a check or the kata over its
        time): then the judge is killed and the checks say why."""
        now = time.monotonic()
        if cancel.is_set():
            run.kill()
            self._unrun(Status.INTERRUPTED, INTERRUPTED_MESSAGE)
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
            c.printed, c.pytest, c.load = ev.printed, ev.pytest, ev.load
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
        elif code != 0 and not checks and note != INTERRUPTED_MESSAGE:
            note = f"{death}: {tail.strip()[-500:]}"
        graded.append((checks, note))
        ended = note or "the judge stopped"
        return graded + [({}, f"not graded: {ended} during an earlier grading of the batch")] * (jobs - len(graded))


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
    grader: Grader | None = None,
    cancel: threading.Event | None = None,
) -> KataResult:
    """Grade one kata (or only the named tasks of it) in a child process.
    progress(kata, task_result) is called as each task's last check ends
    (and those of the chosen tasks it needs, so its result can say which it
    fails because of), while the rest of the kata is still being graded. fail_fast: stop each
    task at its first check that does not pass (that check's outcome is
    the task's status, and the rest are reported with it, not run).
    checks: run only the checks (test functions) of these names; a chosen
    task that has none of them is an error that says so. cancel: once set,
    the grading stops, the checks not run saying it was interrupted."""
    _target.resolve(target)
    chosen = [kata.task(t) for t in tasks] if tasks else list(kata.tasks)
    started = time.monotonic()
    only = [t.name for t in chosen] if tasks else []
    told: set[str] = set()

    def finished_tasks(checks: dict[str, Check]) -> None:
        """Tell each task whose checks have all ended, once every chosen task it needs has too (its row
        can then say which it fails because of)."""
        done = {}
        for task in chosen:
            mine = [c for c in checks.values() if c.task == task.name]
            if mine and all(c.outcome is not Status.NOT_RUN for c in mine):
                done[task.name] = task_result(task, mine, "")
        for result in with_roots(kata, list(done.values())):
            if result.name not in told and all(t in done for t in kata.needs(result.name) if t in only or not only):
                told.add(result.name)
                progress(kata, result)

    names = list(checks or ())
    call = _Call.make(grader, cancel)
    [(graded, note)] = _run_checks(
        call, kata, target, seed, limits, only, finished_tasks if progress else None, fail_fast, names
    )
    return kata_result(kata, chosen, graded, note, names, time.monotonic() - started, progress, told)


@dataclass(frozen=True)
class Grading:
    """One grading of a batch: a target, and the only tasks and checks of it to grade (all when empty)."""

    target: str
    tasks: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()


def grade_batch(
    kata: Kata,
    gradings: list[Grading],
    *,
    seed: int = 0,
    limits: Limits = Limits(),
    fail_fast: bool = False,
    grader: Grader | None = None,
) -> list[KataResult]:
    """Grade several targets of one kata, one after another in one judge
    process, as grade_kata would grade each (its own jails, fixtures and
    limits, the same seed), but with the suite collected once: for graders
    of many submissions of a kata, such as the project's mutants. A grading
    the judge did not reach (it died during an earlier one) crashes with a
    note that says so. Each result's duration is the batch's average."""
    if not gradings:
        return []
    batch = [{"target": judge_target(g.target), "tasks": list(g.tasks), "checks": list(g.checks)} for g in gradings]
    # An unknown task stops here, as in grade_kata.
    chosen = [[kata.task(t) for t in g.tasks] or list(kata.tasks) for g in gradings]
    started = time.monotonic()
    call = _Call.make(grader, None)
    graded = _run_checks(call, kata, gradings[0].target, seed, limits, [], None, fail_fast, [], batch)
    duration = (time.monotonic() - started) / len(gradings)
    return [
        kata_result(kata, tasks, checks, note, list(g.checks), duration)
        for g, tasks, (checks, note) in zip(gradings, chosen, graded)
    ]


@dataclass(frozen=True, eq=False)
class Job:
    """One kata of one target to grade: with its seed, and the only tasks of it to grade (all when empty)."""

    kata: Kata
    target: str = "katas"
    seed: int = 0
    tasks: tuple[str, ...] = ()


@dataclass
class Graded:
    """What grade_many did: each job's result in the jobs' order (None for a
    job not graded, the exception for one the grader failed on), and whether
    Ctrl-C or the cancel event stopped it."""

    results: list = field(default_factory=list)
    interrupted: bool = False


def grade_many(
    jobs: list[Job],
    *,
    workers: int = 1,
    limits: Limits = Limits(),
    progress: Callable[[Job, TaskResult], None] | None = None,
    on_done: Callable[[Job, KataResult | Exception], None] | None = None,
    fail_fast: bool = False,
    grader: Grader | None = None,
    cancel: threading.Event | None = None,
) -> Graded:
    """Grade every job, `workers` at a time, each kata in a judge of its own:
    the one parallel grading loop of `kata grade`, `grade-all` and the kits.
    progress(job, task_result): as each task is graded (from worker threads
    when workers > 1); on_done(job, result): as each job ends, in the calling
    thread. Ctrl-C (KeyboardInterrupt) or setting cancel stops every judge of
    this grading at once, and the jobs not started never start; what was
    graded is kept."""
    call = _Call.make(grader, cancel)
    call.grader.grading_started(call.cancel)
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    futures = {pool.submit(_grade_job, call, job, limits, progress, fail_fast): i for i, job in enumerate(jobs)}
    out = Graded([None] * len(jobs))
    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                _take(out, futures[future], future, jobs, on_done)
            if call.cancel.is_set():
                out.interrupted = True
    except KeyboardInterrupt:
        out.interrupted = True
        call.cancel.set()
    finally:
        for future in futures:
            future.cancel()
        pool.shutdown(wait=True)
        call.grader.grading_ended(call.cancel)
    for future, i in futures.items():
        if out.results[i] is None and future.done() and not future.cancelled():
            _take(out, i, future, jobs, on_done)
    out.interrupted = out.interrupted or call.cancel.is_set()
    return out


def _grade_job(call: _Call, job: Job, limits: Limits, progress, fail_fast: bool) -> KataResult:
    if call.cancel.is_set():
        raise _NotStarted
    tell = (lambda kata, result: progress(job, result)) if progress is not None else None
    return grade_kata(
        job.kata,
        job.target,
        seed=job.seed,
        tasks=list(job.tasks) or None,
        limits=limits,
        progress=tell,
        fail_fast=fail_fast,
        grader=call.grader,
        cancel=call.cancel,
    )


class _NotStarted(Exception):
    """A job the grading was stopped before."""


def _take(out: Graded, i: int, future, jobs: list[Job], on_done) -> None:
    try:
        result = future.result()
    except _NotStarted:
        return
    except Exception as exc:  # the grader's own failure: the caller decides what this job's row says
        result = exc
    out.results[i] = result
    if on_done is not None:
        on_done(jobs[i], result)


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
    grader: Grader | None = None,
    cancel: threading.Event | None = None,
) -> GradeResult:
    """Grade several katas of one target, `jobs` at a time; each in its own process.
    tasks: kata name -> the only tasks of it to grade (all when absent).
    progress(kata, task_result): called as each task is graded (from
    worker threads when jobs > 1). fail_fast: as grade_kata's.

    Ctrl-C (KeyboardInterrupt), or setting cancel, kills every judge and
    jail of this grading at once; the result then holds what was graded so
    far, with `interrupted` set. The grader's own failure on a kata is raised."""
    started = time.monotonic()
    work = [Job(k, target, seed, tuple((tasks or {}).get(k.name) or ())) for k in katas]
    tell = (lambda job, result: progress(job.kata, result)) if progress is not None else None
    graded = grade_many(
        work, workers=jobs, limits=limits, progress=tell, fail_fast=fail_fast, grader=grader, cancel=cancel
    )
    failed = [r for r in graded.results if isinstance(r, Exception)]
    if failed:
        raise failed[0]
    results = [r for r in graded.results if r is not None]
    return GradeResult(
        target=target,
        seed=seed,
        score=sum(k.score for k in results),
        max_score=sum(k.max_score for k in results),
        duration=round(time.monotonic() - started, 3),
        katas=results,
        interrupted=graded.interrupted,
    )
