"""Gradescope's autograder results.json for a grade, or for a submission that could not be graded.

What `kata gradescope run` writes for every submission and `kata grade --gradescope FILE` writes.
"""

from __future__ import annotations

import math
import re

from grader.judge.events import Status
from grader.kata.registry import load_registry
from grader.kata.text import printable
from grader.output import versions
from grader.run.results import GradeResult, TaskResult

RESULTS_VERSION = 1  # extra_data["version"]: bumped when a field of ours is renamed or removed
MAX_FAILURES_SHOWN = 5  # failing checks a test's output details; the rest are counted
MAX_TEXT = 2000  # characters of one message or example shown; Gradescope's output box is for reading


# ------------------------------------------------------------------ results.json


def results(result: GradeResult, *, seed: int, note: str = "") -> dict:
    """Gradescope's results.json for a grade: one test per task, with a
    Markdown output (status, checks passed, and for a task that does not
    pass each failing check's message, its failing example, which is the
    learner's call as Hypothesis shrank it, and the hint), a leaderboard of
    the figures the passing speed checks measured, and `note` (Markdown)
    under the one-line summary."""
    orders = {k.name: k.order for k in load_registry()}
    tests = []
    for position, kata in enumerate(result.katas, 1):
        order = orders.get(kata.name, position)
        for number, task in enumerate(kata.tasks, 1):
            tests.append(
                {
                    "name": f"{kata.name} / {task.name}: {task.title}",
                    "number": f"{order}.{number}",
                    "score": task.score,
                    "max_score": task.max_score,
                    "status": "passed" if task.status == Status.PASS else "failed",
                    "visibility": "after_due_date" if task.visibility == "hidden" else "visible",
                    "output": _task_output(task),
                    "output_format": "md",
                    "extra_data": {
                        "kata": kata.name,
                        "task": task.name,
                        "status": str(task.status),
                        "checks_passed": task.checks_passed,
                        "checks_total": task.checks_total,
                        "because_of": task.because_of,
                        "seed": seed,
                    },
                }
            )
    summary = _summary(result, tests, seed)
    return {
        "score": result.score,
        "execution_time": round(result.duration, 3),
        "output": f"{summary}\n\n{note}" if note else summary,
        "output_format": "md",
        "test_name_format": "text",
        "stdout_visibility": "hidden",  # the log holds tracebacks and paths meant for the instructor
        "extra_data": {
            "seed": seed,
            "score": result.score,
            "max_score": result.max_score,
            "version": RESULTS_VERSION,
            "versions": versions.installed(),
        },
        "tests": tests,
        "leaderboard": _leaderboard(result),
    }


def _summary(result: GradeResult, tests: list[dict], seed: int) -> str:
    """One line for the top of the page. While some tasks are hidden it counts
    only the shown ones: the total would give the hidden ones away."""
    shown = [t for t in tests if t["visibility"] == "visible"]
    passed = sum(t["status"] == "passed" for t in shown)
    points = f"{sum(t['score'] for t in shown)}/{sum(t['max_score'] for t in shown)} points"
    line = f"**{points}**: {passed} of {len(shown)} tasks pass (graded with seed {seed})."
    hidden = len(tests) - len(shown)
    if hidden:
        line = (
            f"**{points} on the tasks shown now**: {passed} of {len(shown)} pass (graded with seed {seed}). "
            f"{hidden} more {'task is' if hidden == 1 else 'tasks are'} graded too and shown after the due date."
        )
    if result.interrupted:
        line += " The grading was interrupted: the tasks it did not reach score nothing."
    return line


def _task_output(task: TaskResult) -> str:
    """Markdown for one task: its status, then why it does not pass and the hint (for a task that fails
    because a task it needs fails: which, and nothing of its own)."""
    head = f"**{task.status}**: {task.checks_passed} of {task.checks_total} checks passed"
    if task.status == Status.PASS:
        return head
    if task.because_of:  # its own checks say little while a task it needs fails
        return f"{head}\n\nIt {task.because}."
    parts = [head]
    if not task.failures and task.message:  # no check ran: the message says why (a crash before collection)
        parts.append(_fenced(task.message))
    for i, failure in enumerate(task.failures[:MAX_FAILURES_SHOWN]):
        label = "First failing check" if i == 0 else "Also failing"
        parts.append(f"{label}: `{failure['test']}` ({failure['outcome']})")
        parts.append(_fenced(failure["message"] or "(no message)"))
        if failure["example"]:
            parts.append("The failing example:")
            parts.append(_fenced(failure["example"]))
    unshown = len(task.failures) - MAX_FAILURES_SHOWN
    if unshown > 0:
        parts.append(f"... and {unshown} more {'check' if unshown == 1 else 'checks'} that did not pass, not shown.")
    if task.hint:
        parts.append(f"**Hint:** {task.hint}")
    return "\n\n".join(parts)


def _fenced(text: str) -> str:
    """text, cut to MAX_TEXT, in a Markdown code block: learner text renders as
    written, never as Markdown, and no backticks inside can close the block."""
    if len(text) > MAX_TEXT:
        text = f"{text[:MAX_TEXT]}\n... ({len(text) - MAX_TEXT} more characters cut)"
    text = printable(text)
    fence = "`" * max(3, _longest_backticks(text) + 1)
    return f"{fence}text\n{text}\n{fence}"


def _longest_backticks(text: str) -> int:
    """The longest run of backticks in text: a Markdown fence one longer cannot be closed by it."""
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def code_span(text: str) -> str:
    """text as a Markdown code span that no backtick inside can close (CommonMark: a
    fence longer than any run of backticks in it, padded with a space where it starts
    or ends with one), its control characters and newlines escaped."""
    text = printable(text, lines=False)
    fence = "`" * (_longest_backticks(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _leaderboard(result: GradeResult) -> list[dict]:
    """One entry per figure of a passing task: a figure whose answers were wrong
    ranks nothing. Hidden tasks stay off it, as the leaderboard is public."""
    board = []
    for kata in result.katas:
        for task in kata.tasks:
            if task.status != Status.PASS or task.visibility == "hidden":
                continue
            for figure in task.figures:
                if figure.get("bar") is not None and math.isfinite(
                    figure["value"]
                ):  # measured against a bar; JSON has no NaN
                    board.append(
                        {
                            "name": f"{kata.name}: {figure['name']}",
                            "value": round(figure["value"], 2),
                            "order": "desc" if figure["better"] == "higher" else "asc",
                        }
                    )
    return board


def error_results(message: str, *, seed: int | None, execution_time: float) -> dict:
    """results.json for a submission that could not be graded: score 0, the
    message (Markdown) at the top, and one failed test worth every point of
    the registry, so the student sees 0 out of the assignment's total."""
    output = f"**Not graded: 0 points.**\n\n{message}"
    test = {
        "name": "submission",
        "number": "0",
        "score": 0,
        "status": "failed",
        "visibility": "visible",
        "output": output,
        "output_format": "md",
    }
    total = _total_points()
    if total is not None:
        test["max_score"] = total
    return {
        "score": 0,
        "execution_time": round(execution_time, 3),
        "output": output,
        "output_format": "md",
        "stdout_visibility": "hidden",
        "extra_data": {
            "seed": seed,
            "score": 0,
            "max_score": total,
            "version": RESULTS_VERSION,
            "versions": versions.installed(),
            "error": message,
        },
        "tests": [test],
    }


def _total_points() -> int | None:
    """Every point of the registry, or None when the registry itself is what failed."""
    try:
        return sum(k.max_score for k in load_registry())
    except Exception:  # noqa: BLE001 - this serves the error report; it must not raise in its turn
        return None
