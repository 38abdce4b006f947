"""Every kata's suite fails each of its mutants (grader/suites/KATA/mutants.toml: one
mistake a learner makes, as a one-bug edit of the reference solution or of
the alternative implementation) and gives full marks to the alternative,
tests/fixtures/alt/KATA.py: a correct implementation written differently.

Each mutant is graded by the check it names, under every seed of SEEDS, and
must be caught under each: a task passes only when every one of its checks
passes, so that check's verdict is the task's, and no verdict depends on the
examples one seed happens to draw. A kata's mutants are graded in one judge
per seed (runner.grade_batch: the suite collected once, each mutant with
jails and fixtures of its own), one test per kata, seed and share, whose
failure lists every mutant that got through (`python tests/mutation.py KATA
--all` grades them one by one). The quick run grades a sample under the
standard seed: the first mutant of each task (of the reference, and of the
alternative), so that every task's suite is seen to catch a mistake; the
slow tests grade the rest of them under it, and all of them under seeds 1
and 2, so that CI grades each mutant under each seed once. (All of them at
seed 0 would cost the quick run about 26 s of test time.) The
alternative is graded whole, with the standard seed and with seed 1, among
the slow tests, as is the reference with seed 1 (its standard-seed grade is
tests/suites/test_katas.py's; CI's 10 minutes hold the speed-flake test, not
the sweep of seeds). The thorough tests (`python -m pytest -m thorough`, left out of the
default run for their minutes) sweep the reference and each alternative
through seeds 0-9, seed by seed, failing at the first that loses a point, and
grade each mutant's whole task, every check in the suite's order, as a
learner's grade would."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grader.kata.registry import find_kata, load_registry, suite_tasks, tomllib
from grader.kata.target import SOLUTIONS_DIR
from grader.run.runner import grade

from mutation import (
    ALTERNATIVES,
    MUTANT_LIMITS,
    SEEDS,
    assert_alternative_passes,
    catching_check,
    grade_mutants,
    load_mutants,
    write_checks,
)

KATAS = [k.name for k in load_registry()]
# The reference and the alternative under seed 1 in the slow tests; the thorough sweep takes every seed of these.
OTHER_SEED = 1
SWEEP_SEEDS = tuple(range(10))
CASES = [
    (kata, mutant, base)
    for kata in KATAS
    for mutants, base in zip(load_mutants(kata), (SOLUTIONS_DIR, ALTERNATIVES))
    for mutant in mutants
]
WITH_MUTANTS = sorted({kata for kata, _, _ in CASES}, key=KATAS.index)
WITH_ALTERNATIVE = [k for k in KATAS if (ALTERNATIVES / f"{k}.py").is_file()]


def test_every_mutant_names_a_check_of_its_task():
    wrong = []
    marks = {kata: suite_tasks(find_kata(kata).suite) for kata in WITH_MUTANTS}
    for kata, mutant, _ in CASES:
        owners = marks[kata].get(mutant.check)
        if owners is None or mutant.task not in owners:
            wrong.append(f"{kata}: {mutant.name!r} names {mutant.check!r}, not a check of task {mutant.task!r}")
    assert not wrong, "\n".join(wrong) + "\n(python tests/mutation.py KATA --all --write names the right ones)"


def test_the_finder_names_the_check_a_mutant_names():
    # python tests/mutation.py KATA --write: it grades the whole task, then the first check to fail under the others
    mutant = next(m for m in load_mutants("kv_cache")[0] if m.name == "update returns only the new keys and values")
    assert catching_check("kv_cache", dataclasses.replace(mutant, check="")) == mutant.check


def test_the_finder_writes_each_check_after_its_task_line(tmp_path: Path):
    path = tmp_path / "toy.toml"
    path.write_text(
        '# a header\n\n[[mutant]]\nname = "a"\ntask = "t"\nold = "x"\nnew = "y"\n\n'
        '[[mutant]]\nname = "b"\ntask = "t"\ncheck = "test_old"\nold = "x"\nnew = "z"\n\n'
        '[[alternative]]\nname = "a"\ntask = "u"\nold = "p"\nnew = "q"\n',
        encoding="utf-8",
    )
    write_checks(path, {("mutant", "a"): "test_a", ("mutant", "b"): "test_b", ("alternative", "a"): "test_c"})
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert [(m["name"], m["check"], m["new"]) for m in data["mutant"]] == [("a", "test_a", "y"), ("b", "test_b", "z")]
    assert [(m["name"], m["check"]) for m in data["alternative"]] == [("a", "test_c")]
    assert path.read_text(encoding="utf-8").startswith("# a header\n")


def sample(mutants: list) -> list:
    """The first mutant of each task, in the file's order: the quick run's share."""
    firsts: dict[str, object] = {}
    for mutant in mutants:
        firsts.setdefault(mutant.task, mutant)
    return list(firsts.values())


def share_of(mutants: list, share: str) -> list:
    """mutants, "sample" (the first of each task), "rest" (the others) or "all"."""
    if share == "all":
        return mutants
    picked = sample(mutants)
    return picked if share == "sample" else [m for m in mutants if m not in picked]


def assert_every_mutant_caught(
    kata: str, seed: int, folder: Path, whole_task: bool = False, share: str = "all"
) -> None:
    """Grade kata's mutants of `share` (share_of) with seed, in one batch per
    base (the reference solution, the alternative), and require each caught."""
    missed = []
    for base in (SOLUTIONS_DIR, ALTERNATIVES):
        mutants = share_of([m for k, m, b in CASES if k == kata and b == base], share)
        if not mutants:
            continue
        (folder / base.name).mkdir()
        graded = grade_mutants(kata, mutants, folder / base.name, base, seed, whole_task=whole_task)
        by = "its task's checks" if whole_task else "its check"
        missed += [
            f"{'alternative: ' if base == ALTERNATIVES else ''}{m.name!r}: graded {graded[m.name].status.value!r} "
            f"by {by} ({m.task}: {m.check}), expected one of {list(m.expect)}: {graded[m.name].message}"
            for m in mutants
            if graded[m.name].status not in m.expect
        ]
    assert not missed, f"{len(missed)} mutants of {kata} passed with seed {seed}:\n" + "\n".join(missed)


# The quick run's sample under the standard seed; the rest of them under it, and all of them under the other
# seeds, with the slow tests (CI runs both).
SEED_CASES = [pytest.param(SEEDS[0], "sample")] + [
    pytest.param(seed, share, marks=pytest.mark.slow)
    for seed, share in [(SEEDS[0], "rest"), *((seed, "all") for seed in SEEDS[1:])]
]


@pytest.mark.parametrize(("seed", "share"), SEED_CASES)
@pytest.mark.parametrize("kata", WITH_MUTANTS)
def test_each_mutant_is_caught_by_its_check(kata: str, seed: int, share: str, tmp_path: Path):
    assert_every_mutant_caught(kata, seed, tmp_path, share=share)


def test_the_quick_sample_and_the_rest_share_out_every_mutant_once_with_one_of_each_task():
    for kata in WITH_MUTANTS:
        for base in (SOLUTIONS_DIR, ALTERNATIVES):
            mutants = [m for k, m, b in CASES if k == kata and b == base]
            picked, rest = share_of(mutants, "sample"), share_of(mutants, "rest")
            assert sorted(m.name for m in picked + rest) == sorted(m.name for m in mutants)
            assert sorted(m.task for m in picked) == sorted({m.task for m in mutants}), (kata, base.name)


@pytest.mark.slow
@pytest.mark.thorough  # minutes of grading on two cores: outside the default run and CI's budget
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kata", WITH_MUTANTS)
def test_each_mutant_fails_its_whole_task(kata: str, seed: int, tmp_path: Path):
    assert_every_mutant_caught(kata, seed, tmp_path, whole_task=True)


@pytest.mark.slow  # a whole kata graded: with the standard seed here, with seed 1 below
@pytest.mark.parametrize("kata", WITH_ALTERNATIVE)
def test_a_differently_written_correct_implementation_gets_full_marks(kata: str, tmp_path: Path):
    assert_alternative_passes(kata, tmp_path)


def assert_reference_passes(seed: int) -> None:
    graded = grade(list(load_registry()), "reference", seed=seed, jobs=2, limits=MUTANT_LIMITS)
    lost = [
        (k.name, t.name, t.status.value, t.message) for k in graded.katas for t in k.tasks if t.status.value != "pass"
    ]
    assert not lost, f"the reference lost points with seed {seed}: {lost}"
    named = [(k.name, t.name, t.diagnosis) for k in graded.katas for t in k.tasks if t.diagnosis]
    assert not named, f"the reference got a diagnosis of a known mistake with seed {seed}: {named}"


@pytest.mark.slow
def test_the_reference_gets_full_marks_under_another_seed():
    assert_reference_passes(OTHER_SEED)


@pytest.mark.slow
@pytest.mark.parametrize("kata", WITH_ALTERNATIVE)
def test_the_alternative_gets_full_marks_under_another_seed(kata: str, tmp_path: Path):
    assert_alternative_passes(kata, tmp_path, OTHER_SEED)


@pytest.mark.slow
@pytest.mark.thorough  # ten gradings of every kata: minutes
@pytest.mark.parametrize("target", ["reference", *(f"alternative {k}" for k in WITH_ALTERNATIVE)])
def test_full_marks_under_every_seed_of_the_sweep(target: str, tmp_path: Path):
    """Seeds 0-9 in order; the failure names the first seed that loses a point (and what it lost)."""
    for seed in SWEEP_SEEDS:
        if target == "reference":
            assert_reference_passes(seed)
        else:
            assert_alternative_passes(target.split()[-1], tmp_path, seed)
