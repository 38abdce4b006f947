"""The kv_cache suite's oracles: the suite's own forward pass through a cache and greedy text
of the float32 model, and the tokens a memory budget holds, computed here in the judge, never
from the code under test.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from reference.model import Config, Model


def _fits(config: Config, budget: int, cache: str, weight_bits) -> int:
    """The suite's answer: budget less ceil(params x bits / 8), over bytes per token, and never below 0."""
    per_token = (
        2 * config.n_layers * config.n_kv_heads * (config.head_dim * 4 if cache == "float32" else config.head_dim + 4)
    )
    weights = -(-(config.n_params() * Fraction(weight_bits)) // 8)
    return max(0, (budget - weights) // per_token)


def _suite_forward(model: Model, tokens: list[int], start: int, update) -> np.ndarray:
    """The suite's own forward_cached: logits (t, V) of tokens at positions start .. start + t - 1, each layer's
    keys and values going through update(layer, k, v), which returns every key and value of that layer."""
    t = len(tokens)
    positions, key_positions = np.arange(start, start + t), np.arange(start + t)
    x = model.embed(tokens)
    for layer in range(model.config.n_layers):
        q, k, v = model.qkv(layer, x, positions)
        k_all, v_all = (np.asarray(a, np.float32) for a in update(layer, k, v))
        x = x + model.attend(layer, q, k_all, v_all, positions, key_positions)
        x = x + model.mlp(layer, x)
    return model.logits(x)


def _float_greedy_text(model: Model, prompt: list[int], length: int) -> list[int]:
    """prompt continued greedily to length tokens by the float32 model, through the suite's own float32 cache."""
    held: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def update(layer, k, v):
        old = held.get(layer, (k[:, :0], v[:, :0]))
        held[layer] = (np.concatenate([old[0], k], axis=1), np.concatenate([old[1], v], axis=1))
        return held[layer]

    text = list(prompt)
    logits = _suite_forward(model, text, 0, update)
    while len(text) < length:
        text.append(int(np.argmax(logits[-1])))
        if len(text) < length:
            logits = _suite_forward(model, text[-1:], len(text) - 1, update)
    return text
