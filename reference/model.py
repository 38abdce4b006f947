"""A Llama-style decoder-only transformer in NumPy, float32.

Per layer: RMSNorm -> attention (rotary positions, grouped-query heads) ->
residual -> RMSNorm -> SwiGLU MLP or a mixture of SwiGLU experts -> residual.
Then a final RMSNorm and the output projection.

Sources, and where this file departs from them:

- The layout (pre-norm RMSNorm, rotary positions, SwiGLU, no biases) follows
  LLaMA: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language
  Models", arXiv:2302.13971.
- RMSNorm: Zhang & Sennrich 2019, "Root Mean Square Layer Normalization",
  arXiv:1910.07467. A gain and no bias; eps is added to the mean square,
  inside the square root.
- Attention is scaled dot-product attention with a causal mask (Vaswani et
  al. 2017, "Attention Is All You Need", arXiv:1706.03762). The mask compares
  absolute positions, not indices, so queries can attend to cached keys.
- Rotary position embeddings: Su et al. 2021, "RoFormer: Enhanced Transformer
  with Rotary Position Embedding", arXiv:2104.09864. Same frequencies,
  theta^(-2i/Dh) for i < Dh/2, but dimension i is rotated with i + Dh/2 (the
  "rotate half" layout of GPT-NeoX and of Hugging Face's Llama), where the
  paper and Meta's LLaMA code rotate neighbours 2i and 2i + 1 together. The
  two layouts differ by a fixed permutation of each head's dimensions: weights
  trained for one need their wq and wk columns permuted to run in the other.
- Grouped-query attention: Ainslie et al. 2023, "GQA: Training Generalized
  Multi-Query Transformer Models from Multi-Head Checkpoints",
  arXiv:2305.13245. Consecutive query heads share a key/value head; Hkv = 1
  is multi-query attention, Hkv = H plain multi-head attention.
- SwiGLU MLP: Shazeer 2020, "GLU Variants Improve Transformer",
  arXiv:2002.05202: (silu(x W_gate) * (x W_up)) W_down, without biases.
- Mixture of experts with top-k routing: Shazeer et al. 2017, "Outrageously
  Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer",
  arXiv:1701.06538. The paper's gates are a softmax over the top k of noisy
  router logits. Here there is no noise, and the softmax over all E experts,
  renormalized over the top k, gives the same gates in exact arithmetic. Each
  expert is a SwiGLU MLP. There is no expert capacity, so no token is dropped.

This file only runs the model. The load-balancing loss the shipped teacher
was trained with (Fedus et al. 2021, "Switch Transformers",
arXiv:2101.03961) is in tools/train.py.

Dimension names used in every docstring: T tokens, V vocab, D model width,
H query heads, Hkv key/value heads, Dh head width, F MLP width, E experts,
K experts per token.

`Model.forward` recomputes everything for the whole sequence. It is built
from the pieces a cached decoder needs, which all take absolute positions:

    x = model.embed(tokens)                                   # (T, D)
    for layer in range(config.n_layers):
        q, k, v = model.qkv(layer, x, positions)              # (H|Hkv, T, Dh)
        x = x + model.attend(layer, q, k, v, positions, positions)
        x = x + model.mlp(layer, x)
    logits = model.logits(x)                                  # (T, V)

Every matmul adds its multiply-accumulates, and every piece the bytes of the
weights and the keys and values it reads, to the `Work` counters active on
this model (see `Model.count_work`), so speed checks can count work exactly.
Each piece first makes one call to a check at the bottom of the file, which
raises a ValueError that says what is wrong with its input.

A decode step (T = 1) is a few hundred small NumPy operations, so their fixed
cost, more than the matmuls, sets its time. Hence:
- each layer's wq, wk and wv are stored side by side in one array, and so are
  w_gate and w_up, each weight a view of its columns: one matmul does the
  work of three (or two);
- the rotary tables of every position are computed once per shape
  (`rope_cache`);
- at one token, RMSNorm takes its sum of squares as a dot product, q and k
  are rotated together, and the MoE block routes in Python and runs only the
  token's K experts;
- two to FEW_TOKENS tokens (a verify step's) are routed in Python too, and
  run the MoE block's experts on the layout grouped-GEMM MoE kernels use:
  the routed rows sorted by expert, one product per chosen expert and no
  padding, so an expert no token chose is never read (see
  `Model._experts_grouped`; padding every expert to the busiest one's rows
  cost a 5-token verify step 6% more, on the CPU's own OpenBLAS kernel);
- attention skips the causal mask when no key is later than a query, and
  adds it as a bias built once per pair of position arrays (`_causal_bias`);
  past SCORE_ROWS query rows per kv head its scores are one product per
  query head (OpenBLAS's SkylakeX kernel multiplies up to 8 rows on a faster
  path);
- the checks cost O(1) or O(T), never a pass over the weights.
The results are the plain formulas' up to float32 rounding, and the work
counted is the same. Nothing derived from the weights is kept beside them: a
weight edited in place edits its group's array, and a weight replaced after
construction joins a new group array at the next call (`weights` then holds
its view; one of another shape or dtype is multiplied on its own), so either
way the weight used is the one in `weights`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np

WEIGHTS_DIR = Path(__file__).parent / "weights"
SCORE_ROWS = 8  # up to this many query rows per kv head, attention scores are one product per kv head (Model.attend)
FEW_TOKENS = 8  # up to this many tokens, an MoE block routes in Python, its experts grouped (Model._experts_grouped)
# (and the lowest and highest of up to this many positions or ids are taken in Python: _span)
REBUILD_HINT = "rebuild the shipped weights with: pip install -e '.[train]' && python tools/train.py"


@dataclass(frozen=True)
class Config:
    vocab_size: int = 96  # V: number of token ids (the character tokenizer has 96)
    d_model: int = 64  # D: width of the residual stream
    n_layers: int = 2  # number of transformer blocks
    n_heads: int = 4  # H: query heads; Dh = d_model // n_heads
    n_kv_heads: int = 2  # Hkv: key/value heads, shared by H // Hkv query heads each
    d_ff: int = 128  # F: hidden width of the SwiGLU MLP (of each expert, for MoE)
    max_seq_len: int = 256  # longest sequence the model accepts
    n_experts: int = 0  # E: experts per MoE block; 0 means a dense MLP
    top_k: int = 0  # K: experts each token is routed to; 0 for a dense MLP
    rope_theta: float = 10000.0  # base of the rotary position frequencies
    norm_eps: float = 1e-5  # epsilon inside every RMSNorm

    def __post_init__(self) -> None:
        _check_config(self)

    @property
    def head_dim(self) -> int:
        """Dh, the width of one attention head."""
        return self.d_model // self.n_heads

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """The name and shape of every weight a model of this config holds."""
        D, F, V, Dh = self.d_model, self.d_ff, self.vocab_size, self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"tok_emb": (V, D)}
        for i in range(self.n_layers):
            p = f"layers.{i}."
            shapes[p + "attn_norm"] = (D,)
            shapes[p + "wq"] = (D, self.n_heads * Dh)
            shapes[p + "wk"] = (D, self.n_kv_heads * Dh)
            shapes[p + "wv"] = (D, self.n_kv_heads * Dh)
            shapes[p + "wo"] = (self.n_heads * Dh, D)
            shapes[p + "mlp_norm"] = (D,)
            if self.is_moe:
                E = self.n_experts
                shapes[p + "router"] = (D, E)
                shapes[p + "w_gate"] = (E, D, F)
                shapes[p + "w_up"] = (E, D, F)
                shapes[p + "w_down"] = (E, F, D)
            else:
                shapes[p + "w_gate"] = (D, F)
                shapes[p + "w_up"] = (D, F)
                shapes[p + "w_down"] = (F, D)
        shapes["norm"] = (D,)
        shapes["out"] = (D, V)
        return shapes

    def n_params(self) -> int:
        return sum(int(np.prod(s)) for s in self.weight_shapes().values())


@dataclass
class Work:
    """Work a model did while this counter was active.

    macs: multiply-accumulates of every matmul, attention scores included.
    positions: per layer, the token positions pushed through its q/k/v projections.
    by_piece: macs split by piece ("qkv", "attention", "wo", "mlp", "router",
        "experts", "logits").

    What the pieces read from memory, in bytes of the arrays as they are held
    (a float16 weight counts 2 bytes a value); activations are not counted:
    weight_bytes: the weights read. Each matmul reads its whole weight matrix
        once, whatever the number of rows it multiplies (of an MoE block, the
        router and only the experts some token was routed to); each RMSNorm
        its gain; the embedding the rows of the distinct tokens looked up.
    cache_bytes: the keys and values each attention call reads, (Hkv, Tk, Dh)
        each: in a decode step, what a KV cache hauls for every layer.
    matmul_weights: values of the weight matrices the matmuls read, the ones
        a quantized model stores in fewer bits (see `weight_bytes_at`).
    bytes_by_piece: weight_bytes and cache_bytes split by piece: "embed" and
        "norm" (the embedding rows and norm gains), "attention" (the keys and
        values), and the matmuls' weight matrices under the pieces of by_piece.
    """

    macs: int = 0
    positions: dict[int, int] = field(default_factory=dict)
    by_piece: Counter = field(default_factory=Counter)
    weight_bytes: int = 0
    cache_bytes: int = 0
    matmul_weights: int = 0
    bytes_by_piece: Counter = field(default_factory=Counter)

    def add(self, piece: str, macs: int) -> None:
        self.macs += int(macs)
        self.by_piece[piece] += int(macs)

    def add_weight_read(self, piece: str, nbytes: int, matmul_weights: int = 0) -> None:
        """Count nbytes of weights read by piece, matmul_weights of them values of a matmul's weight matrix."""
        self.weight_bytes += int(nbytes)
        self.matmul_weights += int(matmul_weights)
        self.bytes_by_piece[piece] += int(nbytes)

    def add_cache_read(self, nbytes: int) -> None:
        """Count nbytes of keys and values read by attention."""
        self.cache_bytes += int(nbytes)
        self.bytes_by_piece["attention"] += int(nbytes)

    def weight_bytes_at(self, bits_per_weight: float) -> float:
        """weight_bytes had every matmul weight matrix been stored at
        bits_per_weight bits a value, scales included; the embedding rows and
        norm gains as they are (as quantize_model leaves them in float).

        32 is float32; 8.5 is llama.cpp's Q8_0 and 4.5 its Q4_0 (34 and 18
        bytes per block of 32 values along a matrix's input axis). The count
        is exact, whole bytes, when each matrix's input width is a multiple of
        32, which those formats require.
        """
        return self.bytes_by_piece["embed"] + self.bytes_by_piece["norm"] + self.matmul_weights * bits_per_weight / 8


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _swiglu_in_place(y: np.ndarray, F: int) -> np.ndarray:
    """silu(y[:, :F]) * y[:, F:] for rows y (n, 2F) of gate | up: the same
    operations as silu's, bit for bit, into one new array instead of five."""
    gate = y[:, :F]
    out = np.negative(gate)
    np.exp(out, out=out)
    out += 1.0
    np.divide(gate, out, out=out)
    out *= y[:, F:]
    return out


