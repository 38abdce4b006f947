"""Quantization: precision for memory.

Every weight is hauled out of memory for every token, and the hauling is the
bottleneck. Storing a weight in fewer bits snaps it onto a coarse grid of
levels `code * scale`: symmetric (codes around 0), affine (a zero point, so
0.0 stays exact), or grouped (one scale per run of G weights, so an outlier
only coarsens its own group, at the price of a few bits per weight for the
scales). llama.cpp's Q8_0 and Q4_0 blocks are grouped quantization with
G = 32, an fp16 scale and its own rounding, written out byte for byte.

Every quantizer above takes its scale from the largest magnitude, so one
outlier stretches the grid for all the rest: a weight 100x the others
leaves them a code or two. Calibration picks the scale instead: clipping
at a percentile of |x|, or at the clip that minimises the squared error,
gives up the few outliers (clamped to the largest code) to resolve the
many, and at 4 bits that brings a quantized model's predictions far closer
to the float model's. The art is quantizing the parts that tolerate it
while protecting the sensitive ones.

That art takes two measurements. Sensitivity: quantize one weight matrix
alone and see how far the model's predictions move (KL from the float
model); then spend a byte budget unevenly, more bits where a byte buys the
largest drop, as llama.cpp's Q4_K_M keeps some matrices at 6 bits and the
rest at 4. Salience (AWQ, Lin et al. 2024, arXiv:2306.00978): an input
channel that carries large activations multiplies its weights' rounding
errors, so scale those rows up before quantizing (their relative error
shrinks) and divide the activations by the same scale, folded into the
RMSNorm gain before the matrix; the scale is mean |activation| to a power
alpha, searched for the least output error.

Rounding in the uniform quantizers is NumPy's round-half-to-even (as in
PyTorch); Q8_0/Q4_0 round exactly as llama.cpp does. Every function raises
ValueError, naming what was wrong, for bits outside 2..8, a non-float input,
or NaN/inf in it.
"""

from __future__ import annotations

import numpy as np

from reference.model import Model, rms_norm, silu, softmax, top_k_route

BLOCK = 32  # values per llama.cpp Q8_0 / Q4_0 block
Q8_0_BYTES = 2 + BLOCK  # fp16 scale + 32 int8 codes
Q4_0_BYTES = 2 + BLOCK // 2  # fp16 scale + 32 4-bit codes, two per byte
LINEAR_WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router", "out")  # name suffixes
CALIBRATIONS = ("minmax", "percentile", "mse")  # the methods calibrate knows
PLAN_CHOICES = (2, 3, 4, 8)  # the bit widths mixed_precision_plan chooses from by default
ALPHAS = tuple(i / 19 for i in range(20))  # awq_quantize's default exponents: 20 points from 0 to 1
MIN_MEAN = 1e-8  # activation_scales floors each channel's mean |x| here, so a silent channel gets no 0 scale


