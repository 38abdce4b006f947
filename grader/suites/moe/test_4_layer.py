"""Checks of the layer task: moe_forward against the dense mixture, the reference model's
block and a float64 loop; capacity, dropped tokens, losses and expert work.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from grader.suites.common import rng
from grader.suites.moe.checks import LOSS_RTOL, _rejects
from grader.suites.moe.oracles import _capacity, _expert64, _lb64, _moe64, _route64, _softmax64, _z64
from grader.suites.moe.strategies import FACTORS, FLOAT_DTYPES, _layer, _shapes
from reference.model import WEIGHTS_DIR, Config, Model, rms_norm
from reference.tokenizer import encode

OUT_ATOL = 1e-4  # layer outputs (float32 matmuls) against float64 ones
OUT_RTOL = 1e-4
ZERO_TOL = 1e-7  # what still counts as a zero output
TOP_K_GAP = 1e-4  # a routing is "clear" when the k-th and (k+1)-th probabilities differ by this


def _tie_free_layer(salt, T, D, E, F, k, router_scale=1.0):
    """_layer data whose top-k routing is clear on every row (see _clear), for any --seed."""
    for attempt in range(100):
        args = _layer(salt + 1000 * attempt, T, D, E, F, router_scale)
        if np.all(_clear(_route64(args[0], args[1], k)[0], k)):
            return args
    raise AssertionError("the suite found no tie-free data; report this as a grader bug")


def _clear(probs, k):
    """Per row: True when the top-k set and its order cannot flip under float32 rounding."""
    s = -np.sort(-probs, axis=-1)
    gaps = s[:, :-1] - s[:, 1:]  # (T, E-1)
    if k == probs.shape[1]:
        return np.ones(probs.shape[0], dtype=bool)
    return np.all(gaps[:, :k] > TOP_K_GAP, axis=-1)


def _moe_model(seed=0):
    config = Config(
        vocab_size=32, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=24, max_seq_len=64, n_experts=4, top_k=2
    )
    return Model.random(config, seed=seed)


def _block_inputs(model, layer, x):
    """The MoE block's input (the RMSNorm of x) and its weights, from a reference model."""
    w, p, c = model.weights, f"layers.{layer}.", model.config
    h = rms_norm(x, w[p + "mlp_norm"], c.norm_eps)
    return h, w[p + "router"], w[p + "w_gate"], w[p + "w_up"], w[p + "w_down"]


@pytest.mark.task("layer")
def test_moe_with_every_expert_and_no_capacity_is_the_dense_mixture(kata):
    x, w_router, w_gate, w_up, w_down = _layer(11, 10, 8, 4, 12)
    y, _ = kata.moe_forward(x, w_router, w_gate, w_up, w_down, k=4)
    probs = _softmax64(x.astype(np.float64) @ w_router.astype(np.float64))
    dense = sum(probs[:, e : e + 1] * _expert64(x, w_gate[e], w_up[e], w_down[e]) for e in range(4))
    y = np.asarray(y, dtype=np.float64)
    assert y.shape == x.shape, f"moe_forward returned y of shape {y.shape}, expected (T, D) = {x.shape}"
    d = float(np.max(np.abs(y - dense)))
    assert d <= OUT_ATOL, f"with k == E the output differs from the softmax-weighted sum of every expert by {d:.3g}"


@pytest.mark.task("layer")
def test_permuting_tokens_permutes_the_outputs(kata):
    x, w_router, w_gate, w_up, w_down = _layer(12, 24, 8, 6, 10)
    perm = rng(13).permutation(24)
    y, _ = kata.moe_forward(x, w_router, w_gate, w_up, w_down, k=2)
    yp, _ = kata.moe_forward(x[perm], w_router, w_gate, w_up, w_down, k=2)
    d = float(np.max(np.abs(np.asarray(yp) - np.asarray(y)[perm])))
    assert d <= OUT_ATOL, (
        f"shuffling the tokens changed their outputs by {d:.3g}; each token's output depends only on it"
    )


