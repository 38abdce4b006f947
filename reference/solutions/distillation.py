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
    z = _shifted(logits, temperature, axis)
    e = np.exp(z)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def log_softmax(logits, temperature=1.0, axis=-1) -> np.ndarray:
    """log(softmax(logits / temperature)) along `axis`, stable for huge logits.

    logits: float array of any shape, e.g. (N, V); finite values.
    temperature: a finite number > 0.
    axis: the axis the probabilities sum to 1 along.

    Returns float64 log-probabilities (all <= 0, finite, for logits as large
    as 1e4 too) of the shape of logits.
    Raises ValueError for non-finite logits, temperature <= 0 or a bad axis.
    """
    z = _shifted(logits, temperature, axis)
    z -= np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
    return z


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
    t, s = _checked_pair(teacher_logits, student_logits)
    log_p = log_softmax(t, temperature)  # (N, V)
    log_q = log_softmax(s, temperature)  # (N, V)
    return np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)


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
    s, t, y, T, alpha = _checked_batch(student_logits, teacher_logits, labels, temperature, alpha, ignore_index)
    keep = y != ignore_index  # (N,)
    n_kept = int(np.count_nonzero(keep))
    if n_kept == 0:
        return 0.0
    soft = np.sum(kl_divergence(t[keep], s[keep], T)) / n_kept
    log_q1 = log_softmax(s[keep])  # (n_kept, V), temperature 1
    hard = -np.sum(np.take_along_axis(log_q1, y[keep][:, None], axis=1)) / n_kept
    return float(alpha * T**2 * soft + (1 - alpha) * hard)


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
    s, t, y, T, alpha = _checked_batch(student_logits, teacher_logits, labels, temperature, alpha, ignore_index)
    grad = np.zeros(s.shape, dtype=np.float64)  # (N, V)
    rows = np.flatnonzero(y != ignore_index)  # the kept rows
    if rows.size == 0:
        return grad
    soft = T * (softmax(s[rows], T) - softmax(t[rows], T))  # d(T**2 KL)/d student
    hard = softmax(s[rows])  # temperature 1
    hard[np.arange(rows.size), y[rows]] -= 1.0
    grad[rows] = (alpha * soft + (1 - alpha) * hard) / rows.size
    return grad


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
    teacher = np.asarray(teacher_logits)
    if teacher.ndim != 2 or teacher.shape[1] < 1:
        raise ValueError(f"teacher_logits must be a 2-D array (N, V), got shape {teacher.shape}")
    N, V = teacher.shape
    prev = _checked_ints(prev_tokens, N, "prev_tokens")
    if N and (prev.min() < 0 or prev.max() >= V):
        raise ValueError(f"prev_tokens must lie in [0, V={V}), got {prev.min()}..{prev.max()}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if not np.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    check_rng(rng)
    _checked_batch(teacher, teacher, labels, temperature, alpha, -100)  # bad logits, labels, T or alpha
    table = 0.01 * rng.standard_normal((V, V))  # (V, V)
    scatter = np.zeros((V, N))  # (V, N): scatter[v, i] = 1 where prev_tokens[i] == v
    scatter[prev, np.arange(N)] = 1.0
    for _ in range(steps):
        grad = distillation_grad(table[prev], teacher, labels, temperature, alpha)  # (N, V)
        table -= lr * (scatter @ grad)
    return table


def _shifted(logits, temperature, axis) -> np.ndarray:
    """logits / temperature minus its maximum along axis, as float64."""
    x = np.asarray(logits, dtype=np.float64)
    T = _checked_temperature(temperature)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"axis must be an int, got {axis!r}")
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis!r} is out of range for logits of shape {x.shape}")
    if x.shape[axis] == 0:
        raise ValueError(f"logits have no entries along axis {axis} (shape {x.shape})")
    if not np.all(np.isfinite(x)):
        raise ValueError("logits hold NaN or inf; pass finite numbers")
    z = x / T  # a new array, safe to change in place
    z -= np.max(z, axis=axis, keepdims=True)
    return z


