"""A Llama-style decoder-only transformer in NumPy, float32.

Per layer: RMSNorm -> attention (rotary positions, grouped-query heads) ->
residual -> RMSNorm -> SwiGLU MLP or a mixture of SwiGLU experts -> residual.
Then a final RMSNorm and the output projection. `Model.forward` runs it on a
whole sequence:

    x = model.embed(tokens)                                    # (T, D)
    for layer in range(config.n_layers):
        q, k, v = model.qkv(layer, x, positions)               # (H, T, Dh), (Hkv, T, Dh), (Hkv, T, Dh)
        x = x + model.attend(layer, q, k, v, positions, positions)  # (T, D)
        x = x + model.mlp(layer, x)                            # (T, D)
    logits = model.logits(x)                                   # (T, V)

Each piece takes absolute positions, so a cached decoder (the kv_cache kata)
drives the same pieces over the keys and values it kept instead of
recomputing them.

Dimension names, in every shape comment: T tokens, V vocab, D model width,
H query heads, Hkv key/value heads, Dh head width, F MLP width, E experts,
K experts per token.

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

Every matmul adds its multiply-accumulates, and every piece the bytes of the
weights and the keys and values it reads, to the `Work` counters
(reference/work.py) active on this model (see `Model.count_work`), so speed
checks can count work exactly.
Each piece first checks its input (reference/checks.py): a bad one raises a
ValueError that says what is wrong, before any work is counted.

Each piece is written once, as the formulas read, with two exceptions: one token (a decode step) and 2 to
FEW_TOKENS (a speculative decoder's verify step), whose time is set by the count of NumPy operations more than
by the arithmetic. At one token RMSNorm is a dot product (`_rms_norm_one_row`), q|k|v and gate|up are one
matmul each, of weights stored side by side (`Model._join`), and an MoE token is routed in Python
(`Model._qkv_one_token`, `Model._mlp_one_token`). At a few, q|k|v is one matmul (`Model._qkv_few_tokens`) and
an MoE block routes in Python and groups its experts' rows (`Model._mlp_few_tokens`). Each is next to the plain
path it must equal (tests/reference/test_fast_paths.py), kept because benchmarks/bench_fast_paths.py shows
what it saves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from reference import checks
from reference.aligned import aligned
from reference.work import Work

# Up to this many tokens (a verify step of k <= 8 guesses: k + 1), qkv and an MoE mlp take their few-token fast paths.
FEW_TOKENS = 9
WEIGHTS_DIR = Path(__file__).parent / "weights"
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
        checks.check_config(self)  # a ValueError naming the first bad field; ints stored as int

    @functools.cached_property  # read by every piece of a decode step: worked out once (the fields are frozen)
    def head_dim(self) -> int:
        """Dh, the width of one attention head."""
        return self.d_model // self.n_heads

    @functools.cached_property
    def is_moe(self) -> bool:
        """Whether each layer's MLP is a mixture of experts."""
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


