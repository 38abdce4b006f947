"""Checks of the symmetric and affine tasks: uniform quantization, per tensor or per channel,
and the checks both per-tensor quantizers (and for the codes' dtype, grouped) share, a case
per task.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.suites.common import rng
from grader.suites.quantization.checks import REL_TOL, _assert_within_half_a_step, _codes, _first, _rel_tol
from grader.suites.quantization.oracles import _affine_expected, _codes_match, _other_axes, _slice_amax
from grader.suites.quantization.strategies import BITS, _one_bad, tensors


@st.composite
def tensor_and_axis(draw):
    x = draw(tensors())
    axis = draw(st.sampled_from([None, *range(x.ndim), -1] if x.ndim else [None]))  # a 0-d x has no axis
    return x, axis


def _broadcast(a, shape, what: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        raise AssertionError(f"{what} of shape {a.shape} does not broadcast against x of shape {shape}") from None


def _assert_monotone(quantize, x: np.ndarray, bits: int) -> None:
    """The codes quantize gives the values of x, sorted, never go down."""
    x = np.sort(x)
    q = _codes(quantize(x, bits)[0], x.shape)
    drops = np.flatnonzero(np.diff(q.astype(np.int64)) < 0)
    assert drops.size == 0, (
        f"{x[drops[0] + 1]:.6g} > {x[drops[0]]:.6g} got the smaller code ({q[drops[0] + 1]} < {q[drops[0]]})"
    )


def _scale_shape(x: np.ndarray, axis) -> tuple[int, ...]:
    """The documented shape of a per-tensor or per-channel scale: () for axis=None, else x.shape with
    every axis but `axis` set to 1."""
    return () if axis is None else tuple(n if a == axis % x.ndim else 1 for a, n in enumerate(x.shape))


def _assert_scale_like(scale, x: np.ndarray, axis, what: str = "scale") -> None:
    """scale has the documented shape for axis and x's float dtype."""
    want = _scale_shape(x, axis)
    assert np.shape(scale) == want, (
        f"{what} for axis={axis} on shape {x.shape} has shape {np.shape(scale)}, expected {want} "
        "(() for axis=None, else x.shape with every axis but `axis` set to 1)"
    )
    dtype = np.asarray(scale).dtype
    assert dtype == x.dtype, f"{what} has dtype {dtype} for x of dtype {x.dtype}; it comes in x's float dtype"


def _zero_slice_cases() -> tuple[np.ndarray, np.ndarray]:
    """An all-zero (3, 4) tensor, and one whose rows 1 and 2 are zeros."""
    x = np.zeros((3, 4), dtype=np.float32)
    x[0] = [1.0, -2.0, 3.0, 0.5]
    return np.zeros_like(x), x


def _assert_zero_slices_get(values, x: np.ndarray, axis, what: str) -> None:
    """values (a scale or zero point per slice) are 0 on every slice of x along axis that is all zeros."""
    got = _broadcast(values, x.shape, what)
    bad = np.broadcast_to(_slice_amax(x, axis) == 0, x.shape) & (got != 0)
    assert not bad.any(), f"a slice of zeros (axis={axis}) got {what} {got[bad][0]:g}, not 0"


