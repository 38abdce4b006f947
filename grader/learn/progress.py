"""What `kata` remembers between runs, in .kata/ of the work directory (next
to the learner's files) unless $KATA_STATE_DIR says otherwise:

- last_grade.json: kata -> task -> status of the latest grade of each task
  that finished (a grade that Ctrl-C stopped keeps the task's previous status);
- interrupted.json: kata -> the tasks whose latest grade Ctrl-C stopped;
- seals.json: which passes this account's grader recorded, on which file (grader.learn.vouch);
- hints.json: "kata/task" -> how many of its hints were shown;
- backups/: the learner's files that `kata reset` replaced.

Every file is written by grader.output.files: through a temporary file and a
rename, so a reader (or a Ctrl-C) never leaves half a file. The CLI and `kata watch` call this; the
grader itself never reads it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from grader.judge.events import DONE_HERE, Status
from grader.kata import target as _target
from grader.kata.registry import Kata, Task
from grader.learn import vouch
from grader.output import files, report

LAST_GRADE, HINTS, BACKUPS = "last_grade.json", "hints.json", "backups"
INTERRUPTED = "interrupted.json"


def state_dir() -> Path:
    """.kata/ in the work folder (grader.kata.target.workdir, which raises NoKataFolder where there is
    none: no state folder is made outside one), unless $KATA_STATE_DIR names another."""
    return Path(os.environ.get("KATA_STATE_DIR") or _target.workdir() / ".kata")


def read(name: str) -> dict:
    """A state file's contents; {} when it is missing or unreadable."""
    try:
        data = json.loads((state_dir() / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write(name: str, data: dict) -> None:
    files.write_json(state_dir() / name, data)


def all_pass(kata: Kata, statuses: dict) -> bool:
    return all(statuses.get(t.name) in DONE_HERE for t in kata.tasks)


def record_grade(katas: list[Kata], result) -> tuple[dict, list[str]]:
    """Merge a grade of the learner's katas into last_grade.json (a task
    graded alone keeps its kata's other statuses; a task whose grading Ctrl-C
    stopped keeps its previous status, and interrupted.json names it until a
    grade of it finishes). Returns the new state and the recaps of the katas
    this grade turned fully green."""
    last, before, seals = read(LAST_GRADE), read(INTERRUPTED), read(vouch.SEALS)
    stopped = dict(before)
    known = {k.name: k for k in katas}
    recaps = []
    for graded in result.katas:
        k = known[graded.name]
        was_done = all_pass(k, last.get(k.name, {}))
        finished = {t.name: t.status.value for t in graded.tasks if t.status is not Status.INTERRUPTED}
        last.setdefault(k.name, {}).update(finished)
        now = {t.name for t in graded.tasks if t.name not in finished}
        stopped[k.name] = sorted((set(interrupted(k.name, stopped)) - set(finished)) | now)
        if all_pass(k, last[k.name]) and not was_done and all(t.status.done_here for t in graded.tasks):
            recaps.append(report.recap(k, graded))
        seals = vouch.sealed(
            seals,
            k.name,
            {t.name for t in graded.tasks if t.status.done_here},
            {name for name, status in finished.items() if status not in DONE_HERE},
            vouch.file_digest(_target.kata_path("katas", k.name)),
        )
    write(vouch.SEALS, seals)
    write(LAST_GRADE, last)
    stopped = {name: tasks for name, tasks in stopped.items() if tasks}
    if stopped != before:
        write(INTERRUPTED, stopped)
    return last, [r for r in recaps if r]


def after_grade(katas: list[Kata], result) -> tuple[dict, list[str]]:
    """The one step after a grade of the learner's katas (`kata grade`'s and
    `kata watch`'s): each failing task's hint becomes the one `kata hint` would
    give next, then the grade is merged into last_grade.json. Returns what
    `record_grade` returns."""
    use_next_hints(katas, result)
    return record_grade(katas, result)


def interrupted(kata: str, stopped: dict | None = None) -> list[str]:
    """The tasks of kata whose latest grade Ctrl-C stopped (their status is the grade before).
    stopped: interrupted.json as read (read here if None)."""
    tasks = (read(INTERRUPTED) if stopped is None else stopped).get(kata, [])
    return [t for t in tasks if isinstance(t, str)] if isinstance(tasks, list) else []


def forget(kata: str) -> None:
    """What is remembered of kata's grades and hints: gone (`kata reset`)."""
    for name in (LAST_GRADE, INTERRUPTED, vouch.SEALS):
        data = read(name)
        if data.pop(kata, None) is not None:
            write(name, data)
    shown = read(HINTS)
    kept = {key: n for key, n in shown.items() if not key.startswith(f"{kata}/")}
    if kept != shown:
        write(HINTS, kept)


def hints_shown(kata: str, task: str) -> int:
    return int(read(HINTS).get(f"{kata}/{task}", 0))


def next_hint(kata: str, task: Task, shown: dict | None = None) -> tuple[int, str]:
    """(its number from 1, the hint) that `kata hint` shows next for task; the
    last one once all were shown. shown: hints.json as read (read here if None)."""
    shown = read(HINTS) if shown is None else shown
    n = min(int(shown.get(f"{kata}/{task.name}", 0)), len(task.hints) - 1)
    return n + 1, task.hints[n]


def mark_hint_shown(kata: str, task: Task) -> None:
    shown = read(HINTS)
    key = f"{kata}/{task.name}"
    shown[key] = min(int(shown.get(key, 0)), len(task.hints) - 1) + 1
    write(HINTS, shown)


def use_next_hints(katas: list[Kata], result) -> None:
    """A graded task whose failing check has no hint of its own shows the
    task's next hint, the one `kata hint` would give, not always the first."""
    known, shown = {k.name: k for k in katas}, read(HINTS)
    for graded in result.katas:
        for task in graded.tasks:
            registered = known[graded.name].task(task.name)
            if task.hint in registered.hints:
                task.hint = next_hint(graded.name, registered, shown)[1]


def back_up(path: Path, kata: str) -> Path:
    """Copy the learner's file to backups/KATA-YYYYmmdd-HHMMSS[-N].py; returns the copy's path."""
    backups = state_dir() / BACKUPS
    backups.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup, n = backups / f"{kata}-{stamp}.py", 1
    while backup.exists():
        backup, n = backups / f"{kata}-{stamp}-{n}.py", n + 1
    shutil.copy2(path, backup)
    return backup


def to_fix_first(kata: Kata, task: Task, statuses: dict) -> Task:
    """The task to work on first for `task`, by the statuses of the latest grade: when it failed while a task
    it needs did not pass, the first such task (Kata.root), else itself."""
    known = {name: Status(s) for name, s in statuses.items() if s in {st.value for st in Status}}
    if task.name not in known or not known[task.name].failed:
        return task
    root = kata.root(task.name, {name for name, status in known.items() if status.blocks})
    return kata.task(root) if root else task


BAR = 24  # characters of `kata list`'s progress bar


def listing(katas: list[Kata]) -> list[str]:
    """`kata list`: the points so far with a progress bar and the next task, then each kata and
    its tasks with the status of their latest grade ('you are here' at the next task)."""
    last, stopped = read(LAST_GRADE), read(INTERRUPTED)
    total = sum(t.points for k in katas for t in k.tasks)
    got = sum(t.points for k in katas for t in k.tasks if last.get(k.name, {}).get(t.name) == Status.PASS.value)
    later = sum(t.points for k in katas for t in k.tasks if last.get(k.name, {}).get(t.name) == Status.SUBMIT.value)
    filled = round(BAR * got / total) if total else 0
    head = f"{got}/{total} points  [{'#' * filled}{'.' * (BAR - filled)}]  {100 * got // max(total, 1)}%"
    lines = [head + (f"  (+{later} on submission)" if later else "")]
    pending = [(k, t) for k in katas for t in k.tasks if last.get(k.name, {}).get(t.name) not in DONE_HERE]
    here = (pending[0][0], to_fix_first(*pending[0], last.get(pending[0][0].name, {}))) if pending else None
    if here is None:
        lines.append("every task passes: well done.")
    else:
        k, t = here
        lines.append(report.next_line(k.name, t.name, last.get(k.name, {}).get(t.name, "not graded yet"), k))
    for k in katas:
        done = sum(t.points for t in k.tasks if last.get(k.name, {}).get(t.name) == Status.PASS.value)
        lines.append(f"\n{k.order}. {k.name}: {k.title} ({k.trade}), {done}/{k.max_score} pts")
        cut = set(interrupted(k.name, stopped))
        for t in k.tasks:
            status = last.get(k.name, {}).get(t.name, "not graded yet")
            if t.name in cut:
                status += ", then interrupted"
            points = f"{t.points} pt" + ("s" if t.points != 1 else " ")
            mark = ">" if here == (k, t) else " "
            lines.append(f" {mark} {t.name:<14} {points}  {status:<22} {t.title}")
    return lines
