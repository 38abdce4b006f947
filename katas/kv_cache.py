"""KV cache: trade memory for time.

A model writes one token at a time. Without a cache, every new token re-runs
the whole sequence through every layer: T tokens cost 1 + 2 + ... + T token
passes. The keys and values of past tokens never change, so keep them: a KV
cache stores them per layer, and each new token computes only its own q, k, v
and attends over the stored ones. T tokens then cost T token passes. The price
is memory: 2 x layers x kv heads x head width x bytes, for every cached token.
Storing the keys and values as int8 with a scale per token and head
(QuantizedKVCache) cuts that price to about a quarter, so more tokens, and
more sequences at once, fit in the same memory (tokens_that_fit).

    cache = KVCache.for_model(model)
    logits = forward_cached(model, prompt, cache)          # prefill, (T, V)
    logits = forward_cached(model, [next_token], cache)    # decode, (1, V)
"""

from __future__ import annotations

import math

import numpy as np

from reference.model import Model
from reference.sampling import check_generation, check_sampling, sample_token


class CacheFullError(ValueError):
    """Writing more tokens than a cache can hold (a KVCache's max_len, or a
    PagedKVCache's free blocks). The cache is left as it was."""


class KVCache:
    """Keys and values of every token already run through a model, per layer,
    in buffers preallocated for max_len tokens.

    Attributes: n_layers, n_kv_heads (Hkv), head_dim (Dh), max_len and dtype,
    as given to the constructor.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int, dtype=np.float32):
        """An empty cache for n_layers layers of n_kv_heads (Hkv) key/value
        heads of width head_dim (Dh), holding at most max_len tokens.

        Preallocates keys and values, each (n_layers, Hkv, max_len, Dh) of
        `dtype` (a floating dtype). Raises ValueError for a size that is not a
        positive int or a dtype that is not floating point.
        """
        raise NotImplementedError

    @classmethod
    def for_model(cls, model: Model, max_len: int | None = None) -> "KVCache":
        """An empty float32 cache sized for `model`: its layers, kv heads and
        head width, holding max_len tokens (default: the model's max_seq_len).

        Raises ValueError when max_len is not an int in [1, max_seq_len].
        """
        raise NotImplementedError

    def update(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append t new keys k and values v, each (Hkv, t, Dh) floating point,
        to `layer`, after the tokens that layer already holds.

        Returns every key and value of that layer, (Hkv, held + t, Dh) each:
        views of the buffers, so the past is never copied. len(cache) advances
        once every layer holds the new tokens.

        Raises CacheFullError when the layer would hold more than max_len
        tokens, and ValueError for a layer outside [0, n_layers) or keys and
        values of another shape or a non-floating dtype. Either way the cache
        is left unchanged.
        """
        raise NotImplementedError

    def __len__(self) -> int:
        """The number of tokens every layer holds."""
        raise NotImplementedError

    def crop(self, n: int) -> None:
        """Forget every token after the first n, in every layer (to roll back
        rejected speculative tokens). Raises ValueError unless 0 <= n <= len(self)."""
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes the key and value buffers hold:
        2 x n_layers x Hkv x Dh x max_len x itemsize."""
        raise NotImplementedError


def forward_cached(model: Model, tokens, cache: KVCache) -> np.ndarray:
    """Logits (t, V) of t new tokens (t,), placed at absolute positions
    len(cache) .. len(cache) + t - 1, attending over the cached tokens and
    each other. Stores the new keys and values in the cache.

    Drives the model's pieces (embed, qkv, attend, mlp, logits) and pushes
    only the t new tokens through each layer. One call with t > 1 is a
    prefill, t = 1 a decode step; a sequence fed in chunks gives the logits
    `model.forward` gives the whole sequence.

    Raises ValueError for bad tokens, a cache whose layers, kv heads or head
    width do not match the model, or positions past the model's
    max_seq_len; CacheFullError when the tokens do not fit the cache.
    """
    raise NotImplementedError


def generate(model: Model, prompt, n_new: int, *, temperature: float = 0.0, rng=None) -> list[int]:
    """The n_new tokens that follow prompt (T,), with a KV cache: one prefill
    of the prompt, then one decode step per new token.

    Each token comes from `reference.sampling.sample_token` on the logits of
    the last position, so the output equals `generate_naive` for the same
    temperature and seeded rng. The last new token is never fed back, so each
    layer sees T + n_new - 1 token positions in all.

    Raises ValueError when prompt + n_new exceed the model's max_seq_len,
    n_new is not an int >= 0, or temperature is negative (or > 0 without an rng).
    """
    raise NotImplementedError


class PagedKVCache:
    """Keys and values of many sequences in one shared pool of fixed-size
    blocks, the vLLM idea: a sequence takes blocks as it grows and gives them
    back when it ends, so memory follows the tokens actually held instead of
    max_len per sequence.

    Each sequence has a block table; its token i lives in pool slot
    table[i // block_size] * block_size + i % block_size, in every layer.
    Reading a sequence back gathers its slots into a copy (a serving engine's
    attention kernel reads the blocks in place instead).
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, num_blocks: int, block_size: int = 16):
        """An empty pool of num_blocks blocks of block_size tokens, for
        n_layers layers of n_kv_heads (Hkv) heads of width head_dim (Dh):
        keys and values each (n_layers, Hkv, num_blocks * block_size, Dh)
        float32. Raises ValueError for a size that is not a positive int."""
        raise NotImplementedError

    def add_sequence(self, seq_id) -> None:
        """Start an empty sequence named seq_id (any hashable). Raises
        ValueError if a sequence of that name is live."""
        raise NotImplementedError

    def update(self, seq_id, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append keys k and values v, each (Hkv, t, Dh) floating point (kept
        as float32), to `layer` of sequence seq_id, taking free blocks as needed.

        Returns every key and value that layer of the sequence holds,
        (Hkv, held + t, Dh) each. Raises CacheFullError when the pool has too
        few free blocks, and ValueError for an unknown sequence, a bad layer,
        or a bad shape or dtype; either way nothing changes.
        """
        raise NotImplementedError

    def free(self, seq_id) -> None:
        """End sequence seq_id and return its blocks to the pool. Raises
        ValueError for an unknown sequence."""
        raise NotImplementedError

    @property
    def blocks_in_use(self) -> int:
        """The number of blocks the live sequences hold."""
        raise NotImplementedError


class QuantizedKVCache:
    """KVCache's API with keys and values stored as int8: each key or value
    vector of one token in one head (Dh numbers) is kept as Dh int8 codes and
    one float32 scale, symmetric absmax quantization:

        scale = max|x| / 127 (in float32),  code = round(x / scale),

    rounding half to even, so codes lie in [-127, 127]; a vector of zeros gets
    scale 0 and codes 0, and comes back exactly zero. A token then costs
    Dh + 4 bytes per head and layer for its keys, as many for its values,
    instead of 4 x Dh in float32.

    Attributes: n_layers, n_kv_heads (Hkv), head_dim (Dh) and max_len, as
    given to the constructor; keys and values, the int8 codes, each
    (n_layers, Hkv, max_len, Dh); key_scales and value_scales, float32, each
    (n_layers, Hkv, max_len). Entries past what a layer holds mean nothing.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, max_len: int):
        """An empty cache for n_layers layers of n_kv_heads (Hkv) key/value
        heads of width head_dim (Dh), holding at most max_len tokens, its
        codes and scales preallocated. Raises ValueError for a size that is
        not a positive int."""
        raise NotImplementedError

    @classmethod
    def for_model(cls, model: Model, max_len: int | None = None) -> "QuantizedKVCache":
        """An empty quantized cache sized for `model`: its layers, kv heads
        and head width, holding max_len tokens (default: the model's
        max_seq_len). Raises ValueError when max_len is not an int in
        [1, max_seq_len]."""
        raise NotImplementedError

    def update(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Quantize t new keys k and values v, each (Hkv, t, Dh) floating
        point, and append them to `layer`, after the tokens that layer
        already holds.

        Returns every key and value of that layer dequantized (code x scale),
        float32, (Hkv, held + t, Dh) each: new arrays, the new tokens as they
        come back from their codes too. len(cache) advances once every layer
        holds the new tokens.

        Raises CacheFullError when the layer would hold more than max_len
        tokens, and ValueError for a layer outside [0, n_layers), keys and
        values of another shape or a non-floating dtype, or values that are
        not finite in float32. Either way the cache is left unchanged.
        """
        raise NotImplementedError

    def __len__(self) -> int:
        """The number of tokens every layer holds."""
        raise NotImplementedError

    def crop(self, n: int) -> None:
        """Forget every token after the first n, in every layer. Raises
        ValueError unless 0 <= n <= len(self)."""
        raise NotImplementedError

    @property
    def bytes_per_token(self) -> int:
        """Bytes one cached token takes, codes and scales:
        2 (keys and values) x n_layers x Hkv x (Dh x 1 byte + 4 bytes of scale)."""
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes the code and scale buffers hold: bytes_per_token x max_len."""
        raise NotImplementedError


CACHE_FORMATS = ("float32", "int8")


def tokens_that_fit(model: Model, budget_bytes: int, cache: str = "float32", weight_bits: float = 32.0) -> int:
    """How many cached tokens fit in budget_bytes of memory beside the
    model's weights: (budget_bytes - weight bytes) // bytes per token, and 0
    when the weights alone fill the budget. Sequences of length L that fit:
    tokens_that_fit(...) // L.

    The weights take ceil(n_params x weight_bits / 8) bytes, every parameter
    at weight_bits bits (32 for float32, 8.5 for llama.cpp's Q8_0, 4.5 for
    Q4_0). A token takes, in the model's layers, kv heads and head width:
    cache="float32": 2 x n_layers x n_kv_heads x head_dim x 4 bytes (KVCache);
    cache="int8": 2 x n_layers x n_kv_heads x (head_dim + 4) bytes (QuantizedKVCache).

    Raises ValueError for a budget that is not an int >= 0, a cache other
    than "float32" or "int8", or weight_bits that is not a positive finite number.
    """
    raise NotImplementedError
