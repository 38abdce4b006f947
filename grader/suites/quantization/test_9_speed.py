"""Checks of the speed task: grouped quantization is vectorized."""

from __future__ import annotations

import numpy as np
import pytest

from grader.suites import common
from grader.suites.common import load_baseline, time_ratio, timed_rng

# Grouped quantization may take this many times a minimal vectorized version (see the speed test):
# correct vectorized code measures about 1x, a Python loop over the groups about 13x.
SPEED_RATIO = 5.0


@pytest.mark.task("speed")
@pytest.mark.speed
def test_grouped_quantization_is_vectorized(kata):
    """1M float32 values (1024 rows of 1024) in groups of 32: 32768 groups.

    The issue asks for "within 10x of one np.round over the same array", but
    with NumPy 2 the max over each group of 32 alone costs 10-20 np.rounds
    (a reduction over a short last axis pays per row), so a correct
    vectorized implementation lands at 20-35x. The baseline is therefore a
    minimal vectorized grouped quantization (baseline.py, the
    same handful of whole-array calls), timed through the same channel:
    correct vectorized code measures about 1x, a Python loop over the
    groups about 13x and one over single values far more, so the bar sits
    at 5x.
    """
    gen = timed_rng(51)

    def inputs(i):  # the warm-up (i = -1) on an eighth of the rows
        return gen.random((128 if i < 0 else 1024, 1024), dtype=np.float32) - np.float32(0.5), 4, 32

    ratio = time_ratio(
        kata.quantize_grouped,
        load_baseline("quantization").quantize_grouped,
        inputs,
        repeats=3,
        what="quantize_grouped",
        bar=SPEED_RATIO,
    )
    common.figure("quantize_grouped time over whole-array numpy", ratio, SPEED_RATIO, better="lower")
    assert ratio < SPEED_RATIO, (
        f"quantize_grouped took {ratio:.1f}x the time of a few whole-array numpy calls doing the same job "
        f"on 1M values; allowed {SPEED_RATIO:g}x (a Python loop over groups or rows?)"
    )
