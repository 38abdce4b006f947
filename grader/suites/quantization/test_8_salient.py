"""Checks of the salient task: activation-aware scaling (AWQ), for one weight and folded
into a whole model.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.suites import common
from grader.suites.common import rng
from grader.suites.quantization.checks import REL_TOL, _assert_untouched, _first, _held
from grader.suites.quantization.oracles import (
    MIN_MEAN,
    SUITE_ALPHAS,
    _awq_errors,
    _codes_match,
    _group_amax,
    _grouped_back,
    _kl_to,
    _log_probs,
    _reaching,
    _scales,
)
from grader.suites.quantization.strategies import (
    FLOATS,
    MIXED_GROUP,
    MIXED_TOKENS,
    MODEL_CONFIG,
    VALUE,
    _linear_names,
    _outlier_model,
    _with,
)
from reference.model import Config, Model

# Scales are float64 formulas: they may differ from the suite's by this share (another order of operations).
SCALE_RTOL = 1e-9
# A chosen alpha's output error may exceed the least over the grid by this share (summation order).
AWQ_RTOL = 1e-6
# A scale read back from a float32 RMSNorm gain (float model's gain over the quantized model's) is this close.
GAIN_RTOL = 1e-5
# Activation-aware 3-bit over plain grouped 3-bit, mean KL on a small model with outlier channels: at most
# this (measured over seeds 0-2: 0.41-0.57).
AWQ_SHARE = 0.8
DENSE_CONFIG = Config(vocab_size=48, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=64)


@st.composite
def activations(draw):
    shape = (draw(st.integers(1, 6)), draw(st.integers(1, 8)))
    return draw(hnp.arrays(draw(FLOATS), shape, elements=VALUE))


@pytest.mark.task("salient")
@given(x=activations(), alpha=st.floats(0.0, 1.0))
@example(x=np.array([[1.0, -4.0, 0.0]], np.float32), alpha=0.0)
@example(x=np.array([[1.0, -4.0, 0.0], [3.0, 2.0, 0.0]]), alpha=1.0)
def test_activation_scales_are_mean_abs_to_the_alpha_over_their_geometric_mean(scales, x, alpha):
    got = np.asarray(scales.activation_scales(x, alpha))
    want = _scales(x, alpha)
    assert got.shape == want.shape, (
        f"scales for x of shape {x.shape} have shape {got.shape}, expected (D,) = {want.shape}"
    )
    assert got.dtype == np.float64, f"the scales come in float64, got {got.dtype}"
    assert np.allclose(got, want, rtol=SCALE_RTOL, atol=0), (
        f"for x {x.tolist()} and alpha {alpha}, the scales are {got.tolist()}; mean |x| per column (floored at "
        f"{MIN_MEAN}) to the alpha, over their geometric mean, is {want.tolist()}"
    )


@pytest.mark.task("salient")
@pytest.mark.parametrize(
    "x, alpha",
    [
        (np.ones((2, 3), np.float32), -0.1),
        (np.ones((2, 3), np.float32), 1.5),
        (np.ones((2, 3), np.float32), True),
        (np.ones(3, np.float32), 0.5),
        (np.ones((0, 3), np.float32), 0.5),
        (np.ones((2, 3), np.int64), 0.5),
        (np.array([[1.0, np.nan]]), 0.5),
    ],
)
def test_activation_scales_rejects_bad_x_and_alpha(kata, x, alpha):
    with pytest.raises(ValueError):
        kata.activation_scales(x, alpha)


def _salient_case(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """w (64, 48) and x (96, 64) whose four channels run 20x the others, as large activations in LLMs do."""
    gen = rng(seed)
    x = gen.standard_normal((96, 64)).astype(np.float32)
    x[:, gen.choice(64, 4, replace=False)] *= 20
    return (gen.standard_normal((64, 48)) / 8).astype(np.float32), x


def _assert_awq_result(
    got, w: np.ndarray, x: np.ndarray, bits: int, group_size: int, alphas=SUITE_ALPHAS, s_rtol: float = SCALE_RTOL
) -> float:
    """got = (w_hat, s, alpha) is the documented search's: alpha of the grid with the least output error
    (the smaller on a tie), s its scales (within s_rtol), w_hat its dequantized scaled weight over s.
    Returns alpha."""
    kinds = [str(v.dtype) if isinstance(v, np.ndarray) else type(v).__name__ for v in got[1:3]]
    assert isinstance(got[1], np.ndarray) and got[1].dtype == np.float64 and isinstance(got[2], float), (
        f"awq_quantize returns the scales s as a float64 array and alpha as a Python float, got {kinds[0]} and "
        f"{kinds[1]}"
    )
    w_hat, s, alpha = np.asarray(got[0]), np.asarray(got[1], dtype=np.float64), float(got[2])
    errors = _awq_errors(w, x, bits, group_size, alphas)
    assert any(math.isclose(alpha, a, abs_tol=1e-12) for a in alphas), f"alpha {alpha} is not one of {alphas}"
    alpha = min(alphas, key=lambda a: abs(a - alpha))
    error, want_s, dq = errors[alpha]
    least = min(e for e, _, _ in errors.values())
    first = min(a for a, (e, _, _) in errors.items() if e <= least * (1 + AWQ_RTOL))
    assert error <= least * (1 + AWQ_RTOL) and alpha == first, (
        f"alpha {alpha} leaves an output error of {error:.6g}; the least over the grid is {least:.6g}, at alpha "
        f"{first} (the output (x / s) @ dequantized against x @ w, not the weights, decides)"
    )
    assert np.allclose(s, want_s, rtol=s_rtol, atol=0), f"the scales returned are not activation_scales(x, {alpha})"
    assert w_hat.shape == w.shape and w_hat.dtype == w.dtype, (
        f"w_hat must have w's shape {w.shape} and dtype {w.dtype}, got {w_hat.shape} {w_hat.dtype}"
    )
    scaled = w.astype(np.float64) * s[:, None]
    step = _group_amax(scaled.T, group_size).T / (2 ** (bits - 1) - 1)  # (D, F): each weight's group's step
    codes = np.round(w_hat * s[:, None] / np.where(step > 0, step, 1))
    ok = _codes_match(codes, scaled / np.where(step > 0, step, 1)) & np.isclose(
        w_hat * s[:, None], codes * step, rtol=1e-5, atol=1e-12
    )
    assert ok.all(), (
        f"w_hat times s at {_first(~ok)} is {(w_hat * s[:, None])[~ok][0]:.6g}, not w * s quantized in groups of "
        f"{group_size} along the input axis ({dq[~ok][0]:.6g}): w_hat is the dequantized scaled weight over s"
    )
    return alpha


@pytest.mark.task("salient")
@pytest.mark.parametrize("bits, group_size, seed", [(3, 32, 71), (4, 16, 72), (2, 32, 73)])
def test_awq_keeps_the_alpha_whose_output_is_closest_to_the_float_output(kata, bits, group_size, seed):
    w, x = _salient_case(seed)
    _assert_awq_result(kata.awq_quantize(w, x, bits, group_size=group_size), w, x, bits, group_size)


@pytest.mark.task("salient")
def test_awq_is_no_worse_than_plain_grouped_quantization_on_its_activations(kata):
    w, x = _salient_case(74)
    w_hat, _, alpha = kata.awq_quantize(w, x, 3)
    x64, want = x.astype(np.float64), x.astype(np.float64) @ w.astype(np.float64)
    awq = float(np.sum((x64 @ np.asarray(w_hat, dtype=np.float64) - want) ** 2))
    plain = float(np.sum((x64 @ _grouped_back(w.astype(np.float64), 3, 32) - want) ** 2))
    common.figure(
        "AWQ's output error over plain grouped quantization's, 3 bits, outlier channels", awq / plain, better="lower"
    )
    assert awq < plain, (
        f"x @ w_hat is {awq:.4g} (squared error) from x @ w, no closer than plain grouped 3-bit quantization "
        f"({plain:.4g}), though four input channels carry 20x the activations (alpha {alpha})"
    )


@pytest.mark.task("salient")
def test_awq_breaks_a_tie_toward_the_smaller_alpha(kata):
    # Every channel has mean |x| = 1, so every alpha gives scales of 1 and the same error.
    gen = rng(75)
    x = np.where(gen.random((16, 32)) < 0.5, -1.0, 1.0).astype(np.float32)
    w = gen.standard_normal((32, 8)).astype(np.float32)
    for alphas, want in ((SUITE_ALPHAS, 0.0), ((0.75, 0.25, 0.5), 0.25)):
        kwargs = {} if alphas is SUITE_ALPHAS else {"alphas": alphas}
        got = float(kata.awq_quantize(w, x, 3, **kwargs)[2])
        assert got == want, f"every alpha of {alphas} gives the same error; the smallest, {want}, wins, not {got}"


@pytest.mark.task("salient")
def test_awq_honours_the_alphas_it_is_given(kata):
    w, x = _salient_case(76)
    _assert_awq_result(kata.awq_quantize(w, x, 3, alphas=(0.5,)), w, x, 3, 32, (0.5,))
    _assert_awq_result(kata.awq_quantize(w, x, 3, alphas=[0.9, 0.1, 0.3]), w, x, 3, 32, (0.1, 0.3, 0.9))


@pytest.mark.task("salient")
@pytest.mark.parametrize(
    "case",
    [
        "w 1-D",
        "w integer",
        "w inf",
        "x narrower",
        "group_size 5",
        "no alphas",
        "alpha 1.5",
        "bits 9",
        "x NaN",
        "x no rows",
    ],
)
def test_awq_quantize_rejects_bad_input(kata, case):
    w, x = np.ones((32, 4), np.float32), np.ones((3, 32), np.float32)
    kwargs, bits = {}, 3
    if case == "w 1-D":
        w = np.ones(32, np.float32)
    elif case == "w integer":
        w = np.ones((32, 4), np.int64)
    elif case == "w inf":
        w[3, 1] = np.inf
    elif case == "x narrower":
        x = np.ones((3, 16), np.float32)
    elif case == "group_size 5":
        kwargs["group_size"] = 5
    elif case == "no alphas":
        kwargs["alphas"] = ()
    elif case == "alpha 1.5":
        kwargs["alphas"] = (0.5, 1.5)
    elif case == "bits 9":
        bits = 9
    elif case == "x NaN":
        x[1, 2] = np.nan
    else:
        x = np.ones((0, 32), np.float32)
    with pytest.raises(ValueError):
        kata.awq_quantize(w, x, bits, **kwargs)


def _awq_models(kata, config: Config, bits: int):
    model = _outlier_model(config, seed=7)
    calib = rng(77).integers(0, config.vocab_size, MIXED_TOKENS)
    return model, calib, kata.quantize_model_awq(model, calib, bits, group_size=MIXED_GROUP)


def _norm_groups(config: Config) -> list[tuple[str, list[str], str | None, int | None]]:
    """(norm, the weights after it, the activation key, the layer) of every RMSNorm before linear weights."""
    mlp = ["router", "w_gate", "w_up"] if config.is_moe else ["w_gate", "w_up"]
    groups = []
    for i in range(config.n_layers):
        groups.append((f"layers.{i}.attn_norm", [f"layers.{i}.{n}" for n in ("wq", "wk", "wv")], "attn", i))
        groups.append((f"layers.{i}.mlp_norm", [f"layers.{i}.{n}" for n in mlp], "mlp", i))
    return groups + [("norm", ["out"], None, None)]


def _side_by_side(model: Model, names: list[str]) -> np.ndarray:
    """The weights `names` (each (in, out), or an expert stack (E, in, out)) side by side: (in, columns)."""
    mats = [np.asarray(model.weights[n]) for n in names]
    return np.concatenate([m if m.ndim == 2 else np.concatenate(list(m), axis=1) for m in mats], axis=1)


@pytest.mark.task("salient")
@pytest.mark.parametrize("config", [MODEL_CONFIG, DENSE_CONFIG], ids=["moe", "dense"])
def test_quantize_model_awq_folds_the_inverse_scale_into_the_norm_before_each_matrix(kata, config):
    """After an RMSNorm the scale is shared by every weight that reads it; the model must hold gain / s
    and the weights w * s quantized: the effective pair is awq_quantize's search on them side by side."""
    bits = 3
    model, calib, out = _awq_models(kata, config, bits)
    layers, final = _reaching(model, calib)
    for norm, names, key, layer in _norm_groups(config):
        x = final if key is None else layers[layer][key]
        gain = np.asarray(out.weights[norm], dtype=np.float64)
        assert np.all(gain != 0), f"the gain of {norm!r} holds a 0"
        s = model.weights[norm].astype(np.float64) / gain  # the scale folded in
        stored = _side_by_side(out, names)
        got = ((stored / s[:, None]).astype(stored.dtype), s, _alpha_of(s, x, norm))
        _assert_awq_result(got, _side_by_side(model, names), x, bits, MIXED_GROUP, s_rtol=GAIN_RTOL)


