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


def _check_bits(bits) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 2 <= bits <= 8:
        raise ValueError(f"bits must be an int from 2 to 8, got {bits!r}")
    return int(bits)


def _check_floats(x, what: str = "x") -> np.ndarray:
    """x as a float array, or a ValueError if it is not floating point or not finite."""
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(
            f"{what} must be a floating-point array, got dtype {arr.dtype}; convert it with .astype(np.float32)"
        )
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr.ravel()))[0])
        raise ValueError(f"{what} holds {arr.ravel()[bad]} at flat index {bad}; only finite values can be quantized")
    return arr


def _check_axis(axis, ndim: int) -> int | None:
    if axis is None:
        return None
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"axis must be None or an int in [{-ndim}, {ndim}) for a {ndim}-D input, got {axis!r}")
    return int(axis) % ndim


def _reduce_axes(ndim: int, axis: int | None) -> tuple[int, ...]:
    """The axes a scale is taken over: all of them, or all but `axis`."""
    return tuple(a for a in range(ndim) if a != axis)


def _check_group_size(group_size, length: int) -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if length % group_size:
        raise ValueError(f"group_size {group_size} does not divide the last axis of length {length}")
    return int(group_size)


def _group_max(a: np.ndarray) -> np.ndarray:
    """The max over the last axis of a (..., G), shape (...); NaN where a row holds one.

    One np.maximum.reduceat over the flat array: np.max(a, axis=-1) pays a fixed
    cost per row, which for rows as short as G = 32 takes twice as long."""
    flat = a.reshape(-1)
    return np.maximum.reduceat(flat, np.arange(0, flat.size, a.shape[-1])).reshape(a.shape[:-1])


def _check_codes(q, what: str = "q") -> np.ndarray:
    arr = np.asarray(q)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must be an integer array of codes, got dtype {arr.dtype}")
    return arr


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
    bits = _check_bits(bits)
    x = _check_floats(x)
    axis = _check_axis(axis, x.ndim)
    qmax = 2 ** (bits - 1) - 1
    amax = np.max(np.abs(x), axis=_reduce_axes(x.ndim, axis), keepdims=axis is not None)
    scale = (amax / qmax).astype(x.dtype)
    safe = np.where(scale > 0, scale, 1).astype(x.dtype)  # a zero slice divides by 1: codes 0, never NaN
    q = np.clip(np.round(x / safe), -qmax, qmax).astype(np.int8)
    return q, scale


def dequantize_symmetric(q, scale) -> np.ndarray:
    """The float values the codes stand for: q * scale.

    q: integer codes, any shape. scale: a float broadcasting against q (as
    returned by quantize_symmetric). Returns an array of q's shape in
    scale's float dtype.
    """
    q = _check_codes(q)
    scale = _check_floats(scale, "scale")
    return (q * scale).astype(scale.dtype)


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
    bits = _check_bits(bits)
    x = _check_floats(x)
    axis = _check_axis(axis, x.ndim)
    qmax = 2**bits - 1
    axes = _reduce_axes(x.ndim, axis)
    keep = axis is not None
    min_neg = np.minimum(np.min(x, axis=axes, keepdims=keep), 0)
    max_pos = np.maximum(np.max(x, axis=axes, keepdims=keep), 0)
    scale = ((max_pos - min_neg) / qmax).astype(x.dtype)
    safe = np.where(scale > 0, scale, 1).astype(x.dtype)
    zero_point = np.clip(np.round(-min_neg / safe), 0, qmax).astype(np.int64)
    q = np.clip(np.round(x / safe) + zero_point, 0, qmax).astype(np.uint8)
    return q, scale, zero_point


