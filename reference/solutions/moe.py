"""Mixture of experts: storage for compute.

A dense MLP fires all its weights for every token. An MoE layer stores E
experts, and a small router sends each token to only K of them, so the layer
holds E experts' worth of parameters while each token pays for K. The price
is storing every expert and keeping the routing balanced: a capacity limit
caps how many tokens an expert takes (the rest are dropped), and the
load-balancing and z losses push the router towards even, tame routing
(Switch Transformer, GShard, ST-MoE, Mixtral).

Tokens x have shape (T, D), the router (D, E), and expert e is a SwiGLU MLP:
(silu(x @ w_gate[e]) * (x @ w_up[e])) @ w_down[e], with w_gate and w_up
(E, D, F) and w_down (E, F, D).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# How far a row of probabilities may sum from 1 and still count as a distribution.
PROB_SUM_TOL = 1e-3


@dataclass
class MoEAux:
    """What an MoE layer reports besides its output.

    load_balancing_loss: E * sum_i f_i * P_i of the routing (see load_balancing_loss).
    z_loss: mean over tokens of logsumexp(router logits) squared (see router_z_loss).
    tokens_per_expert: (E,) ints, the assignments each expert processed (kept ones only).
    dropped: the number of (token, expert) assignments dropped for lack of capacity.
    """

    load_balancing_loss: float
    z_loss: float
    tokens_per_expert: np.ndarray
    dropped: int


def router_probs(x: np.ndarray, w_router: np.ndarray) -> np.ndarray:
    """The router's probability of each expert for each token.

    x: (T, D) tokens; w_router: (D, E) router weights; floats (float32 or float64).
    Returns (T, E): softmax over experts of the logits x @ w_router; each row sums to 1.
    Raises ValueError if x is not (T, D) with T >= 1, or w_router is not (D, E).
    """
    x = _tokens(x)
    w_router = _router(w_router, x.shape[1])
    return _softmax(x @ w_router)


def top_k_gating(probs: np.ndarray, k: int, normalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The K experts each token is routed to, and their gate weights.

    probs: (T, E) router probabilities, each row a distribution (float32 or float64).
    k: experts per token, 1 <= k <= E.
    normalize: if True, the K chosen probabilities are rescaled to sum to 1
        (Mixtral); if False they are returned as they are (Qwen's norm_topk_prob=False).
    Returns indices (T, K) ints, each row the K most probable experts in
    descending probability (ties in any order), and weights (T, K) floats.
    Raises ValueError if probs is not a (T, E) array of distributions or k is out of range.
    """
    probs = _distributions(probs)
    return _gating(probs, _top_k(k, probs.shape[1]), normalize)