def quantize_symmetric(x, bits: int, axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric uniform quantization: x ~= q * scale with codes around 0.

    x: float array of any shape. bits: 2..8; qmax = 2**(bits-1) - 1.
    axis=None: one scale for the whole tensor. axis=a: one scale per index
    along axis a (PyTorch's per-channel axis), taken over all the other axes;
    for a (D, F) weight, axis=1 gives one scale per output column.

    Returns q, int8 codes in [-qmax, qmax] with x's shape, and scale =
    max|x| / qmax (over the whole tensor or the slice), in x's float dtype,
    shaped to broadcast against x: () for axis=None, else x.shape with every
    axis but `axis` set to 1. A slice of zeros gets scale 0 and codes 0.
    Codes are round(x / scale), half to even, clamped to [-qmax, qmax].
    """
    raise NotImplementedError


def dequantize_symmetric(q, scale) -> np.ndarray:
    """The float values the codes stand for: q * scale.

    q: integer codes, any shape. scale: a float broadcasting against q (as
    returned by quantize_symmetric). Returns an array of q's shape in
    scale's float dtype.
    """
    raise NotImplementedError


def quantize_affine(x, bits: int, axis: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Affine (asymmetric) uniform quantization, PyTorch's convention:
    x ~= (q - zero_point) * scale with codes in [0, 2**bits - 1].

    x: float array of any shape. bits: 2..8; qmax = 2**bits - 1.
    axis: as in quantize_symmetric (None: per tensor; a: one scale and zero
    point per index along axis a).

    The range is widened to hold 0: min_neg = min(min x, 0), max_pos =
    max(max x, 0). scale = (max_pos - min_neg) / qmax, zero_point =
    clamp(round(-min_neg / scale), 0, qmax), q = clamp(round(x / scale) +
    zero_point, 0, qmax), rounding half to even. 0.0 comes back exactly. A
    slice of zeros gets scale 0, zero point 0 and codes 0.

    Returns q (uint8, x's shape), scale (x's float dtype) and zero_point
    (int64), both shaped to broadcast against x as in quantize_symmetric.
    """
    raise NotImplementedError


def dequantize_affine(q, scale, zero_point) -> np.ndarray:
    """The float values the codes stand for: (q - zero_point) * scale.

    q: integer codes, any shape; scale (float) and zero_point (integer)
    broadcast against q. Returns an array of q's shape in scale's float dtype.
    """
    raise NotImplementedError


def quantize_grouped(x, bits: int, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Grouped symmetric quantization: one scale per run of G = group_size
    consecutive values along the last axis.

    x: float array (..., L) with G dividing L (else ValueError naming both).
    bits: 2..8; qmax = 2**(bits-1) - 1.

    Returns q, int8 codes in [-qmax, qmax] of shape (..., L), and scales
    (..., L // G) in x's float dtype: scale = max|group| / qmax, codes
    round(x / scale) half to even (here as x * (qmax / max|group|), taken
    in float32 for float16 x, where qmax / max|group| can pass float16's
    65504), clamped. A group of zeros gets scale 0 and codes 0. Vectorized:
    no Python loop over groups.
    """
    raise NotImplementedError


def dequantize_grouped(q, scales, group_size: int) -> np.ndarray:
    """The float values grouped codes stand for.

    q: integer codes (..., L); scales: float (..., L // G); group_size: G.
    Returns q * scale of its group, shape (..., L), in scales' float dtype.
    Raises ValueError for a scalar q or scales of another shape.
    """
    raise NotImplementedError


def pack_int4(q) -> np.ndarray:
    """Two signed 4-bit codes per byte.

    q: integer codes (N,) in [-8, 7] (else ValueError). Element 2i goes to the
    low nibble and 2i+1 to the high nibble of byte i, each as 4-bit two's
    complement; an odd N is padded with one zero code.
    Returns uint8 (ceil(N / 2),).
    """
    raise NotImplementedError


def unpack_int4(packed, n: int) -> np.ndarray:
    """The n signed 4-bit codes that pack_int4 packed.

    packed: uint8 (ceil(n / 2),); n: number of codes. Returns int8 (n,) in [-8, 7].
    Raises ValueError unless packed is 1-D uint8 and ceil(n / 2) equals its size.
    """
    raise NotImplementedError


def quantize_q8_0(x) -> bytes:
    """llama.cpp's Q8_0, bit for bit.

    x: float (N,) with N a multiple of 32, taken as float32. Per block of 32:
    d = max|x| / 127 and id = 1/d (0 when d is 0), in float32; codes
    round(x * id), halves away from zero, as int8. A block is d as
    little-endian fp16 (2 bytes) then the 32 codes: 34 bytes.
    Returns bytes of length N / 32 * 34.
    """
    raise NotImplementedError


def dequantize_q8_0(data: bytes, n: int) -> np.ndarray:
    """The n float32 values (n,) that Q8_0 bytes stand for: code * d."""
    raise NotImplementedError


def quantize_q4_0(x) -> bytes:
    """llama.cpp's Q4_0, bit for bit.

    x: float (N,) with N a multiple of 32, taken as float32. Per block of 32:
    m = the value of largest magnitude, sign kept (the first one on a tie);
    d = m / -8 and id = 1/d (0 when d is 0), in float32; code q =
    min(15, floor(x * id + 8.5)) in [0, 15]. A block is d as little-endian
    fp16 (2 bytes) then 16 bytes, byte j holding code j in its low nibble
    and code j + 16 in its high nibble: 18 bytes. A block of zeros gets
    d = 0 / -8 = -0.0 (fp16 bytes 00 80) and codes 8, as in llama.cpp.
    Returns bytes of length N / 32 * 18.
    """
    raise NotImplementedError


def dequantize_q4_0(data: bytes, n: int) -> np.ndarray:
    """The n float32 values (n,) that Q4_0 bytes stand for: (q - 8) * d."""
    raise NotImplementedError


def quantize_model(model: Model, bits: int, group_size: int = 32) -> Model:
    """A copy of model whose linear weights are grouped-quantized then
    dequantized: the model you would get by shipping them in `bits` bits.

    Quantized: every weight whose name ends in wq, wk, wv, wo, w_gate, w_up,
    w_down (each expert's too), router or out. Each is split into groups of
    G = group_size consecutive values along its input axis (axis -2, the one
    the matmul sums over, as llama.cpp's rows are) and replaced by
    dequantize(quantize_grouped(...)). G must divide every input width (D,
    F), else ValueError naming the weight.
    Left in float: the norms, and tok_emb, the embedding table, which is a
    lookup (each token reads one row, not all of them), not a matmul.

    model is untouched; returns a new Model with the same config.
    """
    raise NotImplementedError


def bits_per_weight(bits: int, group_size: int, scale_bytes: int = 2) -> float:
    """True storage cost of grouped quantization, scales included:
    bits + 8 * scale_bytes / group_size bits per weight.

    4.5 for bits=4, group_size=32 (llama.cpp's Q4_0: 18 bytes per 32 weights);
    8.5 for bits=8 (Q8_0). bits: 2..8; group_size: positive int; scale_bytes:
    bytes of one scale, a non-negative int (2 for fp16). Raises ValueError
    for any of them outside those ranges.
    """
    raise NotImplementedError


def calibrate(x, bits: int, method: str = "minmax", *, percentile: float = 99.9, grid: int = 100):
    """The symmetric per-tensor scale a calibration method picks for x at `bits` bits.

    The scale is used as quantize_symmetric's own: codes = clip(round(x /
    scale), -qmax, qmax), half to even, qmax = 2**(bits-1) - 1, and x ~=
    codes * scale (dequantize_symmetric). A scale below max|x| / qmax clips
    the values beyond qmax * scale to the largest code and spends the codes
    on the rest; a scale of 0 codes everything 0.

    x: float array of any shape holding at least one value. bits: 2..8.
    method:
    - "minmax": max|x| / qmax, quantize_symmetric's scale for axis=None.
    - "percentile": np.percentile(|x|, percentile) / qmax, NumPy's default
      linear interpolation between the sorted |x| (rank (N - 1) *
      percentile / 100); percentile in (0, 100], 100 giving minmax.
    - "mse": c / qmax for the clip c among the grid candidates c_i =
      max|x| * (i / grid), i = 1..grid, whose squared error sum((codes_i *
      s_i - x)**2), s_i = c_i / qmax, is the smallest, the larger clip on
      a tie. c_grid = max|x| is minmax's clip, so mse is never worse.
    An all-zero x gives scale 0 for every method (so does "percentile"
    where that percentile of |x| is 0).

    Everything is computed in float64 (on x.astype(np.float64): max|x|,
    the percentile, c_i = max|x| * (i / grid), codes and errors); returns the
    scale as a NumPy scalar of x's float dtype (np.float32 for float32 x).

    Raises ValueError, naming what was wrong and what is allowed, for bits
    outside 2..8, a method other than the three, percentile not a number in
    (0, 100] or grid not a positive int (both checked whatever the method),
    and an x that is empty, not floating point, or holds NaN or inf.
    """
    raise NotImplementedError


def layer_sensitivity(model: Model, tokens, bits: int, *, group_size: int = 32) -> dict[str, float]:
    """How far the model's predictions move when one weight matrix alone is quantized.

    For every linear weight of model (the names quantize_model quantizes, in
    the order of model.weights; an expert stack (E, in, out) is one weight):
    the mean over the T positions of tokens (T,) of KL(p || q) in nats, p the
    float model's next-token distribution and q that of a copy with only that
    weight grouped-quantized at `bits` in groups of group_size along its input
    axis, as quantize_model does, every other weight left in float. Both
    distributions are taken in float64 from the float32 logits (a log-softmax).

    Returns {name: KL} as Python floats, each >= 0 up to rounding. model is
    untouched. Raises ValueError for a model that is no Model, bits outside
    2..8, a group_size that is not a positive int or does not divide a
    weight's input width (naming the weight), and tokens the model rejects.
    """
    raise NotImplementedError


def mixed_precision_plan(
    sensitivity, sizes, budget_bytes, *, choices=PLAN_CHOICES, group_size: int = 32
) -> dict[str, int]:
    """Bits per weight matrix, from `choices`, spending a byte budget where it buys the most.

    sensitivity: {bits: {name: KL}} for every bits of choices, each a
    layer_sensitivity measurement at that width, naming exactly the weights
    of sizes. sizes: {name: number of values}, each a positive multiple of
    group_size. budget_bytes: a finite number. choices: distinct ints from
    2 to 8 (any order). A weight of n values at b bits costs n * b / 8 bytes
    of codes plus an fp16 scale per group, 2 * n / group_size (as
    Work.weight_bytes_at counts it at bits_per_weight(b, group_size)).

    Every weight starts at the smallest choice. Then, while some upgrade fits,
    one is made: a weight at choice b moves to the next larger choice b',
    for extra bytes n * (b' - b) / 8, where the total stays within
    budget_bytes; of those that fit, the one whose drop in measured
    sensitivity per extra byte, (sensitivity[b][name] -
    sensitivity[b'][name]) / extra, is the largest (ties: the name that sorts
    first; a negative drop is taken only when nothing better fits). It stops
    when no upgrade fits.

    Returns {name: bits} in the order of sizes. Raises ValueError, naming the
    least budget (the bytes of every weight at the smallest choice), for a
    budget below it; and for choices, sizes, sensitivity or budget_bytes that
    break the rules above, or a group_size that is not a positive int.
    """
    raise NotImplementedError


def quantize_model_mixed(model: Model, plan, *, group_size: int = 32) -> Model:
    """A copy of model whose every linear weight is grouped-quantized (then
    dequantized) at the bits the plan gives it, as quantize_model does at one width.

    plan: {name: bits} naming exactly the linear weights of model (those
    quantize_model quantizes), each bits an int from 2 to 8, as
    mixed_precision_plan returns it. Norms and tok_emb stay in float. model
    is untouched; returns a new Model with the same config. Raises
    ValueError for a model that is no Model, a plan that misses or adds a
    name (naming it) or gives bits outside 2..8, and a group_size that is
    not a positive int or does not divide a weight's input width.
    """
    raise NotImplementedError


def activation_scales(x, alpha) -> np.ndarray:
    """AWQ's per-input-channel scales: how salient each channel of the activations is.

    x: float activations (N, D), N >= 1, finite. alpha: a number in [0, 1].
    Per channel j, m_j = mean over the N rows of |x[:, j]| (floored at
    MIN_MEAN, so a channel of zeros still gets a positive scale), and
    s_j = m_j ** alpha, divided by the geometric mean of all D of them,
    exp(mean(log s)), so that the scales' geometric mean is 1 (alpha = 0
    gives all ones). Computed and returned in float64: s (D,).

    Raises ValueError for an x that is not 2-D with a row, not floating
    point or not finite, and an alpha that is not a number in [0, 1].
    """
    raise NotImplementedError


def awq_quantize(w, x, bits: int, *, group_size: int = 32, alphas=ALPHAS):
    """Activation-aware grouped quantization of one weight matrix (AWQ).

    w: float weight (D, F), input axis first as the model's x @ w. x: float
    activations (N, D) that reach it. bits: 2..8. group_size: G dividing D;
    groups run along the input axis, as quantize_model's. alphas: a
    non-empty sequence of numbers in [0, 1] (default 20 evenly spaced from 0
    to 1, ALPHAS).

    For each alpha: s = activation_scales(x, alpha); the scaled weight
    w * s[:, None] is grouped-quantized and dequantized (dq), and it takes
    x / s as its input, so the pair computes (x / s) @ dq. The alpha whose
    output error sum(((x / s) @ dq - x @ w) ** 2), in float64, is the
    smallest is kept (ties: the smaller alpha). alpha = 0 is plain grouped quantization, so with 0 among
    alphas the error is never above it.

    Returns (w_hat, s, alpha): the effective weight w_hat = dq / s[:, None]
    (D, F) in w's dtype, so that x @ w_hat is what the scaled pair computes;
    the scales s (D,), float64; alpha, a Python float. Raises ValueError for
    a w or x that is not 2-D floating point and finite (x with a row), x's
    width not D, bad bits, a group_size that is not a positive int dividing
    D, and alphas that are not a non-empty sequence of numbers in [0, 1].
    """
    raise NotImplementedError


def quantize_model_awq(model: Model, calib_tokens, bits: int, *, group_size: int = 32) -> Model:
    """A copy of model with every linear weight quantized activation-aware (AWQ) at `bits`.

    The activations are the float model's on calib_tokens (T,), one forward
    pass. Each linear weight gets awq_quantize's search (the default alphas)
    on the activations that reach it:
    - q|k|v of a layer, one search on wq | wk | wv side by side, on the normed
      residual before them; the router and every expert's w_gate and w_up
      (of a dense MLP, w_gate and w_up), one search side by side, on the normed
      residual before the MLP; out on the final normed residual. The inverse
      scale is folded into the RMSNorm gain before them (attn_norm, mlp_norm,
      norm become gain / s), and each weight is stored as its scaled weight
      w * s[:, None] quantized and dequantized: the model computes (h / s) @ dq.
    - wo on the attention output before it, and w_down on the SwiGLU product
      silu(h @ w_gate) * (h @ w_up) before it (an expert's on the rows routed
      to it by the float router; an expert no row reaches gets plain grouped
      quantization). No norm precedes them: each is stored as awq_quantize's
      w_hat, the inverse scale folded into the weight.
    tok_emb stays in float. model is untouched; returns a new Model, same config.

    Raises ValueError for a model that is no Model, bits outside 2..8, a
    group_size that is not a positive int or does not divide a weight's input
    width (naming it), and calib_tokens the model rejects.
    """
    raise NotImplementedError
