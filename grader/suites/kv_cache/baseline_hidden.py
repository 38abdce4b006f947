"""Trusted baseline of a hidden check of the kv_cache suite (the update's cost against a preallocated
buffer's), run in a jail of its own so that it crosses the same channel as the learner's code. A student
edition never ships a suite's baseline_hidden.py (grader.instructor.release): what it holds is a working
cache, an answer of the cache task, and only hidden checks load it."""

import numpy as np


class KVCache:
    """The least a cache's update can do: write the new keys and values into one preallocated buffer and
    return views of what it holds. The update-cost check times the learner's cache at 4096 tokens against it,
    so that an update slowed down where the cache is short (to flatten the growth the check measures) cannot
    hide one that copies the past."""

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int):
        self.k = np.zeros((n_layers, n_kv_heads, max_len, head_dim), np.float32)
        self.v = np.zeros_like(self.k)
        self.filled = [0] * n_layers

    def update(self, layer: int, k, v):
        start, t = self.filled[layer], np.shape(k)[1]
        self.k[layer, :, start : start + t], self.v[layer, :, start : start + t] = k, v
        self.filled[layer] = start + t
        return self.k[layer, :, : start + t], self.v[layer, :, : start + t]
