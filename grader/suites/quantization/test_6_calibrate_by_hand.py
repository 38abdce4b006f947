"""Public checks of the calibrate task: the percentile and mse scales of a few tiny inputs, each
worked out by hand in the comments (the sorted |x| and its rank; each candidate clip's squared
error), and a float16 x calibrated as its float64 values are. They need no oracle, so the student
edition ships them beside the hidden checks that compare random inputs with the formulas.
"""

from __future__ import annotations

import numpy as np
import pytest

from grader.suites.common import rng

# A scale may differ from the value worked out by hand by this many units in the last place of x's dtype.
HAND_ULPS = 4

HALF = {"percentile": 50}
# name -> (x, bits, method, keyword arguments, the scale worked out by hand). qmax = 2^(bits-1) - 1.
PERCENTILE_BY_HAND = {
    # |x| sorted: 1 1 2 2 3 3 4 4; rank (8 - 1) * 50 / 100 = 3.5, halfway from 2 to 3 (x itself gives 0 there)
    "percentile 50 of |x|, interpolated": (
        [-4.0, -3.0, -2.0, -1.0, 1.0, 2.0, 3.0, 4.0],
        4,
        "percentile",
        HALF,
        2.5 / 7,
    ),
    # |x| = 1..1001; the default 99.9: rank 1000 * 0.999 = 999, the value 1000 (99 would give 991)
    "percentile 99.9 by default": (np.arange(1.0, 1002.0), 8, "percentile", {}, 1000 / 127),
    "percentile 100 is max|x|": ([1.0, -5.0, 2.0], 4, "percentile", {"percentile": 100}, 5 / 7),
    # |x| sorted: 0 0 0 0 3; rank 4 * 50 / 100 = 2, a 0: scale 0, though max|x| is 3
    "percentile 50 of mostly zeros is 0": ([0.0, 0.0, 3.0, 0.0, 0.0], 4, "percentile", HALF, 0.0),
}
MSE_BY_HAND = {
    "mse of all zeros is 0": ([0.0, 0.0, 0.0, 0.0], 4, "mse", {}, 0.0),
    # grid 1: the one candidate is c_1 = max|x| = 2
    "mse with grid 1 is min-max": ([2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2, "mse", {"grid": 1}, 2.0),
    # 2 bits, qmax 1, clips 1 and 2: at 1 the 2 clips to 1 (error 1); at 2 each 1 / 2 = 0.5 rounds to 0 (error 7)
    "mse clips one outlier at 2 bits": ([2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 2, "mse", {"grid": 2}, 1.0),
    # 3 bits, qmax 3, clips 2 4 6 8: at 8 (scale 8/3) codes 3 1 0 1 2, error 1/9 + 1 + 4/9 + 1/9 = 5/3; at 6 the 8
    # alone errs (8 - 6)^2 = 4, and lower clips more
    "mse at 3 bits divides the clip by qmax": ([8.0, 3.0, -1.0, 2.0, 5.0], 3, "mse", {"grid": 4}, 8 / 3),
    # ties: equal errors go to the larger clip
    # clips 1 2 3 4 err 12 4 4 12: at 2 the 4 clips (4); at 3 the 4 clips (1) and each 2 -> 3 (1 each)
    "mse tie of clips 2 and 3": ([4.0, 2.0, -2.0, 2.0], 2, "mse", {"grid": 4}, 3.0),
    # clips 6 and 7 both err 5: (8 - 6)^2 + (6 - 5)^2 and (8 - 7)^2 + (7 - 5)^2
    "mse tie of clips 6 and 7": ([8.0, 5.0], 2, "mse", {"grid": 8}, 7.0),
    # qmax 3, clips 9 and 12 both err 12: at scale 3 codes 3 1 3 3 (9 + 1 + 1 + 1); at scale 4 codes 3 0 2 2 (half
    # to even: 0 + 4 + 4 + 4)
    "mse tie of clips 9 and 12": ([12.0, 2.0, 10.0, -10.0], 3, "mse", {"grid": 4}, 4.0),
    # a near-tie is no tie: clip 3 errs 1 + (3 - 1.66667)^2 = 2.7777689, clip 4 errs 1.66667^2 = 2.7777889
    "mse near-tie of clips 3 and 4": ([4.0, 1.66667], 2, "mse", {"grid": 4}, 3.0),
    # errors over i = 1..10: 3.03 2.18 1.62 1.25 1.125 1.14 1.06 1.11 1.16 1.125; the least at i = 7, past the
    # local minima at i = 5 (from below) and i = 10 (from above)
    "mse past a local minimum, grid 10": ([0.5, -0.25, -1.75, 0.5, 0.0, -0.75], 2, "mse", {"grid": 10}, 1.75 * 7 / 10),
    # errors over i = 1..12: 9.69 7.19 5.44 4.44 3.875 3.94 3.75 3.94 3.94 4.19 4.0 3.94; the least at i = 7
    "mse past a local minimum, grid 12": ([1.25, 0.5, 3.0, 0.75, -1.0, 0.75], 2, "mse", {"grid": 12}, 3.0 * 7 / 12),
}


def _assert_worked_out_by_hand(cal, case: str, values, bits, method, kwargs, want, dtype) -> None:
    x = np.asarray(values, dtype=dtype)
    got = cal.calibrate(x, bits, method, **kwargs)
    assert np.asarray(got).dtype == x.dtype, f"calibrate returned dtype {np.asarray(got).dtype} for x of {x.dtype}"
    want = float(np.asarray(want, dtype=dtype))
    ulp = float(np.spacing(np.asarray(abs(want), dtype=dtype)))
    assert abs(float(got) - want) <= HAND_ULPS * ulp, (
        f"calibrate({np.asarray(values).tolist()[:8]}, bits={bits}, {method!r}"
        + "".join(f", {k}={v}" for k, v in kwargs.items())
        + f") gave scale {float(got):.9g}; worked out by hand ({case}): {want:.9g}"
    )


@pytest.mark.task("calibrate")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_calibrate_percentile_gives_the_scales_worked_out_by_hand(cal, dtype):
    for case, (values, bits, method, kwargs, want) in PERCENTILE_BY_HAND.items():
        _assert_worked_out_by_hand(cal, case, values, bits, method, kwargs, want, dtype)


@pytest.mark.task("calibrate")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(MSE_BY_HAND), ids=str)
def test_calibrate_mse_gives_the_scales_worked_out_by_hand(cal, case, dtype):
    _assert_worked_out_by_hand(cal, case, *MSE_BY_HAND[case], dtype)


@pytest.mark.task("calibrate")
@pytest.mark.parametrize("method", ["minmax", "percentile", "mse"])
def test_calibrate_of_a_float16_x_is_the_scale_of_its_float64_values_in_float16(cal, method):
    """Everything is computed in float64: float16 values in the thousands, whose squared errors overflow
    float16, get the scale their float64 copy gets, cast to float16."""
    gen = rng(63)
    x = gen.standard_normal(4096) * 1000
    x[gen.choice(4096, 4, replace=False)] = 20000.0 * np.array([1, -1, 1, -1])
    x16 = x.astype(np.float16)
    got = cal.calibrate(x16, 4, method, grid=20)
    want = np.float16(cal.calibrate(x16.astype(np.float64), 4, method, grid=20))
    assert np.asarray(got).dtype == np.float16 and float(got) == float(want), (
        f"calibrate of float16 values in the thousands, {method!r}, gave scale {float(got):.6g} "
        f"({np.asarray(got).dtype}); the same values as float64 give {float(want):.6g}"
    )