def _assert_matches_block(kata, model, layer, x):
    h, w_router, w_gate, w_up, w_down = _block_inputs(model, layer, x)
    want = model.mlp(layer, x)
    y, _ = kata.moe_forward(h, w_router, w_gate, w_up, w_down, model.config.top_k)
    y = np.asarray(y)
    assert y.shape == want.shape, f"moe_forward returned y of shape {y.shape}, expected {want.shape}"
    probs, _, _ = _route64(h, w_router, model.config.top_k)
    clear = _clear(probs, model.config.top_k)  # near-ties may route either way
    assert clear.any(), "suite data has only near ties"
    ok = np.isclose(y[clear], want[clear], rtol=OUT_RTOL, atol=OUT_ATOL)
    d = float(np.max(np.abs(y[clear] - want[clear])))
    assert ok.all(), f"moe_forward differs from the reference model's MoE block (layer {layer}) by {d:.3g}"


@pytest.mark.task("layer")
def test_moe_forward_matches_the_reference_model_block(kata):
    model = _moe_model()
    x = rng(14).standard_normal((40, model.config.d_model)).astype(np.float32)
    _assert_matches_block(kata, model, 0, x)


@pytest.mark.task("layer")
def test_moe_forward_matches_the_teachers_block_on_its_own_activations(kata):
    """The shipped teacher's layer weights, on the residual stream it computes for a short text."""
    try:
        model = Model.pretrained("teacher", WEIGHTS_DIR)
    except (FileNotFoundError, ValueError) as exc:
        pytest.skip(f"no usable teacher weights: {exc}")
    if not model.config.is_moe:
        pytest.skip("the shipped teacher has no MoE blocks")
    tokens = np.array(encode("The router sends each token to two experts."), dtype=np.int64)
    positions = np.arange(tokens.size)
    x = model.embed(tokens)
    for layer in range(min(2, model.config.n_layers)):
        q, k, v = model.qkv(layer, x, positions)
        x = x + model.attend(layer, q, k, v, positions, positions)
        _assert_matches_block(kata, model, layer, x)
        x = x + model.mlp(layer, x)


@pytest.mark.task("layer")
@given(
    shape=_shapes(max_t=20),
    factor=st.sampled_from([None] + FACTORS),
    normalize=st.booleans(),
    dtype=st.sampled_from(FLOAT_DTYPES),
)
@example(shape=(5, 3, 1, 4, 1, 0), factor=0.25, normalize=True, dtype=np.float32)  # one expert, room for 2 of 5
@example(shape=(6, 4, 4, 3, 2, 5), factor=None, normalize=True, dtype=np.float64)
def test_moe_forward_matches_a_float64_per_token_loop(kata, shape, factor, normalize, dtype):
    T, D, E, F, k, seed = shape
    x, w_router, w_gate, w_up, w_down = (a.astype(dtype) for a in _layer(seed, T, D, E, F))
    probs, _, _ = _route64(x, w_router, k)
    assume(np.all(_clear(probs, k)))
    want, _, _ = _moe64(x, w_router, w_gate, w_up, w_down, k, factor, normalize)
    y, _ = kata.moe_forward(x, w_router, w_gate, w_up, w_down, k, capacity_factor=factor, normalize=normalize)
    y = np.asarray(y, dtype=np.float64)
    assert y.shape == (T, D), f"moe_forward returned y of shape {y.shape}, expected (T, D) = {(T, D)}"
    bad = np.flatnonzero(~np.all(np.isclose(y, want, rtol=OUT_RTOL, atol=OUT_ATOL), axis=-1))
    assert bad.size == 0, (
        f"with k={k}, capacity_factor={factor}, normalize={normalize}: token {bad[0] if bad.size else 0}'s output "
        f"differs from the float64 sum of its kept experts, weighted by their gates, by "
        f"{float(np.max(np.abs(y - want))):.3g}"
    )


# Tokens (T, 4) that a router of 100 * identity sends logits of +-100: exp overflows float32 past 88.7.
# Each row's first two choices are clearly apart from each other and from the rest.
LOUD_TOKENS = [[1.0, 0.995, 0.0, -1.0], [-0.3, 0.9, 0.89, -1.0], [0.2, -1.0, 0.21, 0.1], [-1.0, 0.99, 1.0, -0.9]]


