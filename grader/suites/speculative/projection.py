"""The bandwidth lesson of speculative decoding, as a projection: what a
verify call of k + 1 tokens would cost against a one-token call were the
call bound by this machine's memory bandwidth or GEMM rate alone, from the
work the call does (weight bytes read and multiply-accumulates).

    rates = machine_rates()                          # measured now, one BLAS thread
    projected_v(one, verify, rates)                  # max(bytes / bandwidth, 2 macs / GEMM) ratio

`machine_rates` measures both on this machine at bench time: the bandwidth
from summing an array far larger than the caches, the GEMM rate from a large
float32 product, each in this process's CPU seconds (what other programs on
a shared machine do between its turns is not counted). `dense_work` counts a dense model's work from its shapes
alone (a 7B-class model is never built). `row_products` times what the
projection leaves out: a product of a few rows against a one-row product of
the same weight matrix (gemm against gemv).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from grader.measure import timing

BANDWIDTH_MIB = 256  # the array summed to measure memory bandwidth: far past the last-level cache
GEMM_N = 1024  # the GEMM rate's product: (GEMM_N, GEMM_N) @ (GEMM_N, GEMM_N) float32
RATE_TRIES = 5  # each rate is the best of this many timed calls (a busy machine only slows a call)
ROWS_WEIGHT = (4096, 4096)  # the weight matrix of the few-rows-against-one-row product (64 MiB float32)
FEW_ROWS = 5  # rows of a verify call at k = 4


@dataclass(frozen=True)
class Rates:
    """What this machine does on one thread, measured: bytes/s read from memory, FLOP/s of a large GEMM."""

    bandwidth: float  # bytes per second
    gemm: float  # floating-point operations per second (a multiply-accumulate is 2)


@dataclass(frozen=True)
class CallWork:
    """The work of one call: the weight bytes it reads and its multiply-accumulates."""

    weight_bytes: float
    macs: float

    def seconds(self, rates: Rates) -> float:
        """The call's time were it bound by reading its weights or by the GEMM rate, whichever is slower."""
        return max(self.weight_bytes / rates.bandwidth, 2 * self.macs / rates.gemm)


def _best_seconds(fn) -> float:
    """The least CPU seconds of this process over RATE_TRIES calls of fn, after
    one untimed call: CPU time, so that another program's turn on a shared
    CPU is not counted as this machine's slowness."""
    fn()
    best = float("inf")
    for _ in range(RATE_TRIES):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def machine_rates() -> Rates:
    """This machine's memory bandwidth (an array of BANDWIDTH_MIB summed) and
    float32 GEMM rate (GEMM_N cubed), each the best of RATE_TRIES calls."""
    big = np.ones(BANDWIDTH_MIB * 2**20 // 4, dtype=np.float32)
    bandwidth = big.nbytes / _best_seconds(big.sum)
    del big
    a = np.random.default_rng(0).standard_normal((GEMM_N, GEMM_N)).astype(np.float32)
    b = a.T.copy()
    gemm = 2 * GEMM_N**3 / _best_seconds(lambda: a.dot(b))
    return Rates(bandwidth, gemm)


def row_products(repeats: int) -> float:
    """A product of FEW_ROWS rows with a ROWS_WEIGHT float32 matrix over a
    one-row product with it (the median of interleaved rounds): what a
    verify call's few rows cost where the projection counts them as one read
    of the weights."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal(ROWS_WEIGHT).astype(np.float32)
    rows = rng.standard_normal((FEW_ROWS, ROWS_WEIGHT[0])).astype(np.float32)
    one = rows[:1]
    runs = [timing.ignoring_round(lambda: rows.dot(weight)), timing.ignoring_round(lambda: one.dot(weight))]
    return timing.interleave(runs, rounds=max(repeats, 5), spread=0.05).ratio(0, 1)


def dense_work(
    tokens: int, *, d_model: int, n_layers: int, d_ff: int, vocab: int, context: int, bytes_per_weight: float
) -> CallWork:
    """The work of a cached call of a dense, multi-head (llama-like) model that
    scores `tokens` new tokens after `context` cached ones, from its shapes:
    every matmul weight read once (q, k, v, o: 4 D^2 a layer; the SwiGLU:
    3 D F; the output projection: D V), one embedding row per token; macs of
    every matmul row and of attention over context + tokens keys."""
    D = d_model
    matmul = n_layers * (4 * D * D + 3 * D * d_ff) + D * vocab
    weight_bytes = (matmul + tokens * D) * bytes_per_weight
    attention = n_layers * 2 * tokens * (context + tokens) * D  # scores and the weighted sum of values
    return CallWork(weight_bytes, tokens * matmul + attention)


def projected_v(one: CallWork, verify: CallWork, rates: Rates) -> float:
    """The verify call's projected time over the one-token call's, each bound by bandwidth or GEMM rate."""
    return verify.seconds(rates) / one.seconds(rates)
