"""Public checks of the mistakes learners make in every distillation task: values worked out by hand
at a few points (logits far past exp's range among them), relations between calls (rows skipped by
any ignore_index), and two steps of the bigram student written out on a batch of four. They need no
oracle, so the student edition ships them: the mistakes its hidden checks catch on submission fail
here too, where the student works.
"""

import math

import numpy as np
import pytest

from grader.suites.distillation.checks import _close

E = math.e
EXACT = 1e-9  # float64 results against values worked out by hand


@pytest.mark.task("softmax")
def test_softmax_of_a_few_rows_worked_out_by_hand(kata):
    # 1000 and 999 give e/(1+e) and 1/(1+e); a row of equals gives thirds, however far below 0
    x = np.array([[1000.0, 999.0, -1000.0], [0.0, 0.0, 0.0], [-1000.0, -1000.0, -1000.0]])
    want = [[E / (1 + E), 1 / (1 + E), 0.0], [1 / 3] * 3, [1 / 3] * 3]
    got = np.asarray(kata.softmax(x))
    assert got.shape == x.shape and _close(got, want, rtol=EXACT, atol=EXACT), (
        f"softmax({x.tolist()}) gave {got.tolist()}, expected {want}: subtract each row's own largest logit before exp"
    )


@pytest.mark.task("softmax")
def test_log_softmax_of_a_few_rows_worked_out_by_hand(kata):
    # log(1 / (1 + e^-1000)) is 0 to float64 and the other entry is -1000: a log of an underflowed 0 is -inf
    x = np.array([[1000.0, 0.0], [0.0, 0.0]])
    want = [[0.0, -1000.0], [-math.log(2)] * 2]
    got = np.asarray(kata.log_softmax(x))
    assert got.shape == x.shape and _close(got, want, rtol=EXACT, atol=EXACT), (
        f"log_softmax({x.tolist()}) gave {got.tolist()}, expected {want}: logits minus the row's logsumexp, "
        "never the log of a softmax that underflowed to 0"
    )


@pytest.mark.task("softmax")
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_and_log_softmax_along_the_first_axis_normalize_each_column(kata, fn):
    x = np.array([[0.0, 1.0, 2.0], [math.log(3), 1.0, -5.0]])
    got = np.asarray(getattr(kata, fn)(x, 1.0, 0))
    probs = got if fn == "softmax" else np.exp(got)
    want = [[1 / 4, 1 / 2, 1 / (1 + math.exp(-7))], [3 / 4, 1 / 2, math.exp(-7) / (1 + math.exp(-7))]]
    assert _close(probs, want, rtol=EXACT, atol=EXACT), (
        f"{fn}(x, 1.0, axis=0) gave {got.tolist()}; along axis 0 each column is a distribution: {want}"
    )


@pytest.mark.task("kl")
def test_kl_at_a_point_worked_out_by_hand(kata):
    # teacher p = (1/4, 3/4), student q = (1/2, 1/2): KL(p || q) = 1/4 ln(1/2) + 3/4 ln(3/2)
    want = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    got = np.asarray(kata.kl_divergence(np.array([[0.0, math.log(3)]]), np.array([[0.0, 0.0]])))
    assert got.shape == (1,) and _close(got, [want], rtol=EXACT, atol=EXACT), (
        f"kl_divergence(teacher=[[0, ln 3]], student=[[0, 0]]) is {got.tolist()}, expected [{want:.12g}]: "
        "sum_v p[v] (log p[v] - log q[v]) with p the teacher's distribution"
    )


@pytest.mark.task("kl")
def test_kl_of_logits_far_past_exp_is_worked_out_by_hand(kata):
    # p puts all but e^-1000 on token 0 and q all but e^-1000 on token 1: KL = 1000 to float64
    got = np.asarray(kata.kl_divergence(np.array([[1000.0, 0.0]]), np.array([[0.0, 1000.0]])))
    assert np.all(np.isfinite(got)) and _close(got, [1000.0], rtol=EXACT, atol=0), (
        f"kl_divergence of teacher [[1000, 0]] and student [[0, 1000]] is {got.tolist()}, expected [1000.0]: "
        "take log-probabilities from log_softmax, not the log of probabilities that underflowed to 0"
    )


def _batch():
    """Student and teacher logits (5, 3) and their labels, two rows labelled -1."""
    g = np.random.default_rng(7)
    return g.standard_normal((5, 3)), g.standard_normal((5, 3)), np.array([2, -1, 0, -1, 1])


