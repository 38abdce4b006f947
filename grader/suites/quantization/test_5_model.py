"""Checks of the model task: quantize_model's grouped weights and what they cost the model
(KL and greedy agreement with the float model), and bits_per_weight.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.suites import common
from grader.suites.common import rng
from grader.suites.quantization.checks import REL_TOL, _assert_untouched, _assert_within_half_a_step, _held
from grader.suites.quantization.oracles import _group_amax, _mean_kl
from grader.suites.quantization.strategies import LINEAR, MODEL_CONFIG
from reference.lm import CachedLM
from reference.lm import generate as generate_cached
from reference.model import Config, Model
from reference.tokenizer import encode

# Mean KL (nats) of next-token distributions, 8-bit model against the float one.
KL_8BIT = 1e-3
# Share of 32 greedily generated tokens the 8-bit model must agree on.
GREEDY_AGREEMENT = 0.95


@pytest.mark.task("model")
def test_quantize_model_returns_a_copy_and_leaves_the_input_untouched(kata):
    # The model the code is given is the jail's own copy, kept for every later call given the same model: a
    # second call starts from whatever the first left in it, and at 8 bits must still be near the float weights.
    # The judge reads that copy back after both calls, too.
    model = Model.random(MODEL_CONFIG, seed=4)
    held = _held(kata.quantize_model, model)
    out = kata.quantize_model(held, 2)
    assert isinstance(out, Model), f"quantize_model must return a Model, got {type(out).__name__}"
    again = kata.quantize_model(held, 8)
    for name, w in model.weights.items():
        got = np.asarray(again.weights[name], dtype=np.float64)
        if name.split(".")[-1] not in LINEAR:
            assert np.array_equal(got, w), f"{name!r} changed: the first call changed the model it was given"
            continue
        rows, back = np.swapaxes(w.astype(np.float64), -1, -2), np.swapaxes(got, -1, -2)
        _assert_within_half_a_step(
            rows, back, _group_amax(rows, 32), 8, f" at 8 bits after a 2-bit call on the same model ({name})"
        )
    _assert_untouched(held, model, "quantize_model")


@pytest.mark.task("model")
def test_quantize_model_quantizes_every_linear_weight_and_nothing_else(kata, small_model):
    bits = 4
    out = kata.quantize_model(small_model, bits)
    assert out.config == small_model.config, "the quantized model must keep the config"
    for name, w in small_model.weights.items():
        got = np.asarray(out.weights[name], dtype=np.float64)
        if name.split(".")[-1] in LINEAR:
            assert not np.array_equal(got, w), f"weight {name!r} was not quantized"
            # Whatever the grouping, a group's step is at most the whole tensor's.
            bound = np.max(np.abs(w)) / (2 ** (bits - 1) - 1) / 2 * (1 + REL_TOL)
            err = float(np.max(np.abs(got - w)))
            assert err <= bound, (
                f"weight {name!r} comes back {err:.3g} off, more than half a {bits}-bit step ({bound:.3g})"
            )
        else:
            assert np.array_equal(got, w), f"{name!r} is a norm or the embedding table and must stay in float"


@pytest.mark.task("model")
@pytest.mark.parametrize("group_size", [8, 16])
def test_quantize_model_groups_each_weight_in_runs_of_group_size_along_its_input_axis(kata, small_model, group_size):
    bits = 3
    out = kata.quantize_model(small_model, bits, group_size)
    for name, w in small_model.weights.items():
        if name.split(".")[-1] not in LINEAR:
            continue
        got = np.asarray(out.weights[name], dtype=np.float64)
        assert got.shape == w.shape, f"weight {name!r} came back with shape {got.shape}, not {w.shape}"
        got, rows = np.swapaxes(got, -1, -2), np.swapaxes(w.astype(np.float64), -1, -2)  # (..., out, in)
        _assert_within_half_a_step(
            rows, got, _group_amax(rows, group_size), bits, f" of its group of {group_size} along the input axis"
        )


@pytest.mark.task("model")
def test_eight_bit_model_stays_within_a_small_kl_of_the_float_model(kata, small_model):
    tokens = rng(41).integers(0, MODEL_CONFIG.vocab_size, 24)
    kl = _mean_kl(small_model, kata.quantize_model(small_model, 8), tokens)
    assert kl < KL_8BIT, (
        f"the 8-bit model's next-token distributions are {kl:.3g} nats (mean KL) from the float model's; allowed "
        f"{KL_8BIT}"
    )


@pytest.mark.task("model")
def test_kl_to_the_float_model_grows_as_bits_shrink(kata, small_model):
    tokens = rng(42).integers(0, MODEL_CONFIG.vocab_size, 24)
    kls = {bits: _mean_kl(small_model, kata.quantize_model(small_model, bits), tokens) for bits in (8, 6, 4, 3)}
    common.figure("mean KL of the 8-bit model from the float one", kls[8], unit="nats", better="lower", key="kl8")
    common.figure("mean KL of the 4-bit model from the float one", kls[4], unit="nats", better="lower", key="kl4")
    order = list(kls)
    for more, fewer in zip(order, order[1:]):
        assert kls[more] < kls[fewer], (
            f"KL at {more} bits ({kls[more]:.3g}) should be below KL at {fewer} bits ({kls[fewer]:.3g})"
        )


@pytest.mark.task("model")
def test_eight_bit_greedy_generation_agrees_with_the_float_model(kata):
    """The shipped teacher at 8 bits writes the float teacher's 32 greedy
    characters. The quantized weights are loaded into a fresh reference Model,
    so the reference code, not the code under test, runs the generation, and
    reference.lm's cached decoder keeps it to a few tens of milliseconds."""
    teacher = Model.pretrained("teacher")
    prompt = encode("Return the number of ")
    quantized = kata.quantize_model(teacher, 8)
    rebuilt = Model(teacher.config, {name: np.asarray(w) for name, w in quantized.weights.items()})
    want = generate_cached(CachedLM(teacher), prompt, 32)
    got = generate_cached(CachedLM(rebuilt), prompt, 32)
    agree = float(np.mean(np.array(got) == np.array(want)))
    assert agree >= GREEDY_AGREEMENT, (
        f"the 8-bit teacher writes {agree:.0%} of the float teacher's 32 greedy characters; needs "
        f"{GREEDY_AGREEMENT:.0%}"
    )


