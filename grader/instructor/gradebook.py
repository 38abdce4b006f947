"""Grade a class: every student's submission, in parallel, into one gradebook.

`kata grade-all SUBMISSIONS/` reads one folder or zip per student (the kata
modules anywhere inside, see grader.instructor.submissions), grades every (student,
kata) pair as its own judge and jail, `jobs` at a time, and writes:

- OUT/gradebook.csv: a row per student: student, score, max_score, seed,
  note, then the points of each kata and of each task (columns KATA and
  KATA:TASK);
- OUT/students/STUDENT.json: that student's grade in `kata grade --json`'s
  shape, with `digests`: per kata, what its grade rests on, so that
  `--resume` grades again only what changed (grader.instructor.resume).

A submission that cannot be graded (no kata modules, a bad zip) is a row of
zeros with the reason in `note`; one that crashes, hangs or fails to import
is graded like any other (crash, timeout, error), never an abort.
"""

from __future__ import annotations

import csv
import io
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader.instructor import resume
from grader.instructor.submissions import SubmissionError, find_katas_dir, list_students, unpack_zip
from grader.jail import confine
from grader.judge.events import Status
from grader.kata.registry import Kata
from grader.output import files, report
from grader.run import runner, seeds
from grader.run.results import GradeResult, KataResult, Limits, TaskResult


def student_seed(secret: str, student: str) -> int:
    """A seed of the student's own (grader.run.seeds.derived): the same for the
    same secret and name, not guessable without the secret, never the
    standard seed 0."""
    return seeds.derived(secret, student)


class Unisolated(ValueError):
    """A class would be graded with its students' code unconfined, and nobody said to."""


def isolation(unisolated: bool) -> str:
    """The jail mode a class would be graded in here (grader.jail.confine.mode), or Unisolated where that
    is "plain" (neither root nor bubblewrap: one student's code could read and overwrite another's) and
    `unisolated` does not say to grade anyway."""
    mode = confine.mode()
    if mode == "plain" and not unisolated:
        raise Unisolated(
            "this machine can only run each student's code unconfined (no root, no bubblewrap): one "
            "student's module could read and overwrite another's. Install bubblewrap or grade as root; "
            "or pass --unisolated to grade anyway (the gradebook then says so on every row)"
        )
    return mode


@dataclass
class Student:
    name: str
    source: Path  # their folder or zip
    seed: int
    katas_dir: Path | None = None  # where their kata modules are, once found
    note: str = ""  # why their submission could not be graded, if it could not
    results: dict[str, KataResult] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)  # kata -> what its grade rests on (grader.instructor.resume)
    resumed: set[str] = field(default_factory=set)  # the katas whose earlier grade was kept (--resume)

    def grade(self, katas: list[Kata]) -> GradeResult:
        ordered = [self.results[k.name] for k in katas if k.name in self.results]
        return GradeResult(
            target=str(self.katas_dir or self.source),
            seed=self.seed,
            score=sum(k.score for k in ordered),
            max_score=sum(k.max_score for k in ordered),
            duration=round(sum(k.duration for k in ordered), 3),
            katas=ordered,
            interrupted=len(ordered) < len(katas),
        )


@dataclass
class ClassResult:
    students: list[Student]
    katas: list[Kata]
    tasks: dict[str, list[str]]  # kata -> the only tasks graded (all when absent)
    duration: float
    interrupted: bool = False
    isolation: str = ""  # the jail mode the class was graded in (grader.jail.confine.mode)

    @property
    def unisolated(self) -> bool:
        return self.isolation == "plain"

    def task_names(self, kata: Kata) -> list[str]:
        return _task_names(kata, self.tasks)


def _not_graded(kata: Kata, tasks: list[str], why: str, status: Status = Status.ERROR) -> KataResult:
    chosen = [kata.task(t) for t in tasks]
    return KataResult(
        name=kata.name,
        title=kata.title,
        score=0,
        max_score=sum(t.points for t in chosen),
        duration=0.0,
        tasks=[
            TaskResult(
                name=t.name,
                title=t.title,
                status=status,
                score=0,
                max_score=t.points,
                checks_passed=0,
                checks_total=0,
                message=why,
                hint="",
                visibility=t.visibility,
            )
            for t in chosen
        ],
    )


