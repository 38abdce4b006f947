"""Turn a GradeResult into text, JSON and Gradescope's results.json. Returns
strings and dicts; the CLI does the printing and writing."""

from __future__ import annotations

import ast
from pathlib import Path

import click
from tabulate import tabulate

from grader import target as _target
from grader.outcome import Status
from grader.registry import Kata
from grader.runner import GradeResult, TaskResult


# The version of as_json's shape: bumped when a field is renamed or removed, not when one is added.
JSON_VERSION = 2

COLUMNS = ["kata", "task", "status", "checks", "points", "measured"]
COLOURS = {Status.PASS: "green", Status.FAIL: "red", Status.ERROR: "red", Status.CRASH: "red",
           Status.TIMEOUT: "yellow", Status.SLOW: "yellow", Status.TODO: "bright_black"}


def styled(status: Status) -> str:
    """The status word in its colour (click.echo drops colours when not writing to a terminal)."""
    return click.style(status.value, fg=COLOURS.get(status))


def figure_text(figure: dict) -> str:
    """A measured figure against its bar: '8.2x (bar >= 5x)'."""
    unit = figure["unit"]
    sep = "" if unit == "x" else " "
    sign = ">=" if figure["better"] == "higher" else "<="
    return f"{figure['value']:.3g}{sep}{unit} (bar {sign} {figure['bar']:.3g}{sep}{unit})"


def task_row(kata: str, task: TaskResult) -> list[str]:
    """A task's row: kata, task, status, checks, points, and what it measured against its bar."""
    measured = figure_text(task.figures[0]) if task.figures else ""
    if len(task.figures) > 1:
        measured += f" +{len(task.figures) - 1} more"
    return [kata, task.name, styled(task.status), f"{task.checks_passed}/{task.checks_total}",
            f"{task.score}/{task.max_score}", measured]


def header_line(result_target: str, seed: int) -> str:
    return f"grading {_target.describe(result_target)}, seed {seed}"


def total_line(result: GradeResult) -> str:
    return f"total: {result.score}/{result.max_score} points in {result.duration:.1f} s"


def table(result: GradeResult, header: str = "") -> str:
    """One row per task, then a total line, under `header` (by default: what was graded, and the seed).
    A speed or work task shows the figure it measured against its bar."""
    rows = [task_row(kata.name, task) for kata in result.katas for task in kata.tasks]
    columns = COLUMNS if any(r[-1] for r in rows) else COLUMNS[:-1]
    body = tabulate([r[:len(columns)] for r in rows], headers=columns, tablefmt="simple")
    header = header or header_line(result.target, result.seed)
    return f"{header}\n\n{body}\n\n{total_line(result)}"


class LiveRows:
    """The table, a row at a time as tasks finish (`kata grade` on a terminal)."""

    def __init__(self, katas: list[Kata]):
        self.widths = [max([4] + [len(k.name) for k in katas]), max([4] + [len(t.name) for k in katas for t in k.tasks]),
                       7, 7, 6]

    def _line(self, cells: list[str]) -> str:
        out = []
        for cell, width in zip(cells, self.widths):
            out.append(cell + " " * max(0, width - len(click.unstyle(cell))))
        out.extend(cells[len(self.widths):])
        return "  ".join(out).rstrip()

    def head(self) -> str:
        return self._line(COLUMNS) + "\n" + self._line(["-" * w for w in self.widths] + ["-" * 8])

    def row(self, kata: str, task: TaskResult) -> str:
        return self._line(task_row(kata, task))


def next_step(result: GradeResult, katas: list[Kata]) -> str:
    """One line naming the first graded task that does not pass, and where
    to work on it; or that everything graded passes."""
    known = {k.name: k for k in katas}
    for kata in result.katas:
        for task in kata.tasks:
            if task.status is Status.PASS:
                continue
            path = _target.kata_path(result.target, kata.name)
            registered = known.get(kata.name)
            functions = registered.task(task.name).functions if registered else ()
            if functions:
                where = f"write {', '.join(functions)} in {_where(path, functions[0])}"
            else:
                where = f"see `kata grade -v {kata.name}:{task.name}` and `kata hint {kata.name} {task.name}`"
            return f"next: {kata.name} / {task.name} ({task.status.value}): {where}"
    n = sum(len(k.tasks) for k in result.katas)
    return f"every graded task passes ({n} of {n})"


def _where(path, name: str) -> str:
    """path:line of the definition of `name` in the learner's file (parsed, never run), or just path."""
    try:
        shown = path.relative_to(Path.cwd())
    except ValueError:
        shown = path
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return str(shown)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return f"{shown}:{node.lineno}"
    return str(shown)


def details(result: GradeResult) -> str:
    """Every check that did not pass: its message, Hypothesis's minimal example, the task's first hint."""
    out = []
    for kata in result.katas:
        for task in kata.tasks:
            if task.status == "pass":
                continue
            out.append(f"{kata.name} / {task.name}: {task.status}")
            for f in task.failures:
                out.append(f"  {f['test']} [{f['outcome']}]: {f['message']}")
                if f["example"]:
                    out.extend("      " + line for line in f["example"].splitlines())
            out.append(f"  hint: {task.hint}")
            out.append("")
    return "\n".join(out).rstrip()


def failing_summary(result: GradeResult) -> str:
    """One line per task that did not pass, for the default (not -v) output."""
    lines = []
    for kata in result.katas:
        for task in kata.tasks:
            if task.status != "pass" and task.status != "todo":
                lines.append(f"{kata.name} / {task.name}: {task.message}")
    return "\n".join(lines)


def as_json(result: GradeResult) -> dict:
    """The documented JSON shape (extra fields are additions, never renames)."""
    return {
        "version": JSON_VERSION,
        "score": result.score,
        "max_score": result.max_score,
        "seed": result.seed,
        "target": result.target,
        "duration": result.duration,
        "interrupted": result.interrupted,
        "katas": [
            {
                "name": k.name,
                "title": k.title,
                "score": k.score,
                "max_score": k.max_score,
                "duration": k.duration,
                "tasks": [
                    {
                        "name": t.name,
                        "title": t.title,
                        "status": t.status.value,
                        "score": t.score,
                        "max_score": t.max_score,
                        "checks_passed": t.checks_passed,
                        "checks_total": t.checks_total,
                        "message": t.message,
                        "hint": t.hint,
                        "failures": t.failures,
                        "visibility": t.visibility,
                        "figures": t.figures,
                    }
                    for t in k.tasks
                ],
            }
            for k in result.katas
        ],
    }


def gradescope(result: GradeResult) -> dict:
    """Gradescope's autograder results.json (grader.gradescope.results, with the grade's own seed)."""
    from grader import gradescope as _gradescope  # the Gradescope kit loads only when its file is asked for

    return _gradescope.results(result, seed=result.seed)
