"""Public checks of mistakes learners make in the quantization tasks that the hidden checks catch
on submission: a slice of zeros, a zero point worked out by hand, and quantize_model's groups and
its input left untouched. They need no oracle, so the student edition ships them.
"""

from __future__ import annotations

import numpy as np
import pytest

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
        "the model it was given: the first call changed that model, which quantize_model must leave untouched"
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