# ------------------------------------------------------------------ symmetric
def _symmetric_round_trip(sym, x: np.ndarray, bits: int, axis) -> np.ndarray:
    """x through quantize_symmetric and dequantize_symmetric, as float64 of x's shape."""
    q, scale = sym.quantize_symmetric(x, bits, axis=axis)
    x_hat = np.asarray(sym.dequantize_symmetric(q, scale), dtype=np.float64)
    assert x_hat.shape == x.shape, f"dequantize_symmetric returned shape {x_hat.shape}, expected {x.shape}"
    return x_hat


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
def test_symmetric_codes_lie_in_range_in_a_wide_enough_integer_dtype(sym, xa, bits):
    x, axis = xa
    q, _ = sym.quantize_symmetric(x, bits, axis=axis)
    q = _codes(q, x.shape)
    qmax = 2 ** (bits - 1) - 1
    info = np.iinfo(q.dtype)
    assert info.min <= -qmax and info.max >= qmax, f"dtype {q.dtype} cannot hold codes in [-{qmax}, {qmax}]"
    assert q.min() >= -qmax and q.max() <= qmax, f"codes {q.min()}..{q.max()} leave [-{qmax}, {qmax}] at {bits} bits"


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]], dtype=np.float32), 0), bits=2)
def test_symmetric_scale_is_max_abs_over_qmax_per_slice(sym, xa, bits):
    x, axis = xa
    _, scale = sym.quantize_symmetric(x, bits, axis=axis)
    scale = np.asarray(scale, dtype=np.float64)
    n = 1 if axis is None else x.shape[axis]
    assert scale.size == n, (
        f"axis={axis} on shape {x.shape} needs {n} scale(s), one per index along that axis; got shape {scale.shape}"
    )
    got = _broadcast(scale, x.shape, "scale")
    want = np.broadcast_to(_slice_amax(x, axis) / (2 ** (bits - 1) - 1), x.shape)
    bad = ~np.isclose(got, want, rtol=_rel_tol(x), atol=0) & (want > 0)
    assert not bad.any(), f"scale at {_first(bad)} is {got[bad][0]:.6g}, max|x| / qmax there is {want[bad][0]:.6g}"


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([0.25, -1.0, 0.75, 0.5], dtype=np.float32), None), bits=3)
def test_symmetric_error_is_at_most_half_a_step(sym, xa, bits):
    x, axis = xa
    x_hat = _symmetric_round_trip(sym, x, bits, axis)
    _assert_within_half_a_step(x, x_hat, np.broadcast_to(_slice_amax(x, axis), x.shape), bits)


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
def test_symmetric_largest_magnitude_comes_back_within_float_rounding(sym, xa, bits):
    x, axis = xa
    x_hat = _symmetric_round_trip(sym, x, bits, axis)
    amax = np.broadcast_to(_slice_amax(x, axis), x.shape)
    is_max = (np.abs(x) == amax) & (amax > 0)
    err = np.abs(x_hat - x)
    bad = is_max & (err > _rel_tol(x) * amax)
    assert not bad.any(), f"the largest-magnitude value {x[bad][0]:.6g} comes back as {x_hat[bad][0]:.6g}"


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
def test_requantizing_a_dequantized_tensor_gives_the_same_codes(sym, xa, bits):
    x, axis = xa
    q1, scale = sym.quantize_symmetric(x, bits, axis=axis)
    q1 = _codes(q1, x.shape)
    x_hat = (q1 * _broadcast(scale, x.shape, "scale")).astype(x.dtype)
    q2 = _codes(sym.quantize_symmetric(x_hat, bits, axis=axis)[0], x.shape)
    bad = q1 != q2
    assert not bad.any(), f"code at {_first(bad)} was {q1[bad][0]}, quantizing its dequantized value gives {q2[bad][0]}"


@pytest.mark.task("symmetric")
@given(x=tensors(st.integers(2, 40)), bits=BITS)
def test_symmetric_codes_are_monotone_in_the_input(sym, x, bits):
    _assert_monotone(sym.quantize_symmetric, x, bits)


@pytest.mark.task("symmetric")
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_all_zero_slices_get_zero_codes_and_dequantize_to_exact_zeros(kata, axis):
    x = np.zeros((3, 4), dtype=np.float32)
    x[0] = [1.0, -2.0, 3.0, 0.5]
    x[:, 0] = [1.0, 0.0, 0.0]
    for case in (np.zeros_like(x), x):
        q, scale = kata.quantize_symmetric(case, 4, axis=axis)
        q = _codes(q, x.shape)
        x_hat = np.asarray(kata.dequantize_symmetric(q, scale), dtype=np.float64)
        zero = _slice_amax(case, axis) == 0
        zero = np.broadcast_to(zero, x.shape)
        assert np.all(np.isfinite(x_hat)), (
            f"dequantizing gives {x_hat[~np.isfinite(x_hat)][0]} for a slice of zeros (0 / 0?)"
        )
        assert np.all(q[zero] == 0), f"a slice of zeros (axis={axis}) got nonzero codes {q[zero]}"
        assert np.all(x_hat[zero] == 0), f"a slice of zeros (axis={axis}) dequantizes to {x_hat[zero]}, not exact zeros"


@pytest.mark.task("symmetric")
def test_per_channel_error_is_never_above_per_tensor_error(kata):
    g = rng(11)
    magnitudes = 4.0 ** -np.arange(6)  # channels 4x apart in size
    for axis in (0, 1):
        x = (g.standard_normal((6, 64)) * magnitudes[:, None]).astype(np.float32)
        x = x if axis == 0 else np.ascontiguousarray(x.T)
        err = {}
        for mode in (None, axis):
            q, scale = kata.quantize_symmetric(x, 4, axis=mode)
            err[mode] = np.max(
                np.abs(np.asarray(kata.dequantize_symmetric(q, scale), np.float64) - x), axis=_other_axes(2, axis)
            )
        worse = err[axis] > err[None] * (1 + REL_TOL)
        assert not worse.any(), (
            f"with axis={axis}, channel {int(np.argmax(worse))} comes back {err[axis][worse][0]:.3g} off, "
            f"worse than {err[None][worse][0]:.3g} with one scale for the whole tensor"
        )
        assert err[axis][-1] < err[None][-1] / 4, (
            f"with axis={axis} the smallest channel should come back far closer than with one scale "
            f"({err[axis][-1]:.3g} vs {err[None][-1]:.3g}): is the scale taken per channel?"
        )