def dequantize_affine(q, scale, zero_point) -> np.ndarray:
    """The float values the codes stand for: (q - zero_point) * scale.

    q: integer codes, any shape; scale (float) and zero_point (integer)
    broadcast against q. Returns an array of q's shape in scale's float dtype.
    """
    q = _check_codes(q)
    zero_point = _check_codes(zero_point, "zero_point")
    scale = _check_floats(scale, "scale")
    # Subtract in a signed type: uint8 codes minus a zero point would wrap around.
    return ((q.astype(np.int64) - zero_point) * scale).astype(scale.dtype)


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
    bits = _check_bits(bits)
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("x must have at least one axis to group along, got a scalar")
    group_size = _check_group_size(group_size, x.shape[-1])
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"x must be a floating-point array, got dtype {x.dtype}; convert it with .astype(np.float32)")
    qmax = 2 ** (bits - 1) - 1
    # float16 works in float32: its qmax / max|group| overflows to inf once max|group| < qmax / 65504.
    work = np.promote_types(x.dtype, np.float32)
    groups = x.reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)  # (..., L // G, G)
    q = np.abs(groups, order="C", dtype=work)  # (..., L // G, G): |x| for the scales, then the codes in place
    amax = _group_max(q)  # (..., L // G); NaN or inf anywhere shows up here
    if not np.all(np.isfinite(amax)):
        _check_floats(x)  # names the first bad value
    scales = (amax / qmax).astype(x.dtype)
    inv = np.divide(qmax, amax, out=np.zeros_like(amax), where=amax > 0)  # 1/scale, 0 for a zero group
    np.multiply(groups, inv[..., None], out=q)
    np.round(q, out=q)
    codes = np.clip(q, -qmax, qmax, out=np.empty(q.shape, np.int8), casting="unsafe")  # clamped, cast to int8
    return codes.reshape(x.shape), scales


def dequantize_grouped(q, scales, group_size: int) -> np.ndarray:
    """The float values grouped codes stand for.

    q: integer codes (..., L); scales: float (..., L // G); group_size: G.
    Returns q * scale of its group, shape (..., L), in scales' float dtype.
    Raises ValueError for a scalar q or scales of another shape.
    """
    q = _check_codes(q)
    scales = _check_floats(scales, "scales")
    if q.ndim == 0:
        raise ValueError("q must have at least one axis, got a scalar")
    group_size = _check_group_size(group_size, q.shape[-1])
    n_groups = q.shape[-1] // group_size
    if scales.shape != q.shape[:-1] + (n_groups,):
        raise ValueError(
            f"scales must have shape {q.shape[:-1] + (n_groups,)} (one per group of {group_size}), got {scales.shape}"
        )
    groups = q.reshape(*q.shape[:-1], n_groups, group_size)
    return (groups * scales[..., None]).astype(scales.dtype).reshape(q.shape)


def pack_int4(q) -> np.ndarray:
    """Two signed 4-bit codes per byte.

    q: integer codes (N,) in [-8, 7] (else ValueError). Element 2i goes to the
    low nibble and 2i+1 to the high nibble of byte i, each as 4-bit two's
    complement; an odd N is padded with one zero code.
    Returns uint8 (ceil(N / 2),).
    """
    q = _check_codes(q)
    if q.ndim != 1:
        raise ValueError(f"q must be a 1-D array of codes (N,), got shape {q.shape}")
    if q.size and (q.min() < -8 or q.max() > 7):
        bad = int(np.flatnonzero((q < -8) | (q > 7))[0])
        raise ValueError(f"code {int(q[bad])} at index {bad} does not fit in 4 signed bits [-8, 7]")
    nibbles = (q.astype(np.int64) & 0xF).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return nibbles[0::2] | (nibbles[1::2] << 4)


def unpack_int4(packed, n: int) -> np.ndarray:
    """The n signed 4-bit codes that pack_int4 packed.

    packed: uint8 (ceil(n / 2),); n: number of codes. Returns int8 (n,) in [-8, 7].
    Raises ValueError unless packed is 1-D uint8 and ceil(n / 2) equals its size.
    """
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim != 1:
        raise ValueError(f"packed must be a 1-D uint8 array, got shape {packed.shape} dtype {packed.dtype}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 or (n + 1) // 2 != packed.size:
        raise ValueError(f"n must be an int with ceil(n / 2) = {packed.size} (the bytes given), got {n!r}")
    nibbles = np.empty(2 * packed.size, dtype=np.int8)
    nibbles[0::2] = packed & 0xF
    nibbles[1::2] = packed >> 4
    return np.where(nibbles > 7, nibbles - 16, nibbles).astype(np.int8)[:n]


def _blocks(x) -> np.ndarray:
    """x (N,) as float32 blocks (N // 32, 32), or a ValueError. A NaN or inf is left
    for _fp16_scales to find, in the scale of its block."""
    arr = np.asarray(x)
    if not np.issubdtype(arr.dtype, np.floating) or arr.ndim != 1 or arr.size % BLOCK:
        _check_floats(arr)  # a wrong dtype, then a NaN or inf, is named before the shape
        raise ValueError(f"x must be a 1-D array whose length is a multiple of {BLOCK}, got shape {arr.shape}")
    return arr.astype(np.float32, copy=False).reshape(-1, BLOCK)


def _inverse(d: np.ndarray) -> np.ndarray:
    """1/d in float32, 0 where d is 0 (llama.cpp's `id = d ? 1.0f/d : 0.0f`)."""
    return np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)


