"""Which BLAS kernel this process runs, for the header of every figure it prints.

NumPy's OpenBLAS picks a kernel for the CPU it finds, unless OPENBLAS_CORETYPE
forces one (some hosts set it, with OPENBLAS_L2_SIZE, to dodge bugs of old
OpenBLAS builds). A forced older kernel multiplies a few rows by a weight
2-3x slower than the CPU's own, so figures taken under it say little about a
learner's laptop. The benchmark scripts' --native-blas drops both variables
for their own process; nothing else changes them.
"""

from __future__ import annotations

import os

FORCING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")  # the variables that force a kernel


def kernel() -> str:
    """What runs NumPy's matrix products here, as 'OpenBLAS 0.3.31, SkylakeX kernel, 1 thread'."""
    import numpy  # noqa: F401  (loads the BLAS that threadpoolctl reports)
    from threadpoolctl import threadpool_info

    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    if not pools:
        return "no BLAS library found"
    pool = pools[0]
    name = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS"}.get(pool.get("internal_api"), pool.get("prefix"))
    threads = pool.get("num_threads")
    arch = pool.get("architecture")
    parts = [f"{name} {pool.get('version') or ''}".strip(), f"{arch} kernel" if arch else None]
    parts.append(f"{threads} thread{'s' if threads != 1 else ''}")
    return ", ".join(p for p in parts if p)


def forced() -> dict[str, str]:
    """The kernel-forcing variables set in this process's environment."""
    return {name: os.environ[name] for name in FORCING if name in os.environ}


def header(how_to_drop: str) -> str:
    """One line naming the kernel, plus one saying the figures are distorted
    when a kernel is forced; how_to_drop says how to measure without it."""
    line = f"BLAS: {kernel()}"
    set_here = forced()
    if set_here:
        names = " ".join(f"{k}={v}" for k, v in set_here.items())
        line += (
            f"\n(forced by {names}: products of a few rows run 2-3x slower than on this CPU's own kernel, "
            f"so these figures are distorted; {how_to_drop})"
        )
    return line


def without_forcing(environ: dict[str, str]) -> dict[str, str]:
    """environ without the kernel-forcing variables."""
    return {k: v for k, v in environ.items() if k not in FORCING}
