"""The distillation suite's oracles: log softmax, KL, the loss and its gradient in float64, and
the loss's central finite differences, computed here in the judge from the issue's formulas,
never from the code under test.
"""

import numpy as np

from grader.suites.distillation.strategies import IGNORE

FD_STEP = 1e-5  # step of the central finite differences


def _log_softmax64(x, temperature=1.0, axis=-1):
    z = np.asarray(x, dtype=np.float64) / temperature
    z = z - np.max(z, axis=axis, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _kl64(teacher, student, temperature=1.0):
    """Per-row KL(softmax(teacher/T) || softmax(student/T)), float64 (N,)."""
    log_p, log_q = _log_softmax64(teacher, temperature), _log_softmax64(student, temperature)
    return np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)


def _loss64(student, teacher, labels, temperature, alpha):
    """The distillation loss, float64, written from the issue's formula."""
    keep = labels != IGNORE
    if not keep.any():
        return 0.0
    s, t, y = student[keep], teacher[keep], labels[keep]
    soft = np.mean(_kl64(t, s, temperature))
    hard = -np.mean(_log_softmax64(s)[np.arange(y.size), y])
    return alpha * temperature**2 * soft + (1 - alpha) * hard


def _grad64(student, teacher, labels, temperature, alpha):
    """The gradient of _loss64, float64, from the closed form that
    distillation_grad's docstring states."""
    keep = labels != IGNORE
    n = max(int(keep.sum()), 1)
    soft = np.exp(_log_softmax64(student, temperature)) - np.exp(_log_softmax64(teacher, temperature))
    hard = np.exp(_log_softmax64(student))
    hard[np.arange(labels.size)[keep], labels[keep]] -= 1.0
    grad = (alpha * temperature * soft + (1 - alpha) * hard) / n
    grad[~keep] = 0.0
    return grad


def _finite_difference_grad(student, teacher, labels, temperature, alpha):
    """Central differences of _loss64 with respect to every student logit."""
    grad = np.zeros_like(student)
    for idx in np.ndindex(*student.shape):
        up, down = student.copy(), student.copy()
        up[idx] += FD_STEP
        down[idx] -= FD_STEP
        grad[idx] = (
            _loss64(up, teacher, labels, temperature, alpha) - _loss64(down, teacher, labels, temperature, alpha)
        ) / (2 * FD_STEP)
    return grad


def _ngram_table64(logits, tokens, order, temperature=1.0):
    """{context (tuple of ids): (mean probability row, count)}, by walking the
    positions one at a time and adding each softmax row into every context of
    length 0..order-1 it has, as distill_ngram's docstring states."""
    probs = np.exp(_log_softmax64(logits, temperature))
    sums: dict[tuple[int, ...], np.ndarray] = {}
    counts: dict[tuple[int, ...], int] = {}
    ids = [int(t) for t in tokens]
    for i, row in enumerate(probs):
        for c in range(min(order - 1, i + 1) + 1):
            ctx = tuple(ids[i - c + 1 : i + 1])
            sums[ctx] = sums.get(ctx, 0.0) + row
            counts[ctx] = counts.get(ctx, 0) + 1
    return {ctx: (sums[ctx] / counts[ctx], counts[ctx]) for ctx in sums}
