"""Checks of the grouped task: one scale per group of G along the last axis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.suites.common import rng
from grader.suites.quantization.checks import REL_TOL, _assert_within_half_a_step, _codes, _first, _rel_tol
from grader.suites.quantization.oracles import _codes_match, _group_amax, _slice_amax
from grader.suites.quantization.strategies import BITS, tensors


@st.composite
def grouped_inputs(draw):
    """x (..., L) with G dividing L: 1-D, 2-D and 3-D (the docstring's ..., a stack of experts' weights), of
    every float dtype FLOATS draws; and G."""
    group_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    lead = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4))
    n_groups = draw(st.integers(1, 4))
    x = draw(tensors(st.just((*lead, n_groups * group_size))))
    return x, group_size


@pytest.mark.task("grouped")
@given(xg=grouped_inputs(), bits=BITS)
def test_grouped_codes_lie_in_range_with_one_scale_per_group(grp, xg, bits):
    x, group_size = xg
    q, scales = grp.quantize_grouped(x, bits, group_size)
    q = _codes(q, x.shape)
    qmax = 2 ** (bits - 1) - 1
    info = np.iinfo(q.dtype)
    assert info.min <= -qmax and info.max >= qmax, f"dtype {q.dtype} cannot hold codes in [-{qmax}, {qmax}]"
    assert q.min() >= -qmax and q.max() <= qmax, f"codes {q.min()}..{q.max()} leave [-{qmax}, {qmax}] at {bits} bits"
    want_shape = x.shape[:-1] + (x.shape[-1] // group_size,)
    assert np.shape(scales) == want_shape, (
        f"scales have shape {np.shape(scales)}, expected {want_shape} (one per group)"
    )
    want = x.astype(np.float64).reshape(*want_shape, group_size)
    want = np.abs(want).max(axis=-1) / qmax
    got = np.asarray(scales, dtype=np.float64)
    bad = ~np.isclose(got, want, rtol=_rel_tol(x), atol=0) & (want > 0)
    assert not bad.any(), f"scale of group {_first(bad)} is {got[bad][0]:.6g}, max|group| / qmax is {want[bad][0]:.6g}"


@pytest.mark.task("grouped")
@given(xg=grouped_inputs(), bits=BITS)
def test_grouped_error_is_at_most_half_a_step_of_its_group(grp, xg, bits):
    x, group_size = xg
    q, scales = grp.quantize_grouped(x, bits, group_size)
    x_hat = np.asarray(grp.dequantize_grouped(q, scales, group_size), dtype=np.float64)
    assert x_hat.shape == x.shape, f"dequantize_grouped returned shape {x_hat.shape}, expected {x.shape}"
    assert np.all(np.isfinite(x_hat)), "dequantize_grouped returned NaN or inf for finite x"
    _assert_within_half_a_step(x, x_hat, _group_amax(x, group_size), bits, " of its group")


@pytest.mark.task("grouped")
@given(xg=grouped_inputs(), bits=BITS)
def test_grouped_requantizing_a_dequantized_tensor_gives_the_same_codes(grp, xg, bits):
    x, group_size = xg
    q1, scales = grp.quantize_grouped(x, bits, group_size)
    q1 = _codes(q1, x.shape)
    per_element = np.repeat(np.asarray(scales, dtype=np.float64), group_size, axis=-1)
    x_hat = (q1 * per_element).astype(x.dtype)
    q2 = _codes(grp.quantize_grouped(x_hat, bits, group_size)[0], x.shape)
    bad = q1 != q2
    assert not bad.any(), f"code at {_first(bad)} was {q1[bad][0]}, quantizing its dequantized value gives {q2[bad][0]}"


@pytest.mark.task("grouped")
def test_an_outlier_only_coarsens_its_own_group(kata):
    group_size, bits = 16, 4
    x = rng(21).standard_normal((2, 8 * group_size)).astype(np.float32)
    spiked = x.copy()
    spiked[1, 5 * group_size + 3] = 1000.0  # in group 5 of row 1

    def group_errors(a):
        q, scales = kata.quantize_grouped(a, bits, group_size)
        err = np.abs(np.asarray(kata.dequantize_grouped(q, scales, group_size), np.float64) - x)
        err[1, 5 * group_size + 3] = 0.0  # the outlier itself is not judged
        return err.reshape(2, -1, group_size).max(axis=-1)

    before, after = group_errors(x), group_errors(spiked)
    others = np.ones_like(before, dtype=bool)
    others[1, 5] = False
    moved = others & ~np.isclose(after, before, rtol=REL_TOL, atol=0)
    assert not moved.any(), (
        f"an outlier in group 5 of row 1 changed the error of group {int(np.argwhere(moved)[0][1])} "
        f"of row {int(np.argwhere(moved)[0][0])}: do all groups share one scale?"
    )
    assert after[1, 5] > 2 * before[1, 5], "the outlier's own group should come back coarser, its scale grew"


@pytest.mark.task("grouped")
@given(x=tensors(st.tuples(st.integers(1, 5), st.integers(1, 12))), bits=BITS)
def test_one_group_per_row_gives_the_per_channel_symmetric_codes(grp, x, bits):
    q, _ = grp.quantize_grouped(x, bits, x.shape[-1])
    q = _codes(q, x.shape)
    qmax = 2 ** (bits - 1) - 1
    scale = _slice_amax(x, 0) / qmax  # one scale per row: per-channel symmetric with axis=0
    ratio = np.divide(x.astype(np.float64), scale, out=np.zeros(x.shape), where=scale > 0)
    bad = ~_codes_match(q, ratio)
    assert not bad.any(), (
        f"code at {_first(bad)} is {q[bad][0]}, per-channel symmetric gives {np.round(ratio[bad][0]):g}"
    )


@pytest.mark.task("grouped")
def test_grouped_all_zero_groups_dequantize_to_exact_zeros(kata):
    x = np.zeros((2, 8), dtype=np.float32)
    x[0, :4] = [1.0, -3.0, 2.0, 0.5]
    q, scales = kata.quantize_grouped(x, 4, 4)
    x_hat = np.asarray(kata.dequantize_grouped(q, scales, 4))
    assert np.all(np.asarray(q)[:, 4:] == 0) and np.all(np.asarray(q)[1] == 0), "groups of zeros got nonzero codes"
    assert np.all(np.isfinite(x_hat)), "a group of zeros dequantizes to NaN or inf (0 / 0?)"
    assert np.all(x_hat[x == 0] == 0), "groups of zeros do not come back as exact zeros"


@pytest.mark.task("grouped")
def test_grouped_gives_a_group_of_zeros_scale_zero(kata):
    x = np.zeros((2, 8), dtype=np.float32)
    x[0, :4] = [1.0, -3.0, 2.0, 0.5]
    _, scales = kata.quantize_grouped(x, 4, 4)
    got = np.asarray(scales, dtype=np.float64)
    assert got.shape == (2, 2), f"scales have shape {got.shape}, expected (2, 2) (one per group of 4)"
    zero = np.array([[False, True], [True, True]])
    assert np.all(got[zero] == 0), f"groups of zeros got scales {got[zero].tolist()}, not 0"


@pytest.mark.task("grouped")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_grouped_rounds_exact_halves_to_even(kata, dtype):
    # Each group's max|x| is 7 = qmax at 4 bits: qmax / max|group| = 1, so every .5 below is an exact tie.
    x = np.array([[7.0, 2.5, -1.5, 0.5, 3.5, -7.0, 1.0, 6.5]], dtype=dtype)
    want = [[7, 2, -2, 0, 4, -7, 1, 6]]
    q, _ = kata.quantize_grouped(x, 4, 4)
    got = _codes(q, x.shape).tolist()
    assert got == want, f"quantize_grouped({x.tolist()}, 4, 4) gave codes {got}; round half to even gives {want}"


@pytest.mark.task("grouped")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_grouped_scales_and_dequantized_values_keep_the_float_dtype(kata, dtype):
    x = rng(22).standard_normal((3, 16)).astype(dtype)
    q, scales = kata.quantize_grouped(x, 4, 8)
    got = np.asarray(scales).dtype
    assert got == dtype, f"quantize_grouped gave scales of dtype {got} for x of dtype {x.dtype}; they come in x's"
    codes = np.array([[3, -7, 0, 1], [5, -2, 7, 0]], dtype=np.int8)
    x_hat = np.asarray(kata.dequantize_grouped(codes, np.array([[0.5, 0.25], [2.0, 1.0]], dtype=dtype), 2))
    assert x_hat.dtype == dtype, f"dequantize_grouped returned dtype {x_hat.dtype} for {dtype.__name__} scales"


@pytest.mark.task("grouped")
@pytest.mark.parametrize("bits", [8, 4])
def test_grouped_float16_groups_of_small_values_get_round_x_over_scale_codes(kata, bits):
    """float16 holds at most 65504: qmax / max|group| taken in float16 overflows to inf for a group whose
    max|x| is below qmax / 65504 (2e-3 at 8 bits), and every nonzero code becomes +-qmax."""
    x = np.array(
        [[1e-4, -5e-5, 2.5e-5, 0.0], [3e-3, 1e-3, -2e-3, 0.0], [6e-6, -2e-6, 1e-6, 4e-6], [0.5, -0.25, 0.125, 0.0]],
        dtype=np.float16,
    ).reshape(1, 16)
    q, scales = kata.quantize_grouped(x, bits, 4)
    q = _codes(q, x.shape)
    got = np.asarray(scales).dtype
    assert got == np.float16, f"quantize_grouped gave scales of dtype {got} for float16 x; they come in x's"
    qmax = 2 ** (bits - 1) - 1
    amax = _group_amax(x, 4)
    ratio = x.astype(np.float64) / (amax / qmax)
    bad = ~_codes_match(q, ratio)
    assert not bad.any(), (
        f"float16 value {float(x[bad][0]):.4g} in a group whose max|x| is {amax[bad][0]:.3g} got code {q[bad][0]}, "
        f"round(x / scale) is {np.round(ratio[bad][0]):g}"
    )


@pytest.mark.task("grouped")
def test_grouped_rejects_an_indivisible_group_size_naming_both_numbers(kata):
    with pytest.raises(ValueError) as info:
        kata.quantize_grouped(np.ones((2, 12), np.float32), 4, 5)
    message = str(info.value)
    assert "5" in message and "12" in message, (
        f"the error should name group_size 5 and the length 12, it says: {message}"
    )


@pytest.mark.task("grouped")
@pytest.mark.parametrize(
    "x, bits",
    [
        (np.ones(8, np.float32), 1),
        (np.ones(8, np.float32), 9),
        (np.arange(8), 4),
        (np.array([1.0, np.nan, 2.0, 3.0]), 4),
        (np.array([1.0, 2.0, -np.inf, 3.0]), 4),
    ],
    ids=["bits=1", "bits=9", "int", "nan", "inf"],
)
def test_grouped_rejects_bad_bits_integers_nan_and_inf(kata, x, bits):
    with pytest.raises(ValueError):
        kata.quantize_grouped(x, bits, 4)


@pytest.mark.task("grouped")
@pytest.mark.parametrize(
    "q, scales",
    [
        (np.int8(3), np.ones(1, np.float32)),  # a scalar: no axis to group
        (np.zeros((2, 8), np.int8), np.ones((2, 3), np.float32)),  # 8 // 4 = 2 groups a row, not 3
        (np.zeros((2, 8), np.int8), np.ones((3, 2), np.float32)),  # rows that do not match
        (np.zeros((2, 8), np.int8), np.ones(2, np.float32)),  # one row of scales for two rows of codes
        (np.zeros((2, 8), np.int8), np.ones((1, 2), np.float32)),  # the same, kept 2-D: it only broadcasts
    ],
    ids=["scalar", "groups", "rows", "one row", "one row 2-d"],
)
def test_dequantize_grouped_rejects_scales_that_do_not_fit_the_codes(kata, q, scales):
    with pytest.raises(ValueError):
        kata.dequantize_grouped(q, scales, 4)
