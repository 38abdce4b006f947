"""The one way this project times code: interleaved rounds, repeated until
the numbers settle.

Every speed check (grader/suites/common.time_ratio) and every benchmark
(grader/measure/bench.py) times through `interleave`:

    rounds = interleave([mine, baseline], rounds=5)
    rounds.ratio(0, 1)      # median over rounds of time(mine) / time(baseline)

Each round calls every run once, in turn; odd rounds reverse the order, so
neither side always goes first. A machine busy with something else slows
both sides of a round alike, so the ratio of one round's times is steadier
than either time, and the median of the rounds' ratios is what is reported.
After the first `rounds` rounds it keeps going while the rounds still
disagree (the interquartile range of the tracked figure is more than
`spread` of its median), until `max_rounds` rounds or `budget_seconds`,
whichever comes first. A quiet machine stops early; a noisy one buys more
rounds within a bounded time.

A run is a callable taking the round's index. It may return the seconds it
measured itself (the judge times a round trip to the jail around the call
it makes); otherwise (it returns None) it is timed here with perf_counter.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

Run = Callable[[int], "float | None"]


def ignoring_round(fn: Callable[[], object]) -> Run:
    """fn as a run: called without the round's index, its result dropped, timed by interleave."""

    def run(_round: int) -> None:
        fn()

    return run


def _quartile_spread(values: list[float]) -> float:
    """(q75 - q25) / median of values; 0 for fewer than two values or a median of 0."""
    if len(values) < 2:
        return 0.0
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / median if median > 0 else 0.0


@dataclass
class Rounds:
    """What `interleave` measured: seconds[i][r] is run i's time in round r."""

    seconds: list[list[float]] = field(default_factory=list)
    elapsed: float = 0.0  # wall seconds of every round together

    @property
    def count(self) -> int:
        return len(self.seconds[0]) if self.seconds else 0

    def median(self, i: int = 0) -> float:
        """Median seconds of run i."""
        return statistics.median(self.seconds[i])

    def ratios(self, i: int = 0, j: int = 1) -> list[float]:
        """Per round, time(run i) / time(run j)."""
        return [a / b if b > 0 else float("inf") for a, b in zip(self.seconds[i], self.seconds[j])]

    def ratio(self, i: int = 0, j: int = 1) -> float:
        """Median over rounds of time(run i) / time(run j)."""
        return statistics.median(self.ratios(i, j))

    def quartiles(self, i: int = 0, j: int = 1) -> tuple[float, float]:
        """The lower and upper quartiles of the per-round ratios (both the ratio for one round)."""
        values = self.ratios(i, j)
        if len(values) < 2:
            return values[0], values[0]
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return q1, q3

    def spread(self) -> float:
        """How much the rounds disagree on the tracked figure (run 0's time, or
        the ratio of run 0 to run 1): interquartile range over median."""
        return _quartile_spread(self.seconds[0] if len(self.seconds) == 1 else self.ratios(0, 1))


def interleave(
    runs: Sequence[Run],
    *,
    rounds: int = 5,
    max_rounds: int | None = None,
    spread: float = 0.10,
    budget_seconds: float = 10.0,
    warmup: bool = True,
    settled: Callable[[Rounds], bool] | None = None,
) -> Rounds:
    """Time `runs` in interleaved rounds (see the module docstring): at least
    `rounds` of them, then more while the tracked figure's spread exceeds
    `spread`, up to `max_rounds` (default 3 x rounds) and while fewer than
    `budget_seconds` have passed. settled(rounds so far), asked after every
    round, may stop them sooner: when what they decide can no longer change
    (a speed check whose rounds all lie far from its bar). warmup: one
    untimed call of each run first (with round index -1). Raises ValueError
    for no runs or counts below 1."""
    if not runs:
        raise ValueError("interleave needs at least one run to time")
    max_rounds = 3 * rounds if max_rounds is None else max_rounds
    if rounds < 1 or max_rounds < rounds:
        raise ValueError(f"need 1 <= rounds <= max_rounds, got rounds={rounds}, max_rounds={max_rounds}")
    if warmup:
        for run in runs:
            run(-1)
    measured = Rounds([[] for _ in runs])
    started = time.perf_counter()
    r = 0
    while r < max_rounds:
        order = range(len(runs)) if r % 2 == 0 else range(len(runs) - 1, -1, -1)
        for i in order:
            t0 = time.perf_counter()
            seconds = runs[i](r)
            measured.seconds[i].append(time.perf_counter() - t0 if seconds is None else float(seconds))
        r += 1
        measured.elapsed = time.perf_counter() - started
        if settled is not None and settled(measured):
            break
        if r >= rounds and (measured.spread() <= spread or measured.elapsed >= budget_seconds):
            break
    return measured