@pytest.mark.task("layer")
@pytest.mark.parametrize("normalize", [True, False])
def test_moe_forward_is_right_for_router_logits_past_the_range_of_exp(kata, normalize):
    x = np.array(LOUD_TOKENS, dtype=np.float32)
    w_router = 100 * np.eye(4, dtype=np.float32)
    _, _, w_gate, w_up, w_down = _layer(25, 4, 4, 4, 6)
    assert np.all(_clear(_route64(x, w_router, 2)[0], 2)), "suite data has near ties; report this as a grader bug"
    y, _ = kata.moe_forward(x, w_router, w_gate, w_up, w_down, 2, normalize=normalize)
    y = np.asarray(y, dtype=np.float64)
    assert np.all(np.isfinite(y)), "moe_forward returned NaN or inf for router logits of +-100, whose softmax is finite"
    want, _, _ = _moe64(x, w_router, w_gate, w_up, w_down, 2, normalize=normalize)
    d = float(np.max(np.abs(y - want)))
    assert np.allclose(y, want, rtol=OUT_RTOL, atol=OUT_ATOL), (
        f"for router logits of +-100 (normalize={normalize}) moe_forward differs from the float64 per-token loop "
        f"by {d:.3g}"
    )


@pytest.mark.task("layer")
def test_a_large_capacity_factor_drops_nothing(kata):
    x, w_router, w_gate, w_up, w_down = _layer(15, 32, 8, 4, 8)
    free, _ = kata.moe_forward(x, w_router, w_gate, w_up, w_down, 2)
    y, aux = kata.moe_forward(x, w_router, w_gate, w_up, w_down, 2, capacity_factor=4.0)
    assert int(aux.dropped) == 0, (
        f"capacity_factor=E leaves room for every assignment, but {int(aux.dropped)} were dropped"
    )
    d = float(np.max(np.abs(np.asarray(y) - np.asarray(free))))
    assert d <= OUT_ATOL, f"with room for every assignment the output differs from the unlimited layer's by {d:.3g}"


CROWDED = (40, 4, 2)  # (T, E, k) of a layer whose experts overflow at a capacity factor of at most 1


def _crowded_layer(kata, factor: float):
    """moe_forward on a tie-free CROWDED layer at capacity_factor=factor: the suite's
    own (keep mask, expert indices) of every assignment, and the learner's aux."""
    T, E, k = CROWDED
    x, w_router, w_gate, w_up, w_down = _tie_free_layer(20, T, 8, E, 8, k, router_scale=3.0)
    _, keep, idx = _moe64(x, w_router, w_gate, w_up, w_down, k, factor)
    _, aux = kata.moe_forward(x, w_router, w_gate, w_up, w_down, k, capacity_factor=factor)
    return keep, idx, aux


@pytest.mark.task("layer")
@pytest.mark.parametrize("factor", [0.5, 0.75, 1.0])
def test_tokens_per_expert_never_exceed_capacity(kata, factor):
    T, E, k = CROWDED
    keep, idx, aux = _crowded_layer(kata, factor)
    tpe, cap = np.asarray(aux.tokens_per_expert), _capacity(T, E, k, factor)
    assert tpe.shape == (E,), f"tokens_per_expert has shape {tpe.shape}, expected (E,) = {(E,)}"
    assert np.issubdtype(tpe.dtype, np.integer), f"tokens_per_expert must hold ints, got dtype {tpe.dtype}"
    assert tpe.max() <= cap, f"an expert processed {tpe.max()} assignments, over its capacity {cap}"
    want = np.bincount(idx[keep], minlength=E)
    assert np.array_equal(tpe, want), (
        f"tokens_per_expert is {tpe.tolist()}, expected the kept assignments {want.tolist()}"
    )


