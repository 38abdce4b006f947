"""The quantization suite catches every mistake its issue lists (one mutant
each, plus a few more), and gives full marks to a second, differently
written correct implementation.

Not mutated, because the change cannot alter any output: clamping the
symmetric/grouped codes (|x| / scale never exceeds qmax by more than float
rounding, which rounds back to qmax) and clamping the affine zero point
(-min_neg / scale lies in [0, qmax] by construction). A zero-slice division
in the symmetric/grouped/Q8_0 paths yields NaN codes that NumPy casts to
int8 0 here, the correct code, so those are mutated where NaN does show:
the affine zero point and Q4_0, whose zero block must code as 8.
"""

from mutation import Mutant, alternative_test, mutant_test

KATA = "quantization"

MUTANTS = [
    Mutant(
        name="q8_0_rounds_half_to_even",
        task="llama_cpp",
        old="a += np.nextafter(np.float32(0.5), np.float32(0))",
        new="np.round(a, out=a)",
    ),
    Mutant(
        name="affine_codes_not_clamped",
        task="affine",
        old="q = np.clip(np.round(x / safe) + zero_point, 0, qmax).astype(np.uint8)",
        new="q = (np.round(x / safe) + zero_point).astype(np.uint8)",
    ),
    Mutant(
        name="q4_0_codes_not_clamped_to_15",
        task="llama_cpp",
        old='codes = np.clip(v, -np.inf, 15, out=np.empty(v.shape, np.uint8), casting="unsafe")',
        new="codes = v.astype(np.uint8)",
    ),
    Mutant(
        name="zero_point_not_rounded",
        task="affine",
        old="zero_point = np.clip(np.round(-min_neg / safe), 0, qmax).astype(np.int64)",
        new="zero_point = np.clip(-min_neg / safe, 0, qmax).astype(np.int64)",
    ),
    Mutant(
        name="affine_all_zero_tensor_divides_by_zero",
        task="affine",
        old="safe = np.where(scale > 0, scale, 1).astype(x.dtype)\n    zero_point",
        new="safe = scale\n    zero_point",
    ),
    Mutant(
        name="q4_0_zero_block_divides_by_zero",
        task="llama_cpp",
        old="np.multiply(blocks, _inverse(d), out=v)",
        new="np.multiply(blocks, np.float32(1) / d, out=v)",
    ),
    Mutant(
        name="symmetric_per_tensor_where_an_axis_was_asked",
        task="symmetric",
        old="amax = np.max(np.abs(x), axis=_reduce_axes(x.ndim, axis), keepdims=axis is not None)",
        new="amax = np.max(np.abs(x))",
    ),
    Mutant(
        name="symmetric_scales_along_the_wrong_axis",
        task="symmetric",
        old="amax = np.max(np.abs(x), axis=_reduce_axes(x.ndim, axis), keepdims=axis is not None)",
        new="amax = np.max(np.abs(x), axis=axis, keepdims=axis is not None)",
    ),
    Mutant(
        name="affine_per_tensor_where_an_axis_was_asked",
        task="affine",
        old="axes = _reduce_axes(x.ndim, axis)",
        new="axes = None",
    ),
    Mutant(
        name="grouped_one_scale_for_the_whole_tensor",
        task="grouped",
        old="amax = _group_max(q)  #",
        new="amax = _group_max(q) * 0 + np.max(q)  #",
    ),
    Mutant(
        name="q4_0_uses_max_abs_instead_of_the_signed_extreme",
        task="llama_cpp",
        old="d = np.take_along_axis(blocks, first, axis=1) / np.float32(-8)",
        new="d = np.max(np.abs(blocks), axis=1, keepdims=True) / np.float32(-8)",
    ),
    Mutant(
        name="q4_0_interleaves_nibbles",
        task="llama_cpp",
        old="np.bitwise_or(words[:, k], words[:, k + 2] << 4, out=packed[:, k])",
        new="packed[:, k] = (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(np.uint64)[:, k]",
    ),
    Mutant(
        name="pack_int4_swaps_nibbles",
        task="packing",
        old="return nibbles[0::2] | (nibbles[1::2] << 4)",
        new="return nibbles[1::2] | (nibbles[0::2] << 4)",
    ),
    Mutant(
        name="quantize_model_mutates_the_input_model",
        task="model",
        old="out = model.copy()",
        new="out = model",
    ),
    Mutant(
        name="quantize_model_skips_the_router",
        task="model",
        old='"w_down", "router", "out")',
        new='"w_down", "out")',
    ),
    Mutant(
        name="quantize_model_ignores_bits",
        task="model",
        old="q, scales = quantize_grouped(rows, bits, group_size)",
        new="q, scales = quantize_grouped(rows, 4, group_size)",
    ),
    Mutant(
        name="bits_per_weight_forgets_the_scales",
        task="model",
        old="return bits + 8 * scale_bytes / group_size",
        new="return float(bits)",
    ),
    Mutant(
        name="grouped_loops_over_groups_in_python",
        task="speed",
        old="    np.multiply(groups, inv[..., None], out=q)\n",
        new=(
            "    for i, g in enumerate(groups.reshape(-1, group_size)):\n"
            "        s = np.max(np.abs(g)) / qmax\n"
            "        q.reshape(-1, group_size)[i] = g / s if s > 0 else 0\n"
        ),
        expect=("slow",),
    ),
]

test_grader_does_not_pass_the_mutant = mutant_test(KATA, MUTANTS)
test_a_differently_written_correct_implementation_gets_full_marks = alternative_test(KATA)