def _find_katas(s: Student, unpacked: Path, katas: list[Kata], tasks: dict, progress) -> None:
    """Set s.katas_dir to where s's kata modules are, unpacking a zip into
    unpacked first; a submission that cannot be read gets a note and a row of
    not-graded katas instead, and the class goes on."""
    try:
        root = unpack_zip(s.source, unpacked / s.name) if s.source.is_file() else s.source
        s.katas_dir = find_katas_dir(root, [k.name for k in katas])
    except (SubmissionError, OSError) as exc:
        s.note = str(exc)
        for k in katas:
            s.results[k.name] = _not_graded(k, _task_names(k, tasks), f"not graded: {exc}")
            if progress is not None:
                progress(s, s.results[k.name])


def grade_class(
    folder: Path,
    katas: list[Kata],
    *,
    tasks: dict[str, list[str]] | None = None,
    jobs: int = 1,
    seed: int = 0,
    secret: str | None = None,
    limits: Limits = Limits(),
    progress: Callable[[Student, KataResult], None] | None = None,
    earlier: resume.Earlier | None = None,
    unisolated: bool = False,
) -> ClassResult:
    """Grade every submission in folder. progress(student, kata_result) is
    called as each pair finishes. earlier (grader.instructor.resume.earlier_grades):
    the earlier grade to keep of a pair, if any, instead of grading it again.
    Ctrl-C (KeyboardInterrupt) stops every judge and returns what was graded,
    with `interrupted` set.

    Where jails can only run unconfined here, that raises Unisolated unless
    `unisolated` says to grade anyway (see isolation), and then every row's
    note says so."""
    mode = isolation(unisolated)
    tasks = tasks or {}
    started = time.monotonic()
    students = [
        Student(name, source, student_seed(secret, name) if secret else seed) for name, source in list_students(folder)
    ]
    with tempfile.TemporaryDirectory(prefix="kata-class-") as unpacked:
        for s in students:
            _find_katas(s, Path(unpacked), katas, tasks, progress)
            if s.katas_dir is not None:
                s.digests = resume.digests(s.katas_dir, katas)
                _keep_earlier(s, katas, tasks, earlier, progress)
        pairs = {
            runner.Job(k, str(s.katas_dir), s.seed, tuple(tasks.get(k.name) or ())): (s, k)
            for s in students
            if s.katas_dir is not None
            for k in katas
            if k.name not in s.resumed
        }

        def done(job: runner.Job, result: KataResult | Exception) -> None:
            s, k = pairs[job]
            if isinstance(result, Exception):  # the grader's own failure: this pair's row says so, the class goes on
                result = _not_graded(k, _task_names(k, tasks), f"the grader failed: {result}", Status.CRASH)
            s.results[k.name] = result
            if progress is not None:
                progress(s, result)

        graded = runner.grade_many(list(pairs), workers=jobs, limits=limits, on_done=done)
        interrupted = graded.interrupted
    return ClassResult(students, katas, tasks, round(time.monotonic() - started, 3), interrupted, mode)


def _keep_earlier(s: Student, katas: list[Kata], tasks: dict, earlier, progress) -> None:
    """Take, for each kata of s, the earlier grade that `earlier` still holds good (--resume)."""
    for k in katas if earlier is not None else []:
        kept = earlier(s.name, s.seed, s.digests[k.name], k, _task_names(k, tasks))
        if kept is not None:
            s.results[k.name] = kept
            s.resumed.add(k.name)
            if progress is not None:
                progress(s, kept)


def _task_names(kata: Kata, tasks: dict[str, list[str]]) -> list[str]:
    return tasks.get(kata.name) or [t.name for t in kata.tasks]


UNISOLATED_NOTE = "graded unisolated (--unisolated): the students' code could read each other's"


