"""The quantization suite's oracles: the expected answers, computed here in the judge from the
documented formulas, in float64 (or float32 where llama.cpp computes in float32), never from
the code under test: per-slice and per-group max |x|, affine scales and zero points, codes
rounded half to even, llama.cpp's Q8_0 and Q4_0 bytes, the calibration errors and percentile,
the KL of a quantized model, the greedy mixed-precision plan, and AWQ's scales and search.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from grader.suites.quantization.strategies import _with
from reference.model import Model, rms_norm, softmax, top_k_route
from reference.sampling import probs_from_logits

# A code may differ from round(x / scale) only where x / scale lies this close
# to a .5 tie (x / scale and x * (1 / scale) round differently there).
TIE_SLACK = 1e-3


def _other_axes(ndim: int, axis) -> tuple[int, ...]:
    return tuple(a for a in range(ndim) if axis is None or a != axis % ndim)


def _slice_amax(x: np.ndarray, axis) -> np.ndarray:
    """max |x| per slice, float64, shaped to broadcast against x."""
    return np.max(np.abs(x.astype(np.float64)), axis=_other_axes(x.ndim, axis), keepdims=True)


def _codes_match(q: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """Where codes q equal round(ratio), or either neighbour of a near-tie."""
    near_tie = np.abs(np.abs(ratio - np.floor(ratio)) - 0.5) < TIE_SLACK
    return (q == np.round(ratio)) | (near_tie & ((q == np.floor(ratio)) | (q == np.ceil(ratio))))


def _affine_expected(x: np.ndarray, bits: int, axis):
    """(scale, zero_point ratio -min_neg/scale) per slice in float64, broadcast to x."""
    axes = _other_axes(x.ndim, axis)
    x64 = x.astype(np.float64)
    min_neg = np.minimum(np.min(x64, axis=axes, keepdims=True), 0)
    max_pos = np.maximum(np.max(x64, axis=axes, keepdims=True), 0)
    scale = (max_pos - min_neg) / (2**bits - 1)
    ratio = np.divide(-min_neg, scale, out=np.zeros_like(scale), where=scale > 0)
    return np.broadcast_to(scale, x.shape), np.broadcast_to(ratio, x.shape)


def _group_amax(x: np.ndarray, group_size: int) -> np.ndarray:
    """max |x| of each element's group, float64, shape of x."""
    g = np.abs(x.astype(np.float64)).reshape(*x.shape[:-1], -1, group_size)
    return np.broadcast_to(g.max(axis=-1, keepdims=True), g.shape).reshape(x.shape)


def _fp16(d: float) -> bytes:
    return struct.pack("<e", d)


def _q8_0_bytes(d: float, codes: list[int]) -> bytes:
    return _fp16(d) + np.array(codes, dtype=np.int8).tobytes()


def _q4_0_bytes(d: float, codes: list[int]) -> bytes:
    return _fp16(d) + bytes(codes[j] | (codes[j + 16] << 4) for j in range(16))


def _round_away(v: np.ndarray) -> np.ndarray:
    a = np.abs(v)
    return np.sign(v) * (np.floor(a) + (a - np.floor(a) >= 0.5))


def _inverse(d: np.ndarray) -> np.ndarray:
    return np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)


def _expected_q8_0(x: np.ndarray) -> bytes:
    """llama.cpp's quantize_row_q8_0_ref, in float32 as in C."""
    out = b""
    for block in x.astype(np.float32).reshape(-1, 32):
        d = np.float32(np.max(np.abs(block)) / np.float32(127))
        codes = _round_away(block * _inverse(np.array([d]))[0])
        out += np.float16(d).astype("<f2").tobytes() + codes.astype(np.int8).tobytes()
    return out


