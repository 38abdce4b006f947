"""Every kata's suite fails each of its mutants (tests/mutants/KATA.toml: one
mistake a learner makes, as a one-bug edit of the reference solution or of
the alternative implementation) and gives full marks to the alternative,
tests/fixtures/alt/KATA.py: a correct implementation written differently."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.registry import load_registry
from grader.target import SOLUTIONS_DIR

from mutation import ALTERNATIVES, Mutant, assert_alternative_passes, assert_caught, load_mutants

KATAS = [k.name for k in load_registry()]
CASES = [
    (kata, mutant, base)
    for kata in KATAS
    for mutants, base in zip(load_mutants(kata), (SOLUTIONS_DIR, ALTERNATIVES))
    for mutant in mutants
]


@pytest.mark.parametrize(
    "kata, mutant, base",
    CASES,
    ids=[f"{kata}:{'alternative:' if base == ALTERNATIVES else ''}{m.name}" for kata, m, base in CASES],
)
def test_the_grader_does_not_pass_the_mutant(kata: str, mutant: Mutant, base: Path, tmp_path: Path):
    assert_caught(kata, mutant, tmp_path, base)


@pytest.mark.parametrize("kata", [k for k in KATAS if (ALTERNATIVES / f"{k}.py").is_file()])
def test_a_differently_written_correct_implementation_gets_full_marks(kata: str, tmp_path: Path):
    assert_alternative_passes(kata, tmp_path)