def student_note(s: Student, result: ClassResult) -> str:
    """What the gradebook says of a student's submission besides the points:
    that the class was graded unisolated; why it could not be graded, or for
    each kata module that did not load (every task an error with one message:
    a syntax or import error, with its file and line), that message; or that
    the grading was interrupted."""
    said = _own_note(s, result)
    return "; ".join(filter(None, [UNISOLATED_NOTE if result.unisolated else "", said]))


def _own_note(s: Student, result: ClassResult) -> str:
    if s.note:
        return s.note
    notes = [f"{kata} did not load: {_load_failure(kr)}" for kata, kr in s.results.items() if _load_failure(kr)]
    if len(s.results) < len(result.katas):
        notes.append("not graded: interrupted (Ctrl-C)")
    return "; ".join(notes)


@dataclass(frozen=True)
class Roster:
    """A class list to carry into the gradebook: for each student (by the name of
    their submission) the other columns of their row, such as an LMS id or an email."""

    columns: tuple[str, ...]  # the roster's columns besides `student`, in its order
    rows: dict[str, dict[str, str]]  # student -> column -> value


def read_roster(path: Path) -> Roster:
    """The roster in the CSV file at path: a header naming a `student` column
    (the names of the submissions) and any others. ValueError for a file that
    cannot be read, no `student` column, or a student named twice or not at all."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            table, header = list(reader), tuple(reader.fieldnames or ())
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"cannot read the roster {path}: {exc}") from None
    if "student" not in header:
        raise ValueError(
            f"the roster {path} needs a column named 'student' (the submissions' names); it has {list(header)}"
        )
    rows: dict[str, dict[str, str]] = {}
    for line, row in enumerate(table, 2):
        name = (row.get("student") or "").strip()
        if not name or name in rows:
            what = "no student" if not name else f"student {name!r} again"
            raise ValueError(f"the roster {path} names {what} at line {line}")
        rows[name] = {c: row.get(c) or "" for c in header if c != "student"}
    return Roster(tuple(c for c in header if c != "student"), rows)


def gradebook_csv(result: ClassResult, roster: Roster | None = None) -> str:
    """The gradebook: a row per student, columns for each kata and task's points.
    With a roster, its columns follow `student`, and every student it lists
    without a submission gets a row of their own (note: no submission)."""
    extra = roster.columns if roster else ()
    columns = [k.name for k in result.katas] + [f"{k.name}:{t}" for k in result.katas for t in result.task_names(k)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student", *extra, "score", "max_score", "seed", "note", *columns])
    max_score = sum(t.points for k in result.katas for t in k.tasks if t.name in result.task_names(k))
    for s in result.students:
        points: dict[str, object] = {}
        for k in result.katas:
            kr = s.results.get(k.name)
            points[k.name] = kr.score if kr else ""
            for t in kr.tasks if kr else []:
                points[f"{k.name}:{t.name}"] = t.score
        known = roster.rows.get(s.name, {}) if roster else {}
        note = student_note(s, result) or ("not on the roster" if roster and not known else "")
        score = sum(kr.score for kr in s.results.values())
        row = [_cell(s.name), *(_cell(known.get(c, "")) for c in extra), score, max_score, s.seed, _cell(note)]
        writer.writerow(row + [points.get(c, "") for c in columns])
    submitted = {s.name for s in result.students}
    for name, known in roster.rows.items() if roster else ():
        if name not in submitted:
            row = [_cell(name), *(_cell(known.get(c, "")) for c in extra), 0, max_score, "", "no submission"]
            writer.writerow(row + [""] * len(columns))
    return out.getvalue()


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as the start of a formula (OWASP)


def _cell(text: str) -> str:
    """A CSV cell of learner-supplied text (a folder name, a note): control characters escaped, and a
    leading quote where the text would start a formula, so a spreadsheet shows it as text."""
    text = report.printable(text, lines=False)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


MESSAGE_CHARS = 100  # of a message quoted in the summary


def summary(result: ClassResult) -> str:
    """One line per student and kata (their points, and which tasks do not pass, by status; or why the
    kata was not graded), one for a student whose submission could not be graded at all, then one per
    kata: how many students pass every task of it, and the tasks most students do not pass."""
    lines = [f"{len(result.students)} students in {result.duration:.1f} s"]
    if result.unisolated:
        lines.append(f"warning: {UNISOLATED_NOTE}")
    width = max((len(_shown(s.name)) for s in result.students), default=0)
    kata_width = max((len(k.name) for k in result.katas), default=0)
    for s in result.students:
        if s.note:
            lines.append(f"{_shown(s.name):<{width}}  not graded: {_shown(s.note)[:MESSAGE_CHARS]}")
            continue
        for k in result.katas:
            kr = s.results.get(k.name)
            said = _kata_line(kr) if kr else "not graded: interrupted (Ctrl-C)"
            points = f"{kr.score}/{kr.max_score}" if kr else ""
            lines.append(f"{_shown(s.name):<{width}}  {k.name:<{kata_width}}  {points:>7}  {said}")
    lines.append("")
    lines += [_kata_total(result, k) for k in result.katas]
    return "\n".join(lines)


def _shown(text: str) -> str:
    return report.printable(text, lines=False)


def _load_failure(kr: KataResult) -> str:
    """The one message of a kata whose every task is an error before any check passed (a module that
    did not load: missing, a syntax or import error), else ''."""
    messages = {t.message.splitlines()[0] for t in kr.tasks if t.message}
    if kr.tasks and all(t.status is Status.ERROR and t.checks_passed == 0 for t in kr.tasks) and len(messages) == 1:
        return messages.pop()
    return ""


def _kata_line(kr: KataResult) -> str:
    """What a student's kata came to, after its points: pass, why it did not load, or its tasks that do
    not pass grouped by status (`fail: forward, generate; todo: paged`)."""
    failure = _load_failure(kr)
    if failure.startswith("no module ") and failure.endswith("(does not exist)"):  # grader.kata.target's words
        return f"missing: the submission has no {kr.name}.py"
    if failure:
        return f"did not load: {_shown(failure)[:MESSAGE_CHARS]}"
    by_status: dict[str, list[str]] = {}
    for t in kr.tasks:
        if not t.status.done_here:
            by_status.setdefault(t.status.value, []).append(t.name)
    if not by_status:
        return "pass"
    return "; ".join(f"{status}: {', '.join(names)}" for status, names in by_status.items())


def _kata_total(result: ClassResult, kata: Kata) -> str:
    """'KATA: N/M students pass every task; not passing: TASK (how many), ...' over the students it was graded for."""
    graded = [s.results[kata.name] for s in result.students if kata.name in s.results]
    every = sum(all(t.status.done_here for t in kr.tasks) for kr in graded)
    missing: dict[str, int] = {}
    for kr in graded:
        for t in kr.tasks:
            if not t.status.done_here:
                missing[t.name] = missing.get(t.name, 0) + 1
    most = sorted(missing.items(), key=lambda item: -item[1])
    tail = "; not passing: " + ", ".join(f"{name} ({n})" for name, n in most) if most else ""
    return f"{kata.name}: {every}/{len(result.students)} students pass every task{tail}"


def write(result: ClassResult, out: Path, roster: Roster | None = None) -> list[Path]:
    """OUT/gradebook.csv (with the roster's columns, if given) and OUT/students/STUDENT.json; returns the paths."""
    students_dir = Path(out) / "students"
    students_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for s in result.students:
        data = report.as_json(s.grade(result.katas))
        data["student"], data["note"], data["isolation"] = s.name, student_note(s, result), result.isolation
        data["digests"] = {k: d for k, d in s.digests.items() if k in s.results}  # what --resume compares
        path = students_dir / f"{s.name}.json"
        files.write_json(path, data)
        written.append(path)
    book = Path(out) / "gradebook.csv"
    files.write_atomically(book, gradebook_csv(result, roster))
    return [book, *written]
