"""Checks of the top_k task: top_k_gating's indices and weights; and the check that top_k
and the losses share, a case per task: what counts as a probability distribution.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.suites.common import rng
from grader.suites.moe.checks import PROB_TOL, _rejects
from grader.suites.moe.oracles import _softmax64
from grader.suites.moe.strategies import FLOAT_DTYPES


@st.composite
def _probs(draw, max_t=12, max_e=8, ties=True):
    """(probs (T, E) float32 or float64, k): small integer logits make ties common."""
    T, E = draw(st.integers(1, max_t)), draw(st.integers(1, max_e))
    k = draw(st.integers(1, E))
    g = rng(draw(st.integers(0, 2**16)))
    logits = g.integers(-2, 3, (T, E)) if ties and draw(st.booleans()) else g.standard_normal((T, E))
    return _softmax64(logits.astype(np.float64)).astype(draw(st.sampled_from(FLOAT_DTYPES))), k


def _gating(kata, probs: np.ndarray, k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """top_k_gating's (indices, weights as float64), the weights of the indices' shape."""
    idx, w = kata.top_k_gating(probs, k, normalize=normalize)
    idx, w = np.asarray(idx), np.asarray(w, dtype=np.float64)
    assert w.shape == idx.shape, f"weights have shape {w.shape}, expected the shape of indices {idx.shape}"
    return idx, w


@pytest.mark.task("top_k")
@given(case=_probs())
@example(case=(np.full((2, 4), 0.25, dtype=np.float32), 2))
@example(case=(np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32), 3))
@example(case=(np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]), 2))
def test_top_k_indices_are_the_k_largest_in_descending_order(kata, case):
    probs, k = case
    T, E = probs.shape
    idx, _ = kata.top_k_gating(probs, k)
    idx = np.asarray(idx)
    assert idx.shape == (T, k), f"indices have shape {idx.shape}, expected (T, k) = {(T, k)}"
    assert np.issubdtype(idx.dtype, np.integer), f"indices must be integers, got dtype {idx.dtype}"
    assert idx.min() >= 0 and idx.max() < E, f"indices must be experts in [0, {E}), got {idx.min()}..{idx.max()}"
    assert all(len(set(row)) == k for row in idx.tolist()), "a token was routed to the same expert twice"
    chosen = np.take_along_axis(probs, idx, axis=-1)
    best = -np.sort(-probs, axis=-1)[:, :k]
    bad = np.flatnonzero(np.any(chosen != best, axis=-1))
    assert bad.size == 0, (
        f"token {bad[0] if bad.size else 0}: chosen probabilities {chosen[bad[0]] if bad.size else ''} "
        f"are not the {k} largest in descending order {best[bad[0]] if bad.size else ''}"
    )


@pytest.mark.task("top_k")
@given(case=_probs())
@example(case=(np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32), 2))
def test_normalized_weights_are_the_chosen_probabilities_rescaled_to_sum_to_one(kata, case):
    probs, k = case
    idx, w = _gating(kata, probs, k, normalize=True)
    d = float(np.max(np.abs(w.sum(axis=-1) - 1.0)))
    assert d <= PROB_TOL, f"with normalize=True the {k} weights of a token sum to 1 +- {d:.3g}, not 1"
    chosen = np.take_along_axis(probs.astype(np.float64), idx, axis=-1)
    d = float(np.max(np.abs(w - chosen / chosen.sum(axis=-1, keepdims=True))))
    assert d <= PROB_TOL, f"normalized weights differ from the chosen probabilities divided by their sum by {d:.3g}"


@pytest.mark.task("top_k")
@given(case=_probs())
@example(case=(np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32), 2))
def test_unnormalized_weights_are_the_raw_probabilities(kata, case):
    probs, k = case
    idx, w = _gating(kata, probs, k, normalize=False)
    d = float(np.max(np.abs(w - np.take_along_axis(probs, idx, axis=-1))))
    assert d <= PROB_TOL, f"with normalize=False the weights differ from the chosen probabilities by {d:.3g}"


@pytest.mark.task("top_k")
def test_top_k_rejects_k_outside_one_to_e(kata):
    probs = np.full((3, 4), 0.25, dtype=np.float32)
    for k in (0, 5, -1):
        assert _rejects(lambda: kata.top_k_gating(probs, k)), (
            f"top_k_gating accepted k={k} with E=4 experts; raise ValueError"
        )


@pytest.mark.task("top_k")
def test_top_k_rejects_probabilities_that_are_not_distributions(kata):
    cases = [
        (np.array([[0.5, 0.5, 0.5]], dtype=np.float32), "a row summing to 1.5"),
        (np.array([[1.5, -0.5, 0.0]], dtype=np.float32), "a negative probability"),
        (np.array([[np.nan, 0.5, 0.5]], dtype=np.float32), "a NaN"),
        (np.array([0.25, 0.25, 0.5], dtype=np.float32), "a 1-D array"),
    ]
    for probs, what in cases:
        assert _rejects(lambda: kata.top_k_gating(probs, 1)), (
            f"top_k_gating accepted probs with {what}; raise ValueError"
        )


# The stub's PROB_SUM_TOL: a row of probabilities within this of summing to 1 counts as a distribution.
DISTRIBUTION_TOL = 1e-3
# Each task's function that takes probs, called on a (T, 4) probs (its other arguments fixed).
TAKES_PROBS = {
    "top_k": lambda kata, probs: kata.top_k_gating(probs, 2),
    "losses": lambda kata, probs: kata.load_balancing_loss(probs, np.tile(np.arange(2), (probs.shape[0], 1))),
}


def _off_by(off: float) -> np.ndarray:
    """A (2, 4) float32 probs whose second row sums to 1 + off (in float64, within 1e-7)."""
    return np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1 + off]], dtype=np.float32)


@pytest.mark.parametrize("task", ["top_k", "losses"])
def test_a_row_counts_as_a_distribution_exactly_when_it_sums_to_one_within_prob_sum_tol(kata, task):
    call = TAKES_PROBS[task]
    for off in (0.5 * DISTRIBUTION_TOL, -0.5 * DISTRIBUTION_TOL):
        assert not _rejects(lambda: call(kata, _off_by(off))), (
            f"a row of probs summing to 1 {off:+g} was refused; it is within PROB_SUM_TOL = {DISTRIBUTION_TOL:g} of 1, "
            "so it counts as a distribution"
        )
    for off in (2 * DISTRIBUTION_TOL, -2 * DISTRIBUTION_TOL):
        assert _rejects(lambda: call(kata, _off_by(off))), (
            f"a row of probs summing to 1 {off:+g} was accepted; only rows within PROB_SUM_TOL = {DISTRIBUTION_TOL:g} "
            "of 1 are distributions: raise ValueError"
        )
