"""What an interview covers, before it starts: the kata, its tasks and the
minutes (a Plan), and the two files the candidate starts from, the kata's
module with the tasks' functions left to write and its CHECKLIST section."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from grader.interview.clock import minutes_text
from grader.kata.registry import MAX_MINUTES, Kata, Task, find_kata, load_presets
from grader.kata.stubs import make_stub, stub_for
from grader.kata.target import SOLUTIONS_DIR, checklist

DEFAULT_MINUTES = 45


class InterviewError(ValueError):
    """An interview cannot do what was asked; the message says why and what to do."""


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
    path = checklist()
    if path is None:
        raise InterviewError("this copy of the katas has no CHECKLIST.md, which says what each task must do")
    text = path.read_text(encoding="utf-8")
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