def _alpha_of(s: np.ndarray, x: np.ndarray, norm: str) -> float:
    """The alpha of the grid whose scales are s, or a failure saying that none is."""
    for alpha in SUITE_ALPHAS:
        if np.allclose(s, _scales(x, alpha), rtol=GAIN_RTOL, atol=0):
            return alpha
    raise AssertionError(
        f"{norm!r}'s gain over the float model's is no 1 / activation_scales(x, alpha) of the activations after "
        "it for any alpha of the grid: is the inverse scale folded into the gain, with the weights after it scaled?"
    )


@pytest.mark.task("salient")
@pytest.mark.parametrize("config", [MODEL_CONFIG, DENSE_CONFIG], ids=["moe", "dense"])
def test_quantize_model_awq_folds_the_inverse_scale_of_wo_and_w_down_into_the_weight(kata, config):
    bits = 3
    model, calib, out = _awq_models(kata, config, bits)
    layers, _ = _reaching(model, calib)
    for i, acts in enumerate(layers):
        pairs = [(f"layers.{i}.wo", model.weights[f"layers.{i}.wo"], out.weights[f"layers.{i}.wo"], acts["wo"])]
        downs = model.weights[f"layers.{i}.w_down"].reshape(-1, config.d_ff, config.d_model)
        got = np.asarray(out.weights[f"layers.{i}.w_down"]).reshape(downs.shape)
        pairs += [(f"layers.{i}.w_down[{e}]", d, g, x) for e, (d, g, x) in enumerate(zip(downs, got, acts["down"]))]
        for name, w, stored, x in pairs:
            stored = np.asarray(stored)
            if len(x) == 0:  # an expert no row reaches: plain grouped quantization
                assert np.allclose(stored, _grouped_back(w, bits, MIXED_GROUP), atol=REL_TOL), (
                    f"{name} is not plain grouped"
                )
                continue
            best = min(_awq_errors(w, x, bits, MIXED_GROUP).items(), key=lambda kv: kv[1][0])
            alpha, (_, s, _) = best
            _assert_awq_result((stored, s, alpha), w, x, bits, MIXED_GROUP)


