"""Checks of the grad task: the loss's gradient; and the check that kl, grad and distill share,
a case per task: float64 out for float32 logits.
"""

import numpy as np
import pytest
from hypothesis import example, given

from grader.suites import common
from grader.suites.distillation.checks import _close
from grader.suites.distillation.oracles import _finite_difference_grad, _grad64
from grader.suites.distillation.strategies import (
    BAD_BATCHES,
    IGNORE,
    IGNORE_INDICES,
    IGNORED_BY_MINUS_ONE,
    IGNORED_ROWS,
    TWO_ROWS,
    _bad_batch,
    _relabelled,
    _with_ignored_rows,
    alphas,
    batches,
    temperatures,
)

GRAD_ATOL, GRAD_RTOL = 1e-5, 1e-4  # gradient vs central finite differences


@pytest.mark.task("grad")
@given(batch=batches(), temperature=temperatures, alpha=alphas)
@example(
    batch=(*TWO_ROWS, np.array([2, 0])),
    temperature=4.0,
    alpha=1.0,
)
@example(
    batch=(*TWO_ROWS, np.array([2, IGNORE])),
    temperature=3.0,
    alpha=0.0,
)
@example(batch=(*TWO_ROWS, np.array([IGNORE, IGNORE])), temperature=2.0, alpha=0.5)  # every row ignored: all zeros
def test_gradient_matches_central_finite_differences(kata, batch, temperature, alpha):
    student, teacher, labels = batch
    got = np.asarray(kata.distillation_grad(student, teacher, labels, temperature, alpha), dtype=np.float64)
    assert got.shape == student.shape, (
        f"distillation_grad returned shape {got.shape}, expected (N, V) = {student.shape}"
    )
    want = _finite_difference_grad(student, teacher, labels, temperature, alpha)
    i, j = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
    assert _close(got, want, rtol=GRAD_RTOL, atol=GRAD_ATOL), (
        f"d loss / d student[{i}, {j}] is {got[i, j]:.6g}, finite differences of the loss give "
        f"{want[i, j]:.6g} (T={temperature:g}, alpha={alpha:g}, N={student.shape[0]})"
    )


@pytest.mark.task("grad")
@given(batch=batches(bound=20.0), temperature=temperatures, alpha=alphas)
def test_gradient_rows_sum_to_zero(kata, batch, temperature, alpha):
    student, teacher, labels = batch
    got = np.asarray(kata.distillation_grad(student, teacher, labels, temperature, alpha), dtype=np.float64)
    worst = float(np.max(np.abs(np.sum(got, axis=-1))))
    assert worst <= GRAD_ATOL, f"a row of the gradient sums to {worst:.3g}, not 0 (softmax ignores a constant shift)"


@pytest.mark.task("grad")
@given(batch=batches(ignore=False), extra=IGNORED_ROWS, temperature=temperatures, alpha=alphas)
def test_ignored_rows_get_zero_gradient_and_change_no_other_row(kata, batch, extra, temperature, alpha):
    student, teacher, labels = batch
    n = student.shape[0]
    more_s, more_t, more_y = _with_ignored_rows(batch, extra)
    base = np.asarray(kata.distillation_grad(student, teacher, labels, temperature, alpha), dtype=np.float64)
    got = np.asarray(kata.distillation_grad(more_s, more_t, more_y, temperature, alpha), dtype=np.float64)
    assert got.shape == more_s.shape, f"distillation_grad returned shape {got.shape}, expected {more_s.shape}"
    assert np.all(got[n:] == 0), "rows whose label is ignore_index got a nonzero gradient"
    assert _close(got[:n], base, rtol=GRAD_RTOL, atol=GRAD_ATOL), (
        "adding two ignored rows changed the gradient of the other rows: ignored rows must count for nothing"
    )


@pytest.mark.task("grad")
@given(batch=batches(), temperature=temperatures, alpha=alphas, ignore_index=IGNORE_INDICES)
@example(**IGNORED_BY_MINUS_ONE)
def test_gradient_skips_the_rows_labelled_ignore_index_whatever_its_value(
    kata, batch, temperature, alpha, ignore_index
):
    student, teacher, labels = batch
    custom, marked = _relabelled(labels, ignore_index)
    got = np.asarray(
        kata.distillation_grad(student, teacher, custom, temperature, alpha, ignore_index=ignore_index),
        dtype=np.float64,
    )
    want = _grad64(student, teacher, marked, temperature, alpha)
    assert got.shape == want.shape, f"distillation_grad returned shape {got.shape}, expected {want.shape}"
    i, j = np.unravel_index(np.argmax(np.abs(got - want)), got.shape)
    assert _close(got, want, rtol=GRAD_RTOL, atol=GRAD_ATOL), (
        f"with ignore_index={ignore_index} and labels {custom.tolist()}, d loss / d student[{i}, {j}] is "
        f"{got[i, j]:.6g}, expected {want[i, j]:.6g}: the rows labelled ignore_index get zeros and the mean "
        "runs over the others"
    )


@pytest.mark.task("grad")
def test_soft_gradient_keeps_its_scale_as_temperature_grows(kata):
    """At high T the logits divided by T are small (the high-temperature limit),
    where T * (q_T - p_T) tends to (student - teacher) / V, centered: a size
    that does not depend on T. Without the T² in the loss it shrinks as 1/T²."""
    gen = common.rng(5)
    student, teacher = gen.standard_normal((8, 16)), gen.standard_normal((8, 16))
    labels = gen.integers(0, 16, 8)
    temps = [4.0, 8.0, 16.0, 32.0]
    sizes = [
        float(np.linalg.norm(np.asarray(kata.distillation_grad(student, teacher, labels, T, 1.0), dtype=np.float64)))
        for T in temps
    ]
    ratio = max(sizes) / max(min(sizes), 1e-300)
    assert ratio < 2.0, (
        f"the soft gradient's size changes {ratio:.3g}x between T=4 and T=32 "
        f"({', '.join(f'{s:.3g}' for s in sizes)}); it should stay the same order as T grows"
    )


@pytest.mark.task("grad")
@pytest.mark.parametrize("case", BAD_BATCHES)
def test_gradient_rejects_bad_input(kata, case):
    s, t, y, T, a = _bad_batch(case)
    with pytest.raises(ValueError):
        kata.distillation_grad(s, t, y, T, a)


@pytest.mark.parametrize("task", ["kl", "grad", "distill"])
def test_kl_gradient_and_trained_table_are_float64_for_float32_logits(kata, task):
    gen = common.rng(13)
    student, teacher = gen.standard_normal((3, 4)).astype(np.float32), gen.standard_normal((3, 4)).astype(np.float32)
    labels = np.array([0, 3, IGNORE])
    if task == "kl":
        fn, got = "kl_divergence", kata.kl_divergence(teacher, student, 2.0)
    elif task == "grad":
        fn, got = "distillation_grad", kata.distillation_grad(student, teacher, labels, 2.0, 0.5)
    else:
        fn = "distill_bigram"
        got = kata.distill_bigram(
            teacher, np.array([0, 1, 1]), labels, temperature=2.0, alpha=0.5, steps=2, lr=1.0, rng=common.rng(14)
        )
    got = np.asarray(got)
    assert got.dtype == np.float64, f"{fn} of float32 logits returned dtype {got.dtype}, not float64"
