"""`kata interview`: a timed task on a fresh stub, graded in a workspace of
its own, with a log of every attempt and a report for the interviewer.

A workspace holds the kata's module (the functions of the tasks under
interview open, the rest of the kata written from the reference solution),
its CHECKLIST section, and the folder .interview/:

    state.json                  what the interview covers, its seed and its start (written once)
    log.jsonl                   one JSON line per event, appended as it happens: the start, every
                                grade, the final grade; each names the digest of the code it graded
                                and the digest of the line before it
    start/KATA.py               the module as handed out
    final/KATA.py               the module as frozen at the end
    interview-report.md, .json  the report, written at the end

Inside a workspace `kata grade` calls grade(); `kata interview --finish`
calls finish(). The library writes only inside the workspace and returns
data; the CLI prints. Every reading of the time goes through a Clock, so
tests drive a whole interview with a fake one.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta, timezone
from enum import Enum
from pathlib import Path

from grader.grading import seeds
from grader.grading.events import Status
from grader.grading.runner import GradeResult, KataResult, Limits
from grader.grading.runner import grade as run_grade
from grader.kata.registry import MAX_MINUTES, Kata, Question, Task, find_kata, load_presets
from grader.kata.stubs import make_stub, stub_for
from grader.kata.target import ROOT, SOLUTIONS_DIR
from grader.output import files

DEFAULT_MINUTES = 45
STATE_DIR = ".interview"  # inside the workspace
STATE_FILE = "state.json"
LOG_FILE = "log.jsonl"
REPORT_MD = "interview-report.md"
REPORT_JSON = "interview-report.json"
STATE_VERSION = 1
REPORT_VERSION = 1
MESSAGE_CHARS = 400  # a failing check's message is cut to this length in the log


class InterviewError(ValueError):
    """An interview cannot do what was asked; the message says why and what to do."""


class Clock:
    """Where an interview reads the time: the system's clock, in UTC. Tests
    pass a fake one to the CLI as its context object (CliRunner.invoke(...,
    obj=clock))."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


# ------------------------------------------------------------------ planning


@dataclass(frozen=True)
class Plan:
    """What an interview will cover, before it starts."""

    kata: Kata
    tasks: tuple[Task, ...]  # the tasks graded, in registry order
    minutes: int
    title: str
    preset: str = ""  # the preset's name, "" when there is none

    @property
    def whole_kata(self) -> bool:
        return len(self.tasks) == len(self.kata.tasks)

    @property
    def functions(self) -> tuple[str, ...]:
        """The functions and classes the candidate writes; all of them for the whole kata."""
        if self.whole_kata:
            return _public_names(stub_for(self.kata.name))  # the stub keeps every public name
        return tuple(f for t in self.tasks for f in t.functions)


def plan(
    kata_name: str,
    task_names: tuple[str, ...] = (),
    minutes: int = DEFAULT_MINUTES,
    *,
    title: str = "",
    preset: str = "",
) -> Plan:
    """An interview on some tasks of a kata (all of them when task_names is
    empty), or a ValueError saying what is wrong and what is allowed."""
    kata = find_kata(kata_name)
    if len(set(task_names)) != len(task_names):
        raise InterviewError(f"a task is named twice: {' '.join(task_names)}")
    chosen = {kata.task(name).name for name in task_names}
    tasks = tuple(t for t in kata.tasks if t.name in chosen) if task_names else kata.tasks
    if not 1 <= minutes <= MAX_MINUTES:
        raise InterviewError(f"minutes must be in [1, {MAX_MINUTES}], got {minutes}")
    if len(tasks) < len(kata.tasks) and not any(t.functions for t in tasks):
        writers = [t.name for t in kata.tasks if t.functions]
        if not writers:
            raise InterviewError(
                f"the registry lists no functions for the tasks of {kata.name}, so only the whole "
                f"kata can be interviewed: kata interview {kata.name}"
            )
        names = " ".join(t.name for t in tasks)
        raise InterviewError(
            f"{kata.name} / {names} writes no functions of its own (it grades the others', e.g. "
            f"their speed); add a task that does, e.g. kata interview {kata.name} {writers[0]} {names}"
        )
    what = "the whole kata" if len(tasks) == len(kata.tasks) else ", ".join(t.name for t in tasks)
    return Plan(kata, tasks, minutes, title or f"{kata.title}: {what} in {minutes_text(minutes)}", preset)


