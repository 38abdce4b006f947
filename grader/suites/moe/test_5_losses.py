"""Checks of the losses task: the load-balancing and z losses."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.suites.common import rng
from grader.suites.moe.checks import LOSS_RTOL, _rejects
from grader.suites.moe.oracles import _lb64, _softmax64, _z64
from grader.suites.moe.strategies import HUGE_LOGITS, _random_indices, _routings


@pytest.mark.task("losses")
@given(routing=_routings(max_t=4, max_e=16))
@example(routing=(1, 1, 1, 0))
@example(routing=(2, 8, 2, 0))
def test_load_balance_is_one_when_routing_and_probabilities_are_uniform(kata, routing):
    m, E, k, _ = routing
    T = E * m
    probs = np.full((T, E), 1.0 / E, dtype=np.float32)
    indices = (np.arange(T)[:, None] + np.arange(k)[None, :]) % E  # every expert gets T*k/E
    got = float(kata.load_balancing_loss(probs, indices))
    assert math.isclose(got, 1.0, rel_tol=LOSS_RTOL), f"load balance at uniform routing is {got:.6g}, expected 1.0"


@pytest.mark.task("losses")
def test_load_balance_grows_as_routing_concentrates(kata):
    T, E, k = 16, 8, 2
    prefer = np.linspace(1.0, -1.0, E)  # every token prefers experts 0, 1, ...
    indices = np.tile(np.arange(k), (T, 1))
    losses = []
    for beta in (0.5, 1.0, 2.0, 4.0, 8.0):
        probs = _softmax64(np.tile(beta * prefer, (T, 1))).astype(np.float32)
        losses.append(float(kata.load_balancing_loss(probs, indices)))
    assert all(a < b for a, b in zip(losses, losses[1:])) and losses[0] > 1.0, (
        f"as every token's probability piles onto the same {k} experts the loss should grow above 1, got "
        + ", ".join(f"{v:.4g}" for v in losses)
    )


@pytest.mark.task("losses")
@given(routing=_routings(max_t=20, max_e=10))
@example(routing=(1, 1, 1, 0))
@example(routing=(7, 5, 5, 2))
def test_load_balancing_loss_matches_its_float64_formula(kata, routing):
    T, E, k, seed = routing
    probs = _softmax64(2.0 * rng(seed).standard_normal((T, E))).astype(np.float32)
    indices = _random_indices(seed + 1, T, E, k)
    got = float(kata.load_balancing_loss(probs, indices))
    want = _lb64(probs, indices)
    assert math.isclose(got, want, rel_tol=LOSS_RTOL), (
        f"load_balancing_loss is {got:.6g}, expected E * sum_i f_i * P_i = {want:.6g}"
    )


def _assert_z_loss(kata, logits: np.ndarray) -> None:
    """router_z_loss(logits) is the mean of each row's logsumexp squared, within LOSS_RTOL."""
    got, want = float(kata.router_z_loss(logits)), _z64(logits)
    assert math.isclose(got, want, rel_tol=LOSS_RTOL), (
        f"router_z_loss is {got:.6g} for logits up to {np.abs(logits).max():.3g}, expected mean(logsumexp^2) = "
        f"{want:.6g}"
    )


@pytest.mark.task("losses")
@given(T=st.integers(1, 20), E=st.integers(1, 10), scale=st.sampled_from([0.1, 1.0, 10.0]), seed=st.integers(0, 2**16))
@example(T=2, E=3, scale=100.0, seed=0)
@example(T=3, E=4, scale=0.0, seed=1)
def test_z_loss_matches_its_float64_formula(kata, T, E, scale, seed):
    _assert_z_loss(kata, (scale * rng(seed).standard_normal((T, E))).astype(np.float32))


@pytest.mark.task("losses")
def test_z_loss_matches_its_float64_formula_even_for_logits_of_a_thousand(kata):
    _assert_z_loss(kata, np.array(HUGE_LOGITS, dtype=np.float32))


@pytest.mark.task("losses")
def test_z_loss_is_never_negative(kata):
    for shift in (-20.0, -3.0, 0.0, 5.0):
        logits = (shift + rng(21).standard_normal((6, 4))).astype(np.float32)
        got = float(kata.router_z_loss(logits))
        assert got >= 0.0, f"router_z_loss is {got:.6g} for logits around {shift}; a mean of squares is >= 0"


BAD_LOGITS = {
    "a NaN": np.array([[0.0, np.nan, 1.0]], dtype=np.float32),
    "an inf": np.array([[0.0, 1.0], [np.inf, 0.0]], dtype=np.float32),
    "a -inf": np.array([[-np.inf, 1.0]], dtype=np.float64),
    "integers": np.array([[1, 2, 3], [0, 0, 1]], dtype=np.int64),
    "zero tokens": np.zeros((0, 3), dtype=np.float32),
    "a 3-D array": np.zeros((2, 3, 1), dtype=np.float32),
}


@pytest.mark.task("losses")
def test_z_loss_rejects_logits_that_are_not_a_non_empty_2d_array_of_finite_floats(kata):
    for what, logits in BAD_LOGITS.items():
        assert _rejects(lambda: kata.router_z_loss(logits)), (
            f"router_z_loss accepted logits with {what}; raise ValueError"
        )


@pytest.mark.task("losses")
def test_losses_reject_bad_input(kata):
    probs = np.full((4, 3), 1.0 / 3, dtype=np.float32)
    indices = np.zeros((4, 1), dtype=np.int64)
    cases = [
        (lambda: kata.load_balancing_loss(2 * probs, indices), "load_balancing_loss accepted rows summing to 2"),
        (lambda: kata.load_balancing_loss(probs, indices + 3), "load_balancing_loss accepted expert 3 of 3"),
        (
            lambda: kata.load_balancing_loss(probs, indices[:3]),
            "load_balancing_loss accepted 3 rows of indices for 4 tokens",
        ),
        (lambda: kata.router_z_loss(probs[0]), "router_z_loss accepted 1-D logits"),
    ]
    for call, what in cases:
        assert _rejects(call), f"{what}; raise ValueError"