def _expected_q4_0(x: np.ndarray) -> bytes:
    """llama.cpp's quantize_row_q4_0_ref, in float32 as in C."""
    out = b""
    for block in x.astype(np.float32).reshape(-1, 32):
        m = block[int(np.argmax(np.abs(block)))]
        d = np.float32(m / np.float32(-8))
        codes = np.minimum(15, np.floor(block * _inverse(np.array([d]))[0] + np.float32(8.5))).astype(np.uint8)
        out += np.float16(d).astype("<f2").tobytes() + bytes((codes[:16] | (codes[16:] << 4)).tolist())
    return out


def _mean_kl(p_model: Model, q_model: Model, tokens) -> float:
    p = probs_from_logits(p_model.forward(tokens), 1.0)
    q = probs_from_logits(q_model.forward(tokens), 1.0)
    return float(np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=-1)))


def _squared_error(x: np.ndarray, scale: float, bits: int) -> float:
    """sum((codes * scale - x)**2) in float64, codes = clip(round(x / scale), -qmax, qmax); all 0 at scale 0."""
    qmax = 2 ** (bits - 1) - 1
    x = x.astype(np.float64).ravel()
    if scale == 0:
        return float(np.sum(x**2))
    codes = np.clip(np.round(x / scale), -qmax, qmax)
    return float(np.sum((codes * scale - x) ** 2))