def _fp16_scales(d: np.ndarray, x) -> np.ndarray:
    """d (n_blocks, 1) float32 as little-endian fp16, its two bytes viewed as one
    uint16 (n_blocks,), or a ValueError: naming the first NaN or inf of x (which
    made its block's d NaN or inf), else saying that a d overflows fp16."""
    if not np.all(np.abs(d) <= np.finfo(np.float16).max):  # NaN fails this too
        _check_floats(x)
        raise ValueError("a block's scale overflows fp16; values this large (|x| > ~8e6) do not fit these formats")
    return d.astype("<f2").view(np.uint16)[:, 0]


def _split_blocks(data, n, block_bytes: int) -> np.ndarray:
    """data as uint8 blocks (n // 32, block_bytes), or a ValueError."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 or n % BLOCK:
        raise ValueError(f"n must be a non-negative multiple of {BLOCK}, got {n!r}")
    if not isinstance(data, (bytes, bytearray, memoryview)) and getattr(data, "dtype", None) != np.uint8:
        raise ValueError(f"data must be bytes, got {type(data).__name__}")  # bytes(34) would be 34 zero bytes
    raw = np.frombuffer(bytes(data), dtype=np.uint8)
    if raw.size != n // BLOCK * block_bytes:
        raise ValueError(
            f"{n} values take {n // BLOCK * block_bytes} bytes ({block_bytes} per block of {BLOCK}), got {raw.size}"
        )
    return raw.reshape(-1, block_bytes)


def quantize_q8_0(x) -> bytes:
    """llama.cpp's Q8_0, bit for bit.

    x: float (N,) with N a multiple of 32, taken as float32. Per block of 32:
    d = max|x| / 127 and id = 1/d (0 when d is 0), in float32; codes
    round(x * id), halves away from zero, as int8. A block is d as
    little-endian fp16 (2 bytes) then the 32 codes: 34 bytes.
    Returns bytes of length N / 32 * 34.
    """
    blocks = _blocks(x)  # (n_blocks, 32)
    a = np.abs(blocks)  # (n_blocks, 32): |x| for d, then |x| * id in place
    d = _group_max(a)[:, None] / np.float32(127)  # (n_blocks, 1)
    scales = _fp16_scales(d, x)
    # C's roundf(x * id), halves away from zero, exactly: trunc(|x| * id + 0.49999997) with the
    # sign of x (id >= 0), 0.49999997 being the float32 below 0.5 (adding 0.5 would carry 0.49999997
    # up to 1). The identity holds for every float32; the cast to int8 is the trunc.
    a *= _inverse(d)
    a += np.nextafter(np.float32(0.5), np.float32(0))
    np.copysign(a, blocks, out=a)
    out = np.empty((len(blocks), Q8_0_BYTES // 2), np.uint16)  # (n_blocks, 17): the bytes of each block
    out[:, 0] = scales
    out[:, 1:] = a.astype(np.int8).view(np.uint16)
    return out.tobytes()


def dequantize_q8_0(data: bytes, n: int) -> np.ndarray:
    """The n float32 values (n,) that Q8_0 bytes stand for: code * d."""
    blocks = _split_blocks(data, n, Q8_0_BYTES)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)  # (n_blocks, 1)
    codes = blocks[:, 2:].view(np.int8).astype(np.float32)  # (n_blocks, 32)
    return (codes * d).reshape(n)


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
    blocks = _blocks(x)  # (n_blocks, 32)
    v = np.abs(blocks)  # (n_blocks, 32): |x| for m, then x * id + 8.5 in place
    first = np.argmax(v, axis=1)[:, None]  # argmax keeps the first of equal magnitudes
    d = np.take_along_axis(blocks, first, axis=1) / np.float32(-8)  # (n_blocks, 1)
    scales = _fp16_scales(d, x)
    np.multiply(blocks, _inverse(d), out=v)
    v += np.float32(8.5)  # now above 0.49 (|x * id| <= 8 up to rounding), so the cast to uint8 floors
    # min(15, floor(v)) as uint8, by np.clip: numpy's np.minimum against a scalar is slower
    codes = np.clip(v, -np.inf, 15, out=np.empty(v.shape, np.uint8), casting="unsafe")
    out = np.empty((len(blocks), Q4_0_BYTES // 2), np.uint16)  # (n_blocks, 9): the bytes of each block
    out[:, 0] = scales
    # Pack through 64-bit words of 8 codes: words 0-1 of a block hold codes 0-15, words 2-3 codes
    # 16-31, and every code being below 16, shifting a word by 4 moves each into its byte's high
    # nibble. A column at a time, as numpy pays a fixed cost per row of a (n_blocks, 2) slice.
    words = codes.view(np.uint64)  # (n_blocks, 4)
    packed = out[:, 1:].view(np.uint64)  # (n_blocks, 2): the 16 code bytes of each block (unaligned)
    for k in (0, 1):
        np.bitwise_or(words[:, k], words[:, k + 2] << 4, out=packed[:, k])
    return out.tobytes()


def dequantize_q4_0(data: bytes, n: int) -> np.ndarray:
    """The n float32 values (n,) that Q4_0 bytes stand for: (q - 8) * d."""
    blocks = _split_blocks(data, n, Q4_0_BYTES)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)  # (n_blocks, 1)
    packed = blocks[:, 2:]
    codes = np.concatenate([packed & 0xF, packed >> 4], axis=1).astype(np.float32)  # (n_blocks, 32)
    return ((codes - 8) * d).reshape(n)


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
    bits = _check_bits(bits)
    group_size = _check_model(model, group_size)
    out = model.copy()
    for name in _linear_names(out, group_size):
        out.weights[name] = _grouped_weight(out.weights[name], bits, group_size)
    return out


def _check_model(model, group_size) -> int:
    """group_size as an int, or a ValueError for a model that is no Model or a bad group_size."""
    if not isinstance(model, Model):
        raise ValueError(f"model must be a reference.model.Model, got {type(model).__name__}")
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    return int(group_size)


def _linear_names(model: Model, group_size: int) -> list[str]:
    """The names of model's linear weights, in its order, or a ValueError naming
    the first whose input width group_size does not divide."""
    names = [name for name in model.weights if name.split(".")[-1] in LINEAR_WEIGHTS]
    for name in names:
        width = model.weights[name].shape[-2]
        if width % group_size:
            raise ValueError(f"group_size {group_size} does not divide the input width {width} of weight {name!r}")
    return names


def _grouped_weight(w: np.ndarray, bits: int, group_size: int) -> np.ndarray:
    """w (..., in, out) grouped-quantized along its input axis and dequantized, in w's dtype."""
    rows = np.swapaxes(w, -1, -2)  # (..., out, in): groups run along the input axis
    q, scales = quantize_grouped(rows, bits, group_size)
    return np.swapaxes(dequantize_grouped(q, scales, group_size), -1, -2).copy()


