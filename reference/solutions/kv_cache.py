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


def _check_size(owner: str, name: str, value) -> int:
    """value as an int, or a ValueError unless it is a positive int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{owner} {name} must be a positive int, got {value!r}")
    return int(value)


def _check_layer(layer, n_layers: int) -> int:
    """layer as an int, or a ValueError unless it lies in [0, n_layers)."""
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < n_layers:
        raise ValueError(f"layer must be an int in [0, {n_layers}), got {layer!r}")
    return int(layer)


def _model_max_len(model: Model, max_len) -> int:
    """max_len as an int (None: the model's max_seq_len), or a ValueError unless it lies in [1, max_seq_len]."""
    c = model.config
    if max_len is None:
        return c.max_seq_len
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or not 1 <= max_len <= c.max_seq_len:
        raise ValueError(f"max_len must be an int in [1, max_seq_len={c.max_seq_len}], got {max_len!r}")
    return int(max_len)


def _check_kv(k, v, n_kv_heads: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """k and v as arrays, or a ValueError unless both are (Hkv, t, Dh) floating point."""
    k, v = np.asarray(k), np.asarray(v)
    shape = k.shape
    if shape == v.shape and len(shape) == 3 and shape[0] == n_kv_heads and shape[2] == head_dim:
        if k.dtype.kind == v.dtype.kind == "f":  # the usual case, in one test; else the loop says what is wrong
            return k, v
    for name, x in (("k", k), ("v", v)):
        if x.ndim != 3 or x.shape[0] != n_kv_heads or x.shape[2] != head_dim:
            raise ValueError(f"{name} must have shape (Hkv={n_kv_heads}, t, Dh={head_dim}), got {x.shape}")
        if x.dtype.kind != "f":  # float16, float32, float64, longdouble
            raise ValueError(f"{name} must hold floating point numbers, got dtype {x.dtype}")
    if v.shape != k.shape:
        raise ValueError(f"v must have the shape of k {k.shape}, got {v.shape}")
    return k, v


def _check_fits(start: int, t: int, max_len: int) -> None:
    """CacheFullError unless t more tokens fit after the `start` a layer holds."""
    if start + t > max_len:
        raise CacheFullError(
            f"the cache holds {start} tokens and fits max_len={max_len}, so {t} more do not fit; "
            "crop it or make a cache with a larger max_len"
        )


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
        self.n_layers = _check_size("KVCache", "n_layers", n_layers)
        self.n_kv_heads = _check_size("KVCache", "n_kv_heads", n_kv_heads)
        self.head_dim = _check_size("KVCache", "head_dim", head_dim)
        self.max_len = _check_size("KVCache", "max_len", max_len)
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"KVCache dtype must be a floating type such as np.float32, got {dtype!r}") from None
        if not np.issubdtype(dtype, np.floating):
            raise ValueError(f"KVCache dtype must be a floating type such as np.float32, got {dtype}")
        self.dtype = dtype
        shape = (self.n_layers, self.n_kv_heads, self.max_len, self.head_dim)
        self._k = np.zeros(shape, dtype)  # (layers, Hkv, max_len, Dh)
        self._v = np.zeros(shape, dtype)
        self._filled = [0] * self.n_layers  # tokens each layer holds

    @classmethod
    def for_model(cls, model: Model, max_len: int | None = None) -> "KVCache":
        """An empty float32 cache sized for `model`: its layers, kv heads and
        head width, holding max_len tokens (default: the model's max_seq_len).

        Raises ValueError when max_len is not an int in [1, max_seq_len].
        """
        c = model.config
        return cls(c.n_layers, c.n_kv_heads, c.head_dim, _model_max_len(model, max_len))

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
        layer = _check_layer(layer, self.n_layers)
        k, v = _check_kv(k, v, self.n_kv_heads, self.head_dim)
        start, t = self._filled[layer], k.shape[1]
        _check_fits(start, t, self.max_len)
        end = start + t
        self._k[layer, :, start:end] = k
        self._v[layer, :, start:end] = v
        self._filled[layer] = end
        return self._k[layer, :, :end], self._v[layer, :, :end]

    def __len__(self) -> int:
        """The number of tokens every layer holds."""
        return min(self._filled)

    def crop(self, n: int) -> None:
        """Forget every token after the first n, in every layer (to roll back
        rejected speculative tokens). Raises ValueError unless 0 <= n <= len(self)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= len(self):
            raise ValueError(f"crop needs an int n in [0, len(cache)={len(self)}], got {n!r}")
        self._filled = [int(n)] * self.n_layers

    @property
    def nbytes(self) -> int:
        """Bytes the key and value buffers hold:
        2 x n_layers x Hkv x Dh x max_len x itemsize."""
        return int(self._k.nbytes + self._v.nbytes)


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
    c = model.config
    x = model.embed(tokens)  # (t, D); a ValueError for bad tokens
    try:  # read once each: cheaper than asking hasattr first
        sizes, update, start = (cache.n_layers, cache.n_kv_heads, cache.head_dim), cache.update, len(cache)
    except (AttributeError, TypeError):  # no such attribute, or no len()
        what = f"cache must be a one-sequence cache such as KVCache.for_model(model), got {cache!r:.60}"
        raise ValueError(what) from None
    if sizes != (c.n_layers, c.n_kv_heads, c.head_dim):
        raise ValueError(
            f"the cache holds {sizes[0]} layers x {sizes[1]} kv heads x width {sizes[2]}, "
            f"the model needs {c.n_layers} x {c.n_kv_heads} x {c.head_dim}; use KVCache.for_model(model)"
        )
    t = x.shape[0]
    if start + t > c.max_seq_len:
        raise ValueError(f"the cache holds {start} tokens; {t} more exceed max_seq_len={c.max_seq_len}")
    positions = np.arange(start, start + t)
    key_positions = np.arange(start + t)
    for layer in range(c.n_layers):
        q, k, v = model.qkv(layer, x, positions)  # (H, t, Dh), (Hkv, t, Dh), (Hkv, t, Dh)
        k_all, v_all = update(layer, k, v)  # (Hkv, start + t, Dh)
        x = x + model.attend(layer, q, k_all, v_all, positions, key_positions)
        x = x + model.mlp(layer, x)
    return model.logits(x)  # (t, V)


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
    prompt = check_generation(model, prompt, n_new)
    temperature = check_sampling(temperature, rng)
    if n_new == 0:
        return []
    cache = KVCache.for_model(model, max_len=prompt.size + n_new - 1)
    logits = forward_cached(model, prompt, cache)[-1]  # (V,)
    new = []
    for i in range(n_new):
        token = sample_token(logits, temperature, rng)
        new.append(token)
        if i < n_new - 1:
            logits = forward_cached(model, [token], cache)[-1]
    return new


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
        self.n_layers = _check_size("PagedKVCache", "n_layers", n_layers)
        self.n_kv_heads = _check_size("PagedKVCache", "n_kv_heads", n_kv_heads)
        self.head_dim = _check_size("PagedKVCache", "head_dim", head_dim)
        self.num_blocks = _check_size("PagedKVCache", "num_blocks", num_blocks)
        self.block_size = _check_size("PagedKVCache", "block_size", block_size)
        shape = (self.n_layers, self.n_kv_heads, self.num_blocks * self.block_size, self.head_dim)
        self._k = np.zeros(shape, np.float32)
        self._v = np.zeros(shape, np.float32)
        self._free = list(range(self.num_blocks - 1, -1, -1))  # a stack: pop() gives the lowest block
        self._tables: dict = {}  # seq_id -> list of block ids
        self._filled: dict = {}  # seq_id -> tokens held per layer

    def _live(self, seq_id) -> bool:
        """Whether seq_id names a live sequence (an unhashable one never does)."""
        try:
            return seq_id in self._tables
        except TypeError:
            return False

    def add_sequence(self, seq_id) -> None:
        """Start an empty sequence named seq_id (any hashable). Raises
        ValueError if a sequence of that name is live."""
        try:
            hash(seq_id)
        except TypeError:
            raise ValueError(f"a sequence id must be hashable (a str or an int, say), got {seq_id!r:.60}") from None
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists; free it first or pick another id")
        self._tables[seq_id] = []
        self._filled[seq_id] = [0] * self.n_layers

    def update(self, seq_id, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append keys k and values v, each (Hkv, t, Dh) floating point (kept
        as float32), to `layer` of sequence seq_id, taking free blocks as needed.

        Returns every key and value that layer of the sequence holds,
        (Hkv, held + t, Dh) each. Raises CacheFullError when the pool has too
        few free blocks, and ValueError for an unknown sequence, a bad layer,
        or a bad shape or dtype; either way nothing changes.
        """
        if not self._live(seq_id):
            raise ValueError(f"no sequence {seq_id!r}; start it with add_sequence")
        layer = _check_layer(layer, self.n_layers)
        k, v = _check_kv(k, v, self.n_kv_heads, self.head_dim)
        table, filled = self._tables[seq_id], self._filled[seq_id]
        start, end = filled[layer], filled[layer] + k.shape[1]
        need = -(-end // self.block_size) - len(table)
        if need > len(self._free):
            raise CacheFullError(
                f"sequence {seq_id!r} needs {need} more blocks of {self.block_size} tokens, "
                f"but only {len(self._free)} of {self.num_blocks} are free; free a sequence first"
            )
        for _ in range(max(need, 0)):
            table.append(self._free.pop())
        slots = self._slots(table, end)  # (end,)
        self._k[layer][:, slots[start:]] = k
        self._v[layer][:, slots[start:]] = v
        filled[layer] = end
        return self._k[layer][:, slots], self._v[layer][:, slots]

    def _slots(self, table: list[int], n: int) -> np.ndarray:
        """Pool slots of tokens 0 .. n-1 of a sequence with this block table."""
        i = np.arange(n)
        return np.asarray(table, dtype=np.int64)[i // self.block_size] * self.block_size + i % self.block_size

    def free(self, seq_id) -> None:
        """End sequence seq_id and return its blocks to the pool. Raises
        ValueError for an unknown sequence."""
        if not self._live(seq_id):
            raise ValueError(f"no sequence {seq_id!r} to free")
        self._free.extend(reversed(self._tables.pop(seq_id)))
        del self._filled[seq_id]

    @property
    def blocks_in_use(self) -> int:
        """The number of blocks the live sequences hold."""
        return self.num_blocks - len(self._free)


def _quantize_vectors(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Int8 codes (Hkv, t, Dh) and float32 scales (Hkv, t) of x (Hkv, t, Dh): one scale per (head, token)."""
    x = x.astype(np.float32)
    scale = np.max(np.abs(x), axis=-1) / np.float32(127)  # (Hkv, t)
    divisor = np.where(scale > 0, scale, np.float32(1))  # a zero vector: codes 0 whatever the divisor
    codes = np.rint(x / divisor[..., None])  # round half to even
    return np.clip(codes, -127, 127).astype(np.int8), scale


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
        self.n_layers = _check_size("QuantizedKVCache", "n_layers", n_layers)
        self.n_kv_heads = _check_size("QuantizedKVCache", "n_kv_heads", n_kv_heads)
        self.head_dim = _check_size("QuantizedKVCache", "head_dim", head_dim)
        self.max_len = _check_size("QuantizedKVCache", "max_len", max_len)
        shape = (self.n_layers, self.n_kv_heads, self.max_len)
        self.keys = np.zeros((*shape, self.head_dim), np.int8)  # (layers, Hkv, max_len, Dh)
        self.values = np.zeros((*shape, self.head_dim), np.int8)
        self.key_scales = np.zeros(shape, np.float32)  # (layers, Hkv, max_len)
        self.value_scales = np.zeros(shape, np.float32)
        self._held = [0] * self.n_layers  # tokens each layer holds

    @classmethod
    def for_model(cls, model: Model, max_len: int | None = None) -> "QuantizedKVCache":
        """An empty quantized cache sized for `model`: its layers, kv heads
        and head width, holding max_len tokens (default: the model's
        max_seq_len). Raises ValueError when max_len is not an int in
        [1, max_seq_len]."""
        c = model.config
        return cls(c.n_layers, c.n_kv_heads, c.head_dim, _model_max_len(model, max_len))

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
        layer = _check_layer(layer, self.n_layers)
        k, v = _check_kv(k, v, self.n_kv_heads, self.head_dim)
        for name, x in (("k", k), ("v", v)):
            if not np.all(np.isfinite(x.astype(np.float32))):
                raise ValueError(f"{name} must be finite in float32 to get a scale, got inf or nan")
        start, t = self._held[layer], k.shape[1]
        _check_fits(start, t, self.max_len)
        end = start + t
        self.keys[layer, :, start:end], self.key_scales[layer, :, start:end] = _quantize_vectors(k)
        self.values[layer, :, start:end], self.value_scales[layer, :, start:end] = _quantize_vectors(v)
        self._held[layer] = end
        k_all = self.keys[layer, :, :end].astype(np.float32) * self.key_scales[layer, :, :end, None]
        v_all = self.values[layer, :, :end].astype(np.float32) * self.value_scales[layer, :, :end, None]
        return k_all, v_all

    def __len__(self) -> int:
        """The number of tokens every layer holds."""
        return min(self._held)

    def crop(self, n: int) -> None:
        """Forget every token after the first n, in every layer. Raises
        ValueError unless 0 <= n <= len(self)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 or n > len(self):
            raise ValueError(f"crop needs an int n in [0, len(cache)={len(self)}], got {n!r}")
        self._held = [int(n)] * self.n_layers

    @property
    def bytes_per_token(self) -> int:
        """Bytes one cached token takes, codes and scales:
        2 (keys and values) x n_layers x Hkv x (Dh x 1 byte + 4 bytes of scale)."""
        return 2 * self.n_layers * self.n_kv_heads * (self.head_dim + 4)

    @property
    def nbytes(self) -> int:
        """Bytes the code and scale buffers hold: bytes_per_token x max_len."""
        return int(self.keys.nbytes + self.values.nbytes + self.key_scales.nbytes + self.value_scales.nbytes)


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
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, (int, np.integer)) or budget_bytes < 0:
        raise ValueError(f"budget_bytes must be an int >= 0, got {budget_bytes!r}")
    if cache not in CACHE_FORMATS:
        raise ValueError(f"cache must be one of {CACHE_FORMATS}, got {cache!r}")
    if (
        isinstance(weight_bits, bool)
        or not isinstance(weight_bits, (int, float, np.number))
        or not 0 < weight_bits < math.inf
    ):
        raise ValueError(f"weight_bits must be a positive finite number such as 32 or 8.5, got {weight_bits!r}")
    c, weight_bits = model.config, float(weight_bits)  # a float16 width would overflow the product
    per_token = 2 * c.n_layers * c.n_kv_heads * (c.head_dim * 4 if cache == "float32" else c.head_dim + 4)
    if not math.isfinite(c.n_params() * weight_bits / 8):  # weights past any float: no budget holds them
        return 0
    weight_bytes = math.ceil(c.n_params() * weight_bits / 8)
    return max(0, (int(budget_bytes) - weight_bytes) // per_token)
