"""Mutants: small, one-bug edits of a reference solution, and grading them.

Each kata's tests/test_mutants_<kata>.py lists its mutants and asserts the
grader does not pass the task each one breaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.registry import find_kata
from grader.runner import Limits, TaskResult, grade_kata
from grader.target import SOLUTIONS_DIR

# Mutants run only their task's checks; generous limits keep a slow machine from flaking.
MUTANT_LIMITS = Limits(test_seconds=120, kata_seconds=300)


@dataclass(frozen=True)
class Mutant:
    name: str  # the mistake, in words: the test id
    task: str  # the task whose grade must not be 'pass'
    old: str  # text of the reference solution, present exactly once
    new: str  # what replaces it
    expect: tuple[str, ...] = ("fail",)  # statuses the grader may give the task

    def source(self, kata: str) -> str:
        text = (SOLUTIONS_DIR / f"{kata}.py").read_text(encoding="utf-8")
        count = text.count(self.old)
        if count != 1:
            raise AssertionError(f"mutant {self.name!r}: its text occurs {count} times in {kata}.py, not once")
        return text.replace(self.old, self.new)


def grade_mutant(kata: str, mutant: Mutant, tmp_path: Path) -> TaskResult:
    """Write the mutated solution into tmp_path and grade its task."""
    (tmp_path / f"{kata}.py").write_text(mutant.source(kata), encoding="utf-8")
    result = grade_kata(find_kata(kata), str(tmp_path), tasks=[mutant.task], limits=MUTANT_LIMITS)
    return result.tasks[0]


def assert_caught(kata: str, mutant: Mutant, tmp_path: Path) -> None:
    task = grade_mutant(kata, mutant, tmp_path)
    assert task.status in mutant.expect, (
        f"mutant {mutant.name!r} graded {task.status!r} on task {mutant.task!r}, expected one of {mutant.expect}: "
        f"{task.message}"
    )


ALTERNATIVES = Path(__file__).parent / "fixtures" / "alt"


def assert_alternative_passes(kata: str, tmp_path: Path) -> None:
    """The differently written correct implementation tests/fixtures/alt/<kata>.py
    passes every task but speed (the one task allowed to tell ways of writing apart)."""
    (tmp_path / f"{kata}.py").write_text((ALTERNATIVES / f"{kata}.py").read_text(encoding="utf-8"), encoding="utf-8")
    registered = find_kata(kata)
    tasks = [t.name for t in registered.tasks if t.name != "speed"]
    result = grade_kata(registered, str(tmp_path), tasks=tasks, limits=MUTANT_LIMITS)
    failed = [(t.name, t.status, t.message) for t in result.tasks if t.status != "pass"]
    assert not failed, f"the alternative implementation of {kata} lost points: {failed}"
