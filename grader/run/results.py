"""What a grading produces: each check's outcome, and from them each task's
and kata's result, the way the runner and every report see them. Plain data."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from grader.judge.events import INTERRUPTED_MESSAGE, Status
from grader.kata.registry import Kata, Task
from grader.run import diagnosis

MAX_SECONDS = 86_400  # a limit of time is at most a day
MAX_MEMORY_MB = 1 << 20  # and one of memory or output at most 1 TiB: what a process's rlimit and a judge's argv hold


@dataclass(frozen=True)
class Limits:
    """A grading's limits; a ValueError for one that is not a number in (0, its most]."""

    test_seconds: float = 60.0  # wall clock one check may take
    kata_seconds: float = 300.0  # wall clock a kata's whole suite may take
    memory_mb: int = 4096  # address space of a grading process
    output_mb: int = 64  # what a grading process may print

    def __post_init__(self) -> None:
        for name, most in (("test_seconds", MAX_SECONDS), ("kata_seconds", MAX_SECONDS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= most:
                raise ValueError(f"Limits.{name} must be a number of seconds in (0, {most}], got {value!r}")
        for name in ("memory_mb", "output_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_MEMORY_MB:
                raise ValueError(f"Limits.{name} must be an int of MiB in [1, {MAX_MEMORY_MB}], got {value!r}")


@dataclass
class Check:
    id: str  # pytest node id
    name: str  # the test function's name
    task: str = ""  # the task its @pytest.mark.task mark names
    outcome: Status = Status.NOT_RUN
    message: str = ""
    example: str = ""  # Hypothesis's minimal falsifying example, if any
    printed: str = ""  # what the learner's code printed while the check ran, if it failed (capped)
    pytest: str = ""  # pytest's own words for the failure (assertion text, Hypothesis's notes), verbatim
    figures: list[dict] = field(default_factory=list)  # what the check measured against its bar
    load: bool = False  # it failed because the kata module could not be loaded (its message says why)


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
    checks_hidden: int = 0  # a student edition's: the task's checks it does not hold, graded on submission
    diagnosis: str = ""  # the known mistake its failures look like (grader.run.diagnosis), "" for none
    diagnosis_why: str = ""  # that mistake's one-line why
    because_of: str = ""  # "kata:task": the task it needs that fails first, when it fails too; "" otherwise
    load_failed: bool = False  # its checks failed because the kata module did not load: no hint, no diagnosis

    @property
    def looks_like(self) -> str:
        """The line that names the known mistake the task's failures look like, or ""."""
        return f"looks like: {self.diagnosis} (why: {self.diagnosis_why})" if self.diagnosis else ""

    @property
    def root(self) -> str:
        """The name of the task this one fails because of (because_of without its kata), or ""."""
        return self.because_of.partition(":")[2]

    @property
    def because(self) -> str:
        """'fails because greedy fails: fix greedy first', or "" for a task that fails on its own account."""
        return f"fails because {self.root} fails: fix {self.root} first" if self.because_of else ""


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
        """What exit code 0 says: the grading was not interrupted, every graded task is done here, and
        in every graded kata a check of its own ran here. A task this copy holds no check of (a
        student edition's speed task, all of whose checks are hidden) is on submission only beside
        a task of its kata whose checks ran and pass; graded alone, nothing here checked it, so it
        is no pass (a per-task command, such as GitHub Classroom's, exits 1 for it)."""
        return not self.interrupted and all(
            all(t.status.done_here for t in k.tasks) and any(t.checks_total for t in k.tasks) for k in self.katas
        )

    @property
    def on_submission(self) -> int:
        """The points of the tasks whose hidden checks are graded on submission (a student edition's)."""
        return sum(t.max_score for k in self.katas for t in k.tasks if t.status is Status.SUBMIT)


def task_result(task: Task, checks: list[Check], note: str, no_checks: str = "") -> TaskResult:
    """A task passes only when every one of its checks finished and passed.
    no_checks: why there are none, if not for a crash (note). A task with hidden
    checks (a student edition's) whose every check here passes is SUBMIT: the
    rest is graded on submission."""
    passed = sum(c.outcome is Status.PASS for c in checks)
    hint = None
    unloaded = any(c.load for c in checks)
    if not checks and task.hidden and not note:
        status, message = Status.SUBMIT, _on_submission(task, 0)
    elif not checks:
        status = Status.INTERRUPTED if note == INTERRUPTED_MESSAGE else Status.CRASH if note else Status.ERROR
        message = note or no_checks or "the suite has no checks for this task"
    else:

        def outcome(c: Check) -> Status:
            return Status.ERROR if c.outcome is Status.NOT_RUN else c.outcome

        worst = min(checks, key=lambda c: outcome(c).rank)
        status = outcome(worst)
        message = "" if status is Status.PASS else worst.message
        hint = task.hint_for(worst.name)
        if status is Status.PASS and task.hidden:
            status, message = Status.SUBMIT, _on_submission(task, len(checks))
    failures = [
        {
            "test": c.id.split("::")[-1],
            "outcome": c.outcome.value,
            "message": c.message,
            "example": c.example,
            "printed": c.printed,
            "pytest": c.pytest,
        }
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
        hint="" if status.done_here or unloaded else hint or task.hints[0],
        failures=failures,
        visibility=task.visibility,
        figures=[f for c in checks for f in c.figures],
        checks_hidden=len(task.hidden),
        load_failed=unloaded,
    )


def _waiting(kata: Kata, task: Task, result: TaskResult, others: list[TaskResult]) -> TaskResult:
    """A task all of whose checks are hidden (a speed task, timing the functions of the
    others) is todo while a task it needs (every other task, when it names none) graded with
    it is not done here, and says it is no pass when no task graded with it ran a check
    (GradeResult.passed)."""
    needed = set(kata.needs(task.name)) if task.depends else {r.name for r in others}
    pending = [r.name for r in others if r.name in needed and not r.status.done_here]
    if not pending and not any(r.checks_total for r in others):
        return dataclasses.replace(
            result, message=f"{result.message}; graded without a task of its kata whose checks run here, it is no pass"
        )
    if not pending:
        return result
    return dataclasses.replace(
        result,
        status=Status.TODO,
        message=f"{result.message}; it grades the functions of {', '.join(pending)}, which do not pass here yet",
        hint=task.hints[0],
    )


def _diagnosed(result: TaskResult, mistakes: tuple[diagnosis.Mistake, ...]) -> TaskResult:
    """result with the known mistake its failures look like, if any (never for a task done here, one whose
    kata did not load, or one that fails because of a task it needs)."""
    if result.status.done_here or result.load_failed or result.because_of:
        return result
    found = diagnosis.diagnose(mistakes, result.name, result.failures)
    if found is None:
        return result
    return dataclasses.replace(result, diagnosis=found.name, diagnosis_why=found.why)


def with_roots(kata: Kata, results: list[TaskResult]) -> list[TaskResult]:
    """results, each task that failed while a task it needs (the registry's depends, followed through) did not
    pass saying so: because_of names the first such task that needs no failing task itself, and the task
    gives no hint of its own. A task whose kata did not load fails on that account, whatever it needs."""
    failing = {r.name for r in results if r.status.blocks}
    out = []
    for r in results:
        root = kata.root(r.name, failing) if r.status.failed and not r.load_failed else None
        out.append(dataclasses.replace(r, because_of=f"{kata.name}:{root}", hint="") if root else r)
    return out


def _on_submission(task: Task, public: int) -> str:
    hidden = len(task.hidden)
    mine = "" if not public else f"its {public} public check{' passes' if public == 1 else 's pass'}; "
    return (
        f"{mine}{hidden} hidden check{'s' if hidden != 1 else ''} of this task "
        f"{'are' if hidden != 1 else 'is'} graded on submission (this edition does not hold them)"
    )


def kata_result(
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
        results.append(task_result(task, mine, note, missing))
    for i, (task, result) in enumerate(zip(chosen, results)):
        if result.status is Status.SUBMIT and not result.checks_total:
            results[i] = _waiting(kata, task, result, [r for r in results if r is not result])
    mistakes = diagnosis.catalogue(kata)
    results = [_diagnosed(r, mistakes) for r in with_roots(kata, results)]
    for task, result in zip(chosen, results):
        if progress is not None and task.name not in told:
            progress(kata, result)
    return KataResult(
        name=kata.name,
        title=kata.title,
        score=sum(t.score for t in results),
        max_score=sum(t.max_score for t in results),
        duration=round(duration, 3),
        tasks=results,
    )
