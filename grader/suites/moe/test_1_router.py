"""Checks of the router task: router_probs is the softmax of the router logits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.suites.moe.checks import PROB_TOL, _rejects
from grader.suites.moe.oracles import _softmax64
from grader.suites.moe.strategies import FLOAT_DTYPES, HUGE_LOGITS, _layer, _shapes


@pytest.mark.task("router")
@given(shape=_shapes(), scale=st.sampled_from([0.0, 1.0, 30.0]), dtype=st.sampled_from(FLOAT_DTYPES))
@example(shape=(1, 1, 1, 1, 1, 0), scale=1.0, dtype=np.float32)
@example(shape=(3, 4, 5, 2, 2, 1), scale=30.0, dtype=np.float32)
@example(shape=(4, 3, 5, 2, 2, 2), scale=1.0, dtype=np.float64)
def test_router_probs_are_the_softmax_of_the_logits(kata, shape, scale, dtype):
    T, D, E, F, k, seed = shape
    x, w_router = (a.astype(dtype) for a in _layer(seed, T, D, E, F, router_scale=scale)[:2])
    got = np.asarray(kata.router_probs(x, w_router))
    assert got.shape == (T, E), f"router_probs returned shape {got.shape}, expected (T, E) = {(T, E)}"
    assert np.all(np.isfinite(got)), (
        f"router_probs returned NaN or inf for router logits up to {np.abs(x @ w_router).max():.3g}"
    )
    want = _softmax64(x.astype(np.float64) @ w_router.astype(np.float64))
    d = float(np.max(np.abs(got - want)))
    assert d <= PROB_TOL, f"router_probs differs from the softmax over experts of x @ w_router by {d:.3g}"


# A float32 logit of 1000 is only known to 6e-5 (one step of float32 there); a log-softmax (logits minus
# their logsumexp, rounded there) passes that on to the probabilities.
HUGE_PROB_TOL = 1e-3


@pytest.mark.task("router")
def test_router_probs_are_the_softmax_even_for_logits_of_a_thousand(kata):
    x = np.array(HUGE_LOGITS, dtype=np.float32)
    got = np.asarray(kata.router_probs(x, np.eye(3, dtype=np.float32)))
    assert got.shape == x.shape, f"router_probs returned shape {got.shape}, expected (T, E) = {x.shape}"
    assert np.all(np.isfinite(got)), (
        f"router_probs returned NaN or inf for router logits {HUGE_LOGITS}, whose softmax is finite"
    )
    d = float(np.max(np.abs(got - _softmax64(x.astype(np.float64)))))
    assert d <= HUGE_PROB_TOL, f"for router logits up to +-1000 router_probs differs from their softmax by {d:.3g}"


@pytest.mark.task("router")
def test_router_probs_rejects_mismatched_shapes(kata):
    x, w_router, *_ = _layer(1, 4, 6, 3, 2)
    for bad_x, bad_w, what in [
        (x, w_router[:5], "w_router with 5 rows for x of width 6"),
        (x[0], w_router, "a 1-D x"),
        (x, w_router[:, :, None], "a 3-D w_router"),
        (x, w_router[:, 0], "a 1-D w_router (x @ w_router is then one logit per token)"),
        (x[:0], w_router, "an x of zero tokens (T must be >= 1)"),
    ]:
        assert _rejects(lambda: kata.router_probs(bad_x, bad_w)), f"router_probs accepted {what}; raise ValueError"