def _is_number(value) -> bool:
    """Whether value is one real number (a Python or NumPy int or float), not a bool or a string."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _checked_temperature(temperature) -> float:
    if not _is_number(temperature):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    T = float(temperature)
    if not np.isfinite(T) or T <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
    return T


def _checked_pair(first, second) -> tuple[np.ndarray, np.ndarray]:
    """Two logit arrays of the same (N, V) shape, finite, as float64."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] < 1:
        raise ValueError(f"logits must be 2-D arrays (N, V) with V >= 1, got shape {a.shape}")
    if a.shape != b.shape:
        raise ValueError(f"teacher and student logits must have the same shape (N, V), got {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("logits hold NaN or inf; pass finite numbers")
    return a, b


def _checked_ints(values, n: int, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise ValueError(f"{what} must have shape (N,) = ({n},), one per row of the logits, got {arr.shape}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _checked_batch(student_logits, teacher_logits, labels, temperature, alpha, ignore_index):
    """The loss inputs as float64/int64 arrays, or a ValueError saying what is wrong."""
    t, s = _checked_pair(teacher_logits, student_logits)
    N, V = s.shape
    y = _checked_ints(labels, N, "labels")
    bad = np.flatnonzero(((y < 0) | (y >= V)) & (y != ignore_index))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"label {int(y[i])} at row {i} is out of range: labels must be in [0, V={V}) or ignore_index={ignore_index}"
        )
    T = _checked_temperature(temperature)
    if not _is_number(alpha):
        raise ValueError(f"alpha must be a number in [0, 1] (the weight of the soft term), got {alpha!r}")
    a = float(alpha)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"alpha must be in [0, 1] (the weight of the soft term), got {alpha!r}")
    return s, t, y, T, a


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
    logits = np.asarray(teacher_logits)
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"teacher_logits must be a 2-D array (N, V), got shape {logits.shape}")
    N, V = logits.shape
    ids = _checked_ints(tokens, N, "tokens")
    if N and (ids.min() < 0 or ids.max() >= V):
        raise ValueError(f"tokens must lie in [0, V={V}), got {ids.min()}..{ids.max()}")
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise ValueError(f"order must be an int >= 1 (contexts of up to order - 1 ids), got {order!r}")
    C = int(order) - 1
    _checked_temperature(temperature)
    if N == 0:
        return np.zeros((0, C), dtype=np.int64), np.zeros((0, V)), np.zeros(0, dtype=np.int64)
    probs = softmax(logits, temperature)  # (N, V); refuses non-finite logits
    padded = np.concatenate([np.full(C, -1, dtype=np.int64), ids])  # (C + N,)
    windows = np.lib.stride_tricks.sliding_window_view(padded, C)[1:] if C else np.zeros((N, 0), np.int64)  # (N, C)
    parts = [_context_means(windows, probs, c) for c in range(C + 1)]
    return tuple(np.concatenate([part[j] for part in parts]) for j in range(3))


def _context_means(windows: np.ndarray, probs: np.ndarray, c: int):
    """The rows of the contexts of length c: windows (N, C) holds each
    position's last C ids (-1 where the text had none)."""
    N, C = windows.shape
    have = np.arange(N) + 1 >= c  # (N,) positions with c ids behind them
    ctx = windows[have].copy()  # (n, C)
    ctx[:, : C - c] = -1
    rows = probs[have]  # (n, V)
    if C == 0:  # order 1: the one empty context
        return ctx[:1], rows.mean(axis=0, keepdims=True), np.array([N], dtype=np.int64)
    contexts, inverse, counts = np.unique(ctx, axis=0, return_inverse=True, return_counts=True)
    sums = np.zeros((len(contexts), probs.shape[1]))  # (R_c, V)
    np.add.at(sums, inverse.reshape(-1), rows)
    return contexts, sums / counts[:, None], counts.astype(np.int64)