def _grid_errors(x: np.ndarray, bits: int, grid: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidate clips c_i = max|x| * (i / grid), i = 1..grid (c_grid = max|x| exactly), and their squared
    errors at scale c_i / qmax."""
    qmax = 2 ** (bits - 1) - 1
    amax = float(np.max(np.abs(x.astype(np.float64))))
    clips = amax * (np.arange(1, grid + 1) / grid)
    return clips, np.array([_squared_error(x, c / qmax, bits) for c in clips])


def _linear_percentile(x: np.ndarray, percentile: float) -> float:
    """The percentile of |x| interpolated linearly between the sorted values at rank (N - 1) * percentile / 100."""
    a = np.sort(np.abs(x.astype(np.float64)).ravel())
    rank = (a.size - 1) * percentile / 100
    lo = math.floor(rank)
    hi = min(lo + 1, a.size - 1)
    return float(a[lo] + (rank - lo) * (a[hi] - a[lo]))


def _fake_quantized(w: np.ndarray, scale: float, bits: int) -> np.ndarray:
    """w through codes clip(round(w / scale), -qmax, qmax) and back, in float64 then w's dtype."""
    qmax = 2 ** (bits - 1) - 1
    return (np.clip(np.round(w.astype(np.float64) / scale), -qmax, qmax) * scale).astype(w.dtype)


def _grouped_back(w: np.ndarray, bits: int, group_size: int) -> np.ndarray:
    """w (..., in, out) through grouped quantization along its input axis and back, by the formula in
    float64 (scale max|group| / qmax, codes round half to even), cast to w's dtype."""
    qmax = 2 ** (bits - 1) - 1
    rows = np.swapaxes(w.astype(np.float64), -1, -2)  # (..., out, in)
    groups = rows.reshape(*rows.shape[:-1], -1, group_size)
    scale = np.max(np.abs(groups), axis=-1, keepdims=True) / qmax
    back = np.round(groups / np.where(scale > 0, scale, 1.0)) * scale
    return np.swapaxes(back.reshape(rows.shape), -1, -2).astype(w.dtype)


def _log_probs(model: Model, tokens) -> np.ndarray:
    """log softmax (T, V) of model's logits, float64, as logits minus their log-sum-exp."""
    z = model.forward(tokens).astype(np.float64)
    top = np.max(z, axis=1, keepdims=True)
    return z - top - np.log(np.sum(np.exp(z - top), axis=1, keepdims=True))


def _kl_to(p_log: np.ndarray, model: Model, tokens) -> float:
    """Mean KL(p || model) over the positions, p given by its log-probabilities (T, V)."""
    return float(np.mean(np.sum(np.exp(p_log) * (p_log - _log_probs(model, tokens)), axis=-1)))


def _bits_of(n: int, bits: int, group_size: int) -> int:
    """Bits a weight of n values takes at `bits`: codes and an fp16 scale per group."""
    return n * bits + 16 * n // group_size


def _greedy_plan(sensitivity, sizes, budget, choices, group_size) -> dict[str, int]:
    """The plan the docstring describes, written for clarity: every weight at the smallest choice, then
    the upgrade to the next choice of largest sensitivity drop per extra byte that fits, until none does."""
    ladder = sorted(choices)
    plan = {name: ladder[0] for name in sizes}
    spent = sum(_bits_of(n, ladder[0], group_size) for n in sizes.values())
    while True:
        options = []
        for name in sizes:
            at = ladder.index(plan[name])
            if at + 1 < len(ladder):
                up = ladder[at + 1]
                extra = sizes[name] * (up - plan[name])
                if spent + extra <= 8 * budget:
                    gain = (sensitivity[plan[name]][name] - sensitivity[up][name]) / (extra / 8)
                    options.append((-gain, name, up, extra))
        if not options:
            return plan
        _, name, up, extra = min(options)  # the largest gain, then the name that sorts first
        plan[name] = up
        spent += extra


SUITE_ALPHAS = tuple(i / 19 for i in range(20))  # the documented default grid
MIN_MEAN = 1e-8  # the documented floor of a channel's mean |x|


def _scales(x: np.ndarray, alpha: float) -> np.ndarray:
    """The documented scales, float64: mean |x| per column (floored), to the alpha, over their geometric mean."""
    mean = np.maximum(np.mean(np.abs(x.astype(np.float64)), axis=0), MIN_MEAN)
    s = mean**alpha
    return s / math.exp(float(np.mean(np.log(s))))


def _awq_errors(w: np.ndarray, x: np.ndarray, bits: int, group_size: int, alphas=SUITE_ALPHAS) -> dict:
    """alpha -> (output error, scales, the scaled weight quantized and back) for each alpha, float64."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = x64 @ w64
    out = {}
    for alpha in alphas:
        s = _scales(x, alpha)
        dq = _grouped_back(w64 * s[:, None], bits, group_size)
        out[alpha] = (float(np.sum(((x64 / s) @ dq - want) ** 2)), s, dq)
    return out


def _reaching(model: Model, tokens) -> tuple[list[dict], np.ndarray]:
    """What reaches each linear weight of model on tokens, from the reference model's pieces: per layer
    the normed residual before q|k|v ("attn"), the attention output before wo ("wo", through a copy whose
    wo is an identity), the normed residual before the MLP ("mlp") and each expert's SwiGLU product on the
    rows routed to it, or the dense MLP's ("down"); and the final normed residual."""
    c, w = model.config, model.weights
    probe = _with(model, {f"layers.{i}.wo": np.eye(c.d_model, dtype=np.float32) for i in range(c.n_layers)})
    x = model.embed(tokens)
    pos = np.arange(len(tokens))
    out = []
    for i in range(c.n_layers):
        p = f"layers.{i}."
        acts = {"attn": rms_norm(x, w[p + "attn_norm"], c.norm_eps)}
        acts["wo"] = probe.attend(i, *model.qkv(i, x, pos), pos, pos)
        x = x + acts["wo"] @ w[p + "wo"]
        h = rms_norm(x, w[p + "mlp_norm"], c.norm_eps)
        acts["mlp"] = h
        gate, up = w[p + "w_gate"].reshape(-1, c.d_model, c.d_ff), w[p + "w_up"].reshape(-1, c.d_model, c.d_ff)
        if c.is_moe:
            experts = top_k_route(softmax(h @ w[p + "router"]), c.top_k)[0]
            rows = [h[(experts == e).any(axis=1)] for e in range(c.n_experts)]
        else:
            rows = [h]
        acts["down"] = [(r @ g) / (1 + np.exp(-(r @ g))) * (r @ u) for r, g, u in zip(rows, gate, up)]
        out.append(acts)
        x = x + model.mlp(i, x)
    return out, rms_norm(x, w["norm"], c.norm_eps)
