"""Knowledge distillation: a small student learns from a big teacher's whole distribution.

A label says only which token came next; the teacher's distribution says how
likely every other token was too ("70% sunny, 25% cloudy"). Dividing both
sets of logits by a temperature T > 1 softens them so that nuance carries
weight, and multiplying the soft term by T**2 keeps its gradient on the scale
of the hard one (Hinton et al., 2015). The student here is a bigram table: with
the same data and steps, soft targets bring it closer to the teacher than
labels alone do. Distillation at its simplest is an n-gram table whose rows are
the teacher's own distributions averaged over each context: a draft for
speculative decoding that costs a few dictionary look-ups a token and agrees
with the teacher on most of the text it was distilled on, and less elsewhere.

Dimension names: N positions (rows), V vocab.
"""

from __future__ import annotations

import numpy as np

from reference.sampling import check_rng


def softmax(logits, temperature=1.0, axis=-1) -> np.ndarray:
    """softmax(logits / temperature) along `axis`, stable for huge logits.

    logits: float array of any shape, e.g. (N, V); finite values.
    temperature: a finite number > 0; above 1 flattens the distribution,
        below 1 sharpens it toward one-hot.
    axis: the axis the probabilities sum to 1 along.

    Returns float64 probabilities of the shape of logits, finite for
    logits as large as 1e4.
    Raises ValueError for non-finite logits, temperature <= 0 or a bad axis.
    """
    raise NotImplementedError


def log_softmax(logits, temperature=1.0, axis=-1) -> np.ndarray:
    """log(softmax(logits / temperature)) along `axis`, stable for huge logits.

    logits: float array of any shape, e.g. (N, V); finite values.
    temperature: a finite number > 0.
    axis: the axis the probabilities sum to 1 along.

    Returns float64 log-probabilities (all <= 0, finite, for logits as large
    as 1e4 too) of the shape of logits.
    Raises ValueError for non-finite logits, temperature <= 0 or a bad axis.
    """
    raise NotImplementedError


def kl_divergence(teacher_logits, student_logits, temperature=1.0) -> np.ndarray:
    """Per-row forward KL(teacher || student) of the distributions at `temperature`.

    teacher_logits, student_logits: float arrays (N, V) of finite values.
    temperature: a finite number > 0; both sets of logits are divided by it.

    Returns (N,) float64: sum_v p[v] * (log p[v] - log q[v]) with
    p = softmax(teacher / T) and q = softmax(student / T). Always >= 0, and 0
    when the two rows differ only by a constant.
    Raises ValueError for shapes that are not the same (N, V), non-finite
    logits or temperature <= 0.
    """
    raise NotImplementedError


def distillation_loss(student_logits, teacher_logits, labels, temperature=2.0, alpha=0.5, ignore_index=-100) -> float:
    """The Hinton distillation loss of a batch of N positions.

        alpha * T**2 * mean KL(softmax(teacher / T) || softmax(student / T))
        + (1 - alpha) * mean cross-entropy(labels, softmax(student))

    The hard cross-entropy uses temperature 1. Both means run over the rows
    whose label is not ignore_index, and those rows alone; when every row is
    ignored the loss is 0.0.

    student_logits, teacher_logits: float arrays (N, V) of finite values.
    labels: int array (N,), each in [0, V) or equal to ignore_index.
    temperature: T, a finite number > 0.
    alpha: the weight of the soft term, in [0, 1]; 0 is plain cross-entropy.
    ignore_index: the label value that marks a row to skip.

    Returns the loss as a Python float.
    Raises ValueError for mismatched shapes, labels out of range, non-finite
    logits, temperature <= 0 or alpha outside [0, 1].
    """
    raise NotImplementedError


def distillation_grad(
    student_logits, teacher_logits, labels, temperature=2.0, alpha=0.5, ignore_index=-100
) -> np.ndarray:
    """The exact gradient of `distillation_loss` with respect to student_logits.

    Per kept row, with n the number of kept rows, q_T = softmax(student / T),
    p_T = softmax(teacher / T) and q = softmax(student):

        alpha * T * (q_T - p_T) / n + (1 - alpha) * (q - onehot(label)) / n

    (the T**2 of the loss times the 1/T of the inner derivative leaves T).
    Rows whose label is ignore_index get zeros. Each row sums to 0.

    Arguments as for `distillation_loss`.
    Returns float64 (N, V).
    Raises ValueError for the inputs `distillation_loss` rejects.
    """
    raise NotImplementedError


def distill_bigram(teacher_logits, prev_tokens, labels, *, temperature, alpha, steps, lr, rng) -> np.ndarray:
    """Train a bigram student on the teacher's logits with the distillation loss.

    The student is a logit table W (V, V): its logits at a position are the
    row W[prev_token]. W starts as 0.01 * rng.standard_normal((V, V)), and each
    of `steps` steps is one full-batch gradient step

        W -= lr * dL/dW,   L = distillation_loss(W[prev_tokens], teacher_logits, labels, T, alpha)

    where dL/dW adds up each position's gradient row (`distillation_grad`)
    into the row of its previous token.

    teacher_logits: float array (N, V), the teacher's logits at N positions.
    prev_tokens: int array (N,) in [0, V), the token before each position.
    labels: int array (N,), the token that came next (ignore_index -100 skips a row).
    temperature: T > 0 of the soft term. alpha: weight of the soft term, in [0, 1].
    steps: number of gradient steps, an int >= 0 (0 returns the initial table).
    lr: learning rate, a finite number > 0.
    rng: numpy Generator drawing the initial table.

    Returns the trained table, float64 (V, V).
    Raises ValueError for bad shapes, tokens out of range, steps < 0, lr <= 0,
    a missing rng, or the inputs `distillation_loss` rejects.
    """
    raise NotImplementedError


def distill_ngram(teacher_logits, tokens, order, temperature=1.0):
    """Distil an n-gram table from the teacher: each context's row is the
    teacher's next-token distribution averaged over the positions where that
    context occurs.

    teacher_logits: float array (N, V), finite: row i is the teacher's logits
        at position i of tokens (its prediction of tokens[i + 1]).
    tokens: int array (N,) in [0, V), of any integer dtype: the text the
        teacher read.
    order: an int n >= 1 (a NumPy int too): contexts of 0 to n - 1 ids
        (order 1 is one row, the teacher's mean distribution).
    temperature: T > 0; the averaged distributions are softmax(logits / T),
        stable for logits whose exp overflows.

    The context of length c at position i is tokens[i - c + 1 : i + 1], for
    every c from 0 to order - 1 with c <= i + 1 (position i has i + 1 ids
    behind it, itself included).

    Returns (contexts, probs, counts), one row per distinct context, in any
    order:
        contexts: int64 (R, order - 1), the context's ids right-aligned, -1
            before a shorter context's first id (the empty context is all -1);
        probs: float64 (R, V), the mean of softmax(teacher_logits[i] / T)
            over the positions i whose context it is; each row sums to 1;
        counts: int64 (R,), how many positions each row averages.
    N = 0 gives empty arrays (R = 0). teacher_logits and tokens are left
    unchanged. Raises ValueError for shapes that do not fit, ids that are
    not ints in range, non-finite logits (NaN, inf, -inf), an order that is
    not an int >= 1, or temperature <= 0 (on empty text too).
    """
    raise NotImplementedError
