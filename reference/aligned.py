"""Weights laid out for BLAS: each one a copy whose data starts on a 64-byte boundary.

NumPy aligns the arrays it makes to 16 bytes only. A weight that starts 16
bytes past a cache line makes the 64-byte loads of OpenBLAS's AVX-512 kernels
straddle two lines, and a product with it slower: with most of the teacher's
weight shapes 1.07-1.17x, for one row (a decode step) and six (a verify
step), and the teacher's whole calls 1.03x, the rest of a call not being
products (python benchmarks/bench_alignment.py prints each).
"""

from __future__ import annotations

import numpy as np

ALIGN = 64  # bytes: a cache line, and the width of an AVX-512 load


def aligned(x: np.ndarray, offset: int = 0) -> np.ndarray:
    """A float32 copy of x whose data starts `offset` bytes past an ALIGN-byte boundary (0: on one).
    Raises ValueError unless offset is a multiple of 4 (a float32's bytes) in [0, ALIGN)."""
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset % 4 or not 0 <= offset < ALIGN:
        raise ValueError(f"offset must be a multiple of 4 bytes in [0, {ALIGN}), got {offset!r}")
    x = np.asarray(x, dtype=np.float32)
    buffer = np.empty(x.nbytes + 2 * ALIGN, dtype=np.uint8)
    start = -buffer.ctypes.data % ALIGN + offset
    out = buffer[start : start + x.nbytes].view(np.float32).reshape(x.shape)
    out[...] = x
    return out
