"""Checks of the loss task: the distillation loss, rows labelled ignore_index included; and the
check that loss and grad share, a case per task.
"""

import numpy as np
import pytest
from hypothesis import example, given

from grader.suites import common
from grader.suites.distillation.checks import _close
from grader.suites.distillation.oracles import _loss64
from grader.suites.distillation.strategies import (
    BAD_BATCHES,
    IGNORE,
    IGNORE_INDICES,
    IGNORED_BY_MINUS_ONE,
    IGNORED_ROWS,
    _bad_batch,
    _relabelled,
    _with_ignored_rows,
    alphas,
    batches,
    temperatures,
)

LOSS_ATOL, LOSS_RTOL = 1e-6, 1e-5  # loss values vs float64


@pytest.mark.task("loss")
@given(batch=batches(), temperature=temperatures)
def test_loss_with_alpha_one_is_the_scaled_soft_term(kata, batch, temperature):
    student, teacher, labels = batch
    got = float(kata.distillation_loss(student, teacher, labels, temperature, 1.0))
    want = _loss64(student, teacher, labels, temperature, 1.0)
    assert _close(got, want, rtol=LOSS_RTOL, atol=LOSS_ATOL), (
        f"with alpha=1 the loss is {got:.6g}, expected T² x mean KL = {want:.6g} (T={temperature:g})"
    )


@pytest.mark.task("loss")
@given(batch=batches(), temperature=temperatures)
@example(batch=(np.array([[1.0, -1.0, 0.5]]), np.array([[0.0, 0.0, 0.0]]), np.array([0])), temperature=4.0)
def test_loss_with_alpha_zero_is_plain_cross_entropy_at_temperature_one(kata, batch, temperature):
    student, teacher, labels = batch
    got = float(kata.distillation_loss(student, teacher, labels, temperature, 0.0))
    want = _loss64(student, teacher, labels, 1.0, 0.0)
    assert _close(got, want, rtol=LOSS_RTOL, atol=LOSS_ATOL), (
        f"with alpha=0 the loss is {got:.6g}, expected the cross-entropy at temperature 1, {want:.6g} "
        f"(the temperature {temperature:g} must not touch the hard term)"
    )


@pytest.mark.task("loss")
def test_loss_equals_hand_computed_values(kata):
    ln3 = np.log(3.0)
    # Row 0: at T=2 the teacher is (3/4, 1/4) and the student (1/2, 1/2); label 0 costs ln 2.
    # Row 1: student and teacher agree (KL 0); at T=1 the student gives label 1 probability 1/10.
    student = np.array([[0.0, 0.0], [2 * ln3, 0.0]])
    teacher = np.array([[2 * ln3, 0.0], [2 * ln3, 0.0]])
    labels = np.array([0, 1])
    kl0 = 0.75 * np.log(1.5) + 0.25 * np.log(0.5)
    cases = [  # (temperature, alpha, expected)
        (2.0, 0.5, 0.5 * 4 * kl0 / 2 + 0.5 * (np.log(2) + np.log(10)) / 2),
        (2.0, 1.0, 4 * kl0 / 2),
        (2.0, 0.0, (np.log(2) + np.log(10)) / 2),
    ]
    for T, alpha, want in cases:
        got = float(kata.distillation_loss(student, teacher, labels, T, alpha))
        assert abs(got - want) <= LOSS_ATOL + LOSS_RTOL * abs(want), (
            f"on the hand-computed batch (T={T:g}, alpha={alpha:g}) the loss is {got:.6g}, expected {want:.6g}"
        )


@pytest.mark.task("loss")
@given(batch=batches(), temperature=temperatures, alpha=alphas)
def test_loss_matches_the_formula(kata, batch, temperature, alpha):
    student, teacher, labels = batch
    got = kata.distillation_loss(student, teacher, labels, temperature, alpha)
    assert isinstance(got, float), f"distillation_loss returned {type(got).__name__} {got!r}, not a Python float"
    got, want = float(got), _loss64(student, teacher, labels, temperature, alpha)
    assert _close(got, want, rtol=LOSS_RTOL, atol=LOSS_ATOL), (
        f"the loss is {got:.6g}, expected alpha T² mean KL + (1 - alpha) mean CE = {want:.6g}"
    )


@pytest.mark.task("loss")
@given(batch=batches(ignore=False), extra=IGNORED_ROWS, temperature=temperatures, alpha=alphas)
def test_ignored_rows_do_not_change_the_loss(kata, batch, extra, temperature, alpha):
    student, teacher, labels = batch
    more_s, more_t, more_y = _with_ignored_rows(batch, extra)
    base = float(kata.distillation_loss(student, teacher, labels, temperature, alpha))
    got = float(kata.distillation_loss(more_s, more_t, more_y, temperature, alpha))
    assert _close(got, base, rtol=LOSS_RTOL, atol=LOSS_ATOL), (
        f"adding two ignored rows changed the loss from {base:.6g} to {got:.6g}: ignored rows must count for nothing"
    )


@pytest.mark.task("loss")
@given(batch=batches(), temperature=temperatures, alpha=alphas, ignore_index=IGNORE_INDICES)
@example(**IGNORED_BY_MINUS_ONE)
def test_loss_skips_the_rows_labelled_ignore_index_whatever_its_value(kata, batch, temperature, alpha, ignore_index):
    student, teacher, labels = batch
    custom, marked = _relabelled(labels, ignore_index)
    got = float(kata.distillation_loss(student, teacher, custom, temperature, alpha, ignore_index=ignore_index))
    want = _loss64(student, teacher, marked, temperature, alpha)
    assert _close(got, want, rtol=LOSS_RTOL, atol=LOSS_ATOL), (
        f"with ignore_index={ignore_index} and labels {custom.tolist()} the loss is {got:.6g}, expected {want:.6g} "
        "from the rows whose label is not ignore_index"
    )


@pytest.mark.task("loss")
def test_loss_of_an_all_ignored_batch_is_zero(kata):
    s = common.rng(4).standard_normal((3, 5))
    got = kata.distillation_loss(s, -s, np.full(3, IGNORE), 2.0, 0.5)
    assert isinstance(got, float) and got == 0.0, (
        f"when every label is ignore_index the loss is {type(got).__name__} {got!r}, expected the float 0.0"
    )


@pytest.mark.parametrize("task", ["loss", "grad"])
def test_label_minus_100_is_out_of_range_when_ignore_index_is_another_value(kata, task):
    fn = kata.distillation_loss if task == "loss" else kata.distillation_grad
    with pytest.raises(ValueError):  # labels must be in [0, V) or equal to ignore_index, here -1
        fn(np.zeros((3, 4)), np.zeros((3, 4)), np.array([0, IGNORE, 2]), 2.0, 0.5, ignore_index=-1)


@pytest.mark.task("loss")
@pytest.mark.parametrize("case", BAD_BATCHES)
def test_loss_rejects_bad_input(kata, case):
    s, t, y, T, a = _bad_batch(case)
    with pytest.raises(ValueError):
        kata.distillation_loss(s, t, y, T, a)
