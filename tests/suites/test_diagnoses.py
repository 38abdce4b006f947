"""The catalogues of known mistakes (grader/suites/KATA/mistakes.toml, made by
`python tests/mutation.py KATA --signatures --write` from the mutants that
name a looks_like) diagnose the mistakes they were made from, and the same
mistakes written otherwise (tests/mutants/fresh/KATA.toml) in most cases.

The catalogue must be the one its mutants and suite make now: a quick test
fails when it names a check its task no longer has, or a mutant that is gone
or now names another diagnosis, when it was written against other checks than
its tasks have now (its [checks] table), and when a fresh mistake names a
diagnosis it lacks. The slow test grades every fresh mistake
with every check of its task, and the thorough one (`-m thorough`, three
minutes: out of CI's ten) every catalogued mutant, as the writer did under
three seeds before it wrote the catalogue; the quick run
grades one fresh mistake, the distillation loss without its T^2, once through
`kata grade -v`, and checks its diagnosis by name and in the printed lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import learner
from grader.cli.commands import main
from grader.kata.registry import find_kata, load_registry, suite_tasks
from grader.output import report
from grader.run import diagnosis

from mutation import changed_checks, grade_mutants, load_fresh, load_mutants, task_checks, written_against

KATAS = [k.name for k in load_registry()]
WITH_CATALOGUE = [k for k in KATAS if diagnosis.catalogue(find_kata(k))]
# One xdist worker runs the whole module, so the module-scoped grade below is made once.
pytestmark = pytest.mark.xdist_group("test_diagnoses")
FRESH_FLOOR = 0.7  # the least share of the fresh mistakes that must get their diagnosis
T2_FRESH = "the loss written from scratch with means and no T^2"  # tests/mutants/fresh/distillation.toml
T2_NAME = "the T^2 factor is missing"


def named_mutants(kata: str) -> list:
    return [m for mutants in load_mutants(kata) for m in mutants if m.looks_like]


def test_every_kata_with_mutants_has_a_catalogue():
    assert WITH_CATALOGUE == [k for k in KATAS if named_mutants(k)]
    assert set(WITH_CATALOGUE) >= {"kv_cache", "quantization", "distillation", "speculative", "moe"}


@pytest.mark.parametrize("kata", WITH_CATALOGUE)
def test_each_catalogue_names_only_checks_its_tasks_have(kata: str):
    owners = suite_tasks(find_kata(kata).suite)
    stale = [
        f"{m.task}: {m.name!r} names {s.check}"
        for m in diagnosis.catalogue(find_kata(kata))
        for s in m.signature
        if m.task not in owners.get(s.check.split("[", 1)[0], ())
    ]
    assert not stale, f"{kata}'s mistakes.toml is stale (python tests/mutation.py {kata} --signatures --write):\n" + (
        "\n".join(stale)
    )


@pytest.mark.parametrize("kata", WITH_CATALOGUE)
def test_each_catalogue_holds_the_diagnoses_its_mutants_name_now(kata: str):
    mutants = named_mutants(kata)
    written = {(m.task, m.name, m.why, tuple(sorted(m.mutants))) for m in diagnosis.catalogue(find_kata(kata))}
    wanted: dict[tuple[str, str], list] = {}
    for m in mutants:
        wanted.setdefault((m.task, m.looks_like), []).append(m)
    made = {
        (task, name, next(m.why for m in group if m.why), tuple(sorted(m.name for m in group)))
        for (task, name), group in wanted.items()
    }
    assert written == made, (
        f"{kata}'s mistakes.toml is not the one grader/suites/{kata}/mutants.toml makes: "
        f"python tests/mutation.py {kata} --signatures --write"
    )


@pytest.mark.parametrize("kata", WITH_CATALOGUE)
def test_each_fresh_mistake_names_a_mistake_its_catalogue_holds(kata: str):
    # One that names no catalogued mistake can never get its diagnosis: the slow test would count it as missed.
    held = {(m.task, m.name) for m in diagnosis.catalogue(find_kata(kata))}
    unknown = [
        f"{m.name!r}: {m.task}: {m.looks_like!r}" for m in load_fresh(kata) if (m.task, m.looks_like) not in held
    ]
    assert not unknown, f"tests/mutants/fresh/{kata}.toml names mistakes {kata}'s catalogue lacks:\n" + "\n".join(
        unknown
    )


@pytest.mark.parametrize("kata", WITH_CATALOGUE)
def test_each_catalogue_was_written_against_the_checks_its_tasks_have_now(kata: str):
    # A check added to a task after its catalogue was written also fails on that task's mutants, and a
    # mistake whose signature lacks it is diagnosed no more: only grading shows that (the thorough test
    # below), so the catalogue records the checks it saw and this quick test compares them.
    changed = changed_checks(written_against(find_kata(kata).suite / diagnosis.CATALOGUE), task_checks(kata))
    assert not changed, (
        f"{kata}'s mistakes.toml was written against other checks (python tests/mutation.py {kata} --signatures "
        "--write):\n" + "\n".join(changed)
    )


@pytest.mark.slow
@pytest.mark.thorough  # 3 minutes of grading: every mutant's whole task (the writer checked 3 seeds of each)
@pytest.mark.parametrize("kata", WITH_CATALOGUE)
def test_each_catalogued_mistake_is_diagnosed_first_on_its_own_mutants(kata: str, tmp_path: Path):
    mutants = [m for m in load_mutants(kata)[0] if m.looks_like]  # the alternative's are checked by the writer
    graded = grade_mutants(kata, mutants, tmp_path, every_check=True)
    wrong = [
        f"{m.name!r}: {graded[m.name].diagnosis or 'no diagnosis'!r}, not {m.looks_like!r}"
        for m in mutants
        if graded[m.name].diagnosis != m.looks_like
    ]
    print(f"{kata}: {len(mutants) - len(wrong)} of {len(mutants)} mutants diagnosed as their own mistake")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_differently_written_mistakes_get_their_diagnosis_in_most_cases(tmp_path: Path):
    hits, lines = 0, []
    fresh = {kata: load_fresh(kata) for kata in WITH_CATALOGUE}
    for kata, mistakes in fresh.items():
        (tmp_path / kata).mkdir()
        graded = grade_mutants(kata, mistakes, tmp_path / kata, every_check=True)
        for m in mistakes:
            got = graded[m.name].diagnosis
            hits += got == m.looks_like
            lines.append(f"{'hit ' if got == m.looks_like else 'miss'} {kata}: {m.name!r} -> {got or 'no diagnosis'!r}")
    total = sum(len(m) for m in fresh.values())
    print("\n".join(lines) + f"\nfresh mistakes diagnosed by name: {hits} of {total} ({hits / total:.0%})")
    assert total >= 15 and all(len(m) >= 3 for m in fresh.values())
    assert hits >= FRESH_FLOOR * total, "\n".join(lines)


def t2_fresh() -> object:
    mistake = next(m for m in load_fresh("distillation") if m.name == T2_FRESH)
    assert mistake.looks_like == T2_NAME
    return mistake


def diagnosis_why_of(kata: str, name: str) -> str:
    return next(m.why for m in diagnosis.catalogue(find_kata(kata)) if m.name == name)


@pytest.fixture(scope="module")
def t2_graded(tmp_path_factory):
    """The fresh T^2 mistake graded once by `kata grade -v distillation:loss`: (its CliRunner result, the grade the
    command printed). The tests below read both, instead of grading the same file again (seconds each)."""
    tmp = tmp_path_factory.mktemp("t2")
    folder = tmp / "work"
    folder.mkdir()
    (folder / "distillation.py").write_text(t2_fresh().source("distillation"), encoding="utf-8")
    graded, grade = [], learner.grade

    def grade_and_keep(*args, **kwargs):
        graded.append(grade(*args, **kwargs))
        return graded[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KATA_STATE_DIR", str(tmp / "state"))
        patch.setattr(learner, "grade", grade_and_keep)
        result = CliRunner().invoke(main, ["grade", "-v", "distillation:loss", "--target", str(folder)])
    assert len(graded) == 1, result.output
    return result, graded[0]


def test_a_distillation_loss_without_t2_written_freshly_is_diagnosed_by_name(t2_graded):
    _, graded = t2_graded
    [task] = [t for k in graded.katas for t in k.tasks]
    assert (task.name, task.status.value) == ("loss", "fail")
    assert (task.diagnosis, task.diagnosis_why) == (T2_NAME, diagnosis_why_of("distillation", T2_NAME))


def test_kata_grade_verbose_says_what_the_failing_task_looks_like(t2_graded):
    result, graded = t2_graded
    assert result.exit_code == 1, result.output
    line = f"  looks like: {T2_NAME} (why: {diagnosis_why_of('distillation', T2_NAME)})"
    assert line in result.output.splitlines()
    # Without -v, the same grade shows the table and a line per failing task alone.
    quiet = report.table(graded) + report.failing_summary(graded)
    assert "distillation" in quiet and "looks like: " not in quiet