@pytest.mark.task("symmetric")
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_symmetric_gives_a_slice_of_zeros_scale_zero(kata, axis):
    for x in _zero_slice_cases():
        _, scale = kata.quantize_symmetric(x, 4, axis=axis)
        _assert_zero_slices_get(scale, x, axis, "scale")


# Exact ties: the largest magnitude makes the scale a power of two (1, or 1.5 / 3 = 0.5), so x / scale lands
# on n + 0.5 exactly however it is computed. (x, bits, codes rounded half to even.)
SYMMETRIC_TIES = {
    "scale 1": ([7.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 6.5], 4, [7, 0, 2, 2, 0, -2, -2, 6]),
    "scale 0.5": ([1.5, 0.25, 0.75, -1.25], 3, [3, 0, 2, -2]),
}


@pytest.mark.task("symmetric")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(SYMMETRIC_TIES), ids=str)
def test_symmetric_rounds_exact_halves_to_even(kata, case, dtype):
    x, bits, want = SYMMETRIC_TIES[case]
    q, _ = kata.quantize_symmetric(np.array(x, dtype=dtype), bits)
    got = _codes(q, (len(x),)).tolist()
    assert got == want, f"quantize_symmetric({x}, bits={bits}) gave codes {got}; round half to even gives {want}"


def _scale_shape_examples(test):
    """The explicit examples of the scale-shape checks: per tensor, along an axis, along a negative axis, float64,
    and a 0-d x (any shape: its scale has shape ())."""
    small = [[1.0, -2.0], [0.5, 0.0]]
    cases = [((np.array(small, np.float32), None), 8), ((np.array(small, np.float32), 1), 4)]
    cases.append(((np.array(small, np.float64), -2), 3))
    cases.append(((np.array(-2.5, np.float32), None), 4))
    for xa, bits in reversed(cases):
        test = example(xa=xa, bits=bits)(test)
    return test


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
@_scale_shape_examples
def test_symmetric_scale_has_the_input_dtype_and_the_documented_shape(sym, xa, bits):
    x, axis = xa
    _, scale = sym.quantize_symmetric(x, bits, axis=axis)
    _assert_scale_like(scale, x, axis)


@pytest.mark.task("symmetric")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_dequantize_symmetric_returns_the_scale_dtype(kata, dtype):
    q = np.array([[3, -7, 0], [1, 5, -2]], dtype=np.int8)
    for scale in (np.array(0.5, dtype=dtype), np.array([[0.5], [0.25]], dtype=dtype)):
        x_hat = np.asarray(kata.dequantize_symmetric(q, scale))
        assert x_hat.dtype == dtype, f"dequantize_symmetric returned dtype {x_hat.dtype} for a {dtype.__name__} scale"
        want = q * scale.astype(np.float64)
        assert np.array_equal(x_hat, want), f"dequantize_symmetric gave {x_hat.tolist()}, q * scale is {want.tolist()}"


# Both per-tensor quantizers refuse the same inputs: one check, a case per task.
PER_TENSOR = {"symmetric": "quantize_symmetric", "affine": "quantize_affine"}


BAD_TENSORS = {"integers": np.arange(8), "nan": _one_bad(np.nan), "inf": _one_bad(np.inf), "-inf": _one_bad(-np.inf)}


@pytest.mark.parametrize("task", ["symmetric", "affine"])
@pytest.mark.parametrize("bits", [1, 9, 0])
def test_per_tensor_quantizers_reject_bits_out_of_range(kata, task, bits):
    with pytest.raises(ValueError):
        getattr(kata, PER_TENSOR[task])(np.ones(4, np.float32), bits)


@pytest.mark.parametrize("task", ["symmetric", "affine"])
@pytest.mark.parametrize("x", list(BAD_TENSORS.values()), ids=list(BAD_TENSORS))
def test_per_tensor_quantizers_reject_integer_nan_and_inf_input(kata, task, x):
    with pytest.raises(ValueError):
        getattr(kata, PER_TENSOR[task])(x, 8)


