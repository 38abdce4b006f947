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
    raise NotImplementedError


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
    raise NotImplementedError


def expert_capacity(n_tokens: int, n_experts: int, k: int, capacity_factor: float) -> int:
    """How many assignments one expert may take: max(1, ceil(capacity_factor * T * K / E)).

    n_tokens: T >= 0; n_experts: E >= 1; k: K in [1, E];
    capacity_factor: > 0, the slack over a perfectly even split (1.0 = none).
    Returns an int >= 1.
    Raises ValueError on a non-integer or out-of-range count, or a capacity_factor
    that is not a positive finite number.
    """
    raise NotImplementedError


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
    raise NotImplementedError


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
    raise NotImplementedError


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
    raise NotImplementedError


def router_z_loss(router_logits: np.ndarray) -> float:
    """ST-MoE's router z-loss: the mean over tokens of logsumexp(logits) squared.

    It grows with the size of the logits, keeping the router numerically tame.
    router_logits: (T, E) finite floats. Returns a float >= 0.
    Raises ValueError if router_logits is not a non-empty 2-D array of finite floats.
    """
    raise NotImplementedError
