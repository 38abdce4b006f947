"""Turn a GradeResult into text, JSON and Gradescope's results.json. Returns
strings and dicts; the CLI does the printing and writing."""

from __future__ import annotations

from tabulate import tabulate

from grader import target as _target
from grader.runner import GradeResult


# The version of as_json's shape: bumped when a field is renamed or removed, not when one is added.
JSON_VERSION = 2


def table(result: GradeResult, header: str = "") -> str:
    """One row per task, then a total line, under `header` (by default: what was graded, and the seed)."""
    rows = []
    for kata in result.katas:
        for task in kata.tasks:
            rows.append([kata.name, task.name, task.status, f"{task.checks_passed}/{task.checks_total}",
                         f"{task.score}/{task.max_score}"])
    body = tabulate(rows, headers=["kata", "task", "status", "checks", "points"], tablefmt="simple")
    total = f"total: {result.score}/{result.max_score} points in {result.duration:.1f} s"
    header = header or f"grading {_target.describe(result.target)}, seed {result.seed}"
    return f"{header}\n\n{body}\n\n{total}"


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
