"""grader.measure.timing.interleave, the one timing primitive: runs take turns,
alternating who goes first, and rounds continue only while they disagree."""

from __future__ import annotations

import itertools

import pytest

from grader.measure import timing
from grader.suites import common


def scripted(name: str, times, log: list):
    """A run that reports the next of `times` as its seconds and logs (name, round)."""
    it = iter(times)

    def run(r: int) -> float:
        log.append((name, r))
        return next(it)

    return run


def test_runs_take_turns_and_the_order_flips_every_round():
    log = []
    timing.interleave([scripted("a", itertools.repeat(2.0), log), scripted("b", itertools.repeat(1.0), log)], rounds=4)
    assert log == [("a", -1), ("b", -1), ("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)]


def test_steady_rounds_stop_at_the_minimum_and_give_the_median_ratio():
    log = []
    a = scripted("a", [0.0, 2.0, 2.2, 1.8, 2.0, 2.0], log)
    b = scripted("b", itertools.repeat(1.0), log)
    rounds = timing.interleave([a, b], rounds=5, spread=0.25)
    assert rounds.count == 5
    assert rounds.ratio(0, 1) == pytest.approx(2.0)
    assert rounds.ratios(0, 1) == pytest.approx([2.0, 2.2, 1.8, 2.0, 2.0])


def test_disagreeing_rounds_continue_up_to_max_rounds():
    noisy = itertools.cycle([1.0, 5.0])
    rounds = timing.interleave(
        [scripted("a", noisy, []), scripted("b", itertools.repeat(1.0), [])], rounds=3, max_rounds=7, spread=0.05
    )
    assert rounds.count == 7
    assert rounds.spread() > 0.05


def test_noisy_rounds_settle_and_stop_before_max_rounds():
    # Four wild rounds, then steady ones: the quartiles settle once steady rounds are most of them.
    times = [0.0, 1.0, 9.0, 1.0, 9.0] + [2.0] * 20
    rounds = timing.interleave(
        [scripted("a", times, []), scripted("b", itertools.repeat(1.0), [])], rounds=4, max_rounds=20, spread=0.1
    )
    assert 4 < rounds.count < 20
    assert rounds.ratio(0, 1) == pytest.approx(2.0)


def test_the_budget_ends_the_extra_rounds(monkeypatch):
    clock = itertools.count(0.0, 1.0)  # every perf_counter call advances a second
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    noisy = itertools.cycle([1.0, 5.0])
    rounds = timing.interleave(
        [scripted("a", noisy, []), scripted("b", itertools.repeat(1.0), [])],
        rounds=2,
        max_rounds=100,
        spread=0.01,
        budget_seconds=10,
    )
    assert 2 <= rounds.count < 10


def test_settled_rounds_stop_before_the_minimum_and_before_the_spread_settles():
    noisy = itertools.cycle([1.0, 5.0])  # rounds that never agree
    seen = []

    def after_three(rounds: timing.Rounds) -> bool:
        seen.append(rounds.count)
        return rounds.count == 3

    rounds = timing.interleave(
        [scripted("a", noisy, []), scripted("b", itertools.repeat(1.0), [])],
        rounds=5,
        max_rounds=50,
        spread=0.01,
        settled=after_three,
    )
    assert rounds.count == 3 and seen == [1, 2, 3]


@pytest.mark.parametrize(
    "ratios, settled",
    [
        ([20.0], False),  # one round decides nothing
        ([20.0, 16.0], True),  # two rounds, both more than 3x the bar of 5: slow however long it is timed
        ([20.0, 14.0], False),  # one of them within 3x of the bar
        ([1.0, 1.0], False),  # a pass waits for `repeats` rounds
        ([1.0, 1.0, 3.3], True),  # every round 1.5x below the bar
        ([1.0, 1.0, 3.4], False),
        ([8.0, 9.0, 7.6], True),  # every round 1.5x above it
        ([8.0, 9.0, 7.4], False),
        ([1.0, 9.0, 1.0, 9.0], False),  # rounds on both sides: more are needed
    ],
)
def test_a_speed_check_is_settled_only_once_its_rounds_lie_far_from_its_bar(ratios, settled):
    assert common.settled(ratios, bar=5.0, repeats=3) is settled


def test_a_run_that_returns_nothing_is_timed_here():
    calls = []
    rounds = timing.interleave([timing.ignoring_round(lambda: calls.append(1))], rounds=3, warmup=False)
    assert len(calls) == rounds.count >= 3
    assert all(s >= 0 for s in rounds.seconds[0])


@pytest.mark.parametrize("kwargs", [{"rounds": 0}, {"rounds": 5, "max_rounds": 4}])
def test_bad_counts_raise_value_error(kwargs):
    with pytest.raises(ValueError, match="rounds"):
        timing.interleave([timing.ignoring_round(lambda: None)], **kwargs)


def test_no_runs_raise_value_error():
    with pytest.raises(ValueError, match="at least one run"):
        timing.interleave([])
