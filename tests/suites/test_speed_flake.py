"""The speed checks never flake on correct code: the reference's speed task
of every kata, graded 20 times beside two processes that keep both cores
busy, passes all 20 times (issue 17: a bar that correct code clears only
narrowly fails it on a loaded machine). Each kata's gradings run in
batches of ten in one judge (bench_suites.speed_figures), each grading with
jails and fixtures of its own, as a separate `kata grade` would have."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_suites import hogs, speed_figures  # noqa: E402

GRADES = 20
HOGS = 2

# Alone on its xdist worker's group; the other worker's tests add to the load, which only makes this harder.
pytestmark = pytest.mark.xdist_group("speed_flake")


@pytest.mark.slow  # 100-150 s under the hogs: in the default run and CI, not the quick run
def test_the_reference_passes_every_speed_task_20_times_beside_two_busy_processes():
    busy = hogs(HOGS)
    try:
        margins, bars, failed = speed_figures(GRADES)
    finally:
        for hog in busy:
            hog.kill()
    worst = {key: min(values) for key, values in margins.items()}
    assert failed == 0, f"{failed} of {GRADES} grades failed a speed task; worst margins: {worst}"
    assert all(len(values) == GRADES for values in margins.values()), "a speed check reported no figure"
