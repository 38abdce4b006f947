"""What the moe checks draw and build: float dtypes, capacity factors, random layers and
their shapes, random expert indices and routings, and router logits of a thousand.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from grader.suites.common import rng

FLOAT_DTYPES = (np.float32, np.float64)  # the floats the docstrings take: float32 as the models hold, float64
FACTORS = [0.25, 0.5, 1.0, 1.25, 1.5, 2.0, 3.0, 1, 2]  # exact in binary, so any summation order agrees; ints too


def _layer(seed, T, D, E, F, router_scale=1.0):
    """x (T, D), w_router (D, E), w_gate, w_up (E, D, F), w_down (E, F, D), all float32."""
    g = rng(seed)
    x = g.standard_normal((T, D))
    w_router = router_scale * g.standard_normal((D, E)) / np.sqrt(D)
    w_gate = g.standard_normal((E, D, F)) / np.sqrt(D)
    w_up = g.standard_normal((E, D, F)) / np.sqrt(D)
    w_down = g.standard_normal((E, F, D)) / np.sqrt(F)
    return tuple(a.astype(np.float32) for a in (x, w_router, w_gate, w_up, w_down))


@st.composite
def _shapes(draw, max_t=16, max_e=8):
    """(T, D, E, F, k, seed) for a small layer."""
    E = draw(st.integers(1, max_e))
    return (
        draw(st.integers(1, max_t)),
        draw(st.integers(1, 8)),
        E,
        draw(st.integers(1, 8)),
        draw(st.integers(1, E)),
        draw(st.integers(0, 2**16)),
    )


def _random_indices(seed, T, E, k):
    """(T, K) distinct experts per row, in random order."""
    g = rng(seed)
    return np.argsort(g.random((T, E)), axis=-1)[:, :k]


# Router logits (rows of x against an identity router) far past exp's range in float32 (88) and float64 (709).
HUGE_LOGITS = [[1000.0, 999.0, -1000.0], [-1000.0, -1000.0, -1000.0], [88.75, 0.0, 90.0], [-800.0, 300.0, 299.5]]


@st.composite
def _routings(draw, max_t=30, max_e=8):
    """(T, E, k, seed) for random indices."""
    E = draw(st.integers(1, max_e))
    return draw(st.integers(1, max_t)), E, draw(st.integers(1, E)), draw(st.integers(0, 2**16))