# rms_norm and softmax reduce with array methods (x.sum, x.max): the same
# reductions as np.mean, np.sum and np.max, without their Python wrappers.


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x (T, D) scaled to unit root-mean-square per row, times weight (D,).

    One row (a decode step) takes its sum of squares as a dot product and its
    scale as a Python float: two array operations instead of seven, the same
    values up to float32 rounding."""
    if x.ndim == 2 and x.shape[0] == 1:
        row = x[0]
        return (x * (1.0 / math.sqrt(float(row.dot(row)) / x.shape[1] + eps))) * weight
    ms = (x * x).sum(axis=-1, keepdims=True) / x.shape[-1]  # (T, 1) mean square, as np.mean computes it
    return (x / np.sqrt(ms + eps)) * weight


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _softmax_last_axis_in_place(x: np.ndarray) -> np.ndarray:
    """softmax(x, axis=-1), written over x (an array nothing else holds):
    the same operations, without the allocations or the methods' wrappers."""
    x -= np.maximum.reduce(x, axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= np.add.reduce(x, axis=-1, keepdims=True)
    return x


def rope_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables (T, Dh // 2) for the given absolute positions."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate x (heads, T, Dh) by position, pairing dimension i with i + Dh/2.
    The definition; the model runs `rotate_halves`'s operations, the same bits in fewer."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@functools.lru_cache(maxsize=16)
def rope_cache(max_seq_len: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """rope_tables for every position 0 .. max_seq_len - 1, laid out for
    `rotate_halves`: cos2 (max_seq_len, 2, Dh // 2) holds (cos, cos) and sin2
    holds (-sin, sin). Computed once per shape and shared, so read-only."""
    cos, sin = rope_tables(np.arange(max_seq_len), head_dim, theta)  # (max_seq_len, Dh // 2)
    cos2, sin2 = np.stack([cos, cos], axis=1), np.stack([-sin, sin], axis=1)
    cos2.flags.writeable = sin2.flags.writeable = False
    return cos2, sin2


def rotate_halves(x: np.ndarray, cos2: np.ndarray, sin2: np.ndarray) -> np.ndarray:
    """apply_rope(x, cos, sin) in three operations, bit for bit, given rope_cache's
    tables at x's positions, cos2 and sin2 (T, 2, Dh // 2):
    (x1, x2) * (cos, cos) + (x2, x1) * (-sin, sin)."""
    halves = x.reshape(*x.shape[:-1], 2, x.shape[-1] // 2)  # (heads, T, 2, Dh/2): x1, x2
    return (halves * cos2 + halves[..., ::-1, :] * sin2).reshape(x.shape)


def _rotated_row(x: np.ndarray, cos2: np.ndarray, sin2: np.ndarray) -> np.ndarray:
    """rotate_halves for one token: x (1, heads * Dh), rope_cache's rows at its
    position cos2 and sin2 (2, Dh // 2); returns (heads, 1, Dh)."""
    half = cos2.shape[-1]
    halves = x.reshape(-1, 2, half)  # (heads, 2, Dh/2): x1, x2
    return (halves * cos2 + halves[:, ::-1] * sin2).reshape(-1, 1, 2 * half)


@functools.lru_cache(maxsize=8)
def _causal_bias_of(q_positions: bytes, k_positions: bytes) -> np.ndarray:
    """-inf where a key is later than its query, 0 elsewhere (Tq, Tk), float32, read-only."""
    qpos, kpos = np.frombuffer(q_positions, np.int64), np.frombuffer(k_positions, np.int64)
    bias = np.where(kpos[None, :] > qpos[:, None], np.float32(-np.inf), np.float32(0))
    bias.flags.writeable = False
    return bias


@functools.lru_cache(maxsize=8)
def _inverse_sqrt(n: int) -> np.float32:
    """1 / sqrt(n) as a float32 scalar: attention's score scale, made once per head width."""
    return np.float32(1.0 / math.sqrt(n))


def _causal_bias(qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """The causal mask of queries at qpos (Tq,) over keys at kpos (Tk,) as an additive
    bias, built once for each pair of positions and shared by every layer of a call."""
    return _causal_bias_of(qpos.astype(np.int64, copy=False).tobytes(), kpos.astype(np.int64, copy=False).tobytes())


def top_k_route(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """indices (T, K) of the k most probable experts, best first (ties: lower index),
    and their probabilities renormalized to sum to 1 (T, K)."""
    idx = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    w = probs[np.arange(probs.shape[0])[:, None], idx]  # (T, K), as np.take_along_axis, without its wrapper
    return idx, w / w.sum(axis=-1, keepdims=True)


def _route_one_token(logits: list[float], k: int) -> list[tuple[int, float]]:
    """top_k_route(softmax(logits)) for one token's router logits (E floats):
    (expert, gate) of its k experts, in expert order. The k most probable
    experts are the k highest logits, ties to the lower index (a stable sort
    keeps equal logits in index order); the gates, a softmax over their logits
    alone, equal the softmax over all E renormalized over the k, up to rounding.
    (A logit so far below the highest that its float32 probability is 0 could
    rank otherwise; its gate is 0 either way.)"""
    chosen = sorted(range(len(logits)), key=logits.__getitem__, reverse=True)[:k]
    top = logits[chosen[0]]
    weights = [math.exp(logits[e] - top) for e in chosen]
    total = sum(weights)
    return sorted((e, wt / total) for e, wt in zip(chosen, weights))


class _LayerNames(NamedTuple):
    """The keys of one layer's weights in Model.weights, spelled once."""

    attn_norm: str
    wq: str
    wk: str
    wv: str
    wo: str
    mlp_norm: str
    router: str
    w_gate: str
    w_up: str
    w_down: str

    @classmethod
    def of(cls, layer: int) -> "_LayerNames":
        return cls(*(f"layers.{layer}.{field}" for field in cls._fields))


class Model:
    """A decoder-only transformer whose weights are a flat dict name -> float32 array."""

    def __init__(self, config: Config, weights: dict[str, np.ndarray]):
        self.config = config
        self._names = [_LayerNames.of(layer) for layer in range(config.n_layers)]
        self.weights = _checked_weights(config, weights)
        self._counters: list[Work] = []
        # Each layer's wq | wk | wv, and its w_gate | w_up, are stored side by side,
        # each weight a view of its group's array, so one matmul does the group's work.
        self._groups: dict[tuple[str, ...], tuple[np.ndarray, tuple[np.ndarray, ...]]] = {}
        for names in self._names:
            self._store_side_by_side((names.wq, names.wk, names.wv))
            self._store_side_by_side((names.w_gate, names.w_up))

    # ---------------------------------------------------------------- building

    @classmethod
    def random(cls, config: Config, seed: int = 0) -> "Model":
        """A model with random weights: normal(0, 1/sqrt(fan_in)), norms at 1."""
        rng = np.random.default_rng(seed)
        weights = {}
        for name, shape in config.weight_shapes().items():
            if name.endswith("norm"):
                weights[name] = np.ones(shape, dtype=np.float32)
            elif name == "tok_emb":
                weights[name] = rng.standard_normal(shape).astype(np.float32)
            else:
                fan_in = shape[-2]
                weights[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        return cls(config, weights)

    def save(self, path: str | os.PathLike, dtype=np.float32) -> None:
        """Write the config and weights to an .npz file (dtype float32 or float16)."""
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float16):
            raise ValueError(f"save dtype must be float32 or float16, got {dtype}")
        arrays = {name: w.astype(dtype) for name, w in self.weights.items()}
        arrays["__config__"] = np.array(json.dumps(dataclasses.asdict(self.config)))
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Model":
        """Read a model written by `save`. Weights always load as float32."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no weights file at {path}")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
        except Exception as exc:  # a truncated or foreign file: say so plainly
            raise ValueError(f"{path} is not a readable weights file ({exc})") from exc
        if "__config__" not in arrays:
            raise ValueError(f"{path} holds no '__config__' entry, so it is not a model file")
        try:
            config = Config(**json.loads(str(arrays.pop("__config__"))))
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} has an unreadable config: {exc}") from exc
        try:
            return cls(config, arrays)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc

    @classmethod
    def pretrained(cls, name: str, weights_dir: str | os.PathLike = WEIGHTS_DIR) -> "Model":
        """The shipped 'teacher' (MoE), 'draft' (small dense) or 'dense' (the
        teacher's shape, dense, as wide as its active experts) model, read from
        weights_dir/{name}.npz (the package's weights unless told otherwise)."""
        names = ("teacher", "draft", "dense")
        if name not in names:
            raise ValueError(f"pretrained model must be one of {names}, got {name!r}")
        path = Path(weights_dir) / f"{name}.npz"
        if not path.is_file():
            raise FileNotFoundError(f"the {name} weights are missing ({path}); {REBUILD_HINT}")
        try:
            return cls.load(path)
        except ValueError as exc:
            raise ValueError(f"the {name} weights are corrupted: {exc}; {REBUILD_HINT}") from exc

    def copy(self) -> "Model":
        return Model(self.config, {n: w.copy() for n, w in self.weights.items()})

    # ------------------------------------------------- weights side by side

    def _store_side_by_side(self, names: tuple[str, ...]) -> None:
        """Copy the weights `names` into one array, joined along their last
        axis, and make each weight a view of its columns. Edits in place to
        a weight edit that array; a weight replaced leaves the group (see
        `_side_by_side`)."""
        joined = np.concatenate([self.weights[name] for name in names], axis=-1)
        views, start = [], 0
        for name in names:
            width = self.weights[name].shape[-1]
            views.append(joined[..., start : start + width])
            start += width
        self.weights.update(zip(names, views))
        self._groups[names] = joined, tuple(views)

    def _side_by_side(self, names: tuple[str, ...]) -> np.ndarray | None:
        """The array the weights `names` are views of. A weight replaced since
        (as quantize_model does to a copy) by a float32 array of its shape is
        copied into a new group array, and the dict then holds its view; a
        replacement of another shape or dtype leaves None: then each weight
        must be multiplied on its own."""
        joined, views = self._groups[names]
        weights = self.weights
        for name, view in zip(names, views):
            if weights.get(name) is not view:
                break
        else:
            return joined
        current = [weights.get(name) for name in names]
        if not all(
            isinstance(w, np.ndarray) and w.dtype == np.float32 and w.shape == v.shape for w, v in zip(current, views)
        ):
            return None
        self._store_side_by_side(names)
        return self._groups[names][0]

    # ------------------------------------------------------------ work counter

    @contextlib.contextmanager
    def count_work(self) -> Iterator[Work]:
        """Count the work this model does inside the block:

        with model.count_work() as work:
            model.forward(tokens)
        work.macs, work.positions[0]
        """
        work = Work()
        self._counters.append(work)
        try:
            yield work
        finally:  # by identity: two counters that counted the same work compare equal
            self._counters = [w for w in self._counters if w is not work]

    def _mm(self, piece: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a (..., M, N) @ b (N, P), counting M * N * P macs per leading index
        and the weight matrix b read once.

        Rows (M, N) multiply with `ndarray.dot`, the same product as `@`
        without its dispatch (half a microsecond of a decode step's matmuls,
        which take two or three)."""
        out = a.dot(b) if a.ndim == 2 else a @ b
        if self._counters:
            self._count_matmul(piece, a.size // a.shape[-1], b)
        return out

    def _count_matmul(self, piece: str, rows: int, b: np.ndarray) -> None:
        """Count rows (length N) times the weight b (N, P): rows * N * P macs, and b read once."""
        for work in self._counters:
            work.add(piece, rows * b.size)
            work.add_weight_read(piece, b.nbytes, b.size)

    def _count(self, piece: str, macs: int) -> None:
        for work in self._counters:
            work.add(piece, macs)

    # ------------------------------------------------------------------ pieces

    def check_tokens(self, tokens) -> np.ndarray:
        """tokens as a (T,) int64 array, or a ValueError saying what is wrong."""
        return _checked_tokens(self.config, tokens)

    def embed(self, tokens) -> np.ndarray:
        """Token ids (T,) -> residual stream (T, D)."""
        tokens, table = self.check_tokens(tokens), self.weights["tok_emb"]
        for work in self._counters:  # one row read per distinct token
            work.add_weight_read("embed", len(set(tokens.tolist())) * table[0].nbytes)
        return table[tokens]

    def qkv(self, layer: int, x: np.ndarray, positions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Attention inputs of one layer for the residual stream x (T, D) at
        absolute `positions` (T,): RMSNorm, projections, rotary embeddings.

        Returns q (H, T, Dh), k (Hkv, T, Dh), v (Hkv, T, Dh).
        """
        c = self.config
        layer, x, pos = _checked_qkv_inputs(c, layer, x, positions)
        T, Dh = x.shape[0], c.head_dim
        w, names = self.weights, self._names[layer]
        norm = w[names.attn_norm]
        h = rms_norm(x, norm, c.norm_eps)
        cos2, sin2 = rope_cache(c.max_seq_len, Dh, c.rope_theta)
        for work in self._counters:
            work.positions[layer] = work.positions.get(layer, 0) + T
            work.add_weight_read("norm", norm.nbytes)
        qkv = self._side_by_side((names.wq, names.wk, names.wv))
        if qkv is not None:  # one matmul for the three
            y = self._mm("qkv", h, qkv)  # (T, (H + 2 Hkv) Dh): q | k | v
            k_end = (c.n_heads + c.n_kv_heads) * Dh
            if T == 1:  # a decode step: q and k rotated together, no transposes
                p = pos.item()
                qk = _rotated_row(y[:, :k_end], cos2[p], sin2[p])  # (H + Hkv, 1, Dh)
                return qk[: c.n_heads], qk[c.n_heads :], y[:, k_end:].reshape(-1, 1, Dh)
            # q and k rotated together, token by token, then seen head by head: (H + Hkv, T, Dh)
            halves = y[:, :k_end].reshape(T, -1, 2, Dh // 2)  # (T, H + Hkv, 2, Dh/2): x1, x2
            cos2, sin2 = cos2[pos][:, None], sin2[pos][:, None]  # (T, 1, 2, Dh/2)
            qk = (halves * cos2 + halves[:, :, ::-1] * sin2).reshape(T, -1, Dh).transpose(1, 0, 2)
            return qk[: c.n_heads], qk[c.n_heads :], y[:, k_end:].reshape(T, c.n_kv_heads, Dh).transpose(1, 0, 2)
        q = self._mm("qkv", h, w[names.wq])
        k = self._mm("qkv", h, w[names.wk])
        v = self._mm("qkv", h, w[names.wv])
        cos2, sin2 = cos2[pos], sin2[pos]  # (T, 2, Dh // 2): rope_tables(pos, ...), looked up
        q = q.reshape(T, c.n_heads, Dh).transpose(1, 0, 2)
        k = k.reshape(T, c.n_kv_heads, Dh).transpose(1, 0, 2)
        v = v.reshape(T, c.n_kv_heads, Dh).transpose(1, 0, 2)
        return rotate_halves(q, cos2, sin2), rotate_halves(k, cos2, sin2), v

    def attend(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions, k_positions) -> np.ndarray:
        """Attention of queries q (H, Tq, Dh) over keys k and values v
        (Hkv, Tk, Dh), then the output projection: returns (Tq, D).

        Causal by absolute position: the query at position p sees only keys at
        positions <= p. Query head h reads key/value head h // (H // Hkv).
        """
        c = self.config
        layer, q, k, v, qpos, kpos, future = _checked_attend_inputs(c, layer, q, k, v, q_positions, k_positions)
        H, Hkv, Dh = c.n_heads, c.n_kv_heads, c.head_dim
        Tq, Tk = q.shape[1], k.shape[1]
        group = H // Hkv
        if group * Tq <= SCORE_ROWS:  # heads sharing a kv head, stacked: (Hkv, group*Tq, Tk)
            scores = q.reshape(Hkv, group * Tq, Dh) @ k.transpose(0, 2, 1)
        else:  # head by head: (Hkv, group, Tq, Tk), the same array
            scores = q.reshape(Hkv, group, Tq, Dh) @ k[:, None].transpose(0, 1, 3, 2)
        # scores is a new array: scaled and normalized in place
        scores *= _inverse_sqrt(Dh)
        for work in self._counters:
            work.add("attention", H * Tq * Tk * Dh)
            work.add_cache_read(k.nbytes + v.nbytes)
        if future:  # some key is later than some query (never so in a decode step): mask it
            masked = scores.reshape(H, Tq, Tk)  # a view: no copy back
            masked += _causal_bias(qpos, kpos)
        probs = _softmax_last_axis_in_place(scores)
        if probs.dtype != np.float32:
            probs = probs.astype(np.float32)
        out = probs.reshape(Hkv, group * Tq, Tk) @ v  # (Hkv, group*Tq, Dh)
        self._count("attention", H * Tq * Tk * Dh)
        if Tq == 1:  # (Hkv, group, Dh) is already head after head
            out = out.reshape(1, H * Dh)
        else:
            out = out.reshape(H, Tq, Dh).transpose(1, 0, 2).reshape(Tq, H * Dh)
        return self._mm("wo", out, self.weights[self._names[layer].wo])

    def mlp(self, layer: int, x: np.ndarray) -> np.ndarray:
        """RMSNorm then the SwiGLU MLP (or the MoE of SwiGLU experts) of one
        layer, for the residual stream x (T, D): returns (T, D)."""
        c = self.config
        layer, x = _checked_layer_input(c, layer, x)
        w, names = self.weights, self._names[layer]
        norm = w[names.mlp_norm]
        h = rms_norm(x, norm, c.norm_eps)
        for work in self._counters:
            work.add_weight_read("norm", norm.nbytes)
        w_gate, w_up, w_down = w[names.w_gate], w[names.w_up], w[names.w_down]
        gate_up = self._side_by_side((names.w_gate, names.w_up))  # (E,) D, 2F: one matmul for both
        if not c.is_moe:
            return self._swiglu("mlp", h, w_gate, w_up, w_down, gate_up)
        logits = self._mm("router", h, w[names.router])  # (T, E)
        expert_gate_up = (lambda e: None) if gate_up is None else gate_up.__getitem__
        if h.shape[0] == 1:  # one token (a decode step): route it in Python, run only its K experts
            out = None
            for e, g in _route_one_token(logits[0].tolist(), c.top_k):
                y = self._swiglu("experts", h, w_gate[e], w_up[e], w_down[e], expert_gate_up(e))
                y *= g
                out = y if out is None else out + y
            return out
        if h.shape[0] <= FEW_TOKENS and gate_up is not None:  # a few tokens (a verify step): routed in Python too
            routes = [_route_one_token(row, c.top_k) for row in logits.tolist()]
            return self._experts_grouped(h, routes, gate_up, w_down)
        idx, gates = top_k_route(softmax(logits, axis=-1), c.top_k)  # (T, K), (T, K)
        out = np.zeros_like(h)
        for e in range(c.n_experts):
            rows, slot = np.nonzero(idx == e)
            if rows.size == 0:
                continue
            ye = self._swiglu("experts", h[rows], w_gate[e], w_up[e], w_down[e], expert_gate_up(e))
            ye *= gates[rows, slot][:, None]
            out[rows] += ye  # a token's K experts are distinct: no row repeats within one expert
        return out

    def _experts_grouped(self, h: np.ndarray, routes: list[list[tuple[int, float]]], gate_up, w_down) -> np.ndarray:
        """The MoE block's experts for a few tokens h (T, D), token t routed to
        the (expert, gate) pairs routes[t], on the layout grouped-GEMM MoE
        kernels use: the (token, expert) pairs sorted by expert, so that each
        expert's rows form one block; one product of each block with its
        expert's w_gate | w_up (D, 2F), one SwiGLU over every row, one product
        of each block with its w_down (F, D), and the gated sum as one
        (T, R) @ (R, D) product over the R pairs. No row is padded, so the work
        done is the work counted, and an expert no token chose is never read."""
        E, F = gate_up.shape[0], w_down.shape[1]
        by_expert: list[list[tuple[int, float]]] = [[] for _ in range(E)]  # per expert: (token, gate)
        for t, route in enumerate(routes):
            for e, g in route:
                by_expert[e].append((t, g))
        tokens, gates, blocks = [], [], []  # per row: its token and gate; per expert chosen: (e, first row, end)
        for e, pairs in enumerate(by_expert):
            if pairs:
                blocks.append((e, len(tokens), len(tokens) + len(pairs)))
                for t, g in pairs:
                    tokens.append(t)
                    gates.append(g)
        R, dtype = len(tokens), np.result_type(h.dtype, gate_up.dtype)
        y = np.empty((R, 2 * F), dtype=dtype)  # (R, 2F): each row's gate | up
        z = np.empty((R, w_down.shape[2]), dtype=dtype)  # (R, D)
        rows = h[tokens]  # (R, D)
        for e, start, end in blocks:
            np.dot(rows[start:end], gate_up[e], out=y[start:end])
        a = _swiglu_in_place(y, F)  # (R, F)
        for e, start, end in blocks:
            np.dot(a[start:end], w_down[e], out=z[start:end])
            if self._counters:
                self._count_matmul("experts", end - start, gate_up[e])
                self._count_matmul("experts", end - start, w_down[e])
        combine = np.zeros((len(routes), R), dtype=dtype)  # (T, R): the gate of each row's token
        combine[tokens, range(R)] = gates
        return combine.dot(z)  # (T, D)

    def _swiglu(self, piece: str, h: np.ndarray, w_gate, w_up, w_down, gate_up=None) -> np.ndarray:
        """(silu(h @ w_gate) * (h @ w_up)) @ w_down for rows h (n, D), w_gate and w_up
        (D, F), w_down (F, D): one SwiGLU, its macs counted as `piece`. gate_up,
        when given, is w_gate | w_up side by side (D, 2F): one matmul for both."""
        if gate_up is None:
            return self._mm(piece, silu(self._mm(piece, h, w_gate)) * self._mm(piece, h, w_up), w_down)
        y = self._mm(piece, h, gate_up)  # (n, 2F)
        F = w_gate.shape[-1]
        return self._mm(piece, silu(y[:, :F]) * y[:, F:], w_down)

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Final RMSNorm and output projection: residual stream (T, D) -> logits (T, V)."""
        x = _checked_stream(self.config, x)
        h = rms_norm(x, self.weights["norm"], self.config.norm_eps)
        for work in self._counters:
            work.add_weight_read("norm", self.weights["norm"].nbytes)
        return self._mm("logits", h, self.weights["out"])

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, V) for every position of tokens (T,), recomputing the
        whole sequence from scratch: the path a KV cache avoids."""
        x = self.embed(tokens)  # checks the tokens
        positions = np.arange(x.shape[0])
        for layer in range(self.config.n_layers):
            q, k, v = self.qkv(layer, x, positions)
            x = x + self.attend(layer, q, k, v, positions, positions)
            x = x + self.mlp(layer, x)
        return self.logits(x)

    __call__ = forward


# ------------------------------------------------------------------ checks
# Config, Model and each piece open with one call to one of these, so a bad
# input fails with a ValueError that says what is wrong before a piece counts
# any work. The piece checks hand their inputs back as arrays (the layer as an
# int) and change nothing else, so the math computes on exactly what it was given.
# They cost O(1) or O(T) operations, never a pass over the weights: a decode
# step runs them on every piece of every layer. The weights are checked once,
# when the Model is made.


def _check_config(config: Config) -> None:
    """A ValueError naming the first inconsistent field of config. Also stores
    the integer fields as int and the float fields as float (config is frozen,
    hence object.__setattr__)."""
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"):
        value = getattr(config, name)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
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
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise ValueError(f"Config.{name} must be an integer, got {value!r}")
        object.__setattr__(config, name, int(value))
    for name in ("rope_theta", "norm_eps"):
        object.__setattr__(config, name, float(getattr(config, name)))
    if config.n_experts < 0:
        raise ValueError(f"Config.n_experts must be 0 (dense) or positive, got {config.n_experts}")
    if config.n_experts == 0 and config.top_k != 0:
        raise ValueError(f"Config.top_k must be 0 for a dense model (n_experts=0), got {config.top_k}")
    if config.n_experts > 0 and not 1 <= config.top_k <= config.n_experts:
        raise ValueError(
            f"Config.top_k must be in [1, n_experts={config.n_experts}] for an MoE model, got {config.top_k}"
        )
    if not config.rope_theta > 0:
        raise ValueError(f"Config.rope_theta must be positive, got {config.rope_theta}")
    if not config.norm_eps > 0:
        raise ValueError(f"Config.norm_eps must be positive, got {config.norm_eps}")


def _checked_tokens(config: Config, tokens) -> np.ndarray:
    """tokens as a (T,) int64 array: 1 <= T <= max_seq_len ids in [0, V)."""
    return checked_token_ids(tokens, config.vocab_size, config.max_seq_len)


def checked_token_ids(tokens, vocab_size: int, max_seq_len: int) -> np.ndarray:
    """tokens as a (T,) int64 array of 1 <= T <= max_seq_len ids in [0,
    vocab_size), or a ValueError saying what is wrong: the check every
    language model here makes of its input."""
    arr = np.asarray(tokens)
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


def _checked_layer(config: Config, layer) -> int:
    if not isinstance(layer, (int, np.integer)) or not 0 <= layer < config.n_layers:
        raise ValueError(f"layer must be an int in [0, {config.n_layers}), got {layer!r}")
    return int(layer)


def _checked_stream(config: Config, x) -> np.ndarray:
    """x as a residual stream array (T, D)."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != config.d_model:
        raise ValueError(f"x must have shape (T, D={config.d_model}), got {x.shape}")
    return x


def _all_in_range(arr: np.ndarray, bound: int) -> bool:
    """Whether every value of the integer array arr lies in [0, bound): one
    comparison of arr viewed as unsigned (a negative value wraps to a huge
    one), cheaper than a min and a max; one element without an array operation."""
    if arr.size == 1:
        return 0 <= arr.item() < bound
    unsigned = arr.view(f"u{arr.itemsize}") if arr.dtype.kind == "i" else arr
    return not np.count_nonzero(unsigned >= bound)


def _span(arr: np.ndarray) -> tuple[int, int]:
    """The lowest and highest value of a non-empty integer array; one element
    (a decode step's position or token) without a reduction, a few (a verify
    step's) as Python ints, cheaper than two reductions."""
    if arr.size == 1:
        return (arr.item(),) * 2
    if arr.size <= FEW_TOKENS:
        values = arr.tolist()
        return min(values), max(values)
    return int(arr.min()), int(arr.max())


def _checked_positions(config: Config, positions, T: int, what: str) -> tuple[np.ndarray, int, int]:
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


def _checked_layer_input(config: Config, layer, x) -> tuple[int, np.ndarray]:
    """The inputs of `Model.mlp`: layer as an int, x as an array (T, D)."""
    return _checked_layer(config, layer), _checked_stream(config, x)


def _checked_qkv_inputs(config: Config, layer, x, positions) -> tuple[int, np.ndarray, np.ndarray]:
    """The inputs of `Model.qkv`: layer as an int, x (T, D) and positions (T,) as arrays."""
    layer, x = _checked_layer_input(config, layer, x)
    pos = np.asarray(positions)
    if pos.shape == (x.shape[0],) and pos.dtype.kind in "iu" and _all_in_range(pos, config.max_seq_len):
        return layer, x, pos
    return layer, x, _checked_positions(config, positions, x.shape[0], "positions")[0]  # says what is wrong


def _checked_attend_inputs(config: Config, layer, q, k, v, q_positions, k_positions) -> tuple:
    """The inputs of `Model.attend`: layer as an int; q (H, Tq, Dh), k and v
    (Hkv, Tk, Dh), q_positions (Tq,) and k_positions (Tk,) as arrays. Then
    whether some key is later than some query, which the position ranges the
    check finds tell for free: if none is, the causal mask hides nothing."""
    layer = _checked_layer(config, layer)
    H, Hkv, Dh = config.n_heads, config.n_kv_heads, config.head_dim
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if q.ndim != 3 or q.shape[0] != H or q.shape[2] != Dh:
        raise ValueError(f"q must have shape (H={H}, Tq, Dh={Dh}), got {q.shape}")
    if k.ndim != 3 or k.shape[0] != Hkv or k.shape[2] != Dh:
        raise ValueError(f"k must have shape (Hkv={Hkv}, Tk, Dh={Dh}), got {k.shape}")
    if v.shape != k.shape:
        raise ValueError(f"v must have the shape of k {k.shape}, got {v.shape}")
    Tq, Tk = q.shape[1], k.shape[1]
    qpos, q_lo, q_hi = _checked_positions(config, q_positions, Tq, "q_positions")
    kpos = np.asarray(k_positions)
    if Tq and Tk and kpos.shape == (Tk,) and kpos.dtype.kind in "iu":
        # Every key in [0, q_hi] (a decode or verify step's keys: the cache, then the new tokens) is valid.
        # One comparison, negative positions wrapping to huge ones, instead of a min and a max.
        unsigned = kpos.view(f"u{kpos.itemsize}") if kpos.dtype.kind == "i" else kpos
        if not np.count_nonzero(unsigned > q_hi):
            if Tq == 1:  # none later than the one query
                return layer, q, k, v, qpos, kpos, False
            if kpos[0].item() <= q_lo < kpos[-1].item():  # every query sees a key, and some key is later
                return layer, q, k, v, qpos, kpos, True
    kpos, k_lo, k_hi = _checked_positions(config, k_positions, Tk, "k_positions")
    # A query before every key would have all its scores masked: a softmax of NaNs.
    if Tq and Tk and k_lo > q_lo:
        raise ValueError(f"the query at position {q_lo} sees no key (the earliest key is at {k_lo})")
    return layer, q, k, v, qpos, kpos, k_hi > q_lo


def _checked_weights(config: Config, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights as float32 arrays, or a ValueError naming what does not match the config."""
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
        w = w.astype(np.float32)
        if not np.all(np.isfinite(w)):
            raise ValueError(f"weight {name!r} holds NaN or inf")
        out[name] = w
    return out