def bits_per_weight(bits: int, group_size: int, scale_bytes: int = 2) -> float:
    """True storage cost of grouped quantization, scales included:
    bits + 8 * scale_bytes / group_size bits per weight.

    4.5 for bits=4, group_size=32 (llama.cpp's Q4_0: 18 bytes per 32 weights);
    8.5 for bits=8 (Q8_0). bits: 2..8; group_size: positive int; scale_bytes:
    bytes of one scale, a non-negative int (2 for fp16). Raises ValueError
    for any of them outside those ranges.
    """
    bits = _check_bits(bits)
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    if isinstance(scale_bytes, bool) or not isinstance(scale_bytes, (int, np.integer)) or scale_bytes < 0:
        raise ValueError(f"scale_bytes must be a non-negative int, got {scale_bytes!r}")
    return bits + 8 * scale_bytes / group_size


def _check_method(method) -> str:
    if not isinstance(method, str) or method not in CALIBRATIONS:
        raise ValueError(f"method must be one of {', '.join(map(repr, CALIBRATIONS))}, got {method!r}")
    return method


def _check_percentile(percentile) -> float:
    if (
        isinstance(percentile, bool)
        or not isinstance(percentile, (int, float, np.integer, np.floating))
        or not 0 < percentile <= 100
    ):
        raise ValueError(f"percentile must be a number in (0, 100], got {percentile!r}")
    return float(percentile)