@pytest.mark.task("salient")
def test_quantize_model_awq_is_closer_to_the_float_model_than_plain_grouped_on_outlier_channels(kata):
    bits = 3
    model, _, out = _awq_models(kata, MODEL_CONFIG, bits)
    held_out = rng(78).integers(0, MODEL_CONFIG.vocab_size, MIXED_TOKENS)
    p_log = _log_probs(model, held_out)
    kl_awq = _kl_to(p_log, _with(model, dict(out.weights)), held_out)
    plain = {n: _grouped_back(model.weights[n], bits, MIXED_GROUP) for n in _linear_names(model)}
    kl_plain = _kl_to(p_log, _with(model, plain), held_out)
    share = kl_awq / kl_plain
    common.figure("mean KL, activation-aware 3-bit, outlier channels", kl_awq, unit="nats", better="lower", key="awq3")
    common.figure("mean KL, plain grouped 3-bit, outlier channels", kl_plain, unit="nats", better="lower", key="plain3")
    common.figure("activation-aware KL over plain grouped KL, 3 bits", share, AWQ_SHARE, better="lower")
    assert share <= AWQ_SHARE, (
        f"the activation-aware 3-bit model is {kl_awq:.4g} nats (mean KL) from the float model on held-out "
        f"tokens, {share:.2f}x plain grouped 3-bit's {kl_plain:.4g}; allowed {AWQ_SHARE}x"
    )