def plan_preset(name: str, minutes: int | None = None) -> Plan:
    """The ready-made interview of that name (its minutes unless given)."""
    presets = {p.name: p for p in load_presets()}
    if name not in presets:
        raise InterviewError(f"no preset named {name!r}; the presets are: {', '.join(presets)} (kata interview --list)")
    p = presets[name]
    if minutes is None or minutes == p.minutes:
        return plan(p.kata, p.tasks, p.minutes, title=p.title, preset=p.name)
    return plan(p.kata, p.tasks, minutes, title=f"{p.title}, here in {minutes_text(minutes)}", preset=p.name)


def _solution_source(kata: str) -> str:
    path = SOLUTIONS_DIR / f"{kata}.py"
    if not path.is_file():
        raise InterviewError(
            f"an interview on some of kata {kata!r}'s tasks gives the candidate the rest of the module as the "
            "reference "
            f"solution writes it, and this copy of the project has none at {path} (a student edition ships no "
            "solutions); interview the whole kata instead"
        )
    return path.read_text(encoding="utf-8")


def _public_names(source: str) -> tuple[str, ...]:
    return tuple(
        n.name
        for n in ast.parse(source).body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
    )


def module_text(p: Plan) -> str:
    """The kata module a candidate starts from: the plan's functions open,
    the rest as the reference solution writes them."""
    if p.whole_kata:
        head, body = "# Interview: write every function and class of this module.", stub_for(p.kata.name)
    else:
        head = (
            f"# Interview: write {', '.join(p.functions)}. The rest of this module is written;"
            " read it and call it as you like."
        )
        body = make_stub(_solution_source(p.kata.name), p.functions)
    return f"{head}\n# Grade with `kata grade` in this folder; CHECKLIST.md says what done means.\n{body}"


def checklist_text(p: Plan) -> str:
    """CHECKLIST.md of the workspace: how the interview works, then the
    kata's section of the checklist with only the tasks under interview."""
    text = (ROOT / "CHECKLIST.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- {re.escape(p.kata.name)} -->\n(.*?)<!-- end {re.escape(p.kata.name)} -->", text, re.S)
    if not found:
        raise InterviewError(
            f"CHECKLIST.md has no section for {p.kata.name} (<!-- {p.kata.name} --> ... <!-- end {p.kata.name} -->)"
        )
    chosen = {t.name for t in p.tasks}
    lines = []
    for line in found.group(1).replace(f"`katas/{p.kata.name}.py`", f"`{p.kata.name}.py`").splitlines():
        task = re.match(r"- \[ \] \*\*(\w+)\*\*", line)
        if task is None or task.group(1) in chosen:
            lines.append(re.sub(r"^## \d+\. ", "## ", line))
    what = (
        f"every function and class of {p.kata.name}.py"
        if p.whole_kata
        else f"{', '.join(p.functions)} in {p.kata.name}.py (the rest of the module is written)"
    )
    intro = (
        f"# Interview: {p.title}\n\n"
        f"Write {what}. You have {minutes_text(p.minutes)}.\n\n"
        f"Run `kata grade` in this folder: it grades only this interview's tasks, records every attempt "
        f"and shows the time left. The first grade after time is up is the last one.\n\n"
    )
    return intro + "\n".join(lines).strip() + "\n"


# ------------------------------------------------------------- state and log