def _squared_errors(x: np.ndarray, clips: np.ndarray, qmax: int) -> np.ndarray:
    """sum((codes * s - x)**2) at each scale s = c / qmax, c > 0 in clips (n,), for x (N,) float64.

    Taken on |x| (rounding half to even and the clamp are symmetric, so x and -x err alike; the
    caller may pass |x| itself), through one buffer reused for every clip."""
    a = np.abs(x)
    buf = np.empty_like(a)
    errors = np.empty(len(clips))
    for k, c in enumerate(clips):
        s = c / qmax
        np.divide(a, s, out=buf)
        np.round(buf, out=buf)
        np.minimum(buf, qmax, out=buf)
        buf *= s
        buf -= a
        errors[k] = buf @ buf
    return errors


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
    bits = _check_bits(bits)
    method = _check_method(method)
    percentile = _check_percentile(percentile)
    if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)) or grid < 1:
        raise ValueError(f"grid must be a positive int (the number of candidate clips), got {grid!r}")
    x = _check_floats(x)
    if x.size == 0:
        raise ValueError("x must hold at least one value to calibrate on, got an empty array")
    qmax = 2 ** (bits - 1) - 1
    a = np.abs(x.astype(np.float64)).ravel()  # (N,)
    amax = float(np.max(a))
    if method == "minmax" or amax == 0:
        clip = amax
    elif method == "percentile":
        clip = float(np.percentile(a, percentile))
    else:
        clips = amax * (np.arange(1, int(grid) + 1) / int(grid))  # (grid,); i / grid = 1.0 ends it on max|x|
        errors = _squared_errors(a, clips, qmax)
        clip = clips[np.flatnonzero(errors == errors.min())[-1]]  # the larger clip wins a tie
    return x.dtype.type(clip / qmax)


def _log_probs(model: Model, tokens) -> np.ndarray:
    """log softmax of model's logits for tokens, in float64: (T, V)."""
    logits = model.forward(tokens).astype(np.float64)
    logits -= logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


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
    bits = _check_bits(bits)
    group_size = _check_model(model, group_size)
    names = _linear_names(model, group_size)
    tokens = model.check_tokens(tokens)
    probe = model.copy()
    p_log = _log_probs(probe, tokens)
    p = np.exp(p_log)
    out = {}
    for name in names:
        original = probe.weights[name]
        probe.weights[name] = _grouped_weight(original, bits, group_size)
        kl = np.sum(p * (p_log - _log_probs(probe, tokens)), axis=-1)  # (T,)
        probe.weights[name] = original  # the very view it was: the model's side-by-side weights stay joined
        out[name] = float(np.mean(kl))
    return out


def _check_choices(choices) -> tuple[int, ...]:
    if not isinstance(choices, (tuple, list)) or not choices:
        raise ValueError(f"choices must be a non-empty tuple of bit widths from 2 to 8, got {choices!r}")
    widths = tuple(_check_bits(b) for b in choices)
    if len(set(widths)) != len(widths):
        raise ValueError(f"choices must not repeat a bit width, got {choices!r}")
    return tuple(sorted(widths))