@pytest.mark.task("salient")
def test_quantize_model_awq_leaves_the_model_untouched_and_the_embedding_in_float(kata):
    # The jail keeps its copy of the model for every call given the same model: had the first call changed
    # it, the second would scale and quantize what the first left, and the two would differ.
    model = _outlier_model(MODEL_CONFIG, seed=8)
    held = _held(kata.quantize_model_awq, model)  # and the judge reads it back after both calls
    tokens = rng(79).integers(0, MODEL_CONFIG.vocab_size, 16)
    first = kata.quantize_model_awq(held, tokens, 4, group_size=MIXED_GROUP)
    again = kata.quantize_model_awq(held, tokens, 4, group_size=MIXED_GROUP)
    assert isinstance(first, Model), f"quantize_model_awq must return a Model, got {type(first).__name__}"
    differ = [n for n, w in first.weights.items() if not np.array_equal(np.asarray(w), np.asarray(again.weights[n]))]
    assert not differ, (
        f"called twice on the same model, quantize_model_awq gives other weights {differ[:3]} the second time: "
        "the first call changed the model it was given"
    )
    assert np.array_equal(np.asarray(again.weights["tok_emb"]), model.weights["tok_emb"]), "tok_emb must stay in float"
    _assert_untouched(held, model, "quantize_model_awq")


