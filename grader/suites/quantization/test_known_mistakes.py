"""Public checks of mistakes learners make in the quantization tasks that the hidden checks catch
on submission: a slice of zeros, a zero point worked out by hand, quantize_model's groups and its
input left untouched, small float16 values quantized as their float32 copy is, and llama.cpp's blocks
of float64 values written as those of their float32 copy. They need no oracle, so the student
edition ships them.
"""

from __future__ import annotations

import numpy as np
import pytest

from grader.suites.common import rng
from grader.suites.quantization.strategies import MODEL_CONFIG
from reference.model import Model

ROWS = np.array([[0.0, 0.0, 0.0], [-1.7, 1.0, 0.5]], dtype=np.float32)  # a row of zeros, and min -1.7, max 1


@pytest.mark.task("symmetric")
def test_symmetric_gives_a_row_of_zeros_scale_zero(kata):
    q, scale = kata.quantize_symmetric(ROWS, 8, axis=0)
    scale = np.asarray(scale, dtype=np.float64).ravel()
    assert scale[0] == 0 and not np.any(np.asarray(q)[0]), (
        f"quantize_symmetric(..., axis=0) gave the row of zeros scale {scale[0]!r} and codes {np.asarray(q)[0]}; "
        "a slice of zeros gets scale 0 and codes 0"
    )


@pytest.mark.task("affine")
def test_affine_of_two_rows_worked_out_by_hand(kata):
    # row 1: scale (1 - -1.7) / 255, zero point round(1.7 / scale) = round(160.56) = 161; row 0: 0 and 0
    _, scale, zero_point = kata.quantize_affine(ROWS, 8, axis=0)
    scale, zero_point = np.asarray(scale, dtype=np.float64).ravel(), np.asarray(zero_point).ravel()
    assert scale[0] == 0 and zero_point[0] == 0, (
        f"quantize_affine gave the row of zeros scale {scale[0]!r} and zero point {zero_point[0]!r}, expected 0, 0"
    )
    assert np.isclose(scale[1], 2.7 / 255, rtol=1e-6) and zero_point[1] == 161, (
        f"quantize_affine of [-1.7, 1, 0.5] gave scale {scale[1]!r} and zero point {zero_point[1]!r}, expected "
        "2.7 / 255 and round(1.7 / scale) = 161"
    )


@pytest.mark.task("model")
def test_quantize_model_leaves_the_model_it_is_given_untouched(kata):
    # the jail keeps its copy of the model for every later call given it: a 2-bit call that changed it would
    # leave a later 8-bit call far from the float weights
    model = Model.random(MODEL_CONFIG, seed=8)
    kata.quantize_model(model, 2, 16)
    w, got = model.weights["layers.0.wq"], np.asarray(kata.quantize_model(model, 8, 16).weights["layers.0.wq"])
    step = np.repeat(np.abs(w).reshape(2, 16, -1).max(axis=1), 16, axis=0) / 127  # each group's 8-bit step
    assert np.all(np.abs(got - w) <= 0.5 * step * (1 + 1e-3)), (
        "after a 2-bit call, quantize_model at 8 bits is further than half a step from the float weights of "
        "the model it was given: the first call changed that model"
    )


@pytest.mark.task("model")
@pytest.mark.parametrize("group_size", [8, 16])
def test_quantize_model_keeps_each_groups_largest_magnitude(kata, group_size):
    # symmetric groups map their largest |w| to +-qmax and back: a group of another size would not keep it
    model = Model.random(MODEL_CONFIG, seed=8)
    out = kata.quantize_model(model, 4, group_size)
    for name in ("layers.0.wq", "out"):
        w, got = model.weights[name], np.asarray(out.weights[name])
        groups = w.shape[-2] // group_size
        want = np.abs(w).reshape(*w.shape[:-2], groups, group_size, w.shape[-1]).max(axis=-2)
        have = np.abs(got).reshape(want.shape[:-2] + (groups, group_size, w.shape[-1])).max(axis=-2)
        assert np.allclose(have, want, rtol=1e-3), (
            f"quantize_model(..., group_size={group_size}) did not keep the largest |w| of each run of "
            f"{group_size} along {name}'s input axis (-2): are its groups of another size?"
        )


# Small float16 values, each at least 0.02 from a .5 tie of x / scale at 8 and at 4 bits: qmax / max|group|
# passes float16's 65504 for the first two groups at 8 bits.
SMALL_FLOAT16 = np.array(
    [[1.5e-3, 3e-4, -7e-4, 2e-4], [-1.2e-3, 9e-4, 1e-4, 0.0], [4e-5, -1e-5, 2.2e-5, 3e-6]], dtype=np.float16
).reshape(1, 12)


@pytest.mark.task("grouped")
@pytest.mark.parametrize("bits", [8, 4])
def test_grouped_codes_of_small_float16_values_are_those_of_the_same_values_in_float32(kata, bits):
    q16, scales = kata.quantize_grouped(SMALL_FLOAT16, bits, 4)
    q32, _ = kata.quantize_grouped(SMALL_FLOAT16.astype(np.float32), bits, 4)
    q16, q32 = np.asarray(q16), np.asarray(q32)
    assert np.asarray(scales).dtype == np.float16 and np.array_equal(q16, q32), (
        f"quantize_grouped at {bits} bits, groups of 4, gave float16 values {SMALL_FLOAT16.ravel().tolist()} the "
        f"codes {q16.ravel().tolist()}, and the same values in float32 {q32.ravel().tolist()} (scales "
        f"{np.asarray(scales).dtype}): a float16 x is quantized as its values are, whatever its dtype overflows"
    )


def _near_a_tie_in_float32(top: float) -> np.ndarray:
    """A float64 block of 32 whose value 0.49999999999 becomes 0.5 in float32: a tie there, not in float64."""
    x = np.zeros(32)
    x[:2] = top, 0.49999999999
    x[2:] = np.linspace(-top / 2, top / 3, 30)
    return x


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("which", ["q8_0", "q4_0"])
def test_q8_0_and_q4_0_of_float64_values_are_the_bytes_of_their_float32_copy(kata, which):
    # Q8_0 with max 127: d = 1 and 0.5 rounds away from zero to 1; Q4_0 with its extreme -8: d = 1 and
    # floor(0.5 + 8.5) = 9, where the float64 value gives 0 and 8.
    x = np.concatenate([_near_a_tie_in_float32(127.0 if which == "q8_0" else -8.0), rng(86).normal(size=64)])
    quantize = getattr(kata, f"quantize_{which}")
    got, want = bytes(quantize(x)), bytes(quantize(x.astype(np.float32)))
    assert got == want, (
        f"quantize_{which} of float64 values wrote other bytes than of the same values cast to float32 (first "
        f"difference at byte {next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}): llama.cpp takes "
        "its input as float32"
    )