@dataclass(frozen=True)
class State:
    """An interview's settings, written once when it starts (.interview/state.json)."""

    kata: str
    tasks: tuple[str, ...]  # the tasks graded
    functions: tuple[str, ...]  # the functions and classes the candidate writes
    title: str
    preset: str  # "" when the interview was not started from a preset
    minutes: int
    seed: int  # the grading seed; never printed to the candidate
    practice: bool  # practice alone: the report is the candidate's debrief, answers on request
    started: datetime
    version: int = STATE_VERSION

    @property
    def deadline(self) -> datetime:
        return self.started + timedelta(minutes=self.minutes)

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "kata": self.kata,
            "tasks": list(self.tasks),
            "functions": list(self.functions),
            "title": self.title,
            "preset": self.preset,
            "minutes": self.minutes,
            "seed": self.seed,
            "practice": self.practice,
            "started": self.started.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict) -> "State":
        return cls(
            kata=str(data["kata"]),
            tasks=tuple(data["tasks"]),
            functions=tuple(data["functions"]),
            title=str(data["title"]),
            preset=str(data["preset"]),
            minutes=int(data["minutes"]),
            seed=int(data["seed"]),
            practice=bool(data["practice"]),
            started=datetime.fromisoformat(data["started"]),
            version=int(data["version"]),
        )


class EntryKind(str, Enum):
    START = "start"  # the interview started; sha256 is the module as handed out
    GRADE = "grade"  # an attempt: `kata grade` in the workspace
    FINAL = "final"  # the final grade: `kata interview --finish`, or the first grade after time is up

    def __str__(self) -> str:
        return self.value


class EndReason(str, Enum):
    FINISHED = "finished"  # kata interview --finish
    TIME_UP = "time up"  # the first grade after the deadline

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TaskScore:
    """One task's result in one attempt."""

    name: str
    status: Status
    score: int
    max_score: int
    checks_passed: int
    checks_total: int
    failed_check: str = ""  # the first check that did not pass, "" when all passed
    message: str = ""  # that check's message, cut to MESSAGE_CHARS


@dataclass(frozen=True)
class Entry:
    """One line of the log."""

    kind: EntryKind
    time: datetime
    elapsed: float  # seconds since the start
    sha256: str  # the digest of the code graded (for the start: of the module handed out)
    tasks: tuple[TaskScore, ...] = ()
    reason: EndReason | None = None  # FINAL only
    prev: str = ""  # sha256 of the log line before this one; "" for the first

    @property
    def score(self) -> int:
        return sum(t.score for t in self.tasks)

    @property
    def max_score(self) -> int:
        return sum(t.max_score for t in self.tasks)

    def to_json(self) -> dict:
        return {
            "kind": self.kind.value,
            "time": self.time.isoformat(),
            "elapsed": round(self.elapsed, 3),
            "sha256": self.sha256,
            "tasks": [dict(asdict(t), status=t.status.value) for t in self.tasks],
            "reason": self.reason.value if self.reason else "",
            "prev": self.prev,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Entry":
        return cls(
            kind=EntryKind(data["kind"]),
            time=datetime.fromisoformat(data["time"]),
            elapsed=float(data["elapsed"]),
            sha256=str(data["sha256"]),
            tasks=tuple(TaskScore(**dict(t, status=Status(t["status"]))) for t in data["tasks"]),
            reason=EndReason(data["reason"]) if data["reason"] else None,
            prev=str(data["prev"]),
        )


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Session:
    """A workspace as it is on disk."""

    directory: Path
    state: State
    entries: list[Entry]
    log_intact: bool  # every line names the digest of the line before it

    @property
    def folder(self) -> Path:
        return self.directory / STATE_DIR

    @property
    def module(self) -> Path:
        return self.directory / f"{self.state.kata}.py"

    @property
    def start_copy(self) -> Path:
        return self.folder / "start" / f"{self.state.kata}.py"

    @property
    def final_copy(self) -> Path:
        return self.folder / "final" / f"{self.state.kata}.py"

    @property
    def report_path(self) -> Path:
        return self.folder / REPORT_MD

    @property
    def attempts(self) -> list[Entry]:
        return [e for e in self.entries if e.kind is EntryKind.GRADE]

    @property
    def final(self) -> Entry | None:
        return next((e for e in self.entries if e.kind is EntryKind.FINAL), None)

    @property
    def over(self) -> bool:
        return self.final is not None

    def seconds_left(self, now: datetime) -> float:
        return (self.state.deadline - now).total_seconds()

    def append(self, entry: Entry) -> Entry:
        """Append entry to the log, chained to the line before it; returns what was written."""
        log = self.folder / LOG_FILE
        lines = log.read_bytes().splitlines() if log.exists() else []
        entry = replace(entry, prev=_digest(lines[-1]) if lines else "")
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry.to_json()) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.entries.append(entry)
        return entry