@pytest.mark.task("salient")
def test_quantize_model_awq_quantizes_an_expert_no_calibration_row_reaches_plainly(kata):
    # One calibration token reaches top_k of the experts of each layer; the others see no activations to scale by.
    bits, model = 3, _outlier_model(MODEL_CONFIG, seed=9)
    calib = np.array([5], dtype=np.int64)
    out = kata.quantize_model_awq(model, calib, bits, group_size=MIXED_GROUP)
    layers, _ = _reaching(model, calib)
    unreached = 0
    for i, acts in enumerate(layers):
        downs = model.weights[f"layers.{i}.w_down"]
        got = np.asarray(out.weights[f"layers.{i}.w_down"], dtype=np.float64)
        for e, x in enumerate(acts["down"]):
            if len(x) == 0:
                unreached += 1
                want = _grouped_back(downs[e], bits, MIXED_GROUP)
                assert np.allclose(got[e], want, rtol=0, atol=REL_TOL * np.max(np.abs(downs[e]))), (
                    f"layers.{i}.w_down of expert {e}, which no calibration row reaches, must be plain grouped "
                    f"{bits}-bit quantization of the float weight"
                )
    assert unreached, "the calibration token reached every expert: the check needs one it does not"


@pytest.mark.task("salient")
@pytest.mark.parametrize(
    "bits, group_size, tokens", [(1, 16, [1, 2]), (9, 16, [1, 2]), (3, 0, [1, 2]), (3, 5, [1, 2]), (3, 16, [48])]
)
def test_quantize_model_awq_rejects_bad_bits_group_size_and_tokens(kata, small_model, bits, group_size, tokens):
    with pytest.raises(ValueError):
        kata.quantize_model_awq(small_model, np.array(tokens, dtype=np.int64), bits, group_size=group_size)
