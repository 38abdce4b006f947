"""Checks of the kl task: the per-row KL divergence."""

import numpy as np
import pytest
from hypothesis import example, given

from grader.suites.common import float_arrays
from grader.suites.distillation.checks import _close, _isfinite
from grader.suites.distillation.oracles import _kl64
from grader.suites.distillation.strategies import batches, temperatures

KL_ATOL, KL_RTOL = 1e-6, 1e-5  # per-row KL vs float64


@pytest.mark.task("kl")
@given(batch=batches(bound=20.0, ignore=False), temperature=temperatures)
def test_kl_is_never_negative(kata, batch, temperature):
    student, teacher, _ = batch
    kl = np.asarray(kata.kl_divergence(teacher, student, temperature), dtype=np.float64)
    assert kl.shape == (student.shape[0],), (
        f"kl_divergence returned shape {kl.shape}, expected (N,) = ({student.shape[0]},)"
    )
    assert np.all(kl >= -KL_ATOL), f"kl_divergence returned {float(np.min(kl)):.3g}; KL is never negative"


@pytest.mark.task("kl")
@given(
    teacher=float_arrays((4, 6), -20, 20, dtype=np.float64),
    shift=float_arrays((4, 1), -50, 50, dtype=np.float64),
    temperature=temperatures,
)
def test_kl_is_zero_when_student_and_teacher_differ_by_a_row_constant(kata, teacher, shift, temperature):
    kl = np.asarray(kata.kl_divergence(teacher, teacher + shift, temperature), dtype=np.float64)
    worst = float(np.max(np.abs(kl)))
    assert worst <= KL_ATOL, f"KL between logits that differ by a per-row constant is {worst:.3g}, not 0"


@pytest.mark.task("kl")
@given(batch=batches(bound=20.0, ignore=False), temperature=temperatures)
@example(batch=(np.array([[0.0, 0.0]]), np.array([[2 * np.log(3.0), 0.0]]), np.array([0])), temperature=2.0)
def test_kl_matches_a_float64_formula(kata, batch, temperature):
    student, teacher, _ = batch
    got = np.asarray(kata.kl_divergence(teacher, student, temperature), dtype=np.float64)
    want = _kl64(teacher, student, temperature)
    assert got.shape == want.shape, f"kl_divergence returned shape {got.shape}, expected {want.shape}"
    d = float(np.max(np.abs(got - want)))
    assert _close(got, want, rtol=KL_RTOL, atol=KL_ATOL), (
        f"kl_divergence differs from KL(softmax(teacher/T) || softmax(student/T)) by {d:.3g} (teacher first)"
    )


@pytest.mark.task("kl")
@given(
    teacher=float_arrays((3, 5), -1e4, 1e4, dtype=np.float64),
    student=float_arrays((3, 5), -1e4, 1e4, dtype=np.float64),
    temperature=temperatures,
)
@example(teacher=np.array([[1e4, 0.0]] * 3), student=np.array([[0.0, 1e4]] * 3), temperature=1.0)
@example(teacher=np.array([[20.0, -20.0, 0.0]] * 3), student=np.array([[-20.0, 20.0, 0.0]] * 3), temperature=0.01)
def test_kl_of_huge_logits_is_finite_and_matches_float64(kata, teacher, student, temperature):
    got = np.asarray(kata.kl_divergence(teacher, student, temperature), dtype=np.float64)
    assert np.all(_isfinite(got)), (
        f"kl_divergence of logits up to ±1e4 (T={temperature:g}) returned {got}: a probability that underflowed "
        "to 0 has log -inf; take log-probabilities from log_softmax"
    )
    want = _kl64(teacher, student, temperature)
    d = float(np.max(np.abs(got - want)))
    assert _close(got, want, rtol=KL_RTOL, atol=KL_ATOL), (
        f"kl_divergence of huge logits differs from float64 by {d:.3g}"
    )


@pytest.mark.task("kl")
@pytest.mark.parametrize(
    "case",
    [
        "mismatched shapes",
        "one student row",
        "one teacher row",
        "1-D logits",
        "3-D logits",
        "NaN logits",
        "inf logits",
        "temperature 0",
    ],
)
def test_kl_rejects_bad_input(kata, case):
    t, s, T = np.zeros((3, 4)), np.zeros((3, 4)), 1.0
    if case == "1-D logits":  # one row of each, the same shape, but not (N, V)
        t, s = np.zeros(4), np.zeros(4)
    elif case == "3-D logits":
        t, s = np.zeros((2, 3, 4)), np.zeros((2, 3, 4))
    elif case == "mismatched shapes":
        s = np.zeros((3, 5))
    elif case == "one student row":  # broadcasts against the teacher's (3, 4), but is not the same shape
        s = np.zeros((1, 4))
    elif case == "one teacher row":
        t = np.zeros((1, 4))
    elif case == "NaN logits":
        s[1, 2] = np.nan
    elif case == "inf logits":
        t[0, 0] = np.inf
    else:
        T = 0.0
    with pytest.raises(ValueError):
        kata.kl_divergence(t, s, T)
