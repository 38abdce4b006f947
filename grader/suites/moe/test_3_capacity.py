"""Checks of the capacity task: expert_capacity, and dispatch's priority rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.suites.moe.checks import _rejects
from grader.suites.moe.oracles import _capacity, _queue
from grader.suites.moe.strategies import FACTORS, _random_indices, _routings


@given(T=st.integers(0, 5000), E=st.integers(1, 64), k=st.integers(1, 64), factor=st.sampled_from(FACTORS))
@example(T=0, E=4, k=1, factor=1.0)
@example(T=7, E=8, k=1, factor=0.25)
@example(T=9, E=4, k=2, factor=2)  # "capacity_factor: > 0": an int factor too
# shares exactly whole (3, 3, 7, 27, 27) that float rounding pushes just above it, so that the ceiling is one
# too many, when a quotient by E (of T, k, the factor, factor * T or factor * k) is rounded before the rest
# multiplies it
@pytest.mark.task("capacity")
@example(T=4, E=5, k=3, factor=1.25)
@example(T=3, E=5, k=5, factor=1.0)
@example(T=7, E=25, k=25, factor=1.0)
@example(T=13, E=13, k=9, factor=3.0)
@example(T=14, E=14, k=9, factor=3.0)
def test_expert_capacity_is_the_rounded_up_even_share_times_the_factor(kata, T, E, k, factor):
    k = 1 + (k - 1) % E
    got = kata.expert_capacity(T, E, k, factor)
    want = _capacity(T, E, k, factor)
    assert isinstance(got, (int, np.integer)) and int(got) == want, (
        f"expert_capacity({T}, {E}, {k}, {factor}) returned {got!r}, expected max(1, ceil({factor}*{T}*{k}/{E})) = "
        f"{want}"
    )


@pytest.mark.task("capacity")
def test_expert_capacity_rejects_a_negative_factor_or_a_bad_k(kata):
    for args, what in [
        ((10, 4, 2, -1.0), "capacity_factor=-1.0"),
        ((10, 4, 5, 1.0), "k=5 with 4 experts"),
        ((10, 4, 0, 1.0), "k=0"),
        ((10, 4, 1.5, 1.0), "k=1.5 (k is a count of experts: an integer)"),
    ]:
        assert _rejects(lambda: kata.expert_capacity(*args)), f"expert_capacity accepted {what}; raise ValueError"


@pytest.mark.task("capacity")
def test_expert_capacity_rejects_a_factor_that_is_not_positive_and_finite(kata):
    for factor in (0.0, math.inf, math.nan, None):
        assert _rejects(lambda: kata.expert_capacity(10, 4, 2, factor)), (
            f"expert_capacity accepted capacity_factor={factor}; it must be a positive finite number: raise ValueError"
        )


@pytest.mark.task("capacity")
def test_expert_capacity_rejects_a_bad_count(kata):
    for args, what in [
        ((-1, 4, 2, 1.0), "n_tokens=-1"),
        ((2.5, 4, 2, 1.0), "n_tokens=2.5"),
        ((10, 0, 1, 1.0), "n_experts=0"),
        ((10, 4.0, 2, 1.0), "n_experts=4.0"),
    ]:
        assert _rejects(lambda: kata.expert_capacity(*args)), f"expert_capacity accepted {what}; raise ValueError"


# (indices, E, capacity, keep, position) worked out by hand from the priority rule.
CRAFTED = [
    # rank 0 first: tokens 0, 1 fill expert 0, token 2's first choice is dropped;
    # rank 1: token 2's second choice finds expert 1 full, token 3's finds expert 0 full.
    ([[0, 1], [0, 2], [0, 1], [1, 0]], 3, 2, [[1, 1], [1, 1], [0, 0], [1, 0]], [[0, 1], [1, 0], [2, 2], [0, 3]]),
    # a late token's first choice beats an early token's second choice.
    ([[1, 0], [0, 1]], 2, 1, [[1, 0], [1, 0]], [[0, 1], [0, 1]]),
    # capacity 0 drops everything; one expert queues tokens in order.
    ([[0], [0], [0]], 1, 0, [[0], [0], [0]], [[0], [1], [2]]),
    ([[0], [0], [0]], 1, 3, [[1], [1], [1]], [[0], [1], [2]]),
]


@pytest.mark.task("capacity")
@pytest.mark.parametrize("case", range(len(CRAFTED)))
def test_dispatch_drops_exactly_the_assignments_the_priority_rule_names(kata, case):
    indices, E, capacity, keep, position = CRAFTED[case]
    indices = np.array(indices, dtype=np.int64)
    got_keep, got_pos = kata.dispatch(indices, E, capacity)
    got_keep, got_pos = np.asarray(got_keep), np.asarray(got_pos)
    assert got_keep.shape == indices.shape, f"keep has shape {got_keep.shape}, expected {indices.shape}"
    assert got_pos.shape == indices.shape, f"position has shape {got_pos.shape}, expected {indices.shape}"
    assert np.array_equal(got_pos, np.array(position)), (
        f"dispatch({indices.tolist()}, {E}, {capacity}) gave queue positions {got_pos.tolist()}, expected "
        f"{position} (every first choice queues before any second choice, tokens in order)"
    )
    assert np.array_equal(got_keep.astype(bool), np.array(keep, dtype=bool)), (
        f"dispatch({indices.tolist()}, {E}, {capacity}) kept {got_keep.astype(int).tolist()}, expected {keep} "
        f"(kept iff position < capacity)"
    )


@pytest.mark.task("capacity")
def test_dispatch_returns_bool_keep_and_integer_positions(kata):
    indices, E, capacity, _, _ = CRAFTED[0]
    keep, position = kata.dispatch(np.array(indices, dtype=np.int64), E, capacity)
    keep, position = np.asarray(keep), np.asarray(position)
    assert keep.dtype == bool, f"keep must be a bool array, got dtype {keep.dtype}"
    assert np.issubdtype(position.dtype, np.integer), f"position must hold ints, got dtype {position.dtype}"


@pytest.mark.task("capacity")
@pytest.mark.parametrize("dtype", [np.int32, np.uint8])
def test_dispatch_takes_indices_of_any_integer_dtype(kata, dtype):
    indices, E, capacity, keep, position = CRAFTED[0]
    name = np.dtype(dtype).name
    try:
        got_keep, got_pos = kata.dispatch(np.array(indices, dtype=dtype), E, capacity)
    except ValueError as exc:
        pytest.fail(f"dispatch refused {name} indices ({exc}); indices may be ints of any integer dtype")
    assert np.array_equal(np.asarray(got_pos), position) and np.array_equal(np.asarray(got_keep), keep), (
        f"dispatch of {name} indices differs from dispatch of the same indices as int64"
    )


@pytest.mark.task("capacity")
def test_dispatch_rejects_bad_indices_or_a_negative_capacity(kata):
    indices = np.array([[0, 1], [2, 0], [1, 2]], dtype=np.int64)
    for args, what in [
        ((np.array([[0, 1], [2, 2], [1, 0]]), 3, 2), "token 1 choosing expert 2 twice"),
        ((np.array([[1, 0, 1], [0, 1, 2]]), 3, 2), "token 0 choosing expert 1 twice, not side by side"),
        ((indices, 3, -1), "capacity=-1"),
        ((indices - 1, 3, 2), "expert -1"),
        ((indices + 1, 3, 2), "expert 3 of 3"),
        ((indices.astype(np.float64), 3, 2), "float indices"),
        ((indices[:, 0], 3, 2), "1-D indices"),
    ]:
        assert _rejects(lambda: kata.dispatch(*args)), f"dispatch accepted {what}; raise ValueError"


@pytest.mark.task("capacity")
@given(routing=_routings(), room=st.floats(0.0, 1.0))
@example(routing=(1, 1, 1, 0), room=0.0)
@example(routing=(6, 3, 3, 1), room=0.5)
def test_dispatch_matches_queueing_one_assignment_at_a_time(kata, routing, room):
    T, E, k, seed = routing
    capacity = int(room * T * k)
    indices = _random_indices(seed, T, E, k)
    keep, position = _queue(indices, E, capacity)
    got_keep, got_pos = kata.dispatch(indices, E, capacity)
    got_keep, got_pos = np.asarray(got_keep).astype(bool), np.asarray(got_pos)
    assert np.array_equal(got_pos, position), "queue positions differ from queueing rank by rank, tokens in order"
    assert np.array_equal(got_keep, keep), (
        f"dispatch kept {int(got_keep.sum())} assignments, expected {int(keep.sum())}"
    )