def _gating(probs: np.ndarray, k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """top_k_gating on probs already checked (or made by _softmax)."""
    order = np.argsort(-probs, axis=-1, kind="stable")
    indices = order[:, :k]  # (T, K)
    weights = np.take_along_axis(probs, indices, axis=-1)  # (T, K)
    if normalize:
        weights = weights / np.sum(weights, axis=-1, keepdims=True)
    return indices, weights


def expert_capacity(n_tokens: int, n_experts: int, k: int, capacity_factor: float) -> int:
    """How many assignments one expert may take: max(1, ceil(capacity_factor * T * K / E)).

    n_tokens: T >= 0; n_experts: E >= 1; k: K in [1, E];
    capacity_factor: > 0, the slack over a perfectly even split (1.0 = none).
    Returns an int >= 1.
    Raises ValueError on a non-integer or out-of-range count, or a capacity_factor
    that is not a positive finite number.
    """
    n_tokens = _count(n_tokens, "n_tokens", 0)
    n_experts = _count(n_experts, "n_experts", 1)
    k = _top_k(k, n_experts)
    capacity_factor = _capacity_factor(capacity_factor)
    if not math.isfinite(capacity_factor * n_tokens * k / n_experts):  # past any float: the same formula, exactly
        from fractions import Fraction

        return max(1, -(-Fraction(capacity_factor) * n_tokens * k // n_experts))  # -(-a // b): a / b rounded up
    return max(1, math.ceil(capacity_factor * n_tokens * k / n_experts))


def dispatch(indices: np.ndarray, n_experts: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Queue every (token, expert) assignment at its expert, GShard's way.

    Every token's first choice is queued before any token's second choice,
    and so on; within one choice rank, tokens queue in token order. An
    assignment is kept iff its position in its expert's queue is < capacity.

    indices: (T, K) ints in [0, E), distinct within a row; n_experts: E >= 1;
    capacity: the assignments an expert may take, >= 0.
    Returns keep (T, K) bool and position (T, K) ints, the 0-based place of
    every assignment (kept or not) in its expert's queue.
    Raises ValueError on indices of the wrong shape, dtype or range, a token
    choosing one expert twice, or a negative capacity.
    """
    n_experts = _count(n_experts, "n_experts", 1)
    indices = _indices(indices, n_experts)
    capacity = _count(capacity, "capacity", 0)
    T, k = indices.shape
    flat = indices.T.reshape(-1)  # (K*T,), rank-major: every first choice, then every second...
    order = np.argsort(flat, kind="stable")  # grouped by expert, queue order kept within each
    starts = np.searchsorted(flat[order], np.arange(n_experts))  # (E,) where each queue begins
    queued = np.empty(flat.size, dtype=np.int64)
    queued[order] = np.arange(flat.size) - starts[flat[order]]
    position = queued.reshape(k, T).T  # (T, K)
    return position < capacity, position


def moe_forward(
    x: np.ndarray,
    w_router: np.ndarray,
    w_gate: np.ndarray,
    w_up: np.ndarray,
    w_down: np.ndarray,
    k: int,
    capacity_factor: float | None = None,
    normalize: bool = True,
) -> tuple[np.ndarray, MoEAux]:
    """A mixture-of-experts layer: route, dispatch, run each expert once on
    all its tokens, and combine.

    x: (T, D) tokens; w_router: (D, E); w_gate, w_up: (E, D, F); w_down: (E, F, D);
        floats (float32 or float64).
    k: experts per token, 1 <= k <= E.
    capacity_factor: None for no capacity limit, else > 0 (see expert_capacity);
        assignments past an expert's capacity are dropped (see dispatch) and
        contribute zero, while kept ones keep their gate weights.
    normalize: renormalize the top-k gate weights (see top_k_gating).
    Returns y (T, D) = sum over a token's kept assignments of gate weight times
    the expert's output, and an MoEAux with the losses and counts.
    Raises ValueError on mismatched shapes, k out of range or a bad capacity_factor.
    """
    x = _tokens(x)
    T, D = x.shape
    w_router = _router(w_router, D)
    E = w_router.shape[1]
    w_gate, w_up, w_down = _experts(w_gate, w_up, w_down, E, D)
    k = _top_k(k, E)
    logits = _router_logits(x, w_router)  # (T, E)
    probs = _softmax(logits)  # distributions by construction: no need to check them again
    indices, weights = _gating(probs, k, normalize)  # (T, K), (T, K)
    if capacity_factor is None:
        keep = np.ones(indices.shape, dtype=bool)
    else:
        keep, _ = dispatch(indices, E, expert_capacity(T, E, k, capacity_factor))
    tokens = np.broadcast_to(np.arange(T)[:, None], indices.shape)[keep]  # kept assignments, flat
    experts, gates = indices[keep], weights[keep]
    order = np.argsort(experts, kind="stable")
    tokens, gates = tokens[order], gates[order]
    counts = np.bincount(experts, minlength=E)  # (E,)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    y = np.zeros((T, D), dtype=np.result_type(x, w_down))
    for e in range(E):
        rows = tokens[bounds[e] : bounds[e + 1]]  # this expert's tokens, each at most once
        if rows.size == 0:
            continue
        h = x[rows]  # (n_e, D): one gathered matmul per weight
        hidden = _silu(h @ w_gate[e]) * (h @ w_up[e])  # (n_e, F)
        y[rows] += gates[bounds[e] : bounds[e + 1], None] * (hidden @ w_down[e])
    if not np.all(np.isfinite(y)):  # a NaN or inf weight reached the output: say which array holds it
        _experts_finite(w_gate, w_up, w_down)
    aux = MoEAux(  # the losses of the routing computed above, its inputs already checked
        load_balancing_loss=_balance_loss(probs, indices),
        z_loss=_z_loss(logits),
        tokens_per_expert=counts.astype(np.int64),
        dropped=int(keep.size - np.count_nonzero(keep)),
    )
    return y, aux


def load_balancing_loss(probs: np.ndarray, indices: np.ndarray) -> float:
    """Switch Transformer's load-balancing loss, generalized to top-k:
    E * sum_i f_i * P_i.

    f_i is the fraction of the T*K assignments in indices that go to expert i;
    P_i is the mean over tokens of probs[:, i]. Equals 1.0 when both are
    uniform and grows as routing concentrates on few experts.

    probs: (T, E) router probabilities, each row a distribution.
    indices: (T, K) ints in [0, E), distinct within a row.
    Returns a float.
    Raises ValueError if probs is not distributions or indices do not fit it.
    """
    probs = _distributions(probs)
    T, E = probs.shape
    indices = _indices(indices, E)
    if indices.shape[0] != T:
        raise ValueError(f"indices must have one row per token of probs ({T}), got {indices.shape[0]}")
    return _balance_loss(probs, indices)


def _balance_loss(probs: np.ndarray, indices: np.ndarray) -> float:
    """load_balancing_loss on probs (T, E) and indices (T, K) already checked."""
    E = probs.shape[1]
    f = np.bincount(indices.reshape(-1), minlength=E) / indices.size  # (E,)
    P = np.mean(probs, axis=0, dtype=np.float64)  # (E,)
    return float(E * np.dot(f, P))


def router_z_loss(router_logits: np.ndarray) -> float:
    """ST-MoE's router z-loss: the mean over tokens of logsumexp(logits) squared.

    It grows with the size of the logits, keeping the router numerically tame.
    router_logits: (T, E) finite floats. Returns a float >= 0.
    Raises ValueError if router_logits is not a non-empty 2-D array of finite floats.
    """
    logits = np.asarray(router_logits)
    if logits.ndim != 2 or logits.shape[0] < 1 or logits.shape[1] < 1:
        raise ValueError(f"router_logits must have shape (T, E) with T, E >= 1, got {logits.shape}")
    if not np.issubdtype(logits.dtype, np.floating) or not np.all(np.isfinite(logits)):
        raise ValueError("router_logits must be finite floats")
    return _z_loss(logits)


def _z_loss(logits: np.ndarray) -> float:
    """router_z_loss on finite float logits (T, E) already checked."""
    logits = logits.astype(np.float64)
    top = np.max(logits, axis=-1)
    lse = top + np.log(np.sum(np.exp(logits - top[:, None]), axis=-1))  # (T,)
    return float(np.mean(lse * lse))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - np.max(logits, axis=-1, keepdims=True))
    return z / np.sum(z, axis=-1, keepdims=True)


def _float_array(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"{name} must hold floats, got dtype {a.dtype}")
    return a


def _floats(a, name: str) -> np.ndarray:
    a = _float_array(a, name)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds NaN or inf")
    return a


def _tokens(x) -> np.ndarray:
    x = _floats(x, "x")
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"x must have shape (T, D) with at least one token, got {x.shape}")
    return x


def _router(w_router, D: int) -> np.ndarray:
    w = _floats(w_router, "w_router")
    if w.ndim != 2 or w.shape[0] != D or w.shape[1] < 1:
        raise ValueError(f"w_router must have shape (D={D}, E) with E >= 1, got {w.shape}")
    return w


def _router_logits(x: np.ndarray, w_router: np.ndarray) -> np.ndarray:
    """x @ w_router (T, E), or a ValueError when it overflows to inf (x and w_router are finite)."""
    logits = x @ w_router
    if not np.all(np.isfinite(logits)):
        raise ValueError("the router logits x @ w_router overflow to inf; scale x or w_router down")
    return logits


def _experts(w_gate, w_up, w_down, E: int, D: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The expert weights as float arrays of matching shapes. Their values are
    not scanned here: that would read every expert on every call, the whole
    cost of a call with few tokens. moe_forward checks its output instead."""
    w_gate, w_up, w_down = _float_array(w_gate, "w_gate"), _float_array(w_up, "w_up"), _float_array(w_down, "w_down")
    if w_gate.ndim != 3 or w_gate.shape[:2] != (E, D):
        raise ValueError(f"w_gate must have shape (E={E}, D={D}, F), got {w_gate.shape}")
    F = w_gate.shape[2]
    if w_up.shape != (E, D, F):
        raise ValueError(f"w_up must have the shape of w_gate (E={E}, D={D}, F={F}), got {w_up.shape}")
    if w_down.shape != (E, F, D):
        raise ValueError(f"w_down must have shape (E={E}, F={F}, D={D}), got {w_down.shape}")
    return w_gate, w_up, w_down


def _experts_finite(w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray) -> None:
    """A ValueError naming the first expert weight array that holds NaN or inf."""
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        _floats(w, name)


def _count(n, name: str, low: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {n!r}")
    return int(n)


def _top_k(k, E: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= E:
        raise ValueError(f"k must be an integer in [1, E={E}], got {k!r}")
    return int(k)


def _capacity_factor(capacity_factor) -> float:
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float, np.integer, np.floating)):
        raise ValueError(f"capacity_factor must be a positive number or None, got {capacity_factor!r}")
    if not (math.isfinite(capacity_factor) and capacity_factor > 0):
        raise ValueError(f"capacity_factor must be a positive finite number, got {capacity_factor!r}")
    return float(capacity_factor)


def _distributions(probs) -> np.ndarray:
    probs = _floats(probs, "probs")
    if probs.ndim != 2 or probs.shape[0] < 1 or probs.shape[1] < 1:
        raise ValueError(f"probs must have shape (T, E) with T, E >= 1, got {probs.shape}")
    if np.any(probs < 0):
        raise ValueError("probs must not be negative: each row must be a probability distribution")
    sums = np.sum(probs, axis=-1, dtype=np.float64)
    bad = np.flatnonzero(np.abs(sums - 1.0) > PROB_SUM_TOL)
    if bad.size:
        raise ValueError(f"each row of probs must sum to 1; row {bad[0]} sums to {sums[bad[0]]:.6g}")
    return probs


def _indices(indices, E: int) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.ndim != 2 or idx.shape[0] < 1 or not 1 <= idx.shape[1] <= E:
        raise ValueError(f"indices must have shape (T, K) with T >= 1 and 1 <= K <= E={E}, got {idx.shape}")
    if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
    if idx.min() < 0 or idx.max() >= E:
        raise ValueError(f"indices must lie in [0, E={E}), got {idx.min()}..{idx.max()}")
    ordered = np.sort(idx, axis=-1)
    if np.any(ordered[:, 1:] == ordered[:, :-1]):
        raise ValueError("each token must choose distinct experts, but a row of indices repeats one")
    return idx.astype(np.int64)