# ------------------------------------------------------------------ the math


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x (T, D) scaled to unit root-mean-square per row, times weight (D,)."""
    ms = (x * x).sum(axis=-1, keepdims=True) / x.shape[-1]  # (T, 1) mean square (np.mean's sum, without its wrapper)
    return (x / np.sqrt(ms + eps)) * weight


def _rms_norm_one_row(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """rms_norm of one row x (1, D), its sum of squares a dot product and its
    scale a Python float: four operations instead of seven.
    FAST PATH: 2.1-4.7x faster than rms_norm on one row, in the shipped
    models (python benchmarks/bench_fast_paths.py, load 5 on 2 cores)."""
    row = x[0]  # (D,)
    h = x * weight.reshape(1, -1)  # (1, D): two arrays of one shape, cheaper than broadcasting (D,) over (1, D)
    h *= 1.0 / math.sqrt(float(row.dot(row)) / x.shape[1] + eps)
    return h  # (1, D)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def rope_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables (T, Dh // 2) for the given absolute positions."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))  # (Dh/2,)
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # (T, Dh/2)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate x (heads, T, Dh) by position, pairing dimension i with i + Dh/2.
    The definition; the model runs `rotate_halves`, the same bits in fewer operations."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]  # (heads, T, Dh/2) each
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@functools.lru_cache(maxsize=16)
def rope_cache(max_seq_len: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """rope_tables for every position 0 .. max_seq_len - 1, laid out for
    `rotate_halves`: cos2 (max_seq_len, 2, Dh // 2) holds (cos, cos) and sin2
    holds (-sin, sin). Computed once per shape and shared, so read-only."""
    cos, sin = rope_tables(np.arange(max_seq_len), head_dim, theta)  # (max_seq_len, Dh/2)
    cos2, sin2 = np.stack([cos, cos], axis=1), np.stack([-sin, sin], axis=1)  # (max_seq_len, 2, Dh/2)
    cos2.flags.writeable = sin2.flags.writeable = False
    return cos2, sin2


def rotate_halves(x: np.ndarray, cos2: np.ndarray, sin2: np.ndarray) -> np.ndarray:
    """apply_rope(x, cos, sin) in three operations, bit for bit, given rope_cache's
    tables at x's positions, cos2 and sin2 (T, 2, Dh // 2):
    (x1, x2) * (cos, cos) + (x2, x1) * (-sin, sin)."""
    halves = x.reshape(*x.shape[:-1], 2, x.shape[-1] // 2)  # (heads, T, 2, Dh/2): x1, x2
    return (halves * cos2 + halves[..., ::-1, :] * sin2).reshape(x.shape)  # (heads, T, Dh)


def top_k_route(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """indices (T, K) of the k most probable experts, best first (ties: lower index),
    and their probabilities renormalized to sum to 1 (T, K)."""
    idx = np.argsort(-probs, axis=-1, kind="stable")[:, : checks.checked_top_k(k, probs.shape[-1])]  # (T, K)
    w = np.take_along_axis(probs, idx, axis=-1)  # (T, K)
    return idx, w / w.sum(axis=-1, keepdims=True)


def _route_one_token(logits: list[float], k: int) -> list[tuple[int, float]]:
    """top_k_route(softmax(logits)) for one token's router logits (E floats),
    in Python: (expert, gate) of its k experts, in expert order. Its k most
    probable experts are its k highest logits (ties: the lower index, as
    top_k_route's stable sort), and a softmax over their logits alone is the
    softmax over all E renormalized over the k."""
    chosen = sorted(range(len(logits)), key=logits.__getitem__, reverse=True)[:k]
    weights = [math.exp(logits[e] - logits[chosen[0]]) for e in chosen]  # k floats
    total = sum(weights)
    return sorted((e, weight / total) for e, weight in zip(chosen, weights))


# ------------------------------------------------------------------ the model


class Model:
    """A decoder-only transformer whose weights are a flat dict name -> float32 array."""

    def __init__(self, config: Config, weights: dict[str, np.ndarray]):
        self.config = config
        self.weights = {n: aligned(w) for n, w in checks.checked_weights(config, weights).items()}  # float32 copies
        self._counters: list[Work] = []  # the Work of each count_work block open on this model
        self._joined: dict[tuple[str, ...], tuple[np.ndarray, list[np.ndarray]]] = {}  # see _join
        self._rope = rope_cache(config.max_seq_len, config.head_dim, config.rope_theta)  # cos2, sin2
        for layer in range(config.n_layers):
            p = f"layers.{layer}."
            self._join((p + "wq", p + "wk", p + "wv"))  # (D, (H + 2 Hkv) Dh)
            self._join((p + "w_gate", p + "w_up"))  # ((E,) D, 2F)

    @classmethod
    def random(cls, config: Config, seed: int = 0) -> "Model":
        """A model with random weights: normal(0, 1/sqrt(fan_in)), norms at 1."""
        rng = np.random.default_rng(checks.checked_seed(seed))
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
        dtype = checks.checked_save_dtype(dtype)
        arrays = {name: w.astype(dtype) for name, w in self.weights.items()}
        arrays["__config__"] = np.array(json.dumps(dataclasses.asdict(self.config)))
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Model":
        """Read a model written by `save`. Weights always load as float32."""
        path = checks.checked_path(path)
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
        path = checks.checked_path(weights_dir, "weights_dir") / f"{name}.npz"
        if not path.is_file():
            raise FileNotFoundError(f"the {name} weights are missing ({path}); {REBUILD_HINT}")
        try:
            return cls.load(path)
        except ValueError as exc:
            raise ValueError(f"the {name} weights are corrupted: {exc}; {REBUILD_HINT}") from exc

    def copy(self) -> "Model":
        return Model(self.config, {n: w.copy() for n, w in self.weights.items()})

    def _join(self, names: tuple[str, ...]) -> None:
        """Store the weights `names` side by side in one array, joined along
        their last axis, each weight a view of its columns, so that one matmul
        does the work of two or three (the fast paths). A weight
        edited in place edits the joined array; one replaced leaves it (_joined_weights)."""
        joined = aligned(np.concatenate([self.weights[name] for name in names], axis=-1))
        views, start = [], 0
        for name in names:
            width = self.weights[name].shape[-1]
            views.append(joined[..., start : start + width])
            start += width
        self.weights.update(zip(names, views))
        self._joined[names] = joined, views

    def _joined_weights(self, *names: str) -> np.ndarray | None:
        """The array the weights `names` are views of. A weight replaced since
        (as quantize_model does to a copy) by a float32 array of its shape is
        joined again, the dict then holding its view; one of another shape or
        dtype leaves None, and the plain path runs."""
        joined, views = self._joined[names]
        for name, view in zip(names, views):
            if self.weights[name] is not view:
                break
        else:
            return joined
        for name, view in zip(names, views):
            w = self.weights[name]
            if not (isinstance(w, np.ndarray) and w.dtype == np.float32 and w.shape == view.shape):
                return None
        self._join(names)
        return self._joined[names][0]

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
        """a (M, N) @ b (N, P), counting M * N * P macs and the weight matrix b
        read once. ndarray.dot is the product `@` computes, without its dispatch."""
        for work in self._counters:
            work.add(piece, a.shape[0] * b.size)
            work.add_weight_read(piece, b.nbytes, b.size)
        return a.dot(b)  # (M, P)

    def _norm(self, x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        """rms_norm(x, gain) for x (T, D), counting the gain read."""
        for work in self._counters:
            work.add_weight_read("norm", gain.nbytes)
        if x.shape[0] == 1:  # a decode step: the fast path beside rms_norm
            return _rms_norm_one_row(x, gain, self.config.norm_eps)  # (1, D)
        return rms_norm(x, gain, self.config.norm_eps)  # (T, D)

    # ------------------------------------------------------------------ pieces

    def check_tokens(self, tokens) -> np.ndarray:
        """tokens as a (T,) int64 array, or a ValueError saying what is wrong."""
        return checks.checked_tokens(self.config, tokens)

    def embed(self, tokens) -> np.ndarray:
        """Token ids (T,) -> residual stream (T, D)."""
        tokens, table = self.check_tokens(tokens), self.weights["tok_emb"]
        for work in self._counters:  # one row read per distinct token
            work.add_weight_read("embed", len(set(tokens.tolist())) * table[0].nbytes)
        return table.take(tokens, axis=0)  # (T, D): the rows table[tokens], 0.7 us cheaper than fancy indexing

    def qkv(self, layer: int, x: np.ndarray, positions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Attention inputs of one layer for the residual stream x (T, D) at
        absolute `positions` (T,): RMSNorm, projections, rotary embeddings.

        Returns q (H, T, Dh), k (Hkv, T, Dh), v (Hkv, T, Dh).
        """
        layer, x, positions = checks.checked_qkv_inputs(self.config, layer, x, positions)
        for work in self._counters:
            work.positions[layer] = work.positions.get(layer, 0) + x.shape[0]
        p = f"layers.{layer}."
        h = self._norm(x, self.weights[p + "attn_norm"])  # (T, D)
        wqkv = self._joined_weights(p + "wq", p + "wk", p + "wv")  # (D, (H + 2 Hkv) Dh)
        if h.shape[0] == 1 and wqkv is not None:  # a decode step: the fast path beside this one
            return self._qkv_one_token(h, wqkv, positions.item())
        if h.shape[0] <= FEW_TOKENS and wqkv is not None:  # a verify step: the other fast path
            return self._qkv_few_tokens(h, wqkv, positions)
        return self._qkv_rows(layer, h, positions)

    def _qkv_rows(self, layer: int, h: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, ...]:
        """q, k, v of normed rows h (T, D) at positions (T,): the projections, then rotary embeddings."""
        c, w, p = self.config, self.weights, f"layers.{layer}."
        T, H, Hkv, Dh = h.shape[0], c.n_heads, c.n_kv_heads, c.head_dim
        q = self._mm("qkv", h, w[p + "wq"]).reshape(T, H, Dh).transpose(1, 0, 2)  # (H, T, Dh)
        k = self._mm("qkv", h, w[p + "wk"]).reshape(T, Hkv, Dh).transpose(1, 0, 2)  # (Hkv, T, Dh)
        v = self._mm("qkv", h, w[p + "wv"]).reshape(T, Hkv, Dh).transpose(1, 0, 2)  # (Hkv, T, Dh)
        cos2, sin2 = (table[positions] for table in self._rope)  # (T, 2, Dh/2): the tables at these positions
        return rotate_halves(q, cos2, sin2), rotate_halves(k, cos2, sin2), v

    def _qkv_one_token(self, h: np.ndarray, wqkv: np.ndarray, position: int) -> tuple[np.ndarray, ...]:
        """_qkv_rows for one row h (1, D) at one position, given its layer's
        wq | wk | wv side by side, wqkv (D, (H + 2 Hkv) Dh): one matmul for the
        three, q and k rotated together, one token's heads need no transpose.
        FAST PATH: 2.8-3.1x faster than _qkv_rows on one token, in the shipped
        models (python benchmarks/bench_fast_paths.py, load 5 on 2 cores)."""
        c = self.config
        H, Hkv, Dh = c.n_heads, c.n_kv_heads, c.head_dim
        k_end = (H + Hkv) * Dh  # where v's columns start
        y = self._mm("qkv", h, wqkv)  # (1, (H + 2 Hkv) Dh): q | k | v
        qk = y[0, :k_end].reshape(H + Hkv, 2, Dh // 2)  # (H + Hkv, 2, Dh/2): each head's halves
        cos2, sin2 = self._rope  # (max_seq_len, 2, Dh/2) each
        cos2, sin2 = cos2[position], sin2[position]  # (2, Dh/2): the tables at this position
        qk = (qk * cos2 + qk[:, ::-1] * sin2).reshape(H + Hkv, 1, Dh)  # rotate_halves' formula
        return qk[:H], qk[H:], y[:, k_end:].reshape(Hkv, 1, Dh)  # (H, 1, Dh), (Hkv, 1, Dh), (Hkv, 1, Dh)

    def _qkv_few_tokens(self, h: np.ndarray, wqkv: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, ...]:
        """_qkv_rows for a few rows h (T, D) at positions (T,), given wqkv as
        _qkv_one_token: one matmul for the three, q and k rotated together.
        FAST PATH: 1.6-2.0x faster than _qkv_rows on 2-9 rows, in the shipped
        models (python benchmarks/bench_fast_paths.py, load 1-3 on 2 cores)."""
        c = self.config
        T, H, Hkv, Dh = h.shape[0], c.n_heads, c.n_kv_heads, c.head_dim
        k_end = (H + Hkv) * Dh  # where v's columns start
        y = self._mm("qkv", h, wqkv)  # (T, (H + 2 Hkv) Dh): q | k | v of each row
        qk = y[:, :k_end].reshape(T, H + Hkv, 2, Dh // 2)  # (T, H + Hkv, 2, Dh/2): each head's halves
        cos2, sin2 = self._rope  # (max_seq_len, 2, Dh/2) each
        cos2, sin2 = cos2[positions][:, None], sin2[positions][:, None]  # (T, 1, 2, Dh/2)
        qk = (qk * cos2 + qk[:, :, ::-1] * sin2).reshape(T, H + Hkv, Dh).transpose(1, 0, 2)  # (H + Hkv, T, Dh)
        return qk[:H], qk[H:], y[:, k_end:].reshape(T, Hkv, Dh).transpose(1, 0, 2)  # v (Hkv, T, Dh)

    def attend(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions, k_positions) -> np.ndarray:
        """Attention of queries q (H, Tq, Dh) over keys k and values v
        (Hkv, Tk, Dh), then the output projection: returns (Tq, D).

        Causal by absolute position: the query at position p sees only keys at
        positions <= p. Query head h reads key/value head h // (H // Hkv).
        """
        c = self.config
        checked = checks.checked_attend_inputs(c, layer, q, k, v, q_positions, k_positions)
        layer, q, k, v, q_positions, k_positions, some_key_is_later = checked
        H, Hkv, Dh, Tq, Tk = c.n_heads, c.n_kv_heads, c.head_dim, q.shape[1], k.shape[1]
        group = H // Hkv  # query heads per key/value head
        for work in self._counters:
            work.add("attention", 2 * H * Tq * Tk * Dh)  # the scores, then the weighted values
            work.add_cache_read(k.nbytes + v.nbytes)
        q = q.reshape(Hkv, group * Tq, Dh)  # (Hkv, group*Tq, Dh): the query heads of a kv head, stacked
        scores = q @ k.transpose(0, 2, 1)  # (Hkv, group*Tq, Tk): a new array, so scaled and masked in place
        scores *= 1.0 / math.sqrt(Dh)
        if some_key_is_later:  # than some query (never so in a decode step): mask it
            later = k_positions[None, :] > q_positions[:, None]  # (Tq, Tk)
            np.copyto(scores.reshape(H, Tq, Tk), -np.inf, where=later)  # a view: the mask lands in scores
        # softmax over the keys, in place: a second array of scores would cost its page faults at every
        # call (softmax(scores) made attention at 256 tokens take 2x as long). np.maximum.reduce and
        # np.add.reduce are .max and .sum without their Python wrappers (0.1 us each at one token on NumPy 2.4.6).
        scores -= np.maximum.reduce(scores, axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= np.add.reduce(scores, axis=-1, keepdims=True)
        probs = scores.astype(np.float32, copy=False)  # (Hkv, group*Tq, Tk)
        out = probs @ v  # (Hkv, group*Tq, Dh)
        out = out.reshape(H, Tq, Dh).transpose(1, 0, 2).reshape(Tq, H * Dh)  # (Tq, H*Dh): heads side by side
        return self._mm("wo", out, self.weights[f"layers.{layer}.wo"])  # (Tq, D)

    def mlp(self, layer: int, x: np.ndarray) -> np.ndarray:
        """RMSNorm then the SwiGLU MLP (or the MoE of SwiGLU experts) of one
        layer, for the residual stream x (T, D): returns (T, D)."""
        layer, x = checks.checked_layer_input(self.config, layer, x)
        p = f"layers.{layer}."
        h = self._norm(x, self.weights[p + "mlp_norm"])  # (T, D)
        gate_up = self._joined_weights(p + "w_gate", p + "w_up")  # ((E,) D, 2F)
        if h.shape[0] == 1 and gate_up is not None:  # a decode step: the fast path beside this one
            return self._mlp_one_token(layer, h, gate_up)
        if 1 < h.shape[0] <= FEW_TOKENS and gate_up is not None and self.config.is_moe:  # an MoE verify step
            return self._mlp_few_tokens(layer, h, gate_up)
        return self._mlp_rows(layer, h)

    def _mlp_rows(self, layer: int, h: np.ndarray) -> np.ndarray:
        """The SwiGLU MLP of normed rows h (T, D), or its MoE block: each token
        through its K experts (w_gate and w_up (E, D, F), w_down (E, F, D)),
        their outputs summed with its gates. An expert no token chose is never read."""
        w, p = self.weights, f"layers.{layer}."
        w_gate, w_up, w_down = w[p + "w_gate"], w[p + "w_up"], w[p + "w_down"]
        if not self.config.is_moe:
            return self._swiglu("mlp", h, w_gate, w_up, w_down)  # (T, D)
        logits = self._mm("router", h, w[p + "router"])  # (T, E)
        experts, gates = top_k_route(softmax(logits), self.config.top_k)  # (T, K) each
        out = np.zeros_like(h)  # (T, D)
        for e in range(self.config.n_experts):
            rows, slot = np.nonzero(experts == e)  # the tokens routed to e, and where e stands in their top K
            if rows.size:
                y = self._swiglu("experts", h[rows], w_gate[e], w_up[e], w_down[e])  # (n_e, D)
                out[rows] += gates[rows, slot][:, None] * y  # a token's K experts are distinct: no row repeats
        return out

    def _swiglu(self, piece: str, h: np.ndarray, w_gate, w_up, w_down) -> np.ndarray:
        """(silu(h @ w_gate) * (h @ w_up)) @ w_down for rows h (n, D), w_gate and
        w_up (D, F), w_down (F, D): one SwiGLU, its macs counted as `piece`."""
        gate = self._mm(piece, h, w_gate)  # (n, F)
        up = self._mm(piece, h, w_up)  # (n, F)
        return self._mm(piece, silu(gate) * up, w_down)  # (n, D)

    def _swiglu_joined(self, piece: str, h: np.ndarray, gate_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
        """_swiglu given w_gate | w_up side by side, gate_up (D, 2F): one matmul for the two."""
        F = w_down.shape[0]
        y = self._mm(piece, h, gate_up)  # (n, 2F): gate | up
        return self._mm(piece, silu(y[:, :F]) * y[:, F:], w_down)  # (n, D)

    def _mlp_one_token(self, layer: int, h: np.ndarray, gate_up: np.ndarray) -> np.ndarray:
        """_mlp_rows for one normed row h (1, D), given the layer's w_gate |
        w_up side by side, gate_up ((E,) D, 2F): one matmul for the two. An MoE
        token is routed in Python (`_route_one_token`). FAST PATH: 3.2x faster than _mlp_rows on one token of
        the shipped teacher (MoE), 1.8x of the draft (dense); with the other two, a decode step takes 0.49x
        (teacher) and 0.71x (draft) the time it would without them (python benchmarks/bench_fast_paths.py)."""
        w, p = self.weights, f"layers.{layer}."
        w_down = w[p + "w_down"]  # ((E,) F, D)
        if not self.config.is_moe:
            return self._swiglu_joined("mlp", h, gate_up, w_down)  # (1, D)
        logits = self._mm("router", h, w[p + "router"])[0].tolist()  # E floats
        out = None
        for e, gate in _route_one_token(logits, self.config.top_k):  # K experts, in expert order
            y = self._swiglu_joined("experts", h, gate_up[e], w_down[e])  # (1, D), a new array: gated in place
            y *= gate
            out = y if out is None else out + y  # summed in expert order, as _mlp_rows sums
        return out  # (1, D)

    def _mlp_few_tokens(self, layer: int, h: np.ndarray, gate_up: np.ndarray) -> np.ndarray:
        """_mlp_rows of an MoE block for a few normed rows h (T, D), 2 <= T <=
        FEW_TOKENS (a verify step), given gate_up as _mlp_one_token: each token
        routed in Python (`_route_one_token`), then the experts run on the
        layout grouped-GEMM MoE kernels use: the R (token, expert) pairs sorted
        by expert, so each chosen expert's rows form one block; one product of
        each block with its expert's w_gate | w_up and one with its w_down, one
        SwiGLU over all R rows, and the gated sum one (T, R) @ (R, D) product.
        No row is padded: the work done is the work counted, and an expert no
        token chose is never read. FAST PATH: 1.4-1.9x faster than _mlp_rows
        on 2-9 rows of the shipped teacher; with _qkv_few_tokens, its verify
        step of 2, 5, 9 tokens takes 0.66, 0.76, 0.78x the time it would
        without them (python benchmarks/bench_fast_paths.py, load 1 on 2 cores)."""
        w, p = self.weights, f"layers.{layer}."
        w_down = w[p + "w_down"]  # (E, F, D)
        logits = self._mm("router", h, w[p + "router"]).tolist()  # T lists of E floats
        routes = [_route_one_token(row, self.config.top_k) for row in logits]  # per token: (expert, gate) K times
        pairs = sorted((e, t, gate) for t, route in enumerate(routes) for e, gate in route)  # R, by expert
        experts, tokens, gates = (list(column) for column in zip(*pairs))  # R each
        starts = [r for r in range(len(pairs)) if r == 0 or experts[r] != experts[r - 1]]  # each block's first row
        blocks = [(experts[s], s, end) for s, end in zip(starts, starts[1:] + [len(pairs)])]  # (expert, rows s:end)
        rows, F = h[tokens], w_down.shape[-2]  # (R, D)
        y = np.concatenate([self._mm("experts", rows[s:end], gate_up[e]) for e, s, end in blocks])  # (R, 2F)
        a = silu(y[:, :F]) * y[:, F:]  # (R, F)
        z = np.concatenate([self._mm("experts", a[s:end], w_down[e]) for e, s, end in blocks])  # (R, D)
        combine = np.zeros((h.shape[0], len(pairs)), dtype=z.dtype)  # (T, R): each row's gate, in its token's row
        combine[tokens, np.arange(len(pairs))] = gates
        return combine.dot(z)  # (T, D)

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Final RMSNorm and output projection: residual stream (T, D) -> logits (T, V)."""
        x = checks.checked_stream(self.config, x)
        h = self._norm(x, self.weights["norm"])  # (T, D)
        return self._mm("logits", h, self.weights["out"])  # (T, V)

    def forward(self, tokens) -> np.ndarray:
        """Logits (T, V) for every position of tokens (T,), recomputing the
        whole sequence from scratch: the path a KV cache avoids."""
        x = self.embed(tokens)  # (T, D); checks the tokens
        positions = np.arange(x.shape[0])  # (T,)
        for layer in range(self.config.n_layers):
            q, k, v = self.qkv(layer, x, positions)  # (H, T, Dh), (Hkv, T, Dh), (Hkv, T, Dh)
            x = x + self.attend(layer, q, k, v, positions, positions)  # (T, D)
            x = x + self.mlp(layer, x)  # (T, D)
        return self.logits(x)  # (T, V)

    __call__ = forward