@pytest.mark.task("loss")
def test_the_loss_skips_the_rows_labelled_with_an_ignore_index_of_minus_one(kata):
    s, t, y = _batch()
    kept = y != -1
    skipping = float(kata.distillation_loss(s, t, y, 3.0, 0.3, ignore_index=-1))
    alone = float(kata.distillation_loss(s[kept], t[kept], y[kept], 3.0, 0.3))
    assert math.isclose(skipping, alone, rel_tol=1e-9), (
        f"with ignore_index=-1 the loss is {skipping:.9g}; the rows not labelled -1 alone give {alone:.9g}"
    )


@pytest.mark.task("grad")
def test_the_gradient_skips_the_rows_labelled_with_an_ignore_index_of_minus_one(kata):
    s, t, y = _batch()
    kept = y != -1
    got = np.asarray(kata.distillation_grad(s, t, y, 3.0, 0.3, ignore_index=-1))
    alone = np.asarray(kata.distillation_grad(s[kept], t[kept], y[kept], 3.0, 0.3))
    assert _close(got[kept], alone, rtol=1e-9, atol=1e-12) and not np.any(got[~kept]), (
        "with ignore_index=-1 the gradient's rows labelled -1 must be 0 and the others those of the kept rows alone"
    )


@pytest.mark.task("grad")
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_the_gradient_at_a_point_worked_out_by_hand(kata, alpha):
    # two rows, student [0, ln 3] (q = 1/4, 3/4; at T = 2: 1/(1+sqrt 3), ...), teacher [0, ln 9] (p_T = 1/4, 3/4)
    s = np.array([[0.0, math.log(3)]] * 2)
    t = np.array([[0.0, math.log(9)]] * 2)
    y = np.array([0, 1])
    if alpha == 0.0:  # (q - onehot) / n at temperature 1, whatever T
        want = np.array([[1 / 4 - 1, 3 / 4], [1 / 4, 3 / 4 - 1]]) / 2
    else:  # T (q_T - p_T) / n
        q = 1 / (1 + math.sqrt(3))
        want = np.array([[q - 1 / 4, 1 / 4 - q]] * 2) * 2 / 2
    got = np.asarray(kata.distillation_grad(s, t, y, 2.0, alpha))
    assert _close(got, want, rtol=EXACT, atol=EXACT), (
        f"distillation_grad(T=2, alpha={alpha:g}) gave {got.tolist()}, expected {want.tolist()}: "
        "alpha * T * (q_T - p_T) / n + (1 - alpha) * (q - onehot) / n, the hard term at temperature 1"
    )


@pytest.mark.task("grad")
def test_the_gradient_of_a_batch_whose_every_row_is_ignored_is_zero(kata):
    s, t, _ = _batch()
    got = np.asarray(kata.distillation_grad(s, t, np.full(5, -100)))
    assert got.shape == s.shape and not np.any(got), f"every row is ignored, so the gradient is 0; got {got}"


@pytest.mark.task("distill")
def test_two_steps_of_the_bigram_student_written_out_on_a_batch_of_four(kata):
    g = np.random.default_rng(5)
    teacher, prev, labels = 2 * g.standard_normal((4, 3)), np.array([0, 0, 1, 0]), np.array([1, 2, 0, 1])
    T, alpha, lr = 3.0, 0.7, 0.5  # not the defaults of distillation_loss and distillation_grad
    got = np.asarray(
        kata.distill_bigram(
            teacher, prev, labels, temperature=T, alpha=alpha, steps=2, lr=lr, rng=np.random.default_rng(3)
        )
    )
    table = 0.01 * np.random.default_rng(3).standard_normal((3, 3))
    for _ in range(2):  # each position's gradient row, added into its previous token's row
        for i, v in enumerate(table[prev].copy()):
            soft = np.exp(v / T) / np.exp(v / T).sum() - np.exp(teacher[i] / T) / np.exp(teacher[i] / T).sum()
            hard = np.exp(v) / np.exp(v).sum() - np.eye(3)[labels[i]]
            table[prev[i]] -= lr * (alpha * T * soft + (1 - alpha) * hard) / 4
    assert got.shape == (3, 3) and _close(got, table, rtol=1e-9, atol=1e-12), (
        f"after 2 steps (T={T:g}, alpha={alpha:g}, lr={lr:g}) distill_bigram gave\n{got}\nexpected\n{table}\n"
        "W -= lr * dL/dW, every position adding its gradient row into its previous token's row (token 0 is the "
        "previous token of three positions)"
    )
