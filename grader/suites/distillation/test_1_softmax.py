"""Checks of the softmax task: softmax and log_softmax at a temperature."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.jailer import jail_client
from grader.suites import common
from grader.suites.common import float_arrays
from grader.suites.distillation.checks import _close, _isfinite
from grader.suites.distillation.oracles import _log_softmax64

PROB_ATOL = 1e-6  # softmax probabilities vs float64
LOGPROB_RTOL, LOGPROB_ATOL = 1e-6, 1e-5  # log-probabilities vs float64 (they reach -2e4)
FLAT_TOL = 1e-6  # slack when checking that KL to uniform never increases with T


@pytest.mark.task("softmax")
@given(
    x=float_arrays(st.tuples(st.integers(1, 5), st.integers(1, 8)), dtype=np.float64),
    temperature=st.one_of(st.floats(0.1, 10.0), st.integers(1, 10)),
)
def test_softmax_rows_sum_to_one(kata, x, temperature):
    p = np.asarray(kata.softmax(x, temperature), dtype=np.float64)
    assert p.shape == x.shape, f"softmax returned shape {p.shape} for logits of shape {x.shape}"
    assert np.all(_isfinite(p)), (
        f"softmax of logits up to ±100 at temperature {temperature:g} returned NaN or inf, where every probability "
        "is a finite number in [0, 1]"
    )
    assert np.all(p >= 0), "softmax returned a negative probability"
    sums = np.sum(p, axis=-1)
    worst = float(sums[np.argmax(np.abs(sums - 1))])
    assert abs(worst - 1) <= PROB_ATOL, f"a row of softmax sums to {worst:.9g}, not 1"


@pytest.mark.task("softmax")
@given(
    x=float_arrays((3, 6), -50, 50, dtype=np.float64),
    shift=float_arrays((3, 1), -100, 100, dtype=np.float64),
    temperature=st.one_of(st.floats(0.5, 4.0), st.integers(1, 4)),
)
def test_softmax_ignores_a_constant_added_to_a_row(kata, x, shift, temperature):
    p = np.asarray(kata.softmax(x, temperature), dtype=np.float64)
    shifted = np.asarray(kata.softmax(x + shift, temperature), dtype=np.float64)
    d = float(np.max(np.abs(p - shifted)))
    assert d <= PROB_ATOL, f"adding a constant to each row changed softmax by {d:.3g}"


# Rows whose largest logits lie 1e4 apart: each row needs its own maximum subtracted, not the array's.
ROWS_FAR_APART = np.array(
    [[1e4, 9990.0, 0, -1e4, 5e3], [-1e4, -9999.0, -1e4, -9998.0, -1e4], [0.0, 1.0, -1.0, 2.0, 0.5], [-5e3] * 5],
    dtype=np.float32,
)


@pytest.mark.task("softmax")
@given(
    x=float_arrays((4, 5), -1e4, 1e4, dtype=np.float32), temperature=st.one_of(st.floats(0.5, 4.0), st.integers(1, 4))
)
@example(x=np.array([[1e4, -1e4, 0, 9999.5, 1e4]] * 4, dtype=np.float32), temperature=1.0)
@example(x=np.full((4, 5), -1e4, dtype=np.float32), temperature=0.5)
@example(x=ROWS_FAR_APART, temperature=1.0)
def test_softmax_of_huge_logits_is_finite_and_matches_float64(kata, x, temperature):
    p = np.asarray(kata.softmax(x, temperature), dtype=np.float64)
    assert p.shape == x.shape, f"softmax returned shape {p.shape} for logits of shape {x.shape}"
    assert np.all(_isfinite(p)), "softmax of logits up to ±1e4 returned NaN or inf, where every probability is finite"
    want = np.exp(_log_softmax64(x, temperature))
    d = float(np.max(np.abs(p - want)))
    assert d <= PROB_ATOL, (
        f"softmax of logits up to ±1e4 differs from a float64 computation by {d:.3g}: work in float64, "
        "as the docstring says"
    )


@pytest.mark.task("softmax")
@given(
    x=float_arrays((4, 5), -1e4, 1e4, dtype=np.float32), temperature=st.one_of(st.floats(0.5, 4.0), st.integers(1, 4))
)
@example(x=np.array([[1e4, -1e4, 0, 9999.5, 1e4]] * 4, dtype=np.float32), temperature=1.0)
@example(x=np.array([[0.5, -1.0, 0, 2.0, 0.25]] * 4, dtype=np.float32), temperature=2.0)
@example(x=ROWS_FAR_APART, temperature=0.5)
def test_log_softmax_of_huge_logits_is_finite_and_matches_float64(kata, x, temperature):
    got = np.asarray(kata.log_softmax(x, temperature), dtype=np.float64)
    assert got.shape == x.shape, f"log_softmax returned shape {got.shape} for logits of shape {x.shape}"
    assert np.all(_isfinite(got)), (
        "log_softmax of logits up to ±1e4 returned NaN or -inf, where every log-probability is finite"
    )
    want = _log_softmax64(x, temperature)
    ok = _close(got, want, rtol=LOGPROB_RTOL, atol=LOGPROB_ATOL)
    d = float(np.max(np.abs(got - want)))
    assert ok, f"log_softmax differs from a float64 computation by {d:.3g}"


@pytest.mark.task("softmax")
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_and_log_softmax_return_float64(kata, fn, dtype):
    x = np.array([[1.0, -2.0, 0.5], [3.0, 3.0, -1.0]], dtype=dtype)
    got = np.asarray(getattr(kata, fn)(x, 2.0))
    assert got.dtype == np.float64, f"{fn} of {dtype.__name__} logits returned dtype {got.dtype}, not float64"


@pytest.mark.task("softmax")
def test_softmax_normalizes_along_the_given_axis(kata):
    x = common.rng(1).standard_normal((4, 7))
    p = np.asarray(kata.softmax(x, 2.0, axis=0), dtype=np.float64)
    want = np.exp(_log_softmax64(x.T, 2.0)).T
    assert p.shape == x.shape, f"softmax(axis=0) returned shape {p.shape} for logits of shape {x.shape}"
    d = float(np.max(np.abs(p - want)))
    assert d <= PROB_ATOL, f"softmax(axis=0) differs from normalizing each column by {d:.3g}"


# (shape, axis) beyond the (N, V) rows and last axis most checks use: the docstrings say any shape, any axis.
SHAPES_AND_AXES = [((4, 7), 0), ((3, 4, 5), 1), ((6,), -1)]


@pytest.mark.task("softmax")
@pytest.mark.parametrize("shape, axis", SHAPES_AND_AXES, ids=[f"{s}-axis{a}" for s, a in SHAPES_AND_AXES])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_and_log_softmax_normalize_along_the_given_axis_of_any_shape(kata, fn, shape, axis):
    x = 3.0 * common.rng(12).standard_normal(shape)
    got = np.asarray(getattr(kata, fn)(x, 2.0, axis=axis), dtype=np.float64)
    assert got.shape == x.shape, f"{fn}(axis={axis}) returned shape {got.shape} for logits of shape {x.shape}"
    want = _log_softmax64(x, 2.0, axis=axis)
    rtol, atol = (0.0, PROB_ATOL) if fn == "softmax" else (LOGPROB_RTOL, LOGPROB_ATOL)
    want = np.exp(want) if fn == "softmax" else want
    d = float(np.max(np.abs(got - want)))
    assert _close(got, want, rtol=rtol, atol=atol), (
        f"{fn}(axis={axis}) of logits of shape {x.shape} differs from normalizing along axis {axis} by {d:.3g}: "
        "every step (the maximum, the sum) runs along that axis"
    )


@pytest.mark.task("softmax")
def test_softmax_flattens_toward_uniform_as_temperature_grows(kata):
    rows = 3.0 * common.rng(2).standard_normal((3, 8))
    temps = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1e4]
    for row in rows:
        dist = []  # KL(p || uniform) = log V - entropy, at each temperature
        for T in temps:
            p = np.asarray(kata.softmax(row[None, :], T), dtype=np.float64)[0]
            dist.append(np.log(p.size) + float(np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0))))
        for i in range(1, len(temps)):
            assert dist[i] <= dist[i - 1] + FLAT_TOL, (
                f"raising the temperature from {temps[i - 1]:g} to {temps[i]:g} made softmax less uniform "
                f"(KL to uniform {dist[i - 1]:.4g} -> {dist[i]:.4g})"
            )
        p = np.asarray(kata.softmax(row[None, :], temps[-1]), dtype=np.float64)[0]
        assert np.max(np.abs(p - 1 / p.size)) < 1e-3, f"at temperature {temps[-1]:g} softmax is {p}, not nearly uniform"


@pytest.mark.task("softmax")
def test_softmax_approaches_one_hot_as_temperature_shrinks(kata):
    row = 0.5 * common.rng(3).permutation(8).astype(np.float64)  # distinct logits, gaps of at least 0.5
    best = int(np.argmax(row))
    last = 0.0
    for T in [2.0, 1.0, 0.5, 0.1, 0.02]:
        p = np.asarray(kata.softmax(row[None, :], T), dtype=np.float64)[0]
        assert p[best] >= last - FLAT_TOL, f"lowering the temperature to {T:g} lowered the top probability"
        last = p[best]
    assert last > 1 - 1e-6, f"at temperature 0.02 the top probability is {last:.6g}, not nearly 1 (one-hot)"


@pytest.mark.task("softmax")
@pytest.mark.parametrize("temperature", [1, 3, np.int64(2)], ids=["1", "3", "np.int64(2)"])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_and_log_softmax_take_an_int_temperature_as_that_number(kata, fn, temperature):
    """The temperature is "a finite number > 0": an int is one."""
    x = common.rng(43).standard_normal((3, 6)) * 4
    got = np.asarray(getattr(kata, fn)(x, temperature), dtype=np.float64)
    want = _log_softmax64(x, float(temperature))
    want = want if fn == "log_softmax" else np.exp(want)
    assert got.shape == x.shape and np.allclose(got, want, rtol=1e-9, atol=1e-12), (
        f"{fn}(logits, temperature={temperature!r}) differs from {fn} at temperature {float(temperature)}"
    )


@pytest.mark.task("softmax")
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_and_log_softmax_leave_the_callers_logits_unchanged(kata, fn):
    """The logits are kept in the jail and passed as that very array (float64, which np.asarray does not
    copy): after the call they must hold what they held, for the caller that uses them again. At every
    temperature: at 1, logits / T is the one division code may think it can skip."""
    x = common.rng(44).standard_normal((4, 5)) * 3
    for temperature in (2.0, 1.0, 1):
        logits = jail_client.put(getattr(kata, fn), x)
        _ = getattr(kata, fn)(logits, temperature)
        after = np.asarray(logits.copy())
        assert np.array_equal(after, x), (
            f"{fn}(logits, {temperature!r}) changed the caller's logits: a row that was {x[0].round(4).tolist()} "
            f"is now {after[0].round(4).tolist()}"
        )


@pytest.mark.task("softmax")
@pytest.mark.parametrize("temperature", [0.0, -1.0])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_rejects_a_temperature_that_is_not_positive(kata, fn, temperature):
    with pytest.raises(ValueError):
        getattr(kata, fn)(np.zeros((2, 3)), temperature)


@pytest.mark.task("softmax")
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_and_log_softmax_reject_non_finite_logits(kata, fn, bad):
    x = np.zeros((2, 3))
    x[1, 2] = bad
    with pytest.raises(ValueError):
        getattr(kata, fn)(x, 1.0)


@pytest.mark.task("softmax")
@pytest.mark.parametrize("axis", [2, -3])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_and_log_softmax_reject_an_axis_the_logits_do_not_have(kata, fn, axis):
    with pytest.raises(ValueError):
        getattr(kata, fn)(np.zeros((2, 3)), 1.0, axis=axis)
