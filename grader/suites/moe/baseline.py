"""Trusted baselines of the moe suite's speed checks, run in a jail of their
own so that they cross the same channel as the learner's code. The suite
also calls vectorized_layer itself, in the judge, for expected outputs."""

import numpy as np


def vectorized_layer(x, w_router, w_gate, w_up, w_down, k):
    """The suite's own vectorized layer, losses included, written the way the
    reference model's MoE block is for more than one token: each expert runs
    once on its gathered tokens, and np.add.at scatters the results back. The
    losses reuse the routing's softmax; nothing reads the weights but the matmuls."""
    logits = x @ w_router
    top = logits.max(axis=-1, keepdims=True)  # (T, 1)
    z = np.exp(logits - top)
    total = z.sum(axis=-1, keepdims=True)  # (T, 1)
    probs = z / total
    idx = np.argsort(-probs, axis=-1)[:, :k]
    gates = np.take_along_axis(probs, idx, axis=-1)
    gates /= gates.sum(axis=-1, keepdims=True)
    y = np.zeros_like(x)
    for e in range(w_router.shape[1]):
        rows, slot = np.nonzero(idx == e)
        h = x[rows]
        a = h @ w_gate[e]
        np.add.at(y, rows, gates[rows, slot][:, None] * (((a / (1 + np.exp(-a))) * (h @ w_up[e])) @ w_down[e]))
    E = w_router.shape[1]
    lb = E * np.sum(np.bincount(idx.ravel(), minlength=E) / idx.size * probs.mean(axis=0))
    lse = (top + np.log(total))[:, 0]  # (T,) logsumexp of the router logits
    return y, (lb, np.mean(lse**2))


def layer_output(x, w_router, w_gate, w_up, w_down, k):
    """vectorized_layer's output and no aux: what a timed moe_forward's answer is checked against
    (the learner's MoEAux is an object that stays in the jail)."""
    return vectorized_layer(x, w_router, w_gate, w_up, w_down, k)[0], None


def per_token_loop(x, w_router, w_gate, w_up, w_down, k):
    """The slow way: route and run the experts one token at a time."""
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        logits = x[t] @ w_router
        p = np.exp(logits - logits.max())
        p /= p.sum()
        idx = np.argsort(-p)[:k]
        gates = p[idx] / p[idx].sum()
        for g, e in zip(gates, idx):
            a = x[t] @ w_gate[e]
            y[t] += g * (((a / (1 + np.exp(-a))) * (x[t] @ w_up[e])) @ w_down[e])
    return y
