"""What an interview shows of itself: the report at the end (Markdown for the
interviewer, JSON beside it) and the listing `kata list` prints in a workspace."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from datetime import datetime

from grader.interview.clock import duration, local_time, minutes_text, stamp
from grader.interview.plan import InterviewError
from grader.interview.record import EndReason, Entry, State
from grader.interview.seal import SealCheck
from grader.interview.workspace import Session
from grader.kata.registry import Question, Rubric, find_kata

REPORT_VERSION = 2


@dataclass
class Report:
    """What the interviewer reads at the end (in practice: the candidate's debrief)."""

    state: State
    kata_title: str
    task_titles: dict[str, str]
    attempts: list[Entry]
    hints: list[Entry]
    final: Entry
    log_intact: bool
    sealed: SealCheck
    final_code_attempt: int | None  # the last attempt within time (by the times recorded) that graded the final code
    diff: str  # unified diff from the module handed out to the final one
    questions: list[tuple[str, Question]] = field(default_factory=list)  # (task, question)
    rubric: list[tuple[str, Rubric | None]] = field(default_factory=list)  # (task, its rubric), in the tasks' order

    @property
    def seconds_allowed(self) -> float:
        return self.state.minutes * 60.0

    @property
    def seconds_used(self) -> float:
        return min(self.final.elapsed, self.seconds_allowed)

    @property
    def seconds_over(self) -> float:
        return max(0.0, self.final.elapsed - self.seconds_allowed)

    @property
    def within_time(self) -> bool | None:
        """Whether the final code was graded within time; None when the seal cannot vouch for the record."""
        trusted = self.sealed.intact and not self.sealed.log_unsealed
        return self.final_code_attempt is not None if trusted else None

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
            "candidate": s.candidate,
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
            "seal": {
                "intact": self.sealed.intact,
                "tampered": list(self.sealed.broken),
                "problem": self.sealed.problem,
                "log_unsealed": self.sealed.log_unsealed,
            },
            "attempts": [e.to_json() for e in self.attempts],
            "hints": [e.to_json() for e in self.hints],
            "final": self.final.to_json(),
            "final_code_attempt": self.final_code_attempt,
            "within_time": self.within_time,
            "diff": self.diff,
            "rubric": [{"task": t, "probes": r.probes, "strong": r.strong} for t, r in self.rubric if r],
            "questions": [
                {"task": task, "ask": q.ask, **({} if s.practice else {"answer": q.answer})}
                for task, q in self.questions
            ],
        }

    def markdown(self) -> str:
        s = self.state
        who = "practice: your debrief" if s.practice else "for the interviewer"
        out = [f"# Interview report: {s.kata} / {', '.join(s.tasks)} ({who})", ""]
        if not self.sealed.intact:
            out += [f"**{self.sealed.summary()}.**", ""]
        out += ["| | |", "|---|---|"] + [f"| {k} | {cell(v)} |" for k, v in self._facts()] + [""]
        out += self._attempts_section() + self._hints_section() + self._final_section() + self._diff_section()
        out += self._rubric_section() + self._questions_section() + self._notes_section()
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
            ("candidate", s.candidate or "(not given: kata interview --candidate NAME)"),
            ("kata", f"{s.kata}: {self.kata_title}"),
            ("tasks", "; ".join(f"{t}: {self.task_titles.get(t, '')}" for t in s.tasks)),
            ("written by the candidate", ", ".join(s.functions)),
            ("seed", str(s.seed)),
            ("started", stamp(s.started)),
            ("time allowed", duration(self.seconds_allowed)),
            ("ended", f"{stamp(f.time)} ({ended_by})"),
            ("time used", duration(self.seconds_used) + late),
            ("attempts", str(len(self.attempts))),
            ("hints", f"{len(self.hints)} shown by kata hint" if self.hints else "none asked for"),
            ("final score", f"{f.score}/{f.max_score}"),
            ("final code", self._final_code()),
            ("log", self._log_line()),
            ("seal", self.sealed.summary()),
        ]

    def _final_code(self) -> str:
        if self.final_code_attempt is None:
            return "never graded during the interview"
        if not self.sealed.intact:
            return (
                f"graded as attempt {self.final_code_attempt} by the times recorded; the state does not hold its "
                "seal, so whether that was in time is not known"
            )
        if self.sealed.log_unsealed:
            return (
                f"graded as attempt {self.final_code_attempt} by the log, which was written without the key: "
                "only its chain of digests vouches for that"
            )
        return f"graded as attempt {self.final_code_attempt}, within time"

    def _log_line(self) -> str:
        if self.log_intact:
            return "intact: every line names the digest of the line before it"
        return "EDITED: a line does not name the digest of the line before it"

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
            out += [f"- {n}. {t.name}: `{t.failed_check}`: {cell(t.message)}" for t in e.tasks if t.failed_check]
        return out + [""]

    def _hints_section(self) -> list[str]:
        out = ["## Hints", ""]
        if not self.hints:
            return out + ["None: `kata hint` was not run during the interview.", ""]
        out += ["| at | task | hint | code | text |", "|---|---|---|---|---|"]
        for e in self.hints:
            h = e.hint
            out.append(f"| {duration(e.elapsed)} | {h.task} | {h.number}/{h.of} | `{e.sha256[:10]}` | {cell(h.text)} |")
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
            failed = f"`{t.failed_check}`: {cell(t.message)}" if t.failed_check else ""
            out.append(
                f"| {t.name} | {t.status} | {t.checks_passed}/{t.checks_total} | {t.score}/{t.max_score} | {failed} |"
            )
        return out + [f"| total | | | {f.score}/{f.max_score} | |", ""]

    def _diff_section(self) -> list[str]:
        out = ["## What changed: the module handed out against the final one", ""]
        if self.diff:
            return out + ["```diff", self.diff.rstrip("\n"), "```", ""]
        return out + ["Nothing: the final code is the code handed out.", ""]

    def _rubric_section(self) -> list[str]:
        out = ["## Rubric", ""]
        for task, rubric in self.rubric:
            out += [f"### {task}: {self.task_titles.get(task, '')}", ""]
            if rubric is None:
                out += ["The registry has no rubric for this task.", ""]
                continue
            out += [f"- **What it probes:** {rubric.probes}", f"- **What a strong answer shows:** {rubric.strong}"]
            out += ["- **Seen here:** ", ""]
        return out

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

    def _notes_section(self) -> list[str]:
        whose = "Your notes" if self.state.practice else "Interviewer's notes"
        return [f"## {whose}", "", "(Write here: how the candidate worked, what they asked, your verdict.)", ""]


