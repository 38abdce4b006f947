"""What the speculative checks draw and build: token dtypes, probability rows, pinned target
and draft distributions, and the tiny random models of the loop.
"""

from __future__ import annotations

import numpy as np

from reference.model import Config, Model

TOKEN_DTYPES = (np.int64, np.int32, np.int16, np.uint8)  # draft tokens: ints of any integer dtype


def normalized(raw: np.ndarray) -> np.ndarray:
    """Rows of non-negative raw weights scaled to sum to 1 (an all-tiny row becomes uniform)."""
    raw = np.asarray(raw, dtype=np.float64)
    sums = raw.sum(axis=-1, keepdims=True)
    uniform = np.full_like(raw, 1.0 / raw.shape[-1])
    return np.where(sums > 1e-6, raw / np.where(sums > 1e-6, sums, 1.0), uniform)


P_TWO = normalized(np.array([[0.9, 0.1, 0, 0], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]]))
Q_TWO = normalized(np.array([[0.2, 0.8, 0, 0], [0.7, 0.1, 0.1, 0.1]]))


TINY = Config(vocab_size=12, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=64)
PROMPT = [3, 1, 4, 1, 5]


def tiny(seed: int) -> Model:
    return Model.random(TINY, seed=seed)