def find_workspace() -> Path | None:
    """The interview workspace `kata grade` runs in: the current directory if
    it holds an interview, else $KATA_WORKDIR if that does; None otherwise."""
    places = [Path.cwd()] + ([Path(os.environ["KATA_WORKDIR"]).expanduser()] if os.environ.get("KATA_WORKDIR") else [])
    return next((p.resolve() for p in places if (p / STATE_DIR / STATE_FILE).is_file()), None)


def load(directory: Path) -> Session:
    """The interview in directory, or an InterviewError saying there is none or that its files are damaged."""
    directory = Path(directory).expanduser().resolve()
    folder = directory / STATE_DIR
    try:
        state = State.from_json(json.loads((folder / STATE_FILE).read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise InterviewError(
            f"{directory} holds no interview (no {STATE_DIR}/{STATE_FILE}); "
            "start one with kata interview KATA [TASK...] --dir DIR"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InterviewError(
            f"{folder / STATE_FILE} is damaged ({exc}); it is written once, when the interview starts"
        ) from None
    try:
        lines = (folder / LOG_FILE).read_bytes().splitlines()
    except FileNotFoundError:
        raise InterviewError(f"{folder / LOG_FILE} is missing: the interview's log was deleted") from None
    entries, intact, prev = [], True, ""
    for n, line in enumerate(lines, 1):
        try:
            entry = Entry.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise InterviewError(
                f"line {n} of {folder / LOG_FILE} is not a log entry ({exc}): the log was edited"
            ) from None
        intact = intact and entry.prev == prev
        entries.append(entry)
        prev = _digest(line)
    if not entries or entries[0].kind is not EntryKind.START:
        raise InterviewError(f"{folder / LOG_FILE} does not begin with the interview's start: the log was edited")
    return Session(directory, state, entries, intact)


# ------------------------------------------------------------------ starting


def start(p: Plan, directory: Path, *, seed: int | None, practice: bool, clock: Clock) -> Session:
    """Create the workspace for plan p in directory (absent or empty) and start the clock.

    seed: the grading seed; None draws one at random (it is kept in the state, never printed)."""
    directory = Path(directory).expanduser().resolve()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InterviewError(
            f"{directory} already exists and is not an empty folder; "
            "an interview starts in a new workspace: pick another --dir"
        )
    module, checklist = module_text(p), checklist_text(p)
    state = State(
        kata=p.kata.name,
        tasks=tuple(t.name for t in p.tasks),
        functions=p.functions,
        title=p.title,
        preset=p.preset,
        minutes=p.minutes,
        seed=seeds.drawn() if seed is None else seed,
        practice=practice,
        started=clock.now(),
    )
    folder = directory / STATE_DIR
    (folder / "start").mkdir(parents=True)
    (directory / f"{p.kata.name}.py").write_text(module, encoding="utf-8")
    (directory / "CHECKLIST.md").write_text(checklist, encoding="utf-8")
    files.write_json(folder / STATE_FILE, state.to_json())
    session = Session(directory, state, [], True)
    session.start_copy.write_text(module, encoding="utf-8")
    session.append(Entry(EntryKind.START, state.started, 0.0, _digest(module.encode())))
    return session


# ------------------------------------------------------------------- grading


@dataclass
class Graded:
    """One grade inside a workspace: what was logged and the full result."""

    session: Session
    entry: Entry  # the log line this grade appended
    result: GradeResult  # for the CLI's table (its seed is the interview's: do not print it)
    seconds_left: float  # after the grade; <= 0 once time is up
    report: Path | None = None  # set when this grade ended the interview


def _scores(result: KataResult) -> tuple[TaskScore, ...]:
    out = []
    for t in result.tasks:
        first = t.failures[0] if t.failures else {}
        out.append(
            TaskScore(
                t.name,
                t.status,
                t.score,
                t.max_score,
                t.checks_passed,
                t.checks_total,
                str(first.get("test", "")),
                str(first.get("message", ""))[:MESSAGE_CHARS],
            )
        )
    return tuple(out)


def _grade_copy(
    session: Session, folder: Path, kind: EntryKind, clock: Clock, limits: Limits, reason: EndReason | None = None
) -> Graded:
    """Grade the module copied into folder (the exact bytes the digest names) and log it."""
    s = session.state
    code = (folder / f"{s.kata}.py").read_bytes()
    when = clock.now()
    whole = run_grade([find_kata(s.kata)], str(folder), seed=s.seed, tasks={s.kata: list(s.tasks)}, limits=limits)
    if whole.interrupted:  # Ctrl-C: every judge and jail is gone; the attempt is not logged
        raise KeyboardInterrupt
    entry = session.append(
        Entry(kind, when, (when - s.started).total_seconds(), _digest(code), _scores(whole.katas[0]), reason)
    )
    return Graded(session, entry, whole, session.seconds_left(clock.now()))


def _check_open(session: Session) -> None:
    if session.over:
        final = session.final
        raise InterviewError(
            f"this interview is over: it ended at {_local(final.time)} ({final.reason}) and "
            f"{session.module.name} is frozen; the report is {session.report_path}"
        )
    if not session.module.is_file():
        raise InterviewError(
            f"{session.module} is missing: the interview grades that file; copy {session.start_copy} back to start over"
        )


def grade(directory: Path, clock: Clock, limits: Limits = Limits()) -> Graded:
    """An attempt: grade the workspace's module on the interview's tasks
    and seed, and log it. After the deadline this is the final grade instead
    (see finish)."""
    session = load(directory)
    _check_open(session)
    if session.seconds_left(clock.now()) <= 0:
        return finish(directory, clock, limits, EndReason.TIME_UP)
    with tempfile.TemporaryDirectory(prefix="kata-interview-") as tmp:
        shutil.copyfile(session.module, Path(tmp) / session.module.name)
        return _grade_copy(session, Path(tmp), EntryKind.GRADE, clock, limits)


def finish(directory: Path, clock: Clock, limits: Limits = Limits(), reason: EndReason = EndReason.FINISHED) -> Graded:
    """End the interview: freeze the module (a copy under .interview/final/,
    both files read-only), grade it once more, log it and write the report."""
    session = load(directory)
    _check_open(session)
    session.final_copy.parent.mkdir(exist_ok=True)
    session.final_copy.unlink(missing_ok=True)  # left read-only by a final grade that was interrupted
    shutil.copyfile(session.module, session.final_copy)
    for path in (session.final_copy, session.module):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    graded = _grade_copy(session, session.final_copy.parent, EntryKind.FINAL, clock, limits, reason)
    r = build_report(session)
    files.write_json(session.folder / REPORT_JSON, r.to_json())
    session.report_path.write_text(r.markdown(), encoding="utf-8")
    graded.report = session.report_path
    return graded


# -------------------------------------------------------------------- report


@dataclass
class Report:
    """What the interviewer reads at the end (in practice: the candidate's debrief)."""

    state: State
    kata_title: str
    task_titles: dict[str, str]
    attempts: list[Entry]
    final: Entry
    log_intact: bool
    final_code_attempt: int | None  # the last attempt within time that graded the final code, if any
    diff: str  # unified diff from the module handed out to the final one
    questions: list[tuple[str, Question]] = field(default_factory=list)  # (task, question)

    @property
    def seconds_allowed(self) -> float:
        return self.state.minutes * 60.0

    @property
    def seconds_used(self) -> float:
        return min(self.final.elapsed, self.seconds_allowed)

    @property
    def seconds_over(self) -> float:
        return max(0.0, self.final.elapsed - self.seconds_allowed)

    def to_json(self) -> dict:
        s = self.state
        return {
            "version": REPORT_VERSION,
            "kata": s.kata,
            "kata_title": self.kata_title,
            "tasks": [{"name": t, "title": self.task_titles.get(t, "")} for t in s.tasks],
            "functions": list(s.functions),
            "title": s.title,
            "preset": s.preset,
            "mode": "practice" if s.practice else "interview",
            "seed": s.seed,
            "minutes": s.minutes,
            "started": s.started.isoformat(),
            "deadline": s.deadline.isoformat(),
            "ended": self.final.time.isoformat(),
            "end_reason": self.final.reason.value,
            "seconds_used": round(self.seconds_used, 3),
            "seconds_over": round(self.seconds_over, 3),
            "log_intact": self.log_intact,
            "attempts": [e.to_json() for e in self.attempts],
            "final": self.final.to_json(),
            "final_code_attempt": self.final_code_attempt,
            "diff": self.diff,
            "questions": [
                {"task": task, "ask": q.ask, **({} if s.practice else {"answer": q.answer})}
                for task, q in self.questions
            ],
        }

    def markdown(self) -> str:
        s = self.state
        who = "practice: your debrief" if s.practice else "for the interviewer"
        out = [f"# Interview report: {s.kata} / {', '.join(s.tasks)} ({who})", ""]
        out += ["| | |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in self._facts()] + [""]
        out += self._attempts_section() + self._final_section() + self._diff_section() + self._questions_section()
        return "\n".join(out).rstrip() + "\n"

    def _facts(self) -> list[tuple[str, str]]:
        s, f = self.state, self.final
        ended_by = "kata interview --finish" if f.reason is EndReason.FINISHED else "the first grade after time was up"
        late = (
            f", and the code was frozen {duration(self.seconds_over)} after time was up: edits made in that time "
            "are in the final code"
            if self.seconds_over
            else ""
        )
        return [
            ("interview", s.title + (f" (preset {s.preset})" if s.preset else "")),
            ("kata", f"{s.kata}: {self.kata_title}"),
            ("tasks", "; ".join(f"{t}: {self.task_titles.get(t, '')}" for t in s.tasks)),
            ("written by the candidate", ", ".join(s.functions)),
            ("seed", str(s.seed)),
            ("started", _stamp(s.started)),
            ("time allowed", duration(self.seconds_allowed)),
            ("ended", f"{_stamp(f.time)} ({ended_by})"),
            ("time used", duration(self.seconds_used) + late),
            ("attempts", str(len(self.attempts))),
            ("final score", f"{f.score}/{f.max_score}"),
            (
                "final code",
                f"graded as attempt {self.final_code_attempt}, within time"
                if self.final_code_attempt
                else "never graded during the interview",
            ),
            (
                "log",
                "intact: every line names the digest of the line before it"
                if self.log_intact
                else "EDITED: a line does not name the digest of the line before it",
            ),
        ]

    def _attempts_section(self) -> list[str]:
        tasks = self.state.tasks
        out = ["## Attempts", ""]
        if not self.attempts:
            return out + ["No attempts: `kata grade` was not run within the time.", ""]
        out += [
            "| # | at | code | " + " | ".join(tasks) + " | points |",
            "|---|---|---|" + "---|" * len(tasks) + "---|",
        ]
        for n, e in enumerate(self.attempts, 1):
            cells = [f"{t.status} {t.checks_passed}/{t.checks_total}" for t in e.tasks]
            out.append(
                f"| {n} | {duration(e.elapsed)} | `{e.sha256[:10]}` | "
                + " | ".join(cells)
                + f" | {e.score}/{e.max_score} |"
            )
        out += ["", "The first check that did not pass, per attempt and task:", ""]
        for n, e in enumerate(self.attempts, 1):
            out += [f"- {n}. {t.name}: `{t.failed_check}`: {_cell(t.message)}" for t in e.tasks if t.failed_check]
        return out + [""]

    def _final_section(self) -> list[str]:
        f = self.final
        out = [
            "## Final score",
            "",
            f"Graded at {duration(f.elapsed)}, code `{f.sha256[:10]}`.",
            "",
            "| task | status | checks | points | first check that did not pass |",
            "|---|---|---|---|---|",
        ]
        for t in f.tasks:
            failed = f"`{t.failed_check}`: {_cell(t.message)}" if t.failed_check else ""
            out.append(
                f"| {t.name} | {t.status} | {t.checks_passed}/{t.checks_total} | {t.score}/{t.max_score} | {failed} |"
            )
        return out + [f"| total | | | {f.score}/{f.max_score} | |", ""]

    def _diff_section(self) -> list[str]:
        out = ["## What changed: the module handed out against the final one", ""]
        if self.diff:
            return out + ["```diff", self.diff.rstrip("\n"), "```", ""]
        return out + ["Nothing: the final code is the code handed out.", ""]

    def _questions_section(self) -> list[str]:
        s = self.state
        out = ["## Follow-up questions", ""]
        if s.practice:
            out += [
                "Answer them aloud or on paper before you look: `kata interview --answers` shows the answer sketches.",
                "",
            ]
        else:
            out += ["They probe understanding beyond passing. The answer sketches are for the interviewer.", ""]
        for task in s.tasks:
            mine = [q for t, q in self.questions if t == task]
            if not mine:
                continue
            out += [f"### {task}: {self.task_titles.get(task, '')}", ""]
            for n, q in enumerate(mine, 1):
                out.append(f"{n}. {q.ask}")
                if not s.practice:
                    out += ["", f"   *Answer sketch:* {q.answer}"]
                out.append("")
        return out


def build_report(session: Session) -> Report:
    """The report of an interview that is over."""
    s, final = session.state, session.final
    if final is None:
        raise InterviewError("the interview is not over yet; kata interview --finish ends it")
    kata = find_kata(s.kata)
    tasks = {t.name: t for t in kata.tasks}
    start_code = session.start_copy.read_text(encoding="utf-8")
    final_code = session.final_copy.read_text(encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            start_code.splitlines(keepends=True),
            final_code.splitlines(keepends=True),
            fromfile=f"start/{s.kata}.py",
            tofile=f"final/{s.kata}.py",
        )
    )
    in_time = [n for n, e in enumerate(session.attempts, 1) if e.sha256 == final.sha256 and e.elapsed <= s.minutes * 60]
    return Report(
        state=s,
        kata_title=kata.title,
        task_titles={t: tasks[t].title for t in s.tasks if t in tasks},
        attempts=session.attempts,
        final=final,
        log_intact=session.log_intact,
        final_code_attempt=in_time[-1] if in_time else None,
        diff=diff,
        questions=[(t, q) for t in s.tasks if t in tasks for q in tasks[t].questions],
    )


def follow_up_questions(directory: Path) -> tuple[Session, list[tuple[str, Question]]]:
    """The follow-up questions of an interview that is over, with their answer sketches."""
    session = load(directory)
    if not session.over:
        raise InterviewError(
            "the follow-up questions and their answers come after the interview: kata interview --finish ends it"
        )
    kata = find_kata(session.state.kata)
    return session, [(t.name, q) for t in kata.tasks if t.name in session.state.tasks for q in t.questions]


# ---------------------------------------------------------------- formatting


def duration(seconds: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour on."""
    total = int(max(0.0, seconds))
    h, rest = divmod(total, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def minutes_text(n: int) -> str:
    return f"{n} minute{'' if n == 1 else 's'}"


def _local(when: datetime) -> str:
    return when.astimezone().strftime("%H:%M")


def _stamp(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cell(text: str) -> str:
    """text fit for one Markdown table cell or list line."""
    return " ".join(text.split()).replace("|", "\\|")
