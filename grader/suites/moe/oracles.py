"""The moe suite's oracles: softmax, routing, capacity, GShard's priority queue, the layer
token by token and the two losses, in float64, computed here in the judge, never from the code
under test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def _softmax64(logits):
    z = np.exp(logits - np.max(logits, axis=-1, keepdims=True))
    return z / np.sum(z, axis=-1, keepdims=True)


def _silu64(a):
    return a / (1.0 + np.exp(-a))


def _route64(x, w_router, k, normalize=True):
    """(probs (T, E), indices (T, K), weights (T, K)) in float64."""
    probs = _softmax64(x.astype(np.float64) @ w_router.astype(np.float64))
    idx = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(probs, idx, axis=-1)
    if normalize:
        w = w / w.sum(axis=-1, keepdims=True)
    return probs, idx, w


def _capacity(T, E, k, factor):
    return max(1, math.ceil(Fraction(factor) * T * k / E))


def _queue(indices, E, capacity):
    """GShard's priority, one assignment at a time: (keep, position)."""
    T, k = indices.shape
    filled = [0] * E
    position = np.zeros((T, k), dtype=np.int64)
    for j in range(k):
        for t in range(T):
            e = int(indices[t, j])
            position[t, j] = filled[e]
            filled[e] += 1
    return position < capacity, position


def _expert64(h, wg, wu, wd):
    h = h.astype(np.float64)
    return (_silu64(h @ wg.astype(np.float64)) * (h @ wu.astype(np.float64))) @ wd.astype(np.float64)


def _moe64(x, w_router, w_gate, w_up, w_down, k, factor=None, normalize=True):
    """The layer token by token in float64: (y (T, D), keep (T, K), indices (T, K))."""
    T, E = x.shape[0], w_router.shape[1]
    _, idx, w = _route64(x, w_router, k, normalize)
    if factor is None:
        keep = np.ones(idx.shape, dtype=bool)
    else:
        keep, _ = _queue(idx, E, _capacity(T, E, k, factor))
    y = np.zeros(x.shape, dtype=np.float64)
    for t in range(T):
        for j in range(k):
            if keep[t, j]:
                e = idx[t, j]
                y[t] += w[t, j] * _expert64(x[t : t + 1], w_gate[e], w_up[e], w_down[e])[0]
    return y, keep, idx


def _lb64(probs, indices):
    T, E = probs.shape
    f = np.bincount(np.asarray(indices).reshape(-1), minlength=E) / indices.size
    return E * float(np.sum(f * probs.astype(np.float64).mean(axis=0)))


def _z64(logits):
    logits = logits.astype(np.float64)
    m = logits.max(axis=-1)
    lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=-1))
    return float(np.mean(lse**2))
