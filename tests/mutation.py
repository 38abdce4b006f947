"""Mutants: small, one-bug edits of a reference solution, and grading them.

Each kata's mutants are data, in tests/mutants/<kata>.toml (its header says
how a mutant is written); tests/test_mutants.py grades every one of them, and
the alternative implementation tests/fixtures/alt/<kata>.py, with the
helpers here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.registry import find_kata, tomllib  # tomllib, or tomli on Python 3.10
from grader.runner import Limits, TaskResult, grade_kata
from grader.target import SOLUTIONS_DIR

# Mutants run only their task's checks, and stop at the first that does not pass (fail_fast: its outcome
# is the task's status); generous limits keep a slow machine from flaking.
MUTANT_LIMITS = Limits(test_seconds=120, kata_seconds=300)

# tests/fixtures/alt/<kata>.py: a correct implementation of each kata, written differently from the reference.
ALTERNATIVES = Path(__file__).parent / "fixtures" / "alt"
# tests/mutants/<kata>.toml: each kata's mutants, [[mutant]] of the reference, [[alternative]] of the alternative.
MUTANTS = Path(__file__).parent / "mutants"


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


def grade_mutant(kata: str, mutant: Mutant, tmp_path: Path, base: Path = SOLUTIONS_DIR, seed: int = 0) -> TaskResult:
    """Write the mutated base/<kata>.py into tmp_path and grade its task (with `seed`)."""
    (tmp_path / f"{kata}.py").write_text(mutant.source(kata, base), encoding="utf-8")
    result = grade_kata(
        find_kata(kata), str(tmp_path), seed=seed, tasks=[mutant.task], limits=MUTANT_LIMITS, fail_fast=True
    )
    return result.tasks[0]


def assert_caught(kata: str, mutant: Mutant, tmp_path: Path, base: Path = SOLUTIONS_DIR, seed: int = 0) -> None:
    """The mutant's task is graded one of mutant.expect (with `seed`)."""
    task = grade_mutant(kata, mutant, tmp_path, base, seed)
    assert task.status in mutant.expect, (
        f"mutant {mutant.name!r} graded {task.status!r} on task {mutant.task!r} with seed {seed}, expected one of "
        f"{mutant.expect}: {task.message}"
    )


def load_mutants(kata: str) -> tuple[list[Mutant], list[Mutant]]:
    """kata's mutants from tests/mutants/<kata>.toml: (those of the reference
    solution, those of the alternative implementation); none for a kata
    without the file (one `kata new` just made)."""
    path = MUTANTS / f"{kata}.toml"
    if not path.is_file():
        return [], []
    with open(path, "rb") as f:
        data = tomllib.load(f)
    unknown = set(data) - {"mutant", "alternative"}
    if unknown:
        raise AssertionError(f"tests/mutants/{kata}.toml: unknown tables {sorted(unknown)}")

    def mutant(entry: dict) -> Mutant:
        expect = tuple(entry.pop("expect", ("fail",)))
        try:
            return Mutant(**entry, expect=expect)
        except TypeError as exc:
            raise AssertionError(f"tests/mutants/{kata}.toml: a mutant {entry.get('name')!r}: {exc}") from None

    return [mutant(e) for e in data.get("mutant", [])], [mutant(e) for e in data.get("alternative", [])]


def assert_alternative_passes(kata: str, tmp_path: Path, seed: int = 0) -> None:
    """The differently written correct implementation tests/fixtures/alt/<kata>.py
    passes every task but speed (the one task allowed to tell ways of writing apart), with `seed`."""
    (tmp_path / f"{kata}.py").write_text((ALTERNATIVES / f"{kata}.py").read_text(encoding="utf-8"), encoding="utf-8")
    registered = find_kata(kata)
    tasks = [t.name for t in registered.tasks if t.name != "speed"]
    result = grade_kata(registered, str(tmp_path), seed=seed, tasks=tasks, limits=MUTANT_LIMITS)
    failed = [(t.name, t.status, t.message) for t in result.tasks if t.status != "pass"]
    assert not failed, f"the alternative implementation of {kata} lost points with seed {seed}: {failed}"
