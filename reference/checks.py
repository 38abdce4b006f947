"""The input checks of reference.model: Config's fields, the weights, and the
arguments of each of the model's pieces.

Config, Model and each piece open with one call to one of these, so a bad
input fails with a ValueError that says what is wrong before a piece counts
any work. The piece checks hand their inputs back as arrays (the layer as an
int) and change nothing else, so the math computes on exactly what it was
given. They cost O(1) or O(T) operations, never a pass over the weights: a
decode step runs them on every piece of every layer. The weights are checked
once, when the Model is made. `config` is always a reference.model.Config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

FEW_VALUES = 8  # up to this many positions or ids, their lowest and highest are taken in Python (_span)
# Each integer dtype's unsigned twin, in the machine's byte order, to view an array as (a negative value wraps to a
# huge one); an array of another byte order is not in it.
_UNSIGNED = {np.dtype(f"{kind}{size}"): np.dtype(f"u{size}") for kind in "iu" for size in (1, 2, 4, 8)}


def check_config(config) -> None:
    """A ValueError naming the first inconsistent field of config. Also stores
    the integer fields as int and the float fields as float (config is frozen,
    hence object.__setattr__)."""
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"):
        value = getattr(config, name)
        if not is_int(value) or value < 1:
            raise ValueError(f"Config.{name} must be a positive integer, got {value!r}")
        object.__setattr__(config, name, int(value))  # numpy ints would not survive save()
    if config.d_model % config.n_heads:
        raise ValueError(f"Config.d_model ({config.d_model}) must be divisible by n_heads ({config.n_heads})")
    if (config.d_model // config.n_heads) % 2:
        raise ValueError(
            f"Config head width d_model // n_heads = {config.d_model // config.n_heads} must be even for rotary "
            "embeddings"
        )
    if config.n_heads % config.n_kv_heads:
        raise ValueError(f"Config.n_kv_heads ({config.n_kv_heads}) must divide n_heads ({config.n_heads})")
    for name in ("n_experts", "top_k"):
        value = getattr(config, name)
        if not is_int(value):
            raise ValueError(f"Config.{name} must be an integer, got {value!r}")
        object.__setattr__(config, name, int(value))
    for name in ("rope_theta", "norm_eps"):
        value = getattr(config, name)
        if not 0 < as_float(value) < np.inf:
            raise ValueError(f"Config.{name} must be a finite positive number, got {value!r:.60}")
        object.__setattr__(config, name, float(value))
    if config.n_experts < 0:
        raise ValueError(f"Config.n_experts must be 0 (dense) or positive, got {config.n_experts}")
    if config.n_experts == 0 and config.top_k != 0:
        raise ValueError(f"Config.top_k must be 0 for a dense model (n_experts=0), got {config.top_k}")
    if config.n_experts > 0 and not 1 <= config.top_k <= config.n_experts:
        raise ValueError(
            f"Config.top_k must be in [1, n_experts={config.n_experts}] for an MoE model, got {config.top_k}"
        )


def is_int(value) -> bool:
    """Whether value is one integer: a Python or NumPy int, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_real(value) -> bool:
    """Whether value is one real number: a Python or NumPy int or float (or a 0-d array of one), not a bool."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        return True
    return is_int(value) or isinstance(value, (float, np.floating))


def as_float(value) -> float:
    """value as a float when it is one real number that a float holds, else NaN (which every range check
    refuses): a bool, a str, None, or an int past 1e308."""
    try:
        return float(value) if is_real(value) else np.nan
    except OverflowError:
        return np.nan


def checked_tokens(config, tokens) -> np.ndarray:
    """tokens as a (T,) int64 array: 1 <= T <= max_seq_len ids in [0, V)."""
    return checked_token_ids(tokens, config.vocab_size, config.max_seq_len)


def checked_token_ids(tokens, vocab_size: int, max_seq_len: int) -> np.ndarray:
    """tokens as a (T,) int64 array of 1 <= T <= max_seq_len ids in [0,
    vocab_size), or a ValueError saying what is wrong: the check every
    language model here makes of its input."""
    try:
        arr = np.asarray(tokens)
    except ValueError:  # ragged: NumPy's own words name no token
        raise ValueError("tokens must be a 1-D sequence of ints, got a nested sequence of uneven lengths") from None
    if arr.ndim != 1:
        raise ValueError(f"tokens must be a 1-D sequence of ints, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("tokens must not be empty")
    if arr.dtype.kind not in "iu":  # signed or unsigned integers; bools are kind "b"
        raise ValueError(f"tokens must be integers, got dtype {arr.dtype}")
    if not _all_in_range(arr, vocab_size):
        i = int(np.flatnonzero((arr < 0) | (arr >= vocab_size))[0])
        raise ValueError(f"token id {int(arr[i])} at index {i} is out of range [0, {vocab_size})")
    if arr.size > max_seq_len:
        raise ValueError(f"sequence of {arr.size} tokens is longer than max_seq_len={max_seq_len}")
    return arr.astype(np.int64)


def checked_layer(config, layer) -> int:
    if type(layer) is int and 0 <= layer < config.n_layers:  # the usual case, without isinstance's tuple
        return layer
    if not is_int(layer) or not 0 <= layer < config.n_layers:
        raise ValueError(f"layer must be an int in [0, {config.n_layers}), got {layer!r}")
    return int(layer)


def checked_stream(config, x) -> np.ndarray:
    """x as a residual stream array (T, D) of float32 (or wider) numbers: the
    norm squares x, which overflows in integers and in float16."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != config.d_model:
        raise ValueError(f"x must have shape (T, D={config.d_model}), got {x.shape}")
    if x.dtype.kind != "f" or x.dtype.itemsize < 4:
        raise ValueError(f"x must hold float32 or float64 numbers, got dtype {x.dtype}")
    return x