def _check_plan_inputs(sensitivity, sizes, budget_bytes, choices, group_size) -> None:
    """A ValueError for the first input of mixed_precision_plan that breaks its docstring."""
    if not isinstance(sizes, dict) or not sizes:
        raise ValueError("sizes must be a non-empty dict {weight name: number of values}")
    for name, n in sizes.items():
        if not isinstance(name, str):
            raise ValueError(f"sizes must be named by str, got the name {name!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 or n % group_size:
            raise ValueError(f"sizes[{name!r}] must be a positive multiple of group_size {group_size}, got {n!r}")
    if not isinstance(sensitivity, dict):
        raise ValueError("sensitivity must be a dict {bits: {weight name: KL}}, one entry per bit width of choices")
    for bits in choices:
        measured = sensitivity.get(bits)
        if not isinstance(measured, dict) or set(measured) != set(sizes):
            raise ValueError(f"sensitivity[{bits}] must be a dict with exactly the names of sizes")
        for name, kl in measured.items():
            if isinstance(kl, bool) or not isinstance(kl, (int, float, np.integer, np.floating)) or not np.isfinite(kl):
                raise ValueError(f"sensitivity[{bits}][{name!r}] must be a finite number, got {kl!r}")
    if (
        isinstance(budget_bytes, bool)
        or not isinstance(budget_bytes, (int, float, np.integer, np.floating))
        or not np.isfinite(budget_bytes)
    ):
        raise ValueError(f"budget_bytes must be a finite number of bytes, got {budget_bytes!r}")


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
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size must be a positive int, got {group_size!r}")
    choices = _check_choices(choices)
    _check_plan_inputs(sensitivity, sizes, budget_bytes, choices, group_size)
    # Counted in bits, integers: n * b + 16 * n / G is exact, and so is every comparison with 8 * budget.
    budget_bits = 8 * float(budget_bytes)
    plan = dict.fromkeys(sizes, choices[0])
    spent = sum(int(n) * choices[0] + 16 * int(n) // group_size for n in sizes.values())
    if spent > budget_bits:
        raise ValueError(
            f"budget_bytes {budget_bytes} is below the least budget, {spent / 8:g} bytes: every weight at "
            f"{choices[0]} bits, the smallest choice"
        )
    while True:
        best = None  # (gain, name, next bits, extra bits)
        for name in sorted(sizes):
            i = choices.index(plan[name])
            if i + 1 == len(choices):
                continue
            up = choices[i + 1]
            extra = int(sizes[name]) * (up - plan[name])
            if spent + extra > budget_bits:
                continue
            gain = (float(sensitivity[plan[name]][name]) - float(sensitivity[up][name])) / (extra / 8)
            if best is None or gain > best[0]:
                best = (gain, name, up, extra)
        if best is None:
            return plan
        _, name, plan[name], extra = best
        spent += extra


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
    group_size = _check_model(model, group_size)
    names = _linear_names(model, group_size)
    if not isinstance(plan, dict):
        raise ValueError(f"plan must be a dict {{weight name: bits}}, got {type(plan).__name__}")
    missing, extra = [n for n in names if n not in plan], sorted(set(plan) - set(names), key=str)
    if missing or extra:
        raise ValueError(
            f"plan must name exactly the model's linear weights: missing {missing[:3]}, not linear weights {extra[:3]}"
        )
    widths = {name: _check_bits(plan[name]) for name in names}
    out = model.copy()
    for name in names:
        out.weights[name] = _grouped_weight(out.weights[name], widths[name], group_size)
    return out


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


def _check_activations(x, what: str = "x") -> np.ndarray:
    x = _check_floats(x, what)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{what} must be activations (N, D) with at least one row, got shape {x.shape}")
    return x


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
    alpha = _check_alpha(alpha)
    x = _check_activations(x)
    mean = np.maximum(np.mean(np.abs(x.astype(np.float64)), axis=0), MIN_MEAN)  # (D,)
    log_s = alpha * np.log(mean)
    return np.exp(log_s - np.mean(log_s))


def _check_alphas(alphas) -> tuple[float, ...]:
    if not isinstance(alphas, (tuple, list, np.ndarray)) or np.ndim(alphas) != 1 or len(alphas) == 0:
        raise ValueError(f"alphas must be a non-empty sequence of numbers in [0, 1], got {alphas!r}")
    return tuple(_check_alpha(a) for a in np.asarray(alphas).tolist())


def _scaled_grouped(w: np.ndarray, s: np.ndarray, bits: int, group_size: int) -> np.ndarray:
    """w * s[:, None] (in, out) grouped-quantized along its input axis and dequantized, float64."""
    return _grouped_weight(w.astype(np.float64) * s[:, None], bits, group_size)


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
    bits = _check_bits(bits)
    w = _check_floats(w, "w")
    x = _check_activations(x)
    if w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"w must be (D, F) with D = x's width {x.shape[1]}, got w {w.shape} and x {x.shape}")
    group_size = _check_group_size(group_size, w.shape[0])
    dq, s, alpha = _awq(w, x, bits, group_size, _check_alphas(alphas))
    return (dq / s[:, None]).astype(w.dtype), s, alpha


def _awq(w: np.ndarray, x: np.ndarray, bits: int, group_size: int, alphas) -> tuple[np.ndarray, np.ndarray, float]:
    """awq_quantize's search on checked inputs: (dq, the scaled weight quantized, float64 (D, F); s; alpha)."""
    x64 = x.astype(np.float64)
    want = x64 @ w.astype(np.float64)  # (N, F)
    best = None  # (error, alpha, s, dq)
    for alpha in sorted(alphas):
        s = activation_scales(x, alpha)
        dq = _scaled_grouped(w, s, bits, group_size)
        diff = (x64 / s) @ dq - want
        error = float(np.sum(diff * diff))
        if best is None or error < best[0]:
            best = (error, alpha, s, dq)
    _, alpha, s, dq = best
    return dq, s, alpha


def _activations(model: Model, tokens: np.ndarray) -> tuple[list[dict], np.ndarray]:
    """What reaches each linear weight of the float model on tokens: per layer
    {"attn": the normed residual (T, D) before q|k|v, "wo": the attention
    output (T, H Dh) before wo, "mlp": the normed residual before the MLP or
    router and experts, "down": the SwiGLU product (rows, F) before w_down, one
    per expert (the rows routed to it) or one for a dense MLP}; and the normed
    final residual (T, D) before out."""
    c, w = model.config, model.weights
    probe = model.copy()  # its wo an identity, so that attend hands back the heads' output before wo
    x = model.embed(tokens)
    positions = np.arange(x.shape[0])
    layers = []
    for layer in range(c.n_layers):
        p = f"layers.{layer}."
        probe.weights[p + "wo"] = np.eye(c.n_heads * c.head_dim, dtype=np.float32)
        q, k, v = model.qkv(layer, x, positions)
        heads = probe.attend(layer, q, k, v, positions, positions)  # (T, H Dh)
        acts = {"attn": rms_norm(x, w[p + "attn_norm"], c.norm_eps), "wo": heads}
        x = x + heads @ w[p + "wo"]
        h = rms_norm(x, w[p + "mlp_norm"], c.norm_eps)  # (T, D)
        acts["mlp"] = h
        if c.is_moe:
            experts, _ = top_k_route(softmax(h @ w[p + "router"]), c.top_k)  # (T, K)
            rows = [h[np.any(experts == e, axis=1)] for e in range(c.n_experts)]
            acts["down"] = [silu(r @ w[p + "w_gate"][e]) * (r @ w[p + "w_up"][e]) for e, r in enumerate(rows)]
        else:
            acts["down"] = [silu(h @ w[p + "w_gate"]) * (h @ w[p + "w_up"])]
        layers.append(acts)
        x = x + model.mlp(layer, x)
    return layers, rms_norm(x, w["norm"], c.norm_eps)


def _fold_into_norm(out: Model, norm: str, names: list[str], x: np.ndarray, bits: int, group_size: int) -> None:
    """AWQ with one scale s for every weight read after RMSNorm `norm` (their
    columns side by side, experts' too): out's gain becomes gain / s and each
    weight the quantized w * s[:, None]."""
    w = out.weights
    mats = [w[n] if w[n].ndim == 2 else np.concatenate(list(w[n]), axis=1) for n in names]  # each (D, columns)
    dq, s, _ = _awq(np.concatenate(mats, axis=1), x, bits, group_size, ALPHAS)
    w[norm] = (w[norm] / s).astype(np.float32)
    start = 0
    for name, m in zip(names, mats):
        cols = dq[:, start : start + m.shape[1]].astype(np.float32)
        start += m.shape[1]
        w[name] = cols if w[name].ndim == 2 else np.stack(np.split(cols, w[name].shape[0], axis=1))


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
    bits = _check_bits(bits)
    group_size = _check_model(model, group_size)
    _linear_names(model, group_size)
    layers, final = _activations(model, model.check_tokens(calib_tokens))
    out = model.copy()
    w = out.weights
    for layer, acts in enumerate(layers):
        p = f"layers.{layer}."
        _fold_into_norm(out, p + "attn_norm", [p + "wq", p + "wk", p + "wv"], acts["attn"], bits, group_size)
        readers = ["router", "w_gate", "w_up"] if model.config.is_moe else ["w_gate", "w_up"]
        _fold_into_norm(out, p + "mlp_norm", [p + n for n in readers], acts["mlp"], bits, group_size)
        w[p + "wo"] = awq_quantize(w[p + "wo"], acts["wo"], bits, group_size=group_size)[0]
        down = w[p + "w_down"].reshape(-1, *w[p + "w_down"].shape[-2:])  # (E or 1, F, D)
        done = [
            awq_quantize(d, x, bits, group_size=group_size)[0] if len(x) else _grouped_weight(d, bits, group_size)
            for d, x in zip(down, acts["down"])
        ]
        w[p + "w_down"] = np.stack(done).reshape(w[p + "w_down"].shape)
    _fold_into_norm(out, "norm", ["out"], final, bits, group_size)
    return out
