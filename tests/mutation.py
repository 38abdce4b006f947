"""Mutants: small, one-bug edits of a reference solution, and grading them.

Each kata's tests/test_mutants_<kata>.py lists its mutants and binds the
standard tests made here at its top level, where pytest collects them:

    test_grader_does_not_pass_the_mutant = mutant_test(KATA, MUTANTS)
    test_a_differently_written_correct_implementation_gets_full_marks = alternative_test(KATA)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pytest

from grader.registry import find_kata
from grader.runner import Limits, TaskResult, grade_kata
from grader.target import SOLUTIONS_DIR

# Mutants run only their task's checks; generous limits keep a slow machine from flaking.
MUTANT_LIMITS = Limits(test_seconds=120, kata_seconds=300)

# tests/fixtures/alt/<kata>.py: a correct implementation of each kata, written differently from the reference.
ALTERNATIVES = Path(__file__).parent / "fixtures" / "alt"


@dataclass(frozen=True)
class Mutant:
    name: str  # the mistake, in words: the test id
    task: str  # the task whose grade must not be 'pass'
    old: str  # text of the mutated file (the reference solution unless told), present exactly once
    new: str  # what replaces it
    expect: tuple[str, ...] = ("fail",)  # statuses the grader may give the task

    def source(self, kata: str, base: Path = SOLUTIONS_DIR) -> str:
        """base/<kata>.py with the mutation made."""
        path = base / f"{kata}.py"
        text = path.read_text(encoding="utf-8")
        count = text.count(self.old)
        if count != 1:
            raise AssertionError(f"mutant {self.name!r}: its text occurs {count} times in {path}, not once")
        return text.replace(self.old, self.new)


def grade_mutant(kata: str, mutant: Mutant, tmp_path: Path, base: Path = SOLUTIONS_DIR) -> TaskResult:
    """Write the mutated base/<kata>.py into tmp_path and grade its task."""
    (tmp_path / f"{kata}.py").write_text(mutant.source(kata, base), encoding="utf-8")
    result = grade_kata(find_kata(kata), str(tmp_path), tasks=[mutant.task], limits=MUTANT_LIMITS)
    return result.tasks[0]


def assert_caught(kata: str, mutant: Mutant, tmp_path: Path, base: Path = SOLUTIONS_DIR) -> None:
    task = grade_mutant(kata, mutant, tmp_path, base)
    assert task.status in mutant.expect, (
        f"mutant {mutant.name!r} graded {task.status!r} on task {mutant.task!r}, expected one of {mutant.expect}: "
        f"{task.message}"
    )


def mutant_test(kata: str, mutants: Sequence[Mutant], *, of_alternative: bool = False) -> Callable:
    """A test, one case per mutant, that the grader does not pass the task each
    mutant breaks. The mutants edit the reference solution, or with
    of_alternative the alternative implementation tests/fixtures/alt/<kata>.py
    (for mistakes the reference cannot make). Bind it at a test module's top level."""
    base = ALTERNATIVES if of_alternative else SOLUTIONS_DIR

    @pytest.mark.parametrize("mutant", list(mutants), ids=lambda m: m.name)
    def test(mutant: Mutant, tmp_path: Path) -> None:
        assert_caught(kata, mutant, tmp_path, base)

    return test


def alternative_test(kata: str) -> Callable:
    """A test that the alternative implementation of kata gets full marks on
    every task but speed (assert_alternative_passes). Bind it at a test module's top level."""

    def test(tmp_path: Path) -> None:
        assert_alternative_passes(kata, tmp_path)

    return test


def assert_alternative_passes(kata: str, tmp_path: Path) -> None:
    """The differently written correct implementation tests/fixtures/alt/<kata>.py
    passes every task but speed (the one task allowed to tell ways of writing apart)."""
    (tmp_path / f"{kata}.py").write_text((ALTERNATIVES / f"{kata}.py").read_text(encoding="utf-8"), encoding="utf-8")
    registered = find_kata(kata)
    tasks = [t.name for t in registered.tasks if t.name != "speed"]
    result = grade_kata(registered, str(tmp_path), tasks=tasks, limits=MUTANT_LIMITS)
    failed = [(t.name, t.status, t.message) for t in result.tasks if t.status != "pass"]
    assert not failed, f"the alternative implementation of {kata} lost points: {failed}"