@pytest.mark.task("layer")
@pytest.mark.parametrize("factor", [0.5, 0.75, 1.0])
def test_dropped_counts_the_assignments_past_capacity(kata, factor):
    keep, _, aux = _crowded_layer(kata, factor)
    assert isinstance(aux.dropped, (int, np.integer)) and not isinstance(aux.dropped, bool), (
        f"aux.dropped must be an int (a number of assignments), got {aux.dropped!r}"
    )
    want = int((~keep).sum())
    assert int(aux.dropped) == want, f"aux.dropped is {int(aux.dropped)}, expected {want} assignments past capacity"


def _ranked_tokens(T: int, nudged: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """T tokens (T, 4) that an identity router (returned too) ranks expert 0, then 1, 2, 3; token t
    adds 0.1 t to the logits of the experts `nudged` marks, so no two tokens tie."""
    ranks = np.tile(np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32), (T, 1))
    x = ranks + 0.1 * np.arange(T, dtype=np.float32)[:, None] * np.array(nudged, dtype=np.float32)
    return x, np.eye(4, dtype=np.float32)


@pytest.mark.task("layer")
def test_a_fully_dropped_token_outputs_zero(kata):
    # Router = identity, so every token ranks expert 0, then 1, then 2, then 3;
    # capacity max(1, ceil(0.5 * 4 * 2 / 4)) = 1: token 0 takes both places, tokens 1-3 get none.
    E, T, F = 4, 4, 6
    _, _, w_gate, w_up, w_down = _layer(17, T, E, E, F)
    x, w_router = _ranked_tokens(T, nudged=[1, 0, 0, 0])
    y, aux = kata.moe_forward(x, w_router, w_gate, w_up, w_down, 2, capacity_factor=0.5)
    y = np.asarray(y, dtype=np.float64)
    assert np.all(np.abs(y[1:]) <= ZERO_TOL), (
        f"tokens 1-3 lost both experts to capacity, so they must output 0, got up to {np.abs(y[1:]).max():.3g}"
    )
    want, _, _ = _moe64(x, w_router, w_gate, w_up, w_down, 2, 0.5)
    d = float(np.max(np.abs(y[0] - want[0])))
    assert d <= OUT_ATOL, f"token 0 kept both experts and their gate weights, but its output is off by {d:.3g}"


@pytest.mark.task("layer")
def test_experts_that_get_no_token_count_zero(kata):
    # Router = identity, so every token ranks expert 0, then 1, then 2, then 3: with k = 2, experts 2 and 3 get nothing.
    E, T, F = 4, 5, 6
    _, _, w_gate, w_up, w_down = _layer(24, T, E, E, F)
    x, w_router = _ranked_tokens(T, nudged=[0, 0, 1, 1])
    y, aux = kata.moe_forward(x, w_router, w_gate, w_up, w_down, 2)
    tpe = np.asarray(aux.tokens_per_expert)
    assert tpe.shape == (E,), (
        f"tokens_per_expert has shape {tpe.shape}, expected (E,) = {(E,)} even when experts get no token"
    )
    assert np.array_equal(tpe, [T, T, 0, 0]), f"tokens_per_expert is {tpe.tolist()}, expected {[T, T, 0, 0]}"
    want, _, _ = _moe64(x, w_router, w_gate, w_up, w_down, 2)
    d = float(np.max(np.abs(np.asarray(y, dtype=np.float64) - want)))
    assert d <= OUT_ATOL, f"with experts 2 and 3 idle the output differs from the float64 per-token loop by {d:.3g}"


@pytest.mark.task("layer")
@pytest.mark.parametrize("factor", [None, 0.5])
def test_moe_forward_reports_the_losses_of_its_routing(kata, factor):
    """With capacity_factor=0.5 some assignments are dropped: the losses are
    still those of the routing, every chosen expert counted."""
    x, w_router, w_gate, w_up, w_down = _tie_free_layer(18, 30, 8, 5, 8, 2, router_scale=2.0)
    probs, idx, _ = _route64(x, w_router, 2)
    _, keep, _ = _moe64(x, w_router, w_gate, w_up, w_down, 2, factor)
    assert factor is None or not keep.all(), "suite data drops nothing at capacity_factor=0.5: a grader bug"
    _, aux = kata.moe_forward(x, w_router, w_gate, w_up, w_down, 2, capacity_factor=factor)
    want = _lb64(probs, idx)
    assert math.isclose(float(aux.load_balancing_loss), want, rel_tol=LOSS_RTOL), (
        f"with capacity_factor={factor} aux.load_balancing_loss is {float(aux.load_balancing_loss):.6g}, expected "
        f"{want:.6g} (f_i over all T*K chosen assignments, dropped ones too)"
    )
    want = _z64(x.astype(np.float64) @ w_router.astype(np.float64))
    assert math.isclose(float(aux.z_loss), want, rel_tol=LOSS_RTOL), (
        f"aux.z_loss is {float(aux.z_loss):.6g}, expected {want:.6g} (mean of logsumexp(router logits)^2)"
    )