def _documented_integer_outputs(kata, task: str, x: np.ndarray) -> list[tuple[str, np.ndarray, type]]:
    """(what, the learner's array, its documented dtype) for the integer outputs of task's quantizer on x (2, 4)."""
    if task == "symmetric":
        return [("codes", kata.quantize_symmetric(x, 4, axis=1)[0], np.int8)]
    if task == "affine":
        q, _, zero_point = kata.quantize_affine(x, 4, axis=0)
        return [("codes", q, np.uint8), ("zero_point", zero_point, np.int64)]
    return [("codes", kata.quantize_grouped(x, 4, 2)[0], np.int8)]


# int8 (uint8) codes take one byte a value: the storage a quantizer exists to save.
@pytest.mark.parametrize("task", ["symmetric", "affine", "grouped"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_quantizers_return_codes_in_their_documented_integer_dtype(kata, task, dtype):
    x = np.array([[1.0, -2.0, 0.5, 0.0], [3.0, 0.25, -1.0, 2.0]], dtype=dtype)
    for what, got, want in _documented_integer_outputs(kata, task, x):
        got = np.asarray(got).dtype
        assert got == want, f"quantize_{task} returned {what} of dtype {got}; the docstring promises {np.dtype(want)}"


# --------------------------------------------------------------------- affine
@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@example(
    xa=(np.array([-1.5, 1.5, 0.5], dtype=np.float32), None), bits=2
)  # zero point 1.5 ties to 2: 1.5 must clamp to 3
@example(xa=(np.zeros((2, 3), dtype=np.float32), None), bits=8)
@example(xa=(np.array([[0.0, 0.0], [1.0, -2.0]], dtype=np.float64), 0), bits=4)
def test_affine_codes_lie_in_range_in_a_wide_enough_integer_dtype(aff, xa, bits):
    x, axis = xa
    q, _, zero_point = aff.quantize_affine(x, bits, axis=axis)
    q = _codes(q, x.shape)
    qmax = 2**bits - 1
    info = np.iinfo(q.dtype)
    assert info.min <= 0 and info.max >= qmax, f"dtype {q.dtype} cannot hold codes in [0, {qmax}]"
    assert q.min() >= 0 and q.max() <= qmax, f"codes {q.min()}..{q.max()} leave [0, {qmax}] at {bits} bits"
    zp = np.asarray(zero_point, dtype=np.float64)
    assert np.all(zp == np.round(zp)), f"zero_point must be a whole number (an integer code), got {zp.ravel()[:4]}"
    assert np.all((zp >= 0) & (zp <= qmax)), f"zero_point {zp.ravel()[:4]} leaves [0, {qmax}]"


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([-1.0, 1.0, 0.3], dtype=np.float32), None), bits=8)
@example(xa=(np.array([[-3.0, 0.1], [2.0, 5.0]], dtype=np.float64), 1), bits=2)
def test_affine_scale_and_zero_point_follow_the_pytorch_formulas(aff, xa, bits):
    x, axis = xa
    _, scale, zero_point = aff.quantize_affine(x, bits, axis=axis)
    n = 1 if axis is None else x.shape[axis]
    assert np.size(scale) == n and np.size(zero_point) == n, (
        f"axis={axis} on shape {x.shape} needs {n} scale(s) and zero point(s), one per index along that axis; "
        f"got shapes {np.shape(scale)} and {np.shape(zero_point)}"
    )
    want_scale, ratio = _affine_expected(x, bits, axis)
    got_scale = _broadcast(scale, x.shape, "scale")
    zp = _broadcast(zero_point, x.shape, "zero_point")
    bad = ~np.isclose(got_scale, want_scale, rtol=_rel_tol(x), atol=0) & (want_scale > 0)
    assert not bad.any(), (
        f"scale at {_first(bad)} is {got_scale[bad][0]:.6g}, (max_pos - min_neg) / qmax is {want_scale[bad][0]:.6g}"
    )
    bad = ~_codes_match(zp, ratio) & (want_scale > 0)
    assert not bad.any(), (
        f"zero_point at {_first(bad)} is {zp[bad][0]:g}, round(-min_neg / scale) is {np.round(ratio[bad][0]):g}"
    )


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([-1.0, 1.0, 0.3], dtype=np.float32), None), bits=8)
@example(xa=(np.array([-1.5, 1.5, 0.5], dtype=np.float32), None), bits=2)
def test_affine_error_is_at_most_half_a_step(aff, xa, bits):
    x, axis = xa
    q, scale, zero_point = aff.quantize_affine(x, bits, axis=axis)
    x_hat = np.asarray(aff.dequantize_affine(q, scale, zero_point), dtype=np.float64)
    assert x_hat.shape == x.shape, f"dequantize_affine returned shape {x_hat.shape}, expected {x.shape}"
    step, _ = _affine_expected(x, bits, axis)
    amax = np.broadcast_to(_slice_amax(x, axis), x.shape)
    err = np.abs(x_hat - x)
    bad = err > step / 2 + _rel_tol(x) * amax
    assert not bad.any(), (
        f"element {_first(bad)} ({x[bad][0]:.6g}) comes back {err[bad][0]:.4g} off; half a step is "
        f"{step[bad][0] / 2:.4g}"
    )


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([0.0, 0.0], dtype=np.float32), None), bits=8)
@example(xa=(np.array([0.0, 3.0, 7.0], dtype=np.float32), None), bits=2)
@example(xa=(np.array([-5.0, 0.0, -1.0], dtype=np.float64), None), bits=3)
def test_affine_represents_zero_exactly(aff, xa, bits):
    x, axis = xa
    x = x.copy()
    x.flat[0] = 0.0
    q, scale, zero_point = aff.quantize_affine(x, bits, axis=axis)
    x_hat = np.asarray(aff.dequantize_affine(q, scale, zero_point))
    zero = x == 0
    assert np.all(x_hat[zero] == 0), f"0.0 comes back as {x_hat[zero][x_hat[zero] != 0][0]!r}, not exactly 0"


