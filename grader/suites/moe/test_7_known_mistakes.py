"""Public checks of the mistakes learners make in every moe task: values worked out by hand at a few
points, exact arithmetic (fractions), and relations between calls (a shift of every router logit, a
batch repeated). They need no oracle, so the student edition ships them: the mistakes its hidden
checks catch on submission fail here too, where the student works.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.suites.common import rng
from grader.suites.moe.checks import LOSS_RTOL, PROB_TOL
from grader.suites.moe.strategies import FACTORS, FLOAT_DTYPES

HUGE_ROW_TOL = 1e-4  # probabilities of float32 logits near 1000 (a step of 6e-5) against float64 formulas
OUT_TOL = 1e-4  # a small layer's outputs (float32 matmuls) against the float64 sums written out here
SHIFT_TOL = 1e-3  # outputs of float32 logits near 1000 (a step of 6e-5) against those of logits near 0

# Router logits of five tokens over E = 4 experts (the router is the identity), k = 2: each token's two
# experts, best first, are CHOSEN; expert 3 is nobody's choice. With capacity 2 (capacity_factor 0.75:
# ceil(0.75 * 5 * 2 / 4) = 2), every first choice queues before any second choice, tokens in order:
# expert 0 keeps tokens 0 and 1 and drops token 4's first choice; token 0's second choice (expert 1) and
# token 1's (expert 2) are kept, tokens 2's, 3's and 4's second choices find their expert full.
LOGITS = [
    [2.0, 1.0, 0.0, -5.0],
    [2.0, 0.0, 1.0, -5.0],
    [0.0, 2.0, 1.0, -5.0],
    [0.0, 1.0, 3.0, -5.0],
    [4.0, 0.5, 0.0, -5],
]
CHOSEN = [[0, 1], [0, 2], [1, 2], [2, 1], [0, 1]]
KEPT = [[True, True], [True, True], [True, False], [True, False], [False, False]]
FACTOR = 0.75


def _small_layer(dtype):
    """x (5, 4) = LOGITS, the identity router, and experts of width 3 drawn once: float arrays of dtype."""
    g = rng(71)
    w_gate, w_up = g.standard_normal((4, 4, 3)) / 2, g.standard_normal((4, 4, 3)) / 2
    w_down = g.standard_normal((4, 3, 4)) / 2
    return tuple(np.asarray(a, dtype=dtype) for a in (LOGITS, np.eye(4), w_gate, w_up, w_down))


def _probs64(logits) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.task("router")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_router_probs_of_a_few_logits_worked_out_by_hand(kata, dtype):
    # ln 1, ln 2, ln 5 give 1/8, 2/8, 5/8; equal logits give thirds; 1000 and 999 give e/(1+e) and 1/(1+e)
    x = np.array([[0.0, math.log(2), math.log(5)], [7.0, 7.0, 7.0], [1000.0, 999.0, -1000.0]], dtype=dtype)
    want = [[1 / 8, 2 / 8, 5 / 8], [1 / 3] * 3, [math.e / (1 + math.e), 1 / (1 + math.e), 0.0]]
    got = np.asarray(kata.router_probs(x, np.eye(3, dtype=dtype)), dtype=np.float64)
    assert got.shape == (3, 3) and np.allclose(got, want, atol=HUGE_ROW_TOL), (
        f"router_probs of the logits {x.tolist()} (identity router, {np.dtype(dtype).name}) gave {got.tolist()}, "
        f"expected {want}: a softmax of each token's row (subtract the row's largest logit before exp)"
    )


@pytest.mark.task("top_k")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("normalize", [True, False])
def test_top_k_of_a_few_rows_worked_out_by_hand(kata, dtype, normalize):
    probs = np.array([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3], [0.2, 0.2, 0.6]], dtype=dtype)
    raw = [[0.6, 0.3], [0.5, 0.3], [0.6, 0.2]]
    want = [[0.6 / 0.9, 0.3 / 0.9], [0.5 / 0.8, 0.3 / 0.8], [0.75, 0.25]] if normalize else raw
    indices, weights = kata.top_k_gating(probs, 2, normalize=normalize)
    indices, weights = np.asarray(indices), np.asarray(weights, dtype=np.float64)
    assert indices.shape == (3, 2) and indices[:2].tolist() == [[1, 2], [0, 2]] and indices[2, 0] == 2, (
        f"top_k_gating({probs.tolist()}, k=2) chose {indices.tolist()}, expected each row's 2 largest, largest "
        f"first: [[1, 2], [0, 2], [2, 0 or 1]]"
    )
    assert np.allclose(weights, want, atol=PROB_TOL), (
        f"top_k_gating(..., normalize={normalize}) gave weights {weights.tolist()}, expected {want}"
    )


CAPACITIES = [  # (T, E, k, factor, capacity) = max(1, ceil(factor * T * k / E)) worked out by hand
    (10, 4, 1, 1.0, 3),
    (9, 4, 2, 2, 9),
    (4, 5, 3, 1.25, 3),
    (3, 5, 5, 1.0, 3),
    (7, 25, 25, 1.0, 7),
    (13, 13, 9, 3.0, 27),
    (7, 8, 1, 0.25, 1),
    (0, 4, 1, 1.0, 1),
]


@pytest.mark.task("capacity")
@pytest.mark.parametrize("case", CAPACITIES, ids=str)
def test_expert_capacity_at_a_few_points_worked_out_by_hand(kata, case):
    T, E, k, factor, want = case
    got = kata.expert_capacity(T, E, k, factor)
    assert isinstance(got, (int, np.integer)) and got == want, (
        f"expert_capacity({T}, {E}, {k}, {factor}) returned {got!r}, expected {want}: the even share "
        f"{factor} * {T} * {k} / {E} rounded up (never below 1)"
    )


@pytest.mark.task("capacity")
@given(T=st.integers(0, 3000), E=st.integers(1, 64), k=st.integers(1, 64), factor=st.sampled_from(FACTORS))
@example(T=5, E=4, k=3, factor=1.0)
def test_expert_capacity_is_the_least_count_that_holds_the_share(kata, T, E, k, factor):
    k = 1 + (k - 1) % E
    share = Fraction(factor) * T * k / E  # exact: every factor is a binary fraction
    got = kata.expert_capacity(T, E, k, factor)
    assert isinstance(got, (int, np.integer)) and got >= 1, f"expert_capacity returned {got!r}, not an int >= 1"
    assert got >= share and (got == 1 or got - 1 < share), (
        f"expert_capacity({T}, {E}, {k}, {factor}) returned {got}; the share factor*T*k/E is exactly {share} "
        f"({float(share):.6g}), so the capacity is the least whole number >= it (and >= 1)"
    )


@pytest.mark.task("losses")
def test_load_balancing_loss_at_a_point_worked_out_by_hand(kata):
    # f = (1, 0) (both tokens on expert 0), P = (0.375, 0.625): 2 * (1 * 0.375 + 0 * 0.625) = 0.75
    probs = np.array([[0.5, 0.5], [0.25, 0.75]], dtype=np.float32)
    got = float(kata.load_balancing_loss(probs, np.array([[0], [0]])))
    assert math.isclose(got, 0.75, rel_tol=LOSS_RTOL), f"load_balancing_loss is {got:.6g} here, expected 0.75"


@pytest.mark.task("losses")
@pytest.mark.parametrize("copies", [2, 5])
def test_load_balancing_loss_of_a_batch_repeated_is_the_same(kata, copies):
    g = rng(72)
    probs = _probs64(g.standard_normal((6, 4))).astype(np.float32)
    indices = np.argsort(g.random((6, 4)), axis=-1)[:, :2]
    once = float(kata.load_balancing_loss(probs, indices))
    again = float(kata.load_balancing_loss(np.tile(probs, (copies, 1)), np.tile(indices, (copies, 1))))
    assert math.isclose(once, again, rel_tol=LOSS_RTOL), (
        f"load_balancing_loss is {once:.6g} for a batch and {again:.6g} for it repeated {copies} times; "
        "f and P are fractions and means, so the loss must not depend on T"
    )


@pytest.mark.task("losses")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_z_loss_at_a_few_points_worked_out_by_hand(kata, dtype):
    # one row of two zeros: logsumexp = ln 2; a row of 1000s: 1000 + ln 2; the mean of the squares
    logits = np.array([[0.0, 0.0], [1000.0, 1000.0]], dtype=dtype)
    want = (math.log(2) ** 2 + (1000 + math.log(2)) ** 2) / 2
    got = float(kata.router_z_loss(logits))
    assert math.isclose(got, want, rel_tol=LOSS_RTOL), (
        f"router_z_loss({logits.tolist()}) is {got:.6g}, expected ((ln 2)^2 + (1000 + ln 2)^2) / 2 = {want:.6g} "
        "(logsumexp subtracts the row's largest logit before exp)"
    )


def _by_hand(x, w_gate, w_up, w_down) -> np.ndarray:
    """The small layer's output: each kept assignment's renormalized gate times its expert, in float64."""
    x, w_gate, w_up, w_down = (np.asarray(a, dtype=np.float64) for a in (x, w_gate, w_up, w_down))
    probs = _probs64(LOGITS)
    y = np.zeros_like(x)
    for t, (experts, kept) in enumerate(zip(CHOSEN, KEPT)):
        total = sum(probs[t, e] for e in experts)
        for e, keep in zip(experts, kept):
            if keep:
                h = x[t] @ w_gate[e]
                y[t] += probs[t, e] / total * ((h / (1 + np.exp(-h)) * (x[t] @ w_up[e])) @ w_down[e])
    return y


@pytest.mark.task("layer")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_a_small_layer_with_drops_gives_the_output_worked_out_by_hand(kata, dtype):
    args = _small_layer(dtype)
    y, _ = kata.moe_forward(*args, 2, FACTOR)
    y, want = np.asarray(y, dtype=np.float64), _by_hand(*args[:1], *args[2:])
    assert y.shape == want.shape and np.allclose(y, want, atol=OUT_TOL, rtol=OUT_TOL), (
        f"moe_forward of a 5-token layer with capacity 2 gave rows {np.round(y, 4).tolist()}, expected "
        f"{np.round(want, 4).tolist()}: each token sums its kept experts' outputs times their gates (renormalized "
        "over its top k before any drop); a dropped assignment adds nothing, a token that lost both outputs 0"
    )


@pytest.mark.task("layer")
def test_a_small_layer_with_drops_reports_its_counts(kata):
    _, aux = kata.moe_forward(*_small_layer(np.float32), 2, FACTOR)
    counts = np.asarray(aux.tokens_per_expert)
    assert np.issubdtype(counts.dtype, np.integer) and counts.tolist() == [2, 2, 2, 0], (
        f"tokens_per_expert is {counts.tolist()} ({counts.dtype}), expected the kept assignments per expert, "
        "one int per expert, the last (nobody's choice) included: [2, 2, 2, 0]"
    )
    assert isinstance(aux.dropped, (int, np.integer)) and aux.dropped == 4, (
        f"dropped is {aux.dropped!r}, expected the int 4 (tokens 2 and 3 lose one assignment, token 4 both)"
    )


@pytest.mark.task("layer")
def test_a_small_layer_with_drops_reports_the_loss_of_every_assignment(kata):
    _, aux = kata.moe_forward(*_small_layer(np.float32), 2, FACTOR)
    f = np.bincount(np.ravel(CHOSEN), minlength=4) / np.size(CHOSEN)  # dropped assignments count too
    want = 4 * float(np.dot(f, _probs64(LOGITS).mean(axis=0)))
    assert math.isclose(float(aux.load_balancing_loss), want, rel_tol=1e-4), (
        f"the layer's load_balancing_loss is {float(aux.load_balancing_loss):.6g}, expected {want:.6g}: "
        "E * sum_i f_i * P_i over every routed assignment, the dropped ones included"
    )


@pytest.mark.task("layer")
def test_shifting_every_router_logit_by_a_thousand_changes_no_output(kata):
    x, w_router, *experts = _small_layer(np.float32)
    x = np.concatenate([x, np.ones((5, 1), dtype=np.float32)], axis=1)  # a constant feature...
    experts[0], experts[1] = (np.concatenate([w, w[:, :1] * 0], axis=1) for w in experts[:2])  # experts ignore it
    experts[2] = np.concatenate([experts[2], experts[2][:, :, :1] * 0], axis=2)
    plain = np.concatenate([w_router, np.zeros((1, 4), dtype=np.float32)])
    shifted = np.concatenate([w_router, np.full((1, 4), 1000.0, dtype=np.float32)])  # ...adds 1000 to each logit
    y, _ = kata.moe_forward(x, plain, *experts, 2, FACTOR)
    y_shifted, _ = kata.moe_forward(x, shifted, *experts, 2, FACTOR)
    assert np.all(np.isfinite(y_shifted)) and np.allclose(y_shifted, y, atol=SHIFT_TOL, rtol=SHIFT_TOL), (
        "adding 1000 to every router logit changed moe_forward's output; a softmax does not change when every "
        "logit of a row moves together (subtract the row's largest logit before exp)"
    )