@pytest.mark.task("model")
@pytest.mark.parametrize("bits, group_size", [(1, 32), (9, 32), (8, 5), (8, 0)])
def test_quantize_model_rejects_bad_bits_and_group_size(kata, small_model, bits, group_size):
    with pytest.raises(ValueError):
        kata.quantize_model(small_model, bits, group_size)


@pytest.mark.task("model")
def test_quantize_model_names_the_weight_whose_input_width_group_size_does_not_divide(kata):
    # d_model 32 and d_ff 40: groups of 16 divide every input width but that of the MLP's down projection.
    config = Config(vocab_size=48, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=40, max_seq_len=16)
    model = Model.random(config, seed=4)
    with pytest.raises(ValueError) as info:
        kata.quantize_model(model, 4, 16)
    message = str(info.value)
    assert "w_down" in message, f"the error should name the weight whose input width 40 is no multiple of 16: {message}"


@pytest.mark.task("model")
@pytest.mark.parametrize(
    "bits, group_size, scale_bytes, want",
    [(4, 32, 2, 4.5), (8, 32, 2, 8.5), (4, 64, 2, 4.25), (3, 16, 4, 5.0), (8, 128, 0, 8.0), (2, 1, 2, 18.0)],
)
def test_bits_per_weight_counts_the_scales(kata, bits, group_size, scale_bytes, want):
    got = float(kata.bits_per_weight(bits, group_size, scale_bytes))
    if (bits, group_size, scale_bytes) == (4, 32, 2):
        common.figure(
            "bits per weight, 4-bit groups of 32 with fp16 scales", got, unit="bits", better="lower", key="bpw4"
        )
    assert math.isclose(got, want), (
        f"bits_per_weight({bits}, {group_size}, scale_bytes={scale_bytes}) is {got}, expected {want}"
    )


@pytest.mark.task("model")
@pytest.mark.parametrize("bits, group_size, scale_bytes", [(1, 32, 2), (9, 32, 2), (4, 0, 2), (4, 32, -1)])
def test_bits_per_weight_rejects_sizes_outside_their_ranges(kata, bits, group_size, scale_bytes):
    with pytest.raises(ValueError):
        kata.bits_per_weight(bits, group_size, scale_bytes)