@pytest.mark.task("affine")
@given(x=tensors(st.integers(2, 40)), bits=BITS)
def test_affine_codes_are_monotone_in_the_input(aff, x, bits):
    _assert_monotone(aff.quantize_affine, x, bits)


@pytest.mark.task("affine")
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_affine_gives_a_slice_of_zeros_scale_and_zero_point_zero(kata, axis):
    for x in _zero_slice_cases():
        _, scale, zero_point = kata.quantize_affine(x, 4, axis=axis)
        _assert_zero_slices_get(scale, x, axis, "scale")
        _assert_zero_slices_get(zero_point, x, axis, "zero point")


# Exact ties: max_pos - min_neg = 3 = qmax at 2 bits makes the scale 1, so x / scale and -min_neg / scale
# land on n + 0.5 exactly. (x, codes, zero point, rounded half to even.)
AFFINE_TIES = {
    # zero point round(1) = 1; codes round(x) + 1 with 0.5 -> 0 and -0.5 -> -0.
    "codes": ([-1.0, 2.0, 0.5, -0.5, 1.5], [0, 3, 1, 1, 3], 1),
    # zero point round(0.5) = 0; codes round(x) with -0.5 -> -0, 2.5 -> 2, 1.5 -> 2.
    "zero point": ([-0.5, 2.5, 1.5], [0, 2, 2], 0),
}


@pytest.mark.task("affine")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(AFFINE_TIES), ids=str)
def test_affine_rounds_exact_halves_to_even(kata, case, dtype):
    x, want_codes, want_zero_point = AFFINE_TIES[case]
    q, _, zero_point = kata.quantize_affine(np.array(x, dtype=dtype), 2)
    got = _codes(q, (len(x),)).tolist()
    assert np.ndim(zero_point) == 0 and int(zero_point) == want_zero_point, (
        f"quantize_affine({x}, bits=2) gave zero point {zero_point}; round(-min_neg / scale), half to even, "
        f"is {want_zero_point}"
    )
    assert got == want_codes, (
        f"quantize_affine({x}, bits=2) gave codes {got}; round(x / scale) + zero_point, half to even, is {want_codes}"
    )


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@_scale_shape_examples
def test_affine_scale_and_zero_point_have_the_documented_shape(aff, xa, bits):
    x, axis = xa
    _, scale, zero_point = aff.quantize_affine(x, bits, axis=axis)
    _assert_scale_like(scale, x, axis)
    want = _scale_shape(x, axis)
    assert np.shape(zero_point) == want, (
        f"zero_point for axis={axis} on shape {x.shape} has shape {np.shape(zero_point)}, expected {want}"
    )


@pytest.mark.task("affine")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_dequantize_affine_returns_the_scale_dtype(kata, dtype):
    q = np.array([[3, 15, 0], [1, 5, 2]], dtype=np.uint8)
    zero_point = np.array([[4], [2]], dtype=np.int64)
    scale = np.array([[0.5], [0.25]], dtype=dtype)
    x_hat = np.asarray(kata.dequantize_affine(q, scale, zero_point))
    assert x_hat.dtype == dtype, f"dequantize_affine returned dtype {x_hat.dtype} for a {dtype.__name__} scale"
    want = (q.astype(np.int64) - zero_point) * scale.astype(np.float64)
    assert np.array_equal(x_hat, want), (
        f"dequantize_affine gave {x_hat.tolist()}, (q - zero_point) * scale is {want.tolist()}"
    )