def _all_in_range(arr: np.ndarray, bound: int) -> bool:
    """Whether every value of the integer array arr lies in [0, bound): the
    highest value of arr viewed as unsigned (a negative value wraps to a huge
    one), cheaper than a min and a max; one element without an array operation."""
    if arr.size <= 1:  # no values (a piece given no rows), or one
        return not arr.size or 0 <= arr.item() < bound
    unsigned = _UNSIGNED.get(arr.dtype)
    if unsigned is None:  # a byte order not the machine's: a min and a max
        return 0 <= arr.min() and arr.max() < bound
    return _highest(arr.view(unsigned)) < bound


def _highest(arr: np.ndarray) -> int:
    """The highest value of a non-empty array, as a Python number: argmax is a
    plain method, several times cheaper than the ufunc reduction behind .max()
    at a decode step's sizes (0.15 against 0.9 us for 129 values)."""
    return arr.item(arr.argmax())


def _span(arr: np.ndarray) -> tuple[int, int]:
    """The lowest and highest value of a non-empty integer array; one element
    (a decode step's position or token) without a reduction, a few (a verify
    step's) as Python ints, cheaper than two reductions."""
    if arr.size == 1:
        return (arr.item(),) * 2
    if arr.size <= FEW_VALUES:
        values = arr.tolist()
        return min(values), max(values)
    return arr.item(arr.argmin()), _highest(arr)


def _checked_positions(config, positions, T: int, what: str) -> tuple[np.ndarray, int, int]:
    """positions as an integer array (T,) in [0, max_seq_len), and its lowest
    and highest value (max_seq_len and -1 when T = 0)."""
    pos = np.asarray(positions)
    if pos.shape != (T,) or pos.dtype.kind not in "iu":
        raise ValueError(f"{what} must be {T} integers (one per token), got shape {pos.shape} dtype {pos.dtype}")
    if not T:
        return pos, config.max_seq_len, -1
    lo, hi = _span(pos)
    if lo < 0 or hi >= config.max_seq_len:
        raise ValueError(f"{what} must lie in [0, max_seq_len={config.max_seq_len}), got {lo}..{hi}")
    return pos, lo, hi


def checked_layer_input(config, layer, x) -> tuple[int, np.ndarray]:
    """The inputs of `Model.mlp`: layer as an int, x as an array (T, D)."""
    return checked_layer(config, layer), checked_stream(config, x)


def checked_qkv_inputs(config, layer, x, positions) -> tuple[int, np.ndarray, np.ndarray]:
    """The inputs of `Model.qkv`: layer as an int, x (T, D) and positions (T,) as arrays."""
    layer, x = checked_layer_input(config, layer, x)
    pos = np.asarray(positions)
    if pos.shape == (x.shape[0],) and pos.dtype.kind in "iu" and _all_in_range(pos, config.max_seq_len):
        return layer, x, pos
    return layer, x, _checked_positions(config, positions, x.shape[0], "positions")[0]  # says what is wrong