def build_report(session: Session) -> Report:
    """The report of an interview that is over."""
    s, final = session.state, session.final
    if final is None:
        raise InterviewError("the interview is not over yet; kata interview --finish ends it")
    kata = find_kata(s.kata)
    tasks = {t.name: t for t in kata.tasks}
    diff = "".join(
        difflib.unified_diff(
            session.start_copy.read_text(encoding="utf-8").splitlines(keepends=True),
            session.final_copy.read_text(encoding="utf-8").splitlines(keepends=True),
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
        hints=session.hints,
        final=final,
        log_intact=session.log_intact,
        sealed=session.sealed,
        final_code_attempt=in_time[-1] if in_time else None,
        diff=diff,
        questions=[(t, q) for t in s.tasks if t in tasks for q in tasks[t].questions],
        rubric=[(t, tasks[t].rubric) for t in s.tasks if t in tasks],
    )


def listing(session: Session, now: datetime) -> str:
    """The interview as `kata list` shows it in its workspace: its tasks with their latest
    status, the time left (or that it is up, or over), the attempts and hints so far."""
    s = session.state
    kata = find_kata(s.kata)
    who = f", candidate {s.candidate}" if s.candidate else ""
    lines = [f"interview: {s.title}{' (practice)' if s.practice else ''}{who}", f"{s.kata}: {kata.title}"]
    graded = [e for e in session.entries if e.tasks]
    latest = {t.name: f"{t.status} {t.checks_passed}/{t.checks_total}" for t in graded[-1].tasks} if graded else {}
    for task in (t for t in kata.tasks if t.name in s.tasks):
        points = f"{task.points} pt" + ("s" if task.points != 1 else " ")
        lines.append(f"   {task.name:<14} {points}  {latest.get(task.name, 'not graded yet'):<15} {task.title}")
    lines.append(f"write: {', '.join(s.functions)} in {session.module.name}")
    lines.append(_clock_line(session, now))
    hints = len(session.hints)
    lines.append(f"attempts: {len(session.attempts)}, hints: {hints}" + (" (each one logged)" if hints else ""))
    if not session.sealed.intact or session.sealed.log_unsealed:
        lines.append(f"seal: {session.sealed.summary()}")
    return "\n".join(lines)


def _clock_line(session: Session, now: datetime) -> str:
    s, final = session.state, session.final
    allowed = duration(s.minutes * 60)
    if final is not None:
        return (
            f"over: ended at {local_time(final.time)} ({final.reason}) after {duration(final.elapsed)} of {allowed}; "
            f"the report is {session.report_path}"
        )
    left = session.seconds_left(now)
    if left <= 0:
        return f"time is up ({minutes_text(s.minutes)} allowed): the next kata grade is the final one"
    return f"time left: {duration(left)} of {allowed}, until {local_time(s.deadline)}"


def cell(text: str) -> str:
    """text fit for one Markdown table cell or list line."""
    return " ".join(text.split()).replace("|", "\\|")
