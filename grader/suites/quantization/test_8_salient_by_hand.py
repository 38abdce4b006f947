"""Public checks of the salient task: activation scales of two channels worked out by hand and
their geometric mean; awq_quantize's w_hat read back through its own scales, and its search
against the same function given one alpha at a time; quantize_model_awq's scales read back from
its gains, an expert no calibration row reaches, and a change of the float model that computes
the same thing and must give the same wo, w_down and out. They need no oracle, so the student
edition ships them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.suites.common import rng
from grader.suites.quantization.strategies import MIXED_GROUP, MIXED_TOKENS, MODEL_CONFIG, VALUE, _outlier_model, _with

# Scales may differ from the values worked out by hand by this share (float64, another order of operations).
HAND_RTOL = 1e-9
# A quantized value may exceed half a step from its float value by this share of the step (float32 storage,
# scales read back from float32 gains).
STEP_SLACK = 1e-4
# The alpha awq_quantize keeps may leave an output error above the least of the alphas it was given, each
# given alone, by this share (w_hat's own rounding).
SEARCH_RTOL = 1e-6
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the search check's alphas
# x = [[1, -2], [3, 8]]: mean |x| per channel 2 and 5, geometric mean of their alpha-th powers (2 * 5)^(alpha/2).
TWO_CHANNELS = {
    1.0: [math.sqrt(2 / 5), math.sqrt(5 / 2)],
    0.5: [(2 / 5) ** 0.25, (5 / 2) ** 0.25],
    0.0: [1.0, 1.0],
}


@pytest.mark.task("salient")
@pytest.mark.parametrize("alpha", list(TWO_CHANNELS))
def test_activation_scales_of_two_channels_worked_out_by_hand(scales, alpha):
    x = np.array([[1.0, -2.0], [3.0, 8.0]], dtype=np.float32)
    got = np.asarray(scales.activation_scales(x, alpha), dtype=np.float64)
    want = TWO_CHANNELS[alpha]
    assert got.shape == (2,) and np.allclose(got, want, rtol=HAND_RTOL, atol=0), (
        f"activation_scales([[1, -2], [3, 8]], {alpha}) gave {got.tolist()}; mean |x| per channel is 2 and 5, "
        f"so the scales are 2^a and 5^a over (2^a 5^a)^(1/2) with a = {alpha}: {want}"
    )


@pytest.mark.task("salient")
@given(
    x=hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 8)), elements=VALUE),
    alpha=st.floats(0.0, 1.0),
)
def test_activation_scales_are_positive_with_a_geometric_mean_of_1(scales, x, alpha):
    got = np.asarray(scales.activation_scales(x, alpha), dtype=np.float64)
    assert got.shape == (x.shape[1],) and np.all(got > 0), f"scales for x {x.shape}: {got.tolist()}"
    geometric = math.exp(float(np.mean(np.log(got))))
    assert math.isclose(geometric, 1.0, rel_tol=1e-9), (
        f"the scales {got.tolist()} of x {x.tolist()} at alpha {alpha} have geometric mean {geometric:.9g}, not 1"
    )


def _salient(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """w (64, 48) and x (96, 64), float64, four channels of x 20 times the others."""
    gen = rng(seed)
    x = gen.standard_normal((96, 64))
    x[:, gen.choice(64, 4, replace=False)] *= 20
    return gen.standard_normal((64, 48)) / 8, x


def _off_its_grid(w: np.ndarray, stored: np.ndarray, s: np.ndarray, bits: int, group_size: int) -> np.ndarray:
    """Where stored (..., D, F) is further than half a step from w * s[:, None], the step being max |w * s|
    over its group of group_size along the input axis D over qmax."""
    scaled = w.astype(np.float64) * s[:, None]
    groups = (*w.shape[:-2], w.shape[-2] // group_size, group_size, w.shape[-1])
    top = np.abs(scaled.reshape(groups)).max(axis=-2, keepdims=True)
    err = np.abs(np.asarray(stored, dtype=np.float64) - scaled).reshape(groups)
    return (err > top / (2 ** (bits - 1) - 1) / 2 * (1 + STEP_SLACK)).reshape(w.shape)


@pytest.mark.task("salient")
@pytest.mark.parametrize("alphas", [(1.0,), None], ids=["alpha 1", "default alphas"])
def test_awq_w_hat_times_its_scales_is_within_half_a_step_of_w_times_them(kata, alphas):
    w, x = _salient(81)
    w_hat, s, alpha = kata.awq_quantize(w, x, 3, **({} if alphas is None else {"alphas": alphas}))
    w_hat, s = np.asarray(w_hat), np.asarray(s, dtype=np.float64)
    assert w_hat.shape == w.shape and s.shape == (64,) and np.all(s > 0), f"w_hat {w_hat.shape}, s {s.shape}"
    off = _off_its_grid(w, w_hat * s[:, None], s, 3, 32)
    assert not off.any(), (
        f"at alpha {float(alpha)}, w_hat * s is further than half a 3-bit step from w * s at {np.argwhere(off)[0]}: "
        "w_hat is the scaled weight quantized in groups along the input axis, divided back by s"
    )


@pytest.mark.task("salient")
@pytest.mark.parametrize("bits", [2, 3])
def test_awq_keeps_the_alpha_whose_w_hat_given_alone_has_the_least_output_error(kata, bits):
    w, x = _salient(82)
    want = x @ w
    alone = {}
    for a in ALPHAS:
        w_hat = np.asarray(kata.awq_quantize(w, x, bits, alphas=(a,))[0], dtype=np.float64)
        alone[a] = (float(np.sum((x @ w_hat - want) ** 2)), w_hat)
    w_hat, _, alpha = kata.awq_quantize(w, x, bits, alphas=ALPHAS)
    least = min(e for e, _ in alone.values())
    assert float(alpha) in alone and alone[float(alpha)][0] <= least * (1 + SEARCH_RTOL), (
        f"awq_quantize kept alpha {float(alpha)} of {ALPHAS}; given alone, those alphas leave output errors "
        f"sum((x @ w_hat - x @ w)^2) of {[round(e, 4) for e, _ in alone.values()]}: the least decides"
    )
    assert np.allclose(np.asarray(w_hat, dtype=np.float64), alone[float(alpha)][1], rtol=1e-12, atol=0), (
        f"awq_quantize kept alpha {float(alpha)} but returned another w_hat than it gives with that alpha alone"
    )


NORMS = {"attn_norm": ("wq", "wk", "wv"), "mlp_norm": ("router", "w_gate", "w_up")}


@pytest.mark.task("salient")
def test_quantize_model_awq_stores_each_norms_weights_scaled_by_the_gain_it_divided(kata):
    """The scale s of each RMSNorm is the float gain over the stored one; the weights after it are stored
    as w * s quantized. The model's outlier channels (20x gains) must get scales above 1."""
    bits, model = 3, _outlier_model(MODEL_CONFIG, seed=14)
    calib = rng(83).integers(0, MODEL_CONFIG.vocab_size, MIXED_TOKENS)
    out = kata.quantize_model_awq(model, calib, bits, group_size=MIXED_GROUP)
    groups = [(f"layers.{i}.{n}", [f"layers.{i}.{r}" for r in rs]) for i in range(2) for n, rs in NORMS.items()]
    for norm, readers in [*groups, ("norm", ["out"])]:
        stored_gain = np.asarray(out.weights[norm], dtype=np.float64)
        assert np.all(stored_gain > 0), f"{norm!r}'s gain holds {stored_gain.min():.4g}; it was all positive"
        s = model.weights[norm].astype(np.float64) / stored_gain
        assert np.max(s) > 1.5, (
            f"{norm!r}'s gain over the quantized model's is at most {np.max(s):.4g}: the channels with 20x gains "
            "were not scaled up (is the inverse scale folded into the gain before the weights?)"
        )
        for name in readers:
            off = _off_its_grid(model.weights[name], out.weights[name], s, bits, MIXED_GROUP)
            assert not off.any(), (
                f"{name} is further than half a step from its float weight times s, the scale {norm!r}'s gain "
                f"was divided by, at {np.argwhere(off)[0]}"
            )


