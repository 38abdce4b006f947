"""Every kata's suite fails each of its mutants (tests/mutants/KATA.toml: one
mistake a learner makes, as a one-bug edit of the reference solution or of
the alternative implementation) and gives full marks to the alternative,
tests/fixtures/alt/KATA.py: a correct implementation written differently.

The quick tests grade with the standard seed; the slow ones grade the
reference and the alternative again with OTHER_SEEDS, and the thorough one
(`python -m pytest -m thorough`, left out of the default run for its
minutes) every mutant; each requires the same verdict (a mutant caught, the
reference and the alternative with full marks), so that no verdict depends
on the examples one seed happens to draw."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.registry import load_registry
from grader.runner import grade
from grader.target import SOLUTIONS_DIR

from mutation import ALTERNATIVES, MUTANT_LIMITS, Mutant, assert_alternative_passes, assert_caught, load_mutants

KATAS = [k.name for k in load_registry()]
OTHER_SEEDS = (1, 2)  # `kata grade --seed N`: other, equally deterministic draws
CASES = [
    (kata, mutant, base)
    for kata in KATAS
    for mutants, base in zip(load_mutants(kata), (SOLUTIONS_DIR, ALTERNATIVES))
    for mutant in mutants
]


CASE_IDS = [f"{kata}:{'alternative:' if base == ALTERNATIVES else ''}{m.name}" for kata, m, base in CASES]
WITH_ALTERNATIVE = [k for k in KATAS if (ALTERNATIVES / f"{k}.py").is_file()]


@pytest.mark.parametrize("kata, mutant, base", CASES, ids=CASE_IDS)
def test_the_grader_does_not_pass_the_mutant(kata: str, mutant: Mutant, base: Path, tmp_path: Path):
    assert_caught(kata, mutant, tmp_path, base)


@pytest.mark.parametrize("kata", WITH_ALTERNATIVE)
def test_a_differently_written_correct_implementation_gets_full_marks(kata: str, tmp_path: Path):
    assert_alternative_passes(kata, tmp_path)


@pytest.mark.slow
@pytest.mark.thorough  # about 500 s of grading on two cores: outside the default run and CI's budget
@pytest.mark.parametrize("kata, mutant, base", CASES, ids=CASE_IDS)
def test_the_grader_does_not_pass_the_mutant_under_other_seeds(kata: str, mutant: Mutant, base: Path, tmp_path: Path):
    for seed in OTHER_SEEDS:  # with the standard seed's grade above: caught under three seeds
        (tmp_path / str(seed)).mkdir()
        assert_caught(kata, mutant, tmp_path / str(seed), base, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", OTHER_SEEDS)
def test_the_reference_gets_full_marks_under_other_seeds(seed: int):
    graded = grade(list(load_registry()), "reference", seed=seed, jobs=2, limits=MUTANT_LIMITS)
    lost = [
        (k.name, t.name, t.status.value, t.message) for k in graded.katas for t in k.tasks if t.status.value != "pass"
    ]
    assert not lost, f"the reference lost points with seed {seed}: {lost}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", OTHER_SEEDS)
@pytest.mark.parametrize("kata", WITH_ALTERNATIVE)
def test_the_alternative_gets_full_marks_under_other_seeds(kata: str, seed: int, tmp_path: Path):
    assert_alternative_passes(kata, tmp_path, seed)
