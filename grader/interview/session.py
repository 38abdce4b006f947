"""`kata interview`: a timed task on a fresh stub, graded in a workspace of
its own, with a log of every attempt and hint and a report for the interviewer.

A workspace holds the kata's module (the functions of the tasks under
interview open, the rest of the kata written from the reference solution),
its CHECKLIST section, and the folder .interview/ (grader.interview.workspace
lists its files). Its settings carry an HMAC per field, keyed by a secret
outside the workspace (grader.interview.seal), and the report says when one
no longer matches.

Inside a workspace `kata grade` calls grade(), `kata hint` calls hint() and
`kata list` prints listing(); `kata interview --finish` calls finish(). The
library writes only inside the workspace and the key's folder, and returns
data; the CLI prints. Every reading of the time goes through a Clock, so
tests drive a whole interview with a fake one. This module is what the CLI
imports: the names of the other modules it needs are here too.
"""

from __future__ import annotations

import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.interview import seal
from grader.interview.clock import Clock, duration, local_time, minutes_text
from grader.interview.plan import (
    DEFAULT_MINUTES,
    MAX_MINUTES,
    InterviewError,
    Plan,
    checklist_text,
    module_text,
    plan,
    plan_preset,
)
from grader.interview.record import MESSAGE_CHARS, EndReason, Entry, EntryKind, HintShown, State, TaskScore, digest
from grader.interview.report import build_report, listing
from grader.interview.workspace import REPORT_JSON, STATE_DIR, Session, find_workspace, load, log_seal_value
from grader.judge.events import Status
from grader.kata.registry import Question, find_kata
from grader.output import files
from grader.run import seeds
from grader.run.results import GradeResult, KataResult, Limits
from grader.run.runner import grade as run_grade

__all__ = [
    "DEFAULT_MINUTES",
    "MAX_MINUTES",
    "Clock",
    "EndReason",
    "Entry",
    "EntryKind",
    "Graded",
    "InterviewError",
    "Session",
    "duration",
    "find_workspace",
    "finish",
    "follow_up_questions",
    "grade",
    "hint",
    "listing",
    "load",
    "minutes_text",
    "plan",
    "plan_preset",
    "start",
]

CANDIDATE_CHARS = 100  # the longest candidate name


# ------------------------------------------------------------------ starting


def candidate_name(text: str) -> str:
    """text as a candidate's name (spaces at the ends dropped), or an InterviewError saying what is allowed."""
    name = text.strip()
    if not name or len(name) > CANDIDATE_CHARS or not name.isprintable():
        raise InterviewError(
            f"--candidate takes the candidate's name: one line of printable text, 1 to {CANDIDATE_CHARS} "
            f"characters, got {text!r}"
        )
    return name


