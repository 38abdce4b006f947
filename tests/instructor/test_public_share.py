"""The student edition's public checks catch the mistakes learners make, where the student works:
each kata's catalogued mistakes (grader/suites/KATA/mutants.toml, every one caught by the full suite:
tests/suites/test_mutants.py) are graded with the checks the edition ships for their task
(tests/public_share.py), and at least BAR of each kata's must fail there, not only on submission.

The thorough test grades every mutant (minutes: `python -m pytest -m thorough`) and holds the
committed measurement that `kata release` prints, grader/instructor/public_share.json, to what it
finds; quick tests check that the measurement names every catalogued mistake and no other, and that
it was made with the public checks the edition ships now, so a mutant or a check added without measuring
again fails at once (`python tests/public_share.py --write`). The
three mistakes a student edition once passed are graded in the quick run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from public_share import edition_checks, measure, measure_all

from grader.cli.commands import main
from grader.instructor import public_share, release
from grader.instructor.public_share import BAR, Share, read_shares, share_lines
from grader.kata.registry import load_registry

from mutation import changed_checks, load_mutants

KATAS = [k.name for k in load_registry()]
AGAIN = "measure again: python tests/public_share.py --write"
# The mistakes a student edition passed while its hidden checks failed them (grader/suites/moe/mutants.toml).
ONCE_PASSED = (
    "expert_capacity truncates the share with int() instead of rounding it up",
    "load_balancing_loss divided by T",
    "router_z_loss takes integer logits as floats",
)


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("public") / "edition"
    release.write_edition(out)
    return out


def test_the_mistakes_a_student_edition_once_passed_each_fail_a_public_check_there(edition, tmp_path):
    share = measure("moe", edition_checks(edition)["moe"], tmp_path, only=set(ONCE_PASSED))
    assert sorted(share.caught) == sorted(ONCE_PASSED), f"only on submission: {share.missed}"


def test_the_measurement_names_every_catalogued_mistake_of_a_released_task_and_no_other():
    shares = read_shares()
    assert sorted(shares) == sorted(k for k in KATAS if any(load_mutants(k))), AGAIN
    released = {k.name: {t.name for t in k.tasks if t.release} for k in load_registry()}
    for kata, share in shares.items():
        catalogue = {m.name for mutants in load_mutants(kata) for m in mutants if m.task in released[kata]}
        measured = set(share.caught) | set(share.missed)
        assert measured == catalogue, (
            f"{kata}: the measurement lacks {sorted(catalogue - measured)} and names {sorted(measured - catalogue)}; "
            + AGAIN
        )


def test_the_measurement_was_made_with_the_public_checks_the_edition_ships_now(edition):
    # A public check added, dropped or hidden since changes what the edition catches; only the thorough test
    # grades that again, so the measurement records the checks it graded with and this quick test compares them.
    now = edition_checks(edition)
    changed = [
        f"{kata}:{line}"
        for kata, share in read_shares().items()
        for line in changed_checks(share.checks, now.get(kata, {}))
    ]
    assert not changed, "checks added or gone since the measurement: " + "; ".join(changed) + "; " + AGAIN


@pytest.mark.parametrize("kata", KATAS)
def test_the_committed_measurement_meets_the_bar(kata):
    share = read_shares()[kata]
    assert share.share >= BAR, f"below {BAR:.0%}: {share.line()}; only on submission: {list(share.missed)}"


def test_kata_release_prints_each_katas_share(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    result = CliRunner().invoke(main, ["release", str(tmp_path / "ed")])
    assert result.exit_code == 0, result.output
    shares = read_shares()
    for kata in KATAS:
        assert f"  {kata}: {shares[kata].line()}\n" in result.output


def test_a_share_line_says_how_many_of_how_many_and_a_kata_never_measured_says_so(tmp_path):
    path = public_share.write_shares([Share("toy", ("a", "b", "c"), ("d",))], tmp_path / "m.json")
    assert read_shares(path)["toy"].share == 0.75
    assert share_lines(["toy", "new"], path) == [
        "toy: 3 of 4 catalogued mistakes (75%) fail a public check",
        "new: not measured (python tests/public_share.py)",
    ]
    assert read_shares(tmp_path / "absent.json") == {}


@pytest.mark.slow
@pytest.mark.thorough  # every mutant of every kata graded with its task's public checks: minutes on two cores
def test_each_katas_public_checks_catch_its_share_and_the_committed_measurement_says_so(tmp_path):
    measured = measure_all(tmp_path)
    print("\n".join(f"{kata}: {share.line()}" for kata, share in measured.items()))
    low = {k: (s.line(), s.missed) for k, s in measured.items() if s.share < BAR}
    assert not low, f"below {BAR:.0%} (only on submission: the mistakes listed): {low}"
    committed = read_shares()
    stale = [kata for kata, share in measured.items() if _names(share) != _names(committed.get(kata))]
    assert not stale, f"the committed measurement of {stale} is not what grading finds now; " + AGAIN


def _names(share: Share | None) -> tuple[list[str], list[str]] | None:
    return (sorted(share.caught), sorted(share.missed)) if share else None