def checked_attend_inputs(config, layer, q, k, v, q_positions, k_positions) -> tuple:
    """The inputs of `Model.attend`: layer as an int; q (H, Tq, Dh), k and v
    (Hkv, Tk, Dh), q_positions (Tq,) and k_positions (Tk,) as arrays. Then
    whether some key is later than some query, which the position ranges the
    check finds tell for free: if none is, the causal mask hides nothing."""
    layer = checked_layer(config, layer)
    H, Hkv, Dh = config.n_heads, config.n_kv_heads, config.head_dim
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if q.ndim != 3 or q.shape[0] != H or q.shape[2] != Dh:
        raise ValueError(f"q must have shape (H={H}, Tq, Dh={Dh}), got {q.shape}")
    if k.ndim != 3 or k.shape[0] != Hkv or k.shape[2] != Dh:
        raise ValueError(f"k must have shape (Hkv={Hkv}, Tk, Dh={Dh}), got {k.shape}")
    if v.shape != k.shape:
        raise ValueError(f"v must have the shape of k {k.shape}, got {v.shape}")
    if q.dtype.kind != "f" or k.dtype.kind != "f" or v.dtype.kind != "f":
        raise ValueError(f"q, k and v must hold floating point numbers, got dtypes {q.dtype}, {k.dtype}, {v.dtype}")
    Tq, Tk = q.shape[1], k.shape[1]
    qpos, q_lo, q_hi = _checked_positions(config, q_positions, Tq, "q_positions")
    kpos = np.asarray(k_positions)
    unsigned = _UNSIGNED.get(kpos.dtype)
    if Tq and Tk and kpos.shape == (Tk,) and unsigned is not None:
        # Every key in [0, q_hi] (a decode or verify step's keys: the cache, then the new tokens) is valid.
        # One highest value, negative positions wrapping to huge ones, instead of a min and a max.
        if _highest(kpos.view(unsigned)) <= q_hi:
            if Tq == 1:  # none later than the one query
                return layer, q, k, v, qpos, kpos, False
            if kpos[0].item() <= q_lo < kpos[-1].item():  # every query sees a key, and some key is later
                return layer, q, k, v, qpos, kpos, True
    kpos, k_lo, k_hi = _checked_positions(config, k_positions, Tk, "k_positions")
    # A query before every key, or with no key at all, would have a softmax over nothing: NaNs.
    if Tq and k_lo > q_lo:
        earliest = f"the earliest key is at {k_lo}" if Tk else "k holds no keys"
        raise ValueError(f"the query at position {q_lo} sees no key ({earliest})")
    return layer, q, k, v, qpos, kpos, k_hi > q_lo


def checked_weights(config, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights as float32 arrays, or a ValueError naming what does not match the config."""
    if not callable(getattr(config, "weight_shapes", None)):
        raise ValueError(f"config must be a reference.model.Config, got {type(config).__name__}")
    if not isinstance(weights, Mapping):
        raise ValueError(f"weights must be a dict of name -> array, got {type(weights).__name__}")
    expected = config.weight_shapes()
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {missing[:4]}{'...' if len(missing) > 4 else ''}")
        if extra:
            parts.append(f"unexpected {extra[:4]}{'...' if len(extra) > 4 else ''}")
        raise ValueError(f"weights do not match the config: {'; '.join(parts)}")
    out = {}
    for name, shape in expected.items():
        w = np.asarray(weights[name])
        if w.shape != shape:
            raise ValueError(f"weight {name!r} has shape {w.shape}, the config needs {shape}")
        if not np.issubdtype(w.dtype, np.floating):
            raise ValueError(f"weight {name!r} must be floating point, got {w.dtype}")
        w = w.astype(np.float32, copy=False)  # the model keeps a copy of its own (reference.aligned)
        if not np.all(np.isfinite(w)):
            raise ValueError(f"weight {name!r} holds NaN or inf")
        out[name] = w
    return out


def checked_top_k(k, n: int) -> int:
    """k as an int in [1, n] (experts to keep of n), or a ValueError."""
    if not is_int(k) or not 1 <= k <= n:
        raise ValueError(f"k must be an int in [1, {n}] (the experts to keep), got {k!r}")
    return int(k)


def checked_seed(seed) -> int:
    """seed as an int >= 0, as np.random.default_rng takes it, or a ValueError."""
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return int(seed)


def checked_path(path, what: str = "path") -> Path:
    """path (a str or os.PathLike) as a Path, or a ValueError naming `what`."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{what} must be a str or a path, got {type(path).__name__}")
    return Path(path)


def checked_save_dtype(dtype) -> np.dtype:
    """The dtype a model's weights are saved in, float32 or float16, or a ValueError."""
    try:
        chosen = np.dtype(dtype)
    except TypeError:  # no dtype at all ('fp16', say)
        chosen = None
    if chosen not in (np.float32, np.float16):
        raise ValueError(f"save dtype must be float32 or float16, got {repr(dtype) if chosen is None else chosen}")
    return chosen