def start(
    p: Plan, directory: Path, *, seed: int | None, practice: bool, clock: Clock, candidate: str | None = None
) -> Session:
    """Create the workspace for plan p in directory (absent or empty), seal its settings and start the clock.

    seed: the grading seed; None draws one at random (it is kept in the state, never printed).
    candidate: the candidate's name for the report, or None."""
    directory = Path(directory).expanduser().resolve()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InterviewError(
            f"{directory} already exists and is not an empty folder; "
            "an interview starts in a new workspace: pick another --dir"
        )
    key_file = seal.key_path()
    if key_file.resolve().is_relative_to(directory):
        raise InterviewError(
            f"the interview key {key_file} would sit inside the workspace, where the candidate can read it; "
            f"set ${seal.KEY_ENV} to a file outside {directory}"
        )
    name = "" if candidate is None else candidate_name(candidate)
    module, checklist = module_text(p), checklist_text(p)
    key = seal.make_key(key_file)
    state = State(
        kata=p.kata.name,
        tasks=tuple(t.name for t in p.tasks),
        functions=p.functions,
        title=p.title,
        preset=p.preset,
        candidate=name,
        minutes=p.minutes,
        seed=seeds.drawn() if seed is None else seed,
        practice=practice,
        started=clock.now(),
        id=seal.new_id(),
    )
    (directory / STATE_DIR / "start").mkdir(parents=True)
    (directory / f"{p.kata.name}.py").write_text(module, encoding="utf-8")
    (directory / "CHECKLIST.md").write_text(checklist, encoding="utf-8")
    seals = seal.seal(key, state.id, {**state.sealed(), "attempts": log_seal_value([])})
    session = Session(directory, state, [], True, seals, seal.SealCheck(key_file), key)
    session.write_state()
    session.start_copy.write_text(module, encoding="utf-8")
    session.append(Entry(EntryKind.START, state.started, 0.0, digest(module.encode())))
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
    """Grade the module copied into folder (the exact bytes the digest names) and log it. The
    table shows no hint of the registry's, nor a known mistake's name (as telling as a hint): hints
    come from `kata hint`, which logs each one."""
    s = session.state
    code = (folder / f"{s.kata}.py").read_bytes()
    when = clock.now()
    whole = run_grade([find_kata(s.kata)], str(folder), seed=s.seed, tasks={s.kata: list(s.tasks)}, limits=limits)
    if whole.interrupted:  # Ctrl-C: every judge and jail is gone; the attempt is not logged
        raise KeyboardInterrupt
    for task in whole.katas[0].tasks:
        if task.hint:
            task.hint = f"`kata hint {s.kata} {task.name}` shows one (each hint shown is logged for the interviewer)"
        task.diagnosis = task.diagnosis_why = ""
    entry = session.append(
        Entry(kind, when, (when - s.started).total_seconds(), digest(code), _scores(whole.katas[0]), reason)
    )
    return Graded(session, entry, whole, session.seconds_left(clock.now()))


def _check_open(session: Session) -> None:
    if session.over:
        final = session.final
        raise InterviewError(
            f"this interview is over: it ended at {local_time(final.time)} ({final.reason}) and "
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
    r = build_report(load(directory))  # read back from disk: the report checks what was written
    files.write_json(session.folder / REPORT_JSON, r.to_json())
    session.report_path.write_text(r.markdown(), encoding="utf-8")
    graded.report = session.report_path
    return graded


# --------------------------------------------------------------------- hints


def hint(directory: Path, kata: str, task: str | None, clock: Clock, *, every: bool = False) -> list[HintShown]:
    """`kata hint` inside a workspace: the next hint of one of the interview's tasks (by default
    the first that did not pass its latest grade), or every one of its hints; each hint shown is
    logged with the time and the digest of the module at that moment."""
    session = load(directory)
    s = session.state
    if kata != s.kata or (task is not None and task not in s.tasks):
        raise InterviewError(
            f"{session.directory} is an interview on {s.kata} / {', '.join(s.tasks)}: "
            f"kata hint {s.kata} [TASK] gives the hints of its tasks"
        )
    if session.over:
        raise InterviewError(f"this interview is over; the report is {session.report_path}")
    chosen = find_kata(s.kata).task(task or _first_not_passed(session))
    shown = sum(1 for e in session.hints if e.hint.task == chosen.name)
    numbers = range(1, len(chosen.hints) + 1) if every else [min(shown + 1, len(chosen.hints))]
    now = clock.now()
    code = digest(session.module.read_bytes()) if session.module.is_file() else ""
    out = []
    for n in numbers:
        shown_now = HintShown(chosen.name, n, len(chosen.hints), chosen.hints[n - 1])
        session.append(Entry(EntryKind.HINT, now, (now - s.started).total_seconds(), code, hint=shown_now))
        out.append(shown_now)
    return out


def _first_not_passed(session: Session) -> str:
    graded = [e for e in session.entries if e.tasks]
    passed = {t.name for t in graded[-1].tasks if t.status is Status.PASS} if graded else set()
    return next((t for t in session.state.tasks if t not in passed), session.state.tasks[0])


def follow_up_questions(directory: Path) -> tuple[Session, list[tuple[str, Question]]]:
    """The follow-up questions of an interview that is over, with their answer sketches."""
    session = load(directory)
    if not session.over:
        raise InterviewError(
            "the follow-up questions and their answers come after the interview: kata interview --finish ends it"
        )
    kata = find_kata(session.state.kata)
    return session, [(t.name, q) for t in kata.tasks if t.name in session.state.tasks for q in t.questions]