@pytest.mark.task("layer")
def test_expert_work_is_k_over_e_of_running_every_expert(kata):
    """Work, as far as it can be counted without instrumenting the code under
    test (that would mean testing its internals): the assignments it reports
    processing, aux.tokens_per_expert, must be exactly the routing's T*K, each
    costing 3*D*F multiply-accumulates, so K/E of running every expert on
    every token. That the code really skips the other experts is checked by
    time, in the speed task."""
    model = _moe_model(seed=3)
    c = model.config
    T, D, E, k = 48, c.d_model, c.n_experts, c.top_k
    for attempt in range(100):
        x = rng(19 + 1000 * attempt).standard_normal((T, D)).astype(np.float32)
        h, w_router, w_gate, w_up, w_down = _block_inputs(model, 0, x)
        probs, idx, _ = _route64(h, w_router, k)
        if np.all(_clear(probs, k)):
            break
    else:
        raise AssertionError("the suite found no tie-free data; report this as a grader bug")
    _, aux = kata.moe_forward(h, w_router, w_gate, w_up, w_down, k)
    tpe = np.asarray(aux.tokens_per_expert)
    want = np.bincount(idx.reshape(-1), minlength=E)
    assert np.array_equal(tpe, want), (
        f"tokens_per_expert is {tpe.tolist()}, but the routing sends {want.tolist()} of the {T} x {k} assignments: "
        f"each expert should process exactly the tokens routed to it, {k} of {E} experts per token"
    )


@pytest.mark.task("layer")
def test_moe_forward_rejects_bad_input(kata):
    x, w_router, w_gate, w_up, w_down = _layer(20, 6, 8, 4, 5)
    _, _, *five = _layer(20, 6, 8, 5, 5)  # expert weights for 5 experts
    cases = [
        (dict(k=0), "k=0"),
        (dict(k=5), "k=5 with 4 experts"),
        (dict(k=2, capacity_factor=-1.0), "capacity_factor=-1.0"),
        (dict(k=2, capacity_factor=0.0), "capacity_factor=0.0 (None, not 0, means no limit)"),
        (dict(k=2, capacity_factor=math.inf), "capacity_factor=inf (None, not inf, means no limit)"),
        (dict(k=2, capacity_factor=math.nan), "capacity_factor=nan"),
        (dict(k=2, w_gate=five[0], w_up=five[1], w_down=five[2]), "expert weights for 5 experts with a router for 4"),
        (dict(k=2, w_gate=w_gate[:3], w_up=w_up[:3], w_down=w_down[:3]), "expert weights for 3 experts, router for 4"),
        (dict(k=2, w_up=w_up[:, :, :4]), "w_up narrower than w_gate"),
        (dict(k=2, w_up=w_up[:, :, :1]), "w_up of width 1 (it broadcasts against x @ w_gate)"),
        (dict(k=2, w_down=w_down[:, :, :1]), "w_down of output width 1 for x of width 8 (it broadcasts into y)"),
        (dict(k=2, w_down=w_down[:3]), "w_down with 3 experts for a router with 4"),
        (dict(k=2, w_router=w_router[:7]), "w_router with 7 rows for x of width 8"),
    ]
    for change, what in cases:
        args = dict(x=x, w_router=w_router, w_gate=w_gate, w_up=w_up, w_down=w_down)
        args.update(change)
        assert _rejects(lambda: kata.moe_forward(**args)), f"moe_forward accepted {what}; raise ValueError"