def _plain_grid(w: np.ndarray, bits: int) -> bool:
    """Whether every group of MIXED_GROUP along w's input axis (-2) holds whole multiples of max|group| / qmax."""
    groups = w.astype(np.float64).reshape(w.shape[-2] // MIXED_GROUP, MIXED_GROUP, w.shape[-1])
    step = np.abs(groups).max(axis=-2, keepdims=True) / (2 ** (bits - 1) - 1)
    codes = groups / np.where(step > 0, step, 1)
    return bool(np.all(np.abs(codes - np.round(codes)) < 1e-3))


@pytest.mark.task("salient")
def test_quantize_model_awq_quantizes_plainly_the_experts_one_calibration_token_misses(kata):
    # One token reaches top_k = 2 of the 4 experts of each layer: the other two have no activations to
    # scale by, and their w_down is plain grouped quantization, whole multiples of each group's step.
    bits, model = 3, _outlier_model(MODEL_CONFIG, seed=15)
    out = kata.quantize_model_awq(model, np.array([7]), bits, group_size=MIXED_GROUP)
    for i in range(MODEL_CONFIG.n_layers):
        downs = np.asarray(out.weights[f"layers.{i}.w_down"])
        plain = [e for e, d in enumerate(downs) if _plain_grid(d, bits)]
        floats = [e for e, d in enumerate(downs) if np.array_equal(d, model.weights[f"layers.{i}.w_down"][e])]
        assert not floats, f"layers.{i}.w_down of experts {floats} came back as the float weights"
        assert len(plain) >= MODEL_CONFIG.n_experts - MODEL_CONFIG.top_k, (
            f"in layers.{i}, one calibration token reaches {MODEL_CONFIG.top_k} of {MODEL_CONFIG.n_experts} "
            f"experts, yet only experts {plain} have w_down plainly quantized (on their groups' grid)"
        )


@pytest.mark.task("salient")
def test_quantize_model_awq_of_a_model_computing_the_same_gives_the_same_wo_w_down_and_out(kata):
    """The attention norms' gains times powers of two, per channel, and the rows of wq, wk, wv that read
    those channels divided by as much: the float model computes exactly what it did, so everything that
    reaches wo, w_down and out is what it was, and so must their quantized weights be."""
    bits, model = 3, _outlier_model(MODEL_CONFIG, seed=16)
    gen = rng(84)
    changed = {}
    for i in range(MODEL_CONFIG.n_layers):
        power = np.exp2(gen.integers(-2, 3, MODEL_CONFIG.d_model)).astype(np.float32)
        changed[f"layers.{i}.attn_norm"] = model.weights[f"layers.{i}.attn_norm"] * power
        for name in ("wq", "wk", "wv"):
            changed[f"layers.{i}.{name}"] = model.weights[f"layers.{i}.{name}"] / power[:, None]
    calib = rng(85).integers(0, MODEL_CONFIG.vocab_size, MIXED_TOKENS)
    first = kata.quantize_model_awq(model, calib, bits, group_size=MIXED_GROUP)
    second = kata.quantize_model_awq(_with(model, changed), calib, bits, group_size=MIXED_GROUP)
    names = [f"layers.{i}.{n}" for i in range(MODEL_CONFIG.n_layers) for n in ("wo", "w_down")] + ["out"]
    differ = [
        n for n in names if not np.allclose(np.asarray(first.weights[n]), np.asarray(second.weights[n]), rtol=1e-5)
    ]
    assert not differ, (
        f"{differ[:3]} differ between two models that compute the same (one's attention norm gains times powers "
        "of two, the rows of wq, wk, wv after them divided by as much): what reaches them is the same"
    )
