"""Weights laid out for BLAS: each one a copy whose data starts on a 64-byte boundary.

NumPy aligns the arrays it makes to 16 bytes only. A weight that starts 16
bytes past a cache line makes every 64-byte load of OpenBLAS's AVX-512 kernels
straddle two lines, and a product with it slower: a few rows (a verify step)
10-16% slower with the teacher's weight shapes, one row (a decode step) up to
13% (python benchmarks/bench_alignment.py prints both, and the teacher's calls
with its weights aligned and 16 bytes off).
"""

from __future__ import annotations

import numpy as np

ALIGN = 64  # bytes: a cache line, and the width of an AVX-512 load


def aligned(x: np.ndarray, offset: int = 0) -> np.ndarray:
    """A float32 copy of x whose data starts `offset` bytes past an ALIGN-byte boundary (0: on one)."""
    x = np.asarray(x, dtype=np.float32)
    buffer = np.empty(x.nbytes + 2 * ALIGN, dtype=np.uint8)
    start = -buffer.ctypes.data % ALIGN + offset
    out = buffer[start : start + x.nbytes].view(np.float32).reshape(x.shape)
    out[...] = x
    return out
