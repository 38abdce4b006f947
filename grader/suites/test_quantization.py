"""Grading suite of the quantization kata: uniform (symmetric, affine,
per-channel), grouped, int4 packing, llama.cpp's Q8_0/Q4_0 bytes, a quantized
model, calibration, per-matrix sensitivity and a mixed-precision plan,
activation-aware scaling (AWQ), and the speed of grouped quantization.

Expected values come from the formulas of the issue, computed here in
float64 (or float32 where llama.cpp computes in float32), never from the
code under test.

Audit: each promise of the stub's docstrings that a learner could get wrong, and the checks that
fail without it.

| where | promise | checks |
|---|---|---|
| `quantize_symmetric` | codes lie in [-qmax, qmax], qmax = 2^(bits-1) - 1 | `test_symmetric_codes_lie_in_range_in_a_wide_enough_integer_dtype` |
| `quantize_symmetric` | x of any shape (0-d too) and float dtype (float16 too), per tensor or per channel | `test_symmetric_scale_is_max_abs_over_qmax_per_slice`, `test_symmetric_error_is_at_most_half_a_step`, `test_symmetric_scale_has_the_input_dtype_and_the_documented_shape` |
| `quantize_symmetric` | codes are int8 | `test_quantizers_return_codes_in_their_documented_integer_dtype` |
| `quantize_symmetric` | scale is max abs over qmax, per tensor or per index along axis (negative axes too) | `test_symmetric_scale_is_max_abs_over_qmax_per_slice`, `test_per_channel_error_is_never_above_per_tensor_error` |
| `quantize_symmetric` | scale in x's float dtype, shaped () or x.shape with 1 on every axis but axis | `test_symmetric_scale_has_the_input_dtype_and_the_documented_shape` |
| `quantize_symmetric` | codes round x over scale half to even, clamped | `test_symmetric_rounds_exact_halves_to_even`, `test_symmetric_error_is_at_most_half_a_step`, `test_requantizing_a_dequantized_tensor_gives_the_same_codes` |
| `quantize_symmetric` | the largest magnitude lands on the largest code; codes monotone | `test_symmetric_largest_magnitude_comes_back_within_float_rounding`, `test_symmetric_codes_are_monotone_in_the_input` |
| `quantize_symmetric` | a slice of zeros gets scale 0 and codes 0 | `test_symmetric_gives_a_slice_of_zeros_scale_zero`, `test_all_zero_slices_get_zero_codes_and_dequantize_to_exact_zeros` |
| `quantize_symmetric` | ValueError for bits outside 2..8, integer x, NaN or inf | `test_per_tensor_quantizers_reject_bits_out_of_range`, `test_per_tensor_quantizers_reject_integer_nan_and_inf_input` |
| `dequantize_symmetric` | q times scale, in the scale's float dtype | `test_dequantize_symmetric_returns_the_scale_dtype`, `test_symmetric_error_is_at_most_half_a_step` |
| `quantize_affine` | codes in [0, 2^bits - 1], uint8; zero point int64 | `test_affine_codes_lie_in_range_in_a_wide_enough_integer_dtype`, `test_quantizers_return_codes_in_their_documented_integer_dtype` |
| `quantize_affine` | range widened to hold 0; PyTorch's scale and clamped rounded zero point | `test_affine_scale_and_zero_point_follow_the_pytorch_formulas`, `test_affine_codes_lie_in_range_in_a_wide_enough_integer_dtype` |
| `quantize_affine` | x of any shape (0-d too) and float dtype (float16 too) | `test_affine_scale_and_zero_point_follow_the_pytorch_formulas`, `test_affine_error_is_at_most_half_a_step`, `test_affine_scale_and_zero_point_have_the_documented_shape` |
| `quantize_affine` | codes and zero point round half to even | `test_affine_rounds_exact_halves_to_even` |
| `quantize_affine` | 0.0 comes back exactly; every value within half a step; codes monotone | `test_affine_represents_zero_exactly`, `test_affine_error_is_at_most_half_a_step`, `test_affine_codes_are_monotone_in_the_input` |
| `quantize_affine` | a slice of zeros gets scale 0 and zero point 0 | `test_affine_gives_a_slice_of_zeros_scale_and_zero_point_zero` |
| `quantize_affine` | scale in x's dtype and scale and zero point shaped as in quantize_symmetric | `test_affine_scale_and_zero_point_have_the_documented_shape` |
| `quantize_affine` | ValueError for bits outside 2..8, integer x, NaN or inf | `test_per_tensor_quantizers_reject_bits_out_of_range`, `test_per_tensor_quantizers_reject_integer_nan_and_inf_input` |
| `dequantize_affine` | (q - zero_point) times scale without uint8 wrap-around | `test_affine_error_is_at_most_half_a_step`, `test_affine_represents_zero_exactly` |
| `dequantize_affine` | returns the scale's float dtype | `test_dequantize_affine_returns_the_scale_dtype` |
| `quantize_grouped` | one scale per group of G along the last axis, max abs of the group over qmax | `test_grouped_codes_lie_in_range_with_one_scale_per_group`, `test_an_outlier_only_coarsens_its_own_group` |
| `quantize_grouped` | x (..., L) with any number of leading axes: 1-D, 2-D and 3-D alike, of any float dtype (float16 too), scales (..., L // G) | `test_grouped_codes_lie_in_range_with_one_scale_per_group`, `test_grouped_error_is_at_most_half_a_step_of_its_group` |
| `quantize_grouped` | int8 codes in [-qmax, qmax] | `test_grouped_codes_lie_in_range_with_one_scale_per_group`, `test_quantizers_return_codes_in_their_documented_integer_dtype` |
| `quantize_grouped` | codes round x over scale half to even; G = L gives the per-channel codes | `test_grouped_rounds_exact_halves_to_even`, `test_grouped_error_is_at_most_half_a_step_of_its_group`, `test_one_group_per_row_gives_the_per_channel_symmetric_codes`, `test_grouped_requantizing_a_dequantized_tensor_gives_the_same_codes` |
| `quantize_grouped` | scales in x's float dtype, float16 too, whose small groups still get round x over scale | `test_grouped_scales_and_dequantized_values_keep_the_float_dtype`, `test_grouped_float16_groups_of_small_values_get_round_x_over_scale_codes` |
| `quantize_grouped` | a group of zeros gets scale 0 and codes 0 | `test_grouped_gives_a_group_of_zeros_scale_zero`, `test_grouped_all_zero_groups_dequantize_to_exact_zeros` |
| `quantize_grouped` | ValueError naming both numbers when G does not divide L; and for bad bits, integers, NaN, inf | `test_grouped_rejects_an_indivisible_group_size_naming_both_numbers`, `test_grouped_rejects_bad_bits_integers_nan_and_inf` |
| `quantize_grouped` | vectorized, no Python loop over groups | `test_grouped_quantization_is_vectorized` |
| `dequantize_grouped` | q times its group's scale, in the scales' dtype | `test_grouped_error_is_at_most_half_a_step_of_its_group`, `test_grouped_scales_and_dequantized_values_keep_the_float_dtype` |
| `dequantize_grouped` | ValueError for a scalar q or scales not one per group (also ones that only broadcast) | `test_dequantize_grouped_rejects_scales_that_do_not_fit_the_codes` |
| `pack_int4` | element 2i in the low nibble, 2i+1 in the high, 4-bit two's complement, uint8 | `test_pack_int4_puts_element_2i_in_the_low_nibble`, `test_pack_then_unpack_round_trips_exactly` |
| `pack_int4` | an odd N padded with one zero code; ceil(N / 2) bytes, none for N = 0 | `test_pack_int4_pads_an_odd_count_with_one_zero_code`, `test_pack_then_unpack_round_trips_exactly` |
| `pack_int4` | ValueError for codes outside [-8, 7] | `test_pack_int4_rejects_codes_outside_4_bits` |
| `unpack_int4` | gives back the n codes packed, as int8 | `test_pack_then_unpack_round_trips_exactly`, `test_unpack_int4_returns_int8_codes` |
| `unpack_int4` | ValueError unless packed is 1-D uint8 of ceil(n / 2) bytes | `test_unpack_int4_rejects_bytes_that_do_not_hold_n_codes` |
| `quantize_q8_0` | d = max abs over 127 and id = 1/d in float32, codes rounded halves away from zero, fp16 d then 32 codes | `test_q8_0_matches_hand_computed_blocks`, `test_q8_0_matches_the_llama_cpp_formula_on_random_blocks`, `test_q8_0_and_q4_0_match_gguf_on_random_blocks` |
| `quantize_q8_0` | returns bytes; a float64 x is taken as float32 | `test_q8_0_matches_hand_computed_blocks`, `test_q8_0_and_q4_0_take_float64_input_as_float32` |
| `quantize_q8_0` | ValueError for a length not a multiple of 32, integers, NaN, inf | `test_llama_cpp_blocks_reject_bad_input` |
| `dequantize_q8_0` | code times d, float32 (n,) | `test_q8_0_dequantizes_to_code_times_d`, `test_q8_0_and_q4_0_dequantize_to_float32` |
| `quantize_q4_0` | m the signed extreme (first on a tie), d = m / -8, q = min(15, floor(x id + 8.5)), nibbles j and j + 16 | `test_q4_0_matches_hand_computed_blocks`, `test_q4_0_matches_the_llama_cpp_formula_on_random_blocks` |
| `quantize_q4_0` | a block of zeros gets d = -0.0 and codes 8 | `test_q4_0_matches_hand_computed_blocks` |
| `quantize_q4_0` | returns bytes; a float64 x is taken as float32 | `test_q4_0_matches_hand_computed_blocks`, `test_q8_0_and_q4_0_take_float64_input_as_float32` |
| `quantize_q4_0` | ValueError for a length not a multiple of 32, integers, NaN, inf | `test_llama_cpp_blocks_reject_bad_input` |
| `dequantize_q4_0` | (q - 8) times d, float32 (n,) | `test_q4_0_dequantizes_to_q_minus_8_times_d`, `test_q8_0_and_q4_0_dequantize_to_float32` |
| `quantize_model` | a new Model with the same config; the input untouched and sharing no arrays | `test_quantize_model_returns_a_copy_and_leaves_the_input_untouched` |
| `quantize_model` | every linear weight (experts, router, out too) quantized; norms and tok_emb kept | `test_quantize_model_quantizes_every_linear_weight_and_nothing_else` |
| `quantize_model` | groups of group_size along the input axis, with the bits given | `test_quantize_model_groups_each_weight_in_runs_of_group_size_along_its_input_axis`, `test_kl_to_the_float_model_grows_as_bits_shrink`, `test_eight_bit_model_stays_within_a_small_kl_of_the_float_model`, `test_eight_bit_greedy_generation_agrees_with_the_float_model` |
| `quantize_model` | ValueError for bad bits or group_size, naming the weight group_size does not divide | `test_quantize_model_rejects_bad_bits_and_group_size`, `test_quantize_model_names_the_weight_whose_input_width_group_size_does_not_divide` |
| `bits_per_weight` | bits + 8 scale_bytes / group_size, groups of 1 and scale_bytes 0 included | `test_bits_per_weight_counts_the_scales` |
| `bits_per_weight` | ValueError for bits outside 2..8, group_size below 1, negative scale_bytes | `test_bits_per_weight_rejects_sizes_outside_their_ranges` |
| `calibrate` | minmax (the default) is max abs over qmax; all-zero x gives 0 | `test_calibrate_minmax_is_max_abs_over_qmax` |
| `calibrate` | percentile is NumPy's linear percentile of abs x (99.9 by default, 100 allowed) over qmax, 0 where that is 0 | `test_calibrate_percentile_is_the_linear_percentile_of_abs_x_over_qmax` |
| `calibrate` | x of any shape, 0-d included, and any float dtype, float16 included (its scale in float16) | `test_calibrate_minmax_is_max_abs_over_qmax`, `test_calibrate_mse_is_the_grid_clip_of_least_squared_error` |
| `calibrate` | mse is c over qmax for the grid clip of least squared error, i = 1..grid, grid honoured | `test_calibrate_mse_is_the_grid_clip_of_least_squared_error`, `test_calibrate_mse_is_never_worse_than_minmax` |
| `calibrate` | c_i = max abs x times (i / grid) ends on max abs x exactly, so mse is never worse than minmax (up to the casts' rounding) | `test_calibrate_mse_is_never_worse_than_minmax` |
| `calibrate` | the least error over the whole grid, past a local minimum met first from either end | `test_calibrate_mse_searches_the_whole_grid_past_a_local_minimum` |
| `calibrate` | only equal errors tie: a near-tie within a sloppy tolerance goes to the least error | `test_calibrate_mse_takes_the_least_error_of_a_near_tie` |
| `calibrate` | computed in float64 whatever the dtype of x (float16's squared errors overflow) | `test_calibrate_mse_works_in_float64_for_a_float16_x` |
| `calibrate` | mse breaks a tie toward the larger clip | `test_calibrate_mse_breaks_a_tie_toward_the_larger_clip` |
| `calibrate` | the scale is a NumPy scalar of x's float dtype | `test_calibrate_minmax_is_max_abs_over_qmax`, `test_a_4_bit_teacher_calibrated_by_mse_is_closer_to_the_float_teacher_than_minmax` |
| `calibrate` | percentile and mse beat min-max on heavy tails; mse scales bring a 4-bit teacher closer | `test_calibrate_percentile_and_mse_beat_minmax_on_heavy_tailed_data`, `test_a_4_bit_teacher_calibrated_by_mse_is_closer_to_the_float_teacher_than_minmax` |
| `calibrate` | ValueError for bits, a method not one of the three (naming them), percentile or grid out of range whatever the method, a grid that is a whole float, empty, integer, NaN or inf x | `test_calibrate_rejects_bad_arguments` |
| `layer_sensitivity` | one mean KL (nats, over the positions) per linear weight, that weight alone quantized grouped at bits | `test_layer_sensitivity_is_the_mean_kl_of_quantizing_each_linear_weight_alone` |
| `layer_sensitivity` | the model untouched | `test_layer_sensitivity_leaves_the_model_untouched` |
| `layer_sensitivity` | ValueError for bad bits, group_size and tokens | `test_layer_sensitivity_rejects_bad_bits_group_size_and_tokens` |
| `mixed_precision_plan` | greedy upgrades to the next choice by sensitivity drop per extra byte, ties to the name that sorts first | `test_mixed_plan_is_the_greedy_choice_by_sensitivity_drop_per_byte`, `test_mixed_plan_ranks_by_the_drop_per_byte_not_by_the_drop_alone`, `test_mixed_plan_breaks_a_tie_toward_the_name_that_sorts_first` |
| `mixed_precision_plan` | within the budget (codes plus an fp16 scale per group), stopping only when no upgrade fits | `test_mixed_plan_stays_within_the_budget_and_stops_only_when_no_upgrade_fits` |
| `mixed_precision_plan` | ValueError naming the least budget below it; and for bad choices, sizes, sensitivity, budget, group_size | `test_mixed_plan_refuses_a_budget_below_the_least_naming_it`, `test_mixed_plan_rejects_bad_choices_sizes_sensitivity_and_budget` |
| `mixed_precision_plan` | at the bytes of uniform 3 and 4 bits the plan's model is closer to the float model | `test_the_mixed_plan_at_the_bytes_of_uniform_bits_is_closer_to_the_float_model` |
| `quantize_model_mixed` | each linear weight grouped at its planned bits, norms and embedding kept | `test_quantize_model_mixed_quantizes_each_weight_at_its_planned_bits` |
| `quantize_model_mixed` | ValueError for a plan missing or adding a weight, bad bits, a model that is no Model | `test_quantize_model_mixed_rejects_a_plan_that_misses_or_adds_a_weight` |
| `activation_scales` | mean abs x per channel (floored) to the alpha, over the geometric mean, float64 | `test_activation_scales_are_mean_abs_to_the_alpha_over_their_geometric_mean` |
| `activation_scales` | ValueError for bad x and alpha | `test_activation_scales_rejects_bad_x_and_alpha` |
| `awq_quantize` | the alpha of least output error (ties: smaller), its scales, w_hat the dequantized scaled weight over s | `test_awq_keeps_the_alpha_whose_output_is_closest_to_the_float_output`, `test_awq_breaks_a_tie_toward_the_smaller_alpha`, `test_awq_honours_the_alphas_it_is_given` |
| `awq_quantize` | never worse than plain grouped quantization on its activations | `test_awq_is_no_worse_than_plain_grouped_quantization_on_its_activations` |
| `awq_quantize` | ValueError for bad w, x, bits, group_size, alphas | `test_awq_quantize_rejects_bad_input` |
| `quantize_model_awq` | one scale per RMSNorm for the weights after it, its inverse folded into the gain | `test_quantize_model_awq_folds_the_inverse_scale_into_the_norm_before_each_matrix` |
| `quantize_model_awq` | wo and w_down scaled by what reaches them, the inverse scale in the weight | `test_quantize_model_awq_folds_the_inverse_scale_of_wo_and_w_down_into_the_weight` |
| `quantize_model_awq` | closer to the float model than plain grouped on outlier channels; input untouched, embedding kept | `test_quantize_model_awq_is_closer_to_the_float_model_than_plain_grouped_on_outlier_channels`, `test_quantize_model_awq_leaves_the_model_untouched_and_the_embedding_in_float` |
| `quantize_model_awq` | ValueError for bad bits, group_size and tokens | `test_quantize_model_awq_rejects_bad_bits_group_size_and_tokens` |
"""  # noqa: E501 (a row of the audit table is one line, as tests/test_katas.py reads it)

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.suites import common
from grader.suites.common import load_baseline, load_kata, rng, time_ratio
from reference.lm import CachedLM
from reference.lm import generate as generate_cached
from reference.model import WEIGHTS_DIR, Config, Model, rms_norm, softmax, top_k_route
from reference.sampling import probs_from_logits
from reference.tokenizer import encode

# A code may differ from round(x / scale) only where x / scale lies this close
# to a .5 tie (x / scale and x * (1 / scale) round differently there).
TIE_SLACK = 1e-3
# Float rounding allowed on top of half a step, relative to the slice's max |x|.
REL_TOL = 1e-5
# Mean KL (nats) of next-token distributions, 8-bit model against the float one.
KL_8BIT = 1e-3
# Share of 32 greedily generated tokens the 8-bit model must agree on.
GREEDY_AGREEMENT = 0.95
# Grouped quantization may take this many times a minimal vectorized version (see the speed test):
# correct vectorized code measures about 1x, a Python loop over the groups about 13x.
SPEED_RATIO = 5.0

BITS = st.integers(2, 8)
# Zero, or a magnitude in [1e-3, 100]: no subnormals, whose scales lose precision.
VALUE = st.one_of(st.just(0.0), st.floats(1e-3, 100.0), st.floats(-100.0, -1e-3))
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=7)  # "any shape": 0-d too
FLOATS = st.sampled_from([np.float16, np.float32, np.float64])  # "a float array": float16 too


@pytest.fixture(scope="module")
def kata():
    return load_kata("quantization")


def _probe(call) -> None:
    """Call a function once on a plain input, so an unimplemented stub is
    reported as todo before Hypothesis spends time shrinking its
    NotImplementedError. Any other outcome is left for the test to judge."""
    try:
        call()
    except NotImplementedError:
        raise
    except Exception:
        pass


@pytest.fixture(scope="module")
def sym(kata):
    _probe(lambda: kata.quantize_symmetric(np.ones(4, np.float32), 8))
    return kata


@pytest.fixture(scope="module")
def aff(kata):
    _probe(lambda: kata.quantize_affine(np.ones(4, np.float32), 8))
    return kata


@pytest.fixture(scope="module")
def grp(kata):
    _probe(lambda: kata.quantize_grouped(np.ones(4, np.float32), 8, 2))
    return kata


@pytest.fixture(scope="module")
def pack(kata):
    _probe(lambda: kata.pack_int4(np.zeros(2, np.int8)))
    return kata


@pytest.fixture(scope="module")
def q8(kata):
    _probe(lambda: kata.quantize_q8_0(np.ones(32, np.float32)))
    return kata


@pytest.fixture(scope="module")
def q4(kata):
    _probe(lambda: kata.quantize_q4_0(np.ones(32, np.float32)))
    return kata


@st.composite
def tensors(draw, shape=SHAPES, dtypes=FLOATS):
    dtype = draw(dtypes)
    return draw(hnp.arrays(dtype, shape, elements=VALUE))


@st.composite
def tensor_and_axis(draw):
    x = draw(tensors())
    axis = draw(st.sampled_from([None, *range(x.ndim), -1] if x.ndim else [None]))  # a 0-d x has no axis
    return x, axis


def _other_axes(ndim: int, axis) -> tuple[int, ...]:
    return tuple(a for a in range(ndim) if axis is None or a != axis % ndim)


def _slice_amax(x: np.ndarray, axis) -> np.ndarray:
    """max |x| per slice, float64, shaped to broadcast against x."""
    return np.max(np.abs(x.astype(np.float64)), axis=_other_axes(x.ndim, axis), keepdims=True)


def _broadcast(a, shape, what: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        raise AssertionError(f"{what} of shape {a.shape} does not broadcast against x of shape {shape}") from None


def _codes(q, shape, what: str = "codes") -> np.ndarray:
    q = np.asarray(q)
    assert q.shape == tuple(shape), f"{what} have shape {q.shape}, expected {tuple(shape)} (the shape of x)"
    assert np.issubdtype(q.dtype, np.integer), f"{what} must be a numpy integer array, got dtype {q.dtype}"
    return q


def _codes_match(q: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """Where codes q equal round(ratio), or either neighbour of a near-tie."""
    near_tie = np.abs(np.abs(ratio - np.floor(ratio)) - 0.5) < TIE_SLACK
    return (q == np.round(ratio)) | (near_tie & ((q == np.floor(ratio)) | (q == np.ceil(ratio))))


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _assert_monotone(quantize, x: np.ndarray, bits: int) -> None:
    """The codes quantize gives the values of x, sorted, never go down."""
    x = np.sort(x)
    q = _codes(quantize(x, bits)[0], x.shape)
    drops = np.flatnonzero(np.diff(q.astype(np.int64)) < 0)
    assert drops.size == 0, (
        f"{x[drops[0] + 1]:.6g} > {x[drops[0]]:.6g} got the smaller code ({q[drops[0] + 1]} < {q[drops[0]]})"
    )


def _rel_tol(x: np.ndarray) -> float:
    """REL_TOL, or for float16 x two units of its last place: its scales and q * scale round to 11 bits."""
    return max(REL_TOL, 2 * float(np.finfo(x.dtype).eps))


def _assert_within_half_a_step(x: np.ndarray, x_hat: np.ndarray, amax: np.ndarray, bits: int, of: str = "") -> None:
    """Every element of x_hat within half a quantization step (amax / qmax, amax per element) of x."""
    step = amax / (2 ** (bits - 1) - 1)
    err = np.abs(x_hat - x)
    bad = err > step / 2 + _rel_tol(x) * amax
    assert not bad.any(), (
        f"element {_first(bad)} comes back {err[bad][0]:.4g} off; half a step{of} is {step[bad][0] / 2:.4g}"
    )


def _scale_shape(x: np.ndarray, axis) -> tuple[int, ...]:
    """The documented shape of a per-tensor or per-channel scale: () for axis=None, else x.shape with
    every axis but `axis` set to 1."""
    return () if axis is None else tuple(n if a == axis % x.ndim else 1 for a, n in enumerate(x.shape))


def _assert_scale_like(scale, x: np.ndarray, axis, what: str = "scale") -> None:
    """scale has the documented shape for axis and x's float dtype."""
    want = _scale_shape(x, axis)
    assert np.shape(scale) == want, (
        f"{what} for axis={axis} on shape {x.shape} has shape {np.shape(scale)}, expected {want} "
        "(() for axis=None, else x.shape with every axis but `axis` set to 1)"
    )
    dtype = np.asarray(scale).dtype
    assert dtype == x.dtype, f"{what} has dtype {dtype} for x of dtype {x.dtype}; it comes in x's float dtype"


def _zero_slice_cases() -> tuple[np.ndarray, np.ndarray]:
    """An all-zero (3, 4) tensor, and one whose rows 1 and 2 are zeros."""
    x = np.zeros((3, 4), dtype=np.float32)
    x[0] = [1.0, -2.0, 3.0, 0.5]
    return np.zeros_like(x), x


def _assert_zero_slices_get(values, x: np.ndarray, axis, what: str) -> None:
    """values (a scale or zero point per slice) are 0 on every slice of x along axis that is all zeros."""
    got = _broadcast(values, x.shape, what)
    bad = np.broadcast_to(_slice_amax(x, axis) == 0, x.shape) & (got != 0)
    assert not bad.any(), f"a slice of zeros (axis={axis}) got {what} {got[bad][0]:g}, not 0"


# ------------------------------------------------------------------ symmetric


def _symmetric_round_trip(sym, x: np.ndarray, bits: int, axis) -> np.ndarray:
    """x through quantize_symmetric and dequantize_symmetric, as float64 of x's shape."""
    q, scale = sym.quantize_symmetric(x, bits, axis=axis)
    x_hat = np.asarray(sym.dequantize_symmetric(q, scale), dtype=np.float64)
    assert x_hat.shape == x.shape, f"dequantize_symmetric returned shape {x_hat.shape}, expected {x.shape}"
    return x_hat


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
def test_symmetric_codes_lie_in_range_in_a_wide_enough_integer_dtype(sym, xa, bits):
    x, axis = xa
    q, _ = sym.quantize_symmetric(x, bits, axis=axis)
    q = _codes(q, x.shape)
    qmax = 2 ** (bits - 1) - 1
    info = np.iinfo(q.dtype)
    assert info.min <= -qmax and info.max >= qmax, f"dtype {q.dtype} cannot hold codes in [-{qmax}, {qmax}]"
    assert q.min() >= -qmax and q.max() <= qmax, f"codes {q.min()}..{q.max()} leave [-{qmax}, {qmax}] at {bits} bits"


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]], dtype=np.float32), 0), bits=2)
def test_symmetric_scale_is_max_abs_over_qmax_per_slice(sym, xa, bits):
    x, axis = xa
    _, scale = sym.quantize_symmetric(x, bits, axis=axis)
    scale = np.asarray(scale, dtype=np.float64)
    n = 1 if axis is None else x.shape[axis]
    assert scale.size == n, (
        f"axis={axis} on shape {x.shape} needs {n} scale(s), one per index along that axis; got shape {scale.shape}"
    )
    got = _broadcast(scale, x.shape, "scale")
    want = np.broadcast_to(_slice_amax(x, axis) / (2 ** (bits - 1) - 1), x.shape)
    bad = ~np.isclose(got, want, rtol=_rel_tol(x), atol=0) & (want > 0)
    assert not bad.any(), f"scale at {_first(bad)} is {got[bad][0]:.6g}, max|x| / qmax there is {want[bad][0]:.6g}"


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([0.25, -1.0, 0.75, 0.5], dtype=np.float32), None), bits=3)
def test_symmetric_error_is_at_most_half_a_step(sym, xa, bits):
    x, axis = xa
    x_hat = _symmetric_round_trip(sym, x, bits, axis)
    _assert_within_half_a_step(x, x_hat, np.broadcast_to(_slice_amax(x, axis), x.shape), bits)


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
def test_symmetric_largest_magnitude_comes_back_within_float_rounding(sym, xa, bits):
    x, axis = xa
    x_hat = _symmetric_round_trip(sym, x, bits, axis)
    amax = np.broadcast_to(_slice_amax(x, axis), x.shape)
    is_max = (np.abs(x) == amax) & (amax > 0)
    err = np.abs(x_hat - x)
    bad = is_max & (err > _rel_tol(x) * amax)
    assert not bad.any(), f"the largest-magnitude value {x[bad][0]:.6g} comes back as {x_hat[bad][0]:.6g}"


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
def test_requantizing_a_dequantized_tensor_gives_the_same_codes(sym, xa, bits):
    x, axis = xa
    q1, scale = sym.quantize_symmetric(x, bits, axis=axis)
    q1 = _codes(q1, x.shape)
    x_hat = (q1 * _broadcast(scale, x.shape, "scale")).astype(x.dtype)
    q2 = _codes(sym.quantize_symmetric(x_hat, bits, axis=axis)[0], x.shape)
    bad = q1 != q2
    assert not bad.any(), f"code at {_first(bad)} was {q1[bad][0]}, quantizing its dequantized value gives {q2[bad][0]}"


@pytest.mark.task("symmetric")
@given(x=tensors(st.integers(2, 40)), bits=BITS)
def test_symmetric_codes_are_monotone_in_the_input(sym, x, bits):
    _assert_monotone(sym.quantize_symmetric, x, bits)


@pytest.mark.task("symmetric")
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_all_zero_slices_get_zero_codes_and_dequantize_to_exact_zeros(kata, axis):
    x = np.zeros((3, 4), dtype=np.float32)
    x[0] = [1.0, -2.0, 3.0, 0.5]
    x[:, 0] = [1.0, 0.0, 0.0]
    for case in (np.zeros_like(x), x):
        q, scale = kata.quantize_symmetric(case, 4, axis=axis)
        q = _codes(q, x.shape)
        x_hat = np.asarray(kata.dequantize_symmetric(q, scale), dtype=np.float64)
        zero = _slice_amax(case, axis) == 0
        zero = np.broadcast_to(zero, x.shape)
        assert np.all(np.isfinite(x_hat)), (
            f"dequantizing gives {x_hat[~np.isfinite(x_hat)][0]} for a slice of zeros (0 / 0?)"
        )
        assert np.all(q[zero] == 0), f"a slice of zeros (axis={axis}) got nonzero codes {q[zero]}"
        assert np.all(x_hat[zero] == 0), f"a slice of zeros (axis={axis}) dequantizes to {x_hat[zero]}, not exact zeros"


@pytest.mark.task("symmetric")
def test_per_channel_error_is_never_above_per_tensor_error(kata):
    g = rng(11)
    magnitudes = 4.0 ** -np.arange(6)  # channels 4x apart in size
    for axis in (0, 1):
        x = (g.standard_normal((6, 64)) * magnitudes[:, None]).astype(np.float32)
        x = x if axis == 0 else np.ascontiguousarray(x.T)
        err = {}
        for mode in (None, axis):
            q, scale = kata.quantize_symmetric(x, 4, axis=mode)
            err[mode] = np.max(
                np.abs(np.asarray(kata.dequantize_symmetric(q, scale), np.float64) - x), axis=_other_axes(2, axis)
            )
        worse = err[axis] > err[None] * (1 + REL_TOL)
        assert not worse.any(), (
            f"with axis={axis}, channel {int(np.argmax(worse))} comes back {err[axis][worse][0]:.3g} off, "
            f"worse than {err[None][worse][0]:.3g} with one scale for the whole tensor"
        )
        assert err[axis][-1] < err[None][-1] / 4, (
            f"with axis={axis} the smallest channel should come back far closer than with one scale "
            f"({err[axis][-1]:.3g} vs {err[None][-1]:.3g}): is the scale taken per channel?"
        )


@pytest.mark.task("symmetric")
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_symmetric_gives_a_slice_of_zeros_scale_zero(kata, axis):
    for x in _zero_slice_cases():
        _, scale = kata.quantize_symmetric(x, 4, axis=axis)
        _assert_zero_slices_get(scale, x, axis, "scale")


# Exact ties: the largest magnitude makes the scale a power of two (1, or 1.5 / 3 = 0.5), so x / scale lands
# on n + 0.5 exactly however it is computed. (x, bits, codes rounded half to even.)
SYMMETRIC_TIES = {
    "scale 1": ([7.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 6.5], 4, [7, 0, 2, 2, 0, -2, -2, 6]),
    "scale 0.5": ([1.5, 0.25, 0.75, -1.25], 3, [3, 0, 2, -2]),
}


@pytest.mark.task("symmetric")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(SYMMETRIC_TIES), ids=str)
def test_symmetric_rounds_exact_halves_to_even(kata, case, dtype):
    x, bits, want = SYMMETRIC_TIES[case]
    q, _ = kata.quantize_symmetric(np.array(x, dtype=dtype), bits)
    got = _codes(q, (len(x),)).tolist()
    assert got == want, f"quantize_symmetric({x}, bits={bits}) gave codes {got}; round half to even gives {want}"


def _scale_shape_examples(test):
    """The explicit examples of the scale-shape checks: per tensor, along an axis, along a negative axis, float64,
    and a 0-d x (any shape: its scale has shape ())."""
    small = [[1.0, -2.0], [0.5, 0.0]]
    cases = [((np.array(small, np.float32), None), 8), ((np.array(small, np.float32), 1), 4)]
    cases.append(((np.array(small, np.float64), -2), 3))
    cases.append(((np.array(-2.5, np.float32), None), 4))
    for xa, bits in reversed(cases):
        test = example(xa=xa, bits=bits)(test)
    return test


@pytest.mark.task("symmetric")
@given(xa=tensor_and_axis(), bits=BITS)
@_scale_shape_examples
def test_symmetric_scale_has_the_input_dtype_and_the_documented_shape(sym, xa, bits):
    x, axis = xa
    _, scale = sym.quantize_symmetric(x, bits, axis=axis)
    _assert_scale_like(scale, x, axis)


@pytest.mark.task("symmetric")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_dequantize_symmetric_returns_the_scale_dtype(kata, dtype):
    q = np.array([[3, -7, 0], [1, 5, -2]], dtype=np.int8)
    for scale in (np.array(0.5, dtype=dtype), np.array([[0.5], [0.25]], dtype=dtype)):
        x_hat = np.asarray(kata.dequantize_symmetric(q, scale))
        assert x_hat.dtype == dtype, f"dequantize_symmetric returned dtype {x_hat.dtype} for a {dtype.__name__} scale"
        want = q * scale.astype(np.float64)
        assert np.array_equal(x_hat, want), f"dequantize_symmetric gave {x_hat.tolist()}, q * scale is {want.tolist()}"


# Both per-tensor quantizers refuse the same inputs: one check, a case per task.
PER_TENSOR = {"symmetric": "quantize_symmetric", "affine": "quantize_affine"}


def _one_bad(value: float) -> np.ndarray:
    x = np.ones(8, dtype=np.float32)
    x[3] = value
    return x


BAD_TENSORS = {"integers": np.arange(8), "nan": _one_bad(np.nan), "inf": _one_bad(np.inf), "-inf": _one_bad(-np.inf)}


@pytest.mark.parametrize("task", ["symmetric", "affine"])
@pytest.mark.parametrize("bits", [1, 9, 0])
def test_per_tensor_quantizers_reject_bits_out_of_range(kata, task, bits):
    with pytest.raises(ValueError):
        getattr(kata, PER_TENSOR[task])(np.ones(4, np.float32), bits)


@pytest.mark.parametrize("task", ["symmetric", "affine"])
@pytest.mark.parametrize("x", list(BAD_TENSORS.values()), ids=list(BAD_TENSORS))
def test_per_tensor_quantizers_reject_integer_nan_and_inf_input(kata, task, x):
    with pytest.raises(ValueError):
        getattr(kata, PER_TENSOR[task])(x, 8)


def _documented_integer_outputs(kata, task: str, x: np.ndarray) -> list[tuple[str, np.ndarray, type]]:
    """(what, the learner's array, its documented dtype) for the integer outputs of task's quantizer on x (2, 4)."""
    if task == "symmetric":
        return [("codes", kata.quantize_symmetric(x, 4, axis=1)[0], np.int8)]
    if task == "affine":
        q, _, zero_point = kata.quantize_affine(x, 4, axis=0)
        return [("codes", q, np.uint8), ("zero_point", zero_point, np.int64)]
    return [("codes", kata.quantize_grouped(x, 4, 2)[0], np.int8)]


# int8 (uint8) codes take one byte a value: the storage a quantizer exists to save.
@pytest.mark.parametrize("task", ["symmetric", "affine", "grouped"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_quantizers_return_codes_in_their_documented_integer_dtype(kata, task, dtype):
    x = np.array([[1.0, -2.0, 0.5, 0.0], [3.0, 0.25, -1.0, 2.0]], dtype=dtype)
    for what, got, want in _documented_integer_outputs(kata, task, x):
        got = np.asarray(got).dtype
        assert got == want, f"quantize_{task} returned {what} of dtype {got}; the docstring promises {np.dtype(want)}"


# --------------------------------------------------------------------- affine


def _affine_expected(x: np.ndarray, bits: int, axis):
    """(scale, zero_point ratio -min_neg/scale) per slice in float64, broadcast to x."""
    axes = _other_axes(x.ndim, axis)
    x64 = x.astype(np.float64)
    min_neg = np.minimum(np.min(x64, axis=axes, keepdims=True), 0)
    max_pos = np.maximum(np.max(x64, axis=axes, keepdims=True), 0)
    scale = (max_pos - min_neg) / (2**bits - 1)
    ratio = np.divide(-min_neg, scale, out=np.zeros_like(scale), where=scale > 0)
    return np.broadcast_to(scale, x.shape), np.broadcast_to(ratio, x.shape)


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@example(
    xa=(np.array([-1.5, 1.5, 0.5], dtype=np.float32), None), bits=2
)  # zero point 1.5 ties to 2: 1.5 must clamp to 3
@example(xa=(np.zeros((2, 3), dtype=np.float32), None), bits=8)
@example(xa=(np.array([[0.0, 0.0], [1.0, -2.0]], dtype=np.float64), 0), bits=4)
def test_affine_codes_lie_in_range_in_a_wide_enough_integer_dtype(aff, xa, bits):
    x, axis = xa
    q, _, zero_point = aff.quantize_affine(x, bits, axis=axis)
    q = _codes(q, x.shape)
    qmax = 2**bits - 1
    info = np.iinfo(q.dtype)
    assert info.min <= 0 and info.max >= qmax, f"dtype {q.dtype} cannot hold codes in [0, {qmax}]"
    assert q.min() >= 0 and q.max() <= qmax, f"codes {q.min()}..{q.max()} leave [0, {qmax}] at {bits} bits"
    zp = np.asarray(zero_point, dtype=np.float64)
    assert np.all(zp == np.round(zp)), f"zero_point must be a whole number (an integer code), got {zp.ravel()[:4]}"
    assert np.all((zp >= 0) & (zp <= qmax)), f"zero_point {zp.ravel()[:4]} leaves [0, {qmax}]"


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([-1.0, 1.0, 0.3], dtype=np.float32), None), bits=8)
@example(xa=(np.array([[-3.0, 0.1], [2.0, 5.0]], dtype=np.float64), 1), bits=2)
def test_affine_scale_and_zero_point_follow_the_pytorch_formulas(aff, xa, bits):
    x, axis = xa
    _, scale, zero_point = aff.quantize_affine(x, bits, axis=axis)
    n = 1 if axis is None else x.shape[axis]
    assert np.size(scale) == n and np.size(zero_point) == n, (
        f"axis={axis} on shape {x.shape} needs {n} scale(s) and zero point(s), one per index along that axis; "
        f"got shapes {np.shape(scale)} and {np.shape(zero_point)}"
    )
    want_scale, ratio = _affine_expected(x, bits, axis)
    got_scale = _broadcast(scale, x.shape, "scale")
    zp = _broadcast(zero_point, x.shape, "zero_point")
    bad = ~np.isclose(got_scale, want_scale, rtol=_rel_tol(x), atol=0) & (want_scale > 0)
    assert not bad.any(), (
        f"scale at {_first(bad)} is {got_scale[bad][0]:.6g}, (max_pos - min_neg) / qmax is {want_scale[bad][0]:.6g}"
    )
    bad = ~_codes_match(zp, ratio) & (want_scale > 0)
    assert not bad.any(), (
        f"zero_point at {_first(bad)} is {zp[bad][0]:g}, round(-min_neg / scale) is {np.round(ratio[bad][0]):g}"
    )


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([-1.0, 1.0, 0.3], dtype=np.float32), None), bits=8)
@example(xa=(np.array([-1.5, 1.5, 0.5], dtype=np.float32), None), bits=2)
def test_affine_error_is_at_most_half_a_step(aff, xa, bits):
    x, axis = xa
    q, scale, zero_point = aff.quantize_affine(x, bits, axis=axis)
    x_hat = np.asarray(aff.dequantize_affine(q, scale, zero_point), dtype=np.float64)
    assert x_hat.shape == x.shape, f"dequantize_affine returned shape {x_hat.shape}, expected {x.shape}"
    step, _ = _affine_expected(x, bits, axis)
    amax = np.broadcast_to(_slice_amax(x, axis), x.shape)
    err = np.abs(x_hat - x)
    bad = err > step / 2 + _rel_tol(x) * amax
    assert not bad.any(), (
        f"element {_first(bad)} ({x[bad][0]:.6g}) comes back {err[bad][0]:.4g} off; half a step is "
        f"{step[bad][0] / 2:.4g}"
    )


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@example(xa=(np.array([0.0, 0.0], dtype=np.float32), None), bits=8)
@example(xa=(np.array([0.0, 3.0, 7.0], dtype=np.float32), None), bits=2)
@example(xa=(np.array([-5.0, 0.0, -1.0], dtype=np.float64), None), bits=3)
def test_affine_represents_zero_exactly(aff, xa, bits):
    x, axis = xa
    x = x.copy()
    x.flat[0] = 0.0
    q, scale, zero_point = aff.quantize_affine(x, bits, axis=axis)
    x_hat = np.asarray(aff.dequantize_affine(q, scale, zero_point))
    zero = x == 0
    assert np.all(x_hat[zero] == 0), f"0.0 comes back as {x_hat[zero][x_hat[zero] != 0][0]!r}, not exactly 0"


@pytest.mark.task("affine")
@given(x=tensors(st.integers(2, 40)), bits=BITS)
def test_affine_codes_are_monotone_in_the_input(aff, x, bits):
    _assert_monotone(aff.quantize_affine, x, bits)


@pytest.mark.task("affine")
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_affine_gives_a_slice_of_zeros_scale_and_zero_point_zero(kata, axis):
    for x in _zero_slice_cases():
        _, scale, zero_point = kata.quantize_affine(x, 4, axis=axis)
        _assert_zero_slices_get(scale, x, axis, "scale")
        _assert_zero_slices_get(zero_point, x, axis, "zero point")


# Exact ties: max_pos - min_neg = 3 = qmax at 2 bits makes the scale 1, so x / scale and -min_neg / scale
# land on n + 0.5 exactly. (x, codes, zero point, rounded half to even.)
AFFINE_TIES = {
    # zero point round(1) = 1; codes round(x) + 1 with 0.5 -> 0 and -0.5 -> -0.
    "codes": ([-1.0, 2.0, 0.5, -0.5, 1.5], [0, 3, 1, 1, 3], 1),
    # zero point round(0.5) = 0; codes round(x) with -0.5 -> -0, 2.5 -> 2, 1.5 -> 2.
    "zero point": ([-0.5, 2.5, 1.5], [0, 2, 2], 0),
}


@pytest.mark.task("affine")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(AFFINE_TIES), ids=str)
def test_affine_rounds_exact_halves_to_even(kata, case, dtype):
    x, want_codes, want_zero_point = AFFINE_TIES[case]
    q, _, zero_point = kata.quantize_affine(np.array(x, dtype=dtype), 2)
    got = _codes(q, (len(x),)).tolist()
    assert np.ndim(zero_point) == 0 and int(zero_point) == want_zero_point, (
        f"quantize_affine({x}, bits=2) gave zero point {zero_point}; round(-min_neg / scale), half to even, "
        f"is {want_zero_point}"
    )
    assert got == want_codes, (
        f"quantize_affine({x}, bits=2) gave codes {got}; round(x / scale) + zero_point, half to even, is {want_codes}"
    )


@pytest.mark.task("affine")
@given(xa=tensor_and_axis(), bits=BITS)
@_scale_shape_examples
def test_affine_scale_and_zero_point_have_the_documented_shape(aff, xa, bits):
    x, axis = xa
    _, scale, zero_point = aff.quantize_affine(x, bits, axis=axis)
    _assert_scale_like(scale, x, axis)
    want = _scale_shape(x, axis)
    assert np.shape(zero_point) == want, (
        f"zero_point for axis={axis} on shape {x.shape} has shape {np.shape(zero_point)}, expected {want}"
    )


@pytest.mark.task("affine")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_dequantize_affine_returns_the_scale_dtype(kata, dtype):
    q = np.array([[3, 15, 0], [1, 5, 2]], dtype=np.uint8)
    zero_point = np.array([[4], [2]], dtype=np.int64)
    scale = np.array([[0.5], [0.25]], dtype=dtype)
    x_hat = np.asarray(kata.dequantize_affine(q, scale, zero_point))
    assert x_hat.dtype == dtype, f"dequantize_affine returned dtype {x_hat.dtype} for a {dtype.__name__} scale"
    want = (q.astype(np.int64) - zero_point) * scale.astype(np.float64)
    assert np.array_equal(x_hat, want), (
        f"dequantize_affine gave {x_hat.tolist()}, (q - zero_point) * scale is {want.tolist()}"
    )


# -------------------------------------------------------------------- grouped


@st.composite
def grouped_inputs(draw):
    """x (..., L) with G dividing L: 1-D, 2-D and 3-D (the docstring's ..., a stack of experts' weights), of
    every float dtype FLOATS draws; and G."""
    group_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    lead = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4))
    n_groups = draw(st.integers(1, 4))
    x = draw(tensors(st.just((*lead, n_groups * group_size))))
    return x, group_size


def _group_amax(x: np.ndarray, group_size: int) -> np.ndarray:
    """max |x| of each element's group, float64, shape of x."""
    g = np.abs(x.astype(np.float64)).reshape(*x.shape[:-1], -1, group_size)
    return np.broadcast_to(g.max(axis=-1, keepdims=True), g.shape).reshape(x.shape)


@pytest.mark.task("grouped")
@given(xg=grouped_inputs(), bits=BITS)
def test_grouped_codes_lie_in_range_with_one_scale_per_group(grp, xg, bits):
    x, group_size = xg
    q, scales = grp.quantize_grouped(x, bits, group_size)
    q = _codes(q, x.shape)
    qmax = 2 ** (bits - 1) - 1
    info = np.iinfo(q.dtype)
    assert info.min <= -qmax and info.max >= qmax, f"dtype {q.dtype} cannot hold codes in [-{qmax}, {qmax}]"
    assert q.min() >= -qmax and q.max() <= qmax, f"codes {q.min()}..{q.max()} leave [-{qmax}, {qmax}] at {bits} bits"
    want_shape = x.shape[:-1] + (x.shape[-1] // group_size,)
    assert np.shape(scales) == want_shape, (
        f"scales have shape {np.shape(scales)}, expected {want_shape} (one per group)"
    )
    want = x.astype(np.float64).reshape(*want_shape, group_size)
    want = np.abs(want).max(axis=-1) / qmax
    got = np.asarray(scales, dtype=np.float64)
    bad = ~np.isclose(got, want, rtol=_rel_tol(x), atol=0) & (want > 0)
    assert not bad.any(), f"scale of group {_first(bad)} is {got[bad][0]:.6g}, max|group| / qmax is {want[bad][0]:.6g}"


@pytest.mark.task("grouped")
@given(xg=grouped_inputs(), bits=BITS)
def test_grouped_error_is_at_most_half_a_step_of_its_group(grp, xg, bits):
    x, group_size = xg
    q, scales = grp.quantize_grouped(x, bits, group_size)
    x_hat = np.asarray(grp.dequantize_grouped(q, scales, group_size), dtype=np.float64)
    assert x_hat.shape == x.shape, f"dequantize_grouped returned shape {x_hat.shape}, expected {x.shape}"
    assert np.all(np.isfinite(x_hat)), "dequantize_grouped returned NaN or inf for finite x"
    _assert_within_half_a_step(x, x_hat, _group_amax(x, group_size), bits, " of its group")


@pytest.mark.task("grouped")
@given(xg=grouped_inputs(), bits=BITS)
def test_grouped_requantizing_a_dequantized_tensor_gives_the_same_codes(grp, xg, bits):
    x, group_size = xg
    q1, scales = grp.quantize_grouped(x, bits, group_size)
    q1 = _codes(q1, x.shape)
    per_element = np.repeat(np.asarray(scales, dtype=np.float64), group_size, axis=-1)
    x_hat = (q1 * per_element).astype(x.dtype)
    q2 = _codes(grp.quantize_grouped(x_hat, bits, group_size)[0], x.shape)
    bad = q1 != q2
    assert not bad.any(), f"code at {_first(bad)} was {q1[bad][0]}, quantizing its dequantized value gives {q2[bad][0]}"


@pytest.mark.task("grouped")
def test_an_outlier_only_coarsens_its_own_group(kata):
    group_size, bits = 16, 4
    x = rng(21).standard_normal((2, 8 * group_size)).astype(np.float32)
    spiked = x.copy()
    spiked[1, 5 * group_size + 3] = 1000.0  # in group 5 of row 1

    def group_errors(a):
        q, scales = kata.quantize_grouped(a, bits, group_size)
        err = np.abs(np.asarray(kata.dequantize_grouped(q, scales, group_size), np.float64) - x)
        err[1, 5 * group_size + 3] = 0.0  # the outlier itself is not judged
        return err.reshape(2, -1, group_size).max(axis=-1)

    before, after = group_errors(x), group_errors(spiked)
    others = np.ones_like(before, dtype=bool)
    others[1, 5] = False
    moved = others & ~np.isclose(after, before, rtol=REL_TOL, atol=0)
    assert not moved.any(), (
        f"an outlier in group 5 of row 1 changed the error of group {int(np.argwhere(moved)[0][1])} "
        f"of row {int(np.argwhere(moved)[0][0])}: do all groups share one scale?"
    )
    assert after[1, 5] > 2 * before[1, 5], "the outlier's own group should come back coarser, its scale grew"


@pytest.mark.task("grouped")
@given(x=tensors(st.tuples(st.integers(1, 5), st.integers(1, 12))), bits=BITS)
def test_one_group_per_row_gives_the_per_channel_symmetric_codes(grp, x, bits):
    q, _ = grp.quantize_grouped(x, bits, x.shape[-1])
    q = _codes(q, x.shape)
    qmax = 2 ** (bits - 1) - 1
    scale = _slice_amax(x, 0) / qmax  # one scale per row: per-channel symmetric with axis=0
    ratio = np.divide(x.astype(np.float64), scale, out=np.zeros(x.shape), where=scale > 0)
    bad = ~_codes_match(q, ratio)
    assert not bad.any(), (
        f"code at {_first(bad)} is {q[bad][0]}, per-channel symmetric gives {np.round(ratio[bad][0]):g}"
    )


@pytest.mark.task("grouped")
def test_grouped_all_zero_groups_dequantize_to_exact_zeros(kata):
    x = np.zeros((2, 8), dtype=np.float32)
    x[0, :4] = [1.0, -3.0, 2.0, 0.5]
    q, scales = kata.quantize_grouped(x, 4, 4)
    x_hat = np.asarray(kata.dequantize_grouped(q, scales, 4))
    assert np.all(np.asarray(q)[:, 4:] == 0) and np.all(np.asarray(q)[1] == 0), "groups of zeros got nonzero codes"
    assert np.all(np.isfinite(x_hat)), "a group of zeros dequantizes to NaN or inf (0 / 0?)"
    assert np.all(x_hat[x == 0] == 0), "groups of zeros do not come back as exact zeros"


@pytest.mark.task("grouped")
def test_grouped_gives_a_group_of_zeros_scale_zero(kata):
    x = np.zeros((2, 8), dtype=np.float32)
    x[0, :4] = [1.0, -3.0, 2.0, 0.5]
    _, scales = kata.quantize_grouped(x, 4, 4)
    got = np.asarray(scales, dtype=np.float64)
    assert got.shape == (2, 2), f"scales have shape {got.shape}, expected (2, 2) (one per group of 4)"
    zero = np.array([[False, True], [True, True]])
    assert np.all(got[zero] == 0), f"groups of zeros got scales {got[zero].tolist()}, not 0"


@pytest.mark.task("grouped")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_grouped_rounds_exact_halves_to_even(kata, dtype):
    # Each group's max|x| is 7 = qmax at 4 bits: qmax / max|group| = 1, so every .5 below is an exact tie.
    x = np.array([[7.0, 2.5, -1.5, 0.5, 3.5, -7.0, 1.0, 6.5]], dtype=dtype)
    want = [[7, 2, -2, 0, 4, -7, 1, 6]]
    q, _ = kata.quantize_grouped(x, 4, 4)
    got = _codes(q, x.shape).tolist()
    assert got == want, f"quantize_grouped({x.tolist()}, 4, 4) gave codes {got}; round half to even gives {want}"


@pytest.mark.task("grouped")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_grouped_scales_and_dequantized_values_keep_the_float_dtype(kata, dtype):
    x = rng(22).standard_normal((3, 16)).astype(dtype)
    q, scales = kata.quantize_grouped(x, 4, 8)
    got = np.asarray(scales).dtype
    assert got == dtype, f"quantize_grouped gave scales of dtype {got} for x of dtype {x.dtype}; they come in x's"
    codes = np.array([[3, -7, 0, 1], [5, -2, 7, 0]], dtype=np.int8)
    x_hat = np.asarray(kata.dequantize_grouped(codes, np.array([[0.5, 0.25], [2.0, 1.0]], dtype=dtype), 2))
    assert x_hat.dtype == dtype, f"dequantize_grouped returned dtype {x_hat.dtype} for {dtype.__name__} scales"


@pytest.mark.task("grouped")
@pytest.mark.parametrize("bits", [8, 4])
def test_grouped_float16_groups_of_small_values_get_round_x_over_scale_codes(kata, bits):
    """float16 holds at most 65504: qmax / max|group| taken in float16 overflows to inf for a group whose
    max|x| is below qmax / 65504 (2e-3 at 8 bits), and every nonzero code becomes +-qmax."""
    x = np.array(
        [[1e-4, -5e-5, 2.5e-5, 0.0], [3e-3, 1e-3, -2e-3, 0.0], [6e-6, -2e-6, 1e-6, 4e-6], [0.5, -0.25, 0.125, 0.0]],
        dtype=np.float16,
    ).reshape(1, 16)
    q, scales = kata.quantize_grouped(x, bits, 4)
    q = _codes(q, x.shape)
    got = np.asarray(scales).dtype
    assert got == np.float16, f"quantize_grouped gave scales of dtype {got} for float16 x; they come in x's"
    qmax = 2 ** (bits - 1) - 1
    amax = _group_amax(x, 4)
    ratio = x.astype(np.float64) / (amax / qmax)
    bad = ~_codes_match(q, ratio)
    assert not bad.any(), (
        f"float16 value {float(x[bad][0]):.4g} in a group whose max|x| is {amax[bad][0]:.3g} got code {q[bad][0]}, "
        f"round(x / scale) is {np.round(ratio[bad][0]):g}"
    )


@pytest.mark.task("grouped")
def test_grouped_rejects_an_indivisible_group_size_naming_both_numbers(kata):
    with pytest.raises(ValueError) as info:
        kata.quantize_grouped(np.ones((2, 12), np.float32), 4, 5)
    message = str(info.value)
    assert "5" in message and "12" in message, (
        f"the error should name group_size 5 and the length 12, it says: {message}"
    )


@pytest.mark.task("grouped")
@pytest.mark.parametrize(
    "x, bits",
    [
        (np.ones(8, np.float32), 1),
        (np.ones(8, np.float32), 9),
        (np.arange(8), 4),
        (np.array([1.0, np.nan, 2.0, 3.0]), 4),
        (np.array([1.0, 2.0, -np.inf, 3.0]), 4),
    ],
    ids=["bits=1", "bits=9", "int", "nan", "inf"],
)
def test_grouped_rejects_bad_bits_integers_nan_and_inf(kata, x, bits):
    with pytest.raises(ValueError):
        kata.quantize_grouped(x, bits, 4)


@pytest.mark.task("grouped")
@pytest.mark.parametrize(
    "q, scales",
    [
        (np.int8(3), np.ones(1, np.float32)),  # a scalar: no axis to group
        (np.zeros((2, 8), np.int8), np.ones((2, 3), np.float32)),  # 8 // 4 = 2 groups a row, not 3
        (np.zeros((2, 8), np.int8), np.ones((3, 2), np.float32)),  # rows that do not match
        (np.zeros((2, 8), np.int8), np.ones(2, np.float32)),  # one row of scales for two rows of codes
        (np.zeros((2, 8), np.int8), np.ones((1, 2), np.float32)),  # the same, kept 2-D: it only broadcasts
    ],
    ids=["scalar", "groups", "rows", "one row", "one row 2-d"],
)
def test_dequantize_grouped_rejects_scales_that_do_not_fit_the_codes(kata, q, scales):
    with pytest.raises(ValueError):
        kata.dequantize_grouped(q, scales, 4)


# -------------------------------------------------------------------- packing


@pytest.mark.task("packing")
def test_pack_int4_puts_element_2i_in_the_low_nibble(kata):
    packed = np.asarray(kata.pack_int4(np.array([1, -1, -8, 7, 0, 5], dtype=np.int8)))
    want = [0xF1, 0x78, 0x50]  # -1 is 0xF, -8 is 0x8 in 4-bit two's complement
    assert packed.dtype == np.uint8, f"pack_int4 must return uint8, got {packed.dtype}"
    assert packed.tolist() == want, (
        f"pack_int4([1, -1, -8, 7, 0, 5]) gave {[hex(b) for b in packed.tolist()]}, expected {[hex(b) for b in want]}"
    )


@pytest.mark.task("packing")
@given(codes=st.lists(st.integers(-8, 7), min_size=0, max_size=41))
@example(codes=[])
@example(codes=[-8])
@example(codes=[7, -8, 3])
def test_pack_then_unpack_round_trips_exactly(pack, codes):
    q = np.array(codes, dtype=np.int8)
    packed = np.asarray(pack.pack_int4(q))
    assert packed.shape == ((q.size + 1) // 2,), (
        f"{q.size} codes packed into {packed.shape} bytes, expected {(q.size + 1) // 2}"
    )
    lows = packed.astype(np.int64) & 0xF
    want = np.array(codes[0::2], dtype=np.int64) & 0xF
    assert np.array_equal(lows, want), (
        f"the low nibbles {lows.tolist()} should hold elements 0, 2, 4, ...: {want.tolist()}"
    )
    back = np.asarray(pack.unpack_int4(packed, q.size))
    assert back.tolist() == codes, f"unpack_int4(pack_int4({codes})) gave {back.tolist()}"


@pytest.mark.task("packing")
def test_unpack_int4_returns_int8_codes(kata):
    back = np.asarray(kata.unpack_int4(np.array([0xF1, 0x78, 0x05], dtype=np.uint8), 5))
    assert back.dtype == np.int8, f"unpack_int4 returned dtype {back.dtype}; the docstring promises int8 codes"
    assert back.tolist() == [1, -1, -8, 7, 5], f"unpack_int4([0xF1, 0x78, 0x05], 5) gave {back.tolist()}"


ODD_CODES = st.integers(0, 20).flatmap(lambda k: st.lists(st.integers(-8, 7), min_size=2 * k + 1, max_size=2 * k + 1))


@pytest.mark.task("packing")
@given(codes=ODD_CODES)
@example(codes=[-1])
@example(codes=[1, -1, 7])
def test_pack_int4_pads_an_odd_count_with_one_zero_code(pack, codes):
    padded = [c & 0xF for c in codes] + [0]
    want = [lo | (hi << 4) for lo, hi in zip(padded[0::2], padded[1::2])]
    got = np.asarray(pack.pack_int4(np.array(codes, dtype=np.int8))).tolist()
    assert got == want, (
        f"pack_int4({codes}) gave {[hex(b) for b in got]}, expected {[hex(b) for b in want]} "
        "(the last byte's high nibble holds the zero code that pads an odd count)"
    )


@pytest.mark.task("packing")
@pytest.mark.parametrize("codes", [[8], [-9], [0, 16]])
def test_pack_int4_rejects_codes_outside_4_bits(kata, codes):
    with pytest.raises(ValueError):
        kata.pack_int4(np.array(codes, dtype=np.int16))


@pytest.mark.task("packing")
@pytest.mark.parametrize(
    "packed, n",
    [
        (np.zeros(2, np.uint8), 5),  # 5 codes need 3 bytes
        (np.zeros(2, np.uint8), 2),  # 2 codes fill 1 byte
        (np.zeros((2, 1), np.uint8), 4),  # not 1-D
        (np.zeros(2, np.int16), 4),  # not bytes
    ],
    ids=["too-few-bytes", "too-many-bytes", "2-d", "int16"],
)
def test_unpack_int4_rejects_bytes_that_do_not_hold_n_codes(kata, packed, n):
    with pytest.raises(ValueError):
        kata.unpack_int4(packed, n)


# ---------------------------------------------------------- llama.cpp blocks


def _fp16(d: float) -> bytes:
    return struct.pack("<e", d)


def _q8_0_bytes(d: float, codes: list[int]) -> bytes:
    return _fp16(d) + np.array(codes, dtype=np.int8).tobytes()


def _q4_0_bytes(d: float, codes: list[int]) -> bytes:
    return _fp16(d) + bytes(codes[j] | (codes[j + 16] << 4) for j in range(16))


# Hand-computed blocks: (values, d, codes).
_TIES = [0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.0, -127.0] + [0.0] * 24
Q8_0_BLOCKS = {
    # max|x| = 127 so d = 1: every .5 rounds away from zero (0.5 -> 1, 2.5 -> 3, -2.5 -> -3).
    "ties": (_TIES, 1.0, [1, 2, 3, -1, -3, 127, 127, -127] + [0] * 24),
    "zeros": ([0.0] * 32, 0.0, [0] * 32),
    # max|x| = 254 from a negative value: d = 2, x / d = -127, 2.5, -1.5, 0.5, 0.25.
    "negative max": ([-254.0, 5.0, -3.0, 1.0, 0.5] + [0.0] * 27, 2.0, [-127, 3, -2, 1, 0] + [0] * 27),
    # d = 1: roundf(±(0.5 - 2^-25)) is 0, though |x| + 0.5 rounds up to 1.0 in float32.
    "just below a half": ([127.0, 0.5 - 2.0**-25, -(0.5 - 2.0**-25)] + [0.0] * 29, 1.0, [127, 0, 0] + [0] * 29),
    # d = max|x| / 127 and x * (1 / d) in float32 give 84.5, so 85; in float64, x * id is 84.49999: 84.
    "float32 d": (
        [1.8586623668670654, 1.2366689443588257] + [0.0] * 30,
        float(np.float32(1.8586623668670654) / np.float32(127)),
        [127, 85] + [0] * 30,
    ),
}
Q4_0_BLOCKS = {
    # m = -8 (negative): d = 1, q = min(15, floor(x + 8.5)); ties x = 0.5 -> 9, -0.5 -> 8, 7.5 -> 15.
    "negative max": ([-8.0, 0.5, -0.5, 1.5, 7.5, 3.0] + [0.0] * 26, 1.0, [0, 9, 8, 10, 15, 11] + [8] * 26),
    # m = 16 (positive): d = -2, q = floor(-x / 2 + 8.5).
    "positive max": (
        [16.0, -10.0, 1.0, -1.0] + [0.0] * 12 + [2.0, -3.0] + [0.0] * 14,
        -2.0,
        [0, 13, 8, 9] + [8] * 12 + [7, 10] + [8] * 14,
    ),
    # |8| == |-8|: the first one (8) wins, so d = -1 and -8 maps to min(15, 16) = 15.
    "first max wins": ([0.0, 8.0, -8.0] + [0.0] * 29, -1.0, [8, 0, 15] + [8] * 29),
    # The same tie with the negative value first: it wins, d = 1, and 8 maps to min(15, 16) = 15.
    "first max wins, negative first": ([0.0, -8.0, 8.0] + [0.0] * 29, 1.0, [8, 0, 15] + [8] * 29),
    # m = 32: d = -4, id = -0.25. -(2 - 2^-21) * id = 0.5 - 2^-23, plus 8.5 rounds to 9.0 in float32: code 9
    # (rounding x * id first, then adding 8, gives 8); (2 + 2^-20) * id = -(0.5 + 2^-22), plus 8.5 rounds
    # to 8.0: code 8 (the other way, 7).
    "just below a half": ([32.0, -(2 - 2.0**-21), 2 + 2.0**-20] + [0.0] * 29, -4.0, [0, 9, 8] + [8] * 29),
    # m = 0: d = 0 / -8 = -0.0 in IEEE arithmetic, stored as fp16 bytes 00 80; id = 0, so every q = 8.
    "zeros": ([0.0] * 32, -0.0, [8] * 32),
}


def _assert_block_bytes(quantize, fmt: str, block: str, values: list, want: bytes) -> None:
    """quantize (the learner's Q8_0 or Q4_0 quantizer) writes the bytes llama.cpp writes for the named block."""
    got = quantize(np.array(values, dtype=np.float32))
    assert isinstance(got, bytes), f"{fmt} returned a {type(got).__name__}; it returns bytes"
    assert got == want, f"{fmt} of the '{block}' block: got {got.hex()}, llama.cpp writes {want.hex()}"


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("block", list(Q8_0_BLOCKS), ids=str)
def test_q8_0_matches_hand_computed_blocks(kata, block):
    values, d, codes = Q8_0_BLOCKS[block]
    _assert_block_bytes(kata.quantize_q8_0, "Q8_0", block, values, _q8_0_bytes(d, codes))


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("block", list(Q4_0_BLOCKS), ids=str)
def test_q4_0_matches_hand_computed_blocks(kata, block):
    values, d, codes = Q4_0_BLOCKS[block]
    _assert_block_bytes(kata.quantize_q4_0, "Q4_0", block, values, _q4_0_bytes(d, codes))


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


# The failure message names the first differing block, so these tests skip
# Hypothesis's shrinking, which is slow on arrays of 32-64 floats.
NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate]
_halves = st.integers(-40, 40).map(lambda k: k / 2)
# A pinned largest value that makes d a power of two (Q8_0: d = 127 / 127 or 254 / 127; Q4_0: d = 32 / -8
# or 64 / -8): halves under it give exact ties, x / d = n + 0.5 in Q8_0 and x / d + 8.5 = n in Q4_0.
_PINS = [127.0, -127.0, 254.0, -254.0, 32.0, -32.0, 64.0, -64.0]


@st.composite
def _pinned_blocks(draw, n: int) -> np.ndarray:
    x = draw(hnp.arrays(np.float32, 32 * n, elements=_halves))
    for b in range(n):
        x[32 * b + draw(st.integers(0, 31))] = draw(st.sampled_from(_PINS))
    return x


llama_blocks = st.integers(1, 2).flatmap(
    lambda n: st.one_of(
        hnp.arrays(
            np.float32,
            32 * n,
            elements=st.one_of(
                st.just(0.0),
                st.floats(2.0**-10, 1000.0, width=32),
                st.floats(-1000.0, -(2.0**-10), width=32),
                _halves,
            ),
        ),
        _pinned_blocks(n),  # in the mixed blocks the floats set d, and exact ties practically never happen
    )
)


def _assert_same_blocks(fmt: str, n: int, got: bytes, want: bytes, size: int) -> None:
    """got equals llama.cpp's bytes want, else name the first block of `size` bytes that differs."""
    assert len(got) == len(want), f"{n} values gave {len(got)} bytes; {fmt} takes {size} per block of 32, {len(want)}"
    if got != want:
        b = next(i for i in range(0, len(want), size) if got[i : i + size] != want[i : i + size])
        raise AssertionError(
            f"{fmt} block {b // size} differs from llama.cpp's: "
            f"got {got[b : b + size].hex()}, want {want[b : b + size].hex()}"
        )


@pytest.mark.task("llama_cpp")
@given(x=llama_blocks)
@settings(phases=NO_SHRINK)
def test_q8_0_matches_the_llama_cpp_formula_on_random_blocks(q8, x):
    _assert_same_blocks("Q8_0", x.size, bytes(q8.quantize_q8_0(x)), _expected_q8_0(x), 34)


@pytest.mark.task("llama_cpp")
@given(x=llama_blocks)
@settings(phases=NO_SHRINK)
def test_q4_0_matches_the_llama_cpp_formula_on_random_blocks(q4, x):
    _assert_same_blocks("Q4_0", x.size, bytes(q4.quantize_q4_0(x)), _expected_q4_0(x), 18)


@pytest.mark.task("llama_cpp")
def test_q8_0_dequantizes_to_code_times_d(kata):
    data = _q8_0_bytes(0.5, list(range(-16, 16))) + _q8_0_bytes(-3.0, [127, -127, 1] + [0] * 29)
    got = np.asarray(kata.dequantize_q8_0(data, 64), dtype=np.float64)
    want = np.concatenate([np.arange(-16, 16) * 0.5, np.array([127, -127, 1] + [0] * 29) * -3.0])
    assert got.shape == (64,), f"dequantize_q8_0(data, 64) returned shape {got.shape}"
    bad = got != want
    assert not bad.any(), f"value {int(np.argmax(bad))} is {got[bad][0]}, code * d is {want[bad][0]}"


@pytest.mark.task("llama_cpp")
def test_q4_0_dequantizes_to_q_minus_8_times_d(kata):
    codes = list(range(16)) + list(range(15, -1, -1))
    data = _q4_0_bytes(0.25, codes) + _q4_0_bytes(0.0, [8] * 32)
    got = np.asarray(kata.dequantize_q4_0(data, 64), dtype=np.float64)
    want = np.concatenate([(np.array(codes) - 8) * 0.25, np.zeros(32)])
    assert got.shape == (64,), f"dequantize_q4_0(data, 64) returned shape {got.shape}"
    bad = got != want
    assert not bad.any(), f"value {int(np.argmax(bad))} is {got[bad][0]}, (q - 8) * d is {want[bad][0]}"


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_q8_0_and_q4_0_dequantize_to_float32(kata, fmt):
    data = _q8_0_bytes(0.5, list(range(-16, 16))) if fmt == "q8_0" else _q4_0_bytes(0.25, list(range(16)) * 2)
    got = np.asarray(getattr(kata, f"dequantize_{fmt}")(data, 32))
    assert got.dtype == np.float32, f"dequantize_{fmt} returned dtype {got.dtype}; it gives float32 values"


# float64 values that float32 rounds onto exact ties or past a code boundary, under a largest value
# that makes d = 1 (Q8_0: 127) or -1 (Q4_0: 8): taken as float32 first, they code as the float32 block does.
_NEAR_TIES = [2.5 - 2.0**-40, -(1.5 + 2.0**-40), 0.5 - 2.0**-30, 3.0 - 2.0**-35] + [0.0] * 27


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_q8_0_and_q4_0_take_float64_input_as_float32(kata, fmt):
    x = np.array([127.0 if fmt == "q8_0" else 8.0] + _NEAR_TIES, dtype=np.float64)
    expected = _expected_q8_0 if fmt == "q8_0" else _expected_q4_0
    got, want = bytes(getattr(kata, f"quantize_{fmt}")(x)), expected(x.astype(np.float32))
    assert got == want, (
        f"quantize_{fmt} of float64 values gave {got.hex()}; taken as float32, as the docstring says, they give "
        f"{want.hex()}"
    )


@pytest.mark.task("llama_cpp")
@pytest.mark.needs("gguf")
def test_q8_0_and_q4_0_match_gguf_on_random_blocks(kata):
    """Exists only where the optional `gguf` package (llama.cpp's Python side,
    in the dev extra) is installed; elsewhere it is not graded at all."""
    import gguf

    x = (rng(31).standard_normal(32 * 64) * np.repeat(10.0 ** rng(32).integers(-3, 4, 64), 32)).astype(np.float32)
    x[:32] = 0.0
    for name, quantize in (("Q8_0", kata.quantize_q8_0), ("Q4_0", kata.quantize_q4_0)):
        want = np.asarray(gguf.quants.quantize(x, getattr(gguf.GGMLQuantizationType, name))).tobytes()
        assert bytes(quantize(x)) == want, (
            f"{name} bytes differ from gguf.quants.quantize (llama.cpp's own Python port)"
        )


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("fn", ["quantize_q8_0", "quantize_q4_0"])
@pytest.mark.parametrize(
    "x",
    [
        np.ones(33, np.float32),
        np.ones(16, np.float32),
        np.arange(32),
        np.where(np.arange(32) == 7, np.nan, 1.0),
        np.where(np.arange(32) == 0, np.inf, 1.0),
    ],
    ids=["33 values", "16 values", "int", "nan", "inf"],
)
def test_llama_cpp_blocks_reject_bad_input(kata, fn, x):
    with pytest.raises(ValueError):
        getattr(kata, fn)(x)


# ---------------------------------------------------------------------- model

MODEL_CONFIG = Config(
    vocab_size=48, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=64, n_experts=4, top_k=2
)
LINEAR = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router", "out")


@pytest.fixture(scope="module")
def small_model():
    return Model.random(MODEL_CONFIG, seed=3)


def _mean_kl(p_model: Model, q_model: Model, tokens) -> float:
    p = probs_from_logits(p_model.forward(tokens), 1.0)
    q = probs_from_logits(q_model.forward(tokens), 1.0)
    return float(np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=-1)))


@pytest.mark.task("model")
def test_quantize_model_returns_a_copy_and_leaves_the_input_untouched(kata):
    # The model the code is given is the jail's own copy, kept for every later call given the same model: a
    # second call starts from whatever the first left in it, and at 8 bits must still be near the float weights.
    model = Model.random(MODEL_CONFIG, seed=4)
    out = kata.quantize_model(model, 2)
    assert isinstance(out, Model), f"quantize_model must return a Model, got {type(out).__name__}"
    again = kata.quantize_model(model, 8)
    for name, w in model.weights.items():
        got = np.asarray(again.weights[name], dtype=np.float64)
        if name.split(".")[-1] not in LINEAR:
            assert np.array_equal(got, w), f"{name!r} changed: the first call changed the model it was given"
            continue
        rows, back = np.swapaxes(w.astype(np.float64), -1, -2), np.swapaxes(got, -1, -2)
        _assert_within_half_a_step(
            rows, back, _group_amax(rows, 32), 8, f" at 8 bits after a 2-bit call on the same model ({name})"
        )


@pytest.mark.task("model")
def test_quantize_model_quantizes_every_linear_weight_and_nothing_else(kata, small_model):
    bits = 4
    out = kata.quantize_model(small_model, bits)
    assert out.config == small_model.config, "the quantized model must keep the config"
    for name, w in small_model.weights.items():
        got = np.asarray(out.weights[name], dtype=np.float64)
        if name.split(".")[-1] in LINEAR:
            assert not np.array_equal(got, w), f"weight {name!r} was not quantized"
            # Whatever the grouping, a group's step is at most the whole tensor's.
            bound = np.max(np.abs(w)) / (2 ** (bits - 1) - 1) / 2 * (1 + REL_TOL)
            err = float(np.max(np.abs(got - w)))
            assert err <= bound, (
                f"weight {name!r} comes back {err:.3g} off, more than half a {bits}-bit step ({bound:.3g})"
            )
        else:
            assert np.array_equal(got, w), f"{name!r} is a norm or the embedding table and must stay in float"


@pytest.mark.task("model")
@pytest.mark.parametrize("group_size", [8, 16])
def test_quantize_model_groups_each_weight_in_runs_of_group_size_along_its_input_axis(kata, small_model, group_size):
    bits = 3
    out = kata.quantize_model(small_model, bits, group_size)
    for name, w in small_model.weights.items():
        if name.split(".")[-1] not in LINEAR:
            continue
        got = np.asarray(out.weights[name], dtype=np.float64)
        assert got.shape == w.shape, f"weight {name!r} came back with shape {got.shape}, not {w.shape}"
        got, rows = np.swapaxes(got, -1, -2), np.swapaxes(w.astype(np.float64), -1, -2)  # (..., out, in)
        _assert_within_half_a_step(
            rows, got, _group_amax(rows, group_size), bits, f" of its group of {group_size} along the input axis"
        )


@pytest.mark.task("model")
def test_eight_bit_model_stays_within_a_small_kl_of_the_float_model(kata, small_model):
    tokens = rng(41).integers(0, MODEL_CONFIG.vocab_size, 24)
    kl = _mean_kl(small_model, kata.quantize_model(small_model, 8), tokens)
    assert kl < KL_8BIT, (
        f"the 8-bit model's next-token distributions are {kl:.3g} nats (mean KL) from the float model's; allowed "
        f"{KL_8BIT}"
    )


@pytest.mark.task("model")
def test_kl_to_the_float_model_grows_as_bits_shrink(kata, small_model):
    tokens = rng(42).integers(0, MODEL_CONFIG.vocab_size, 24)
    kls = {bits: _mean_kl(small_model, kata.quantize_model(small_model, bits), tokens) for bits in (8, 6, 4, 3)}
    common.figure("mean KL of the 8-bit model from the float one", kls[8], unit="nats", better="lower", key="kl8")
    common.figure("mean KL of the 4-bit model from the float one", kls[4], unit="nats", better="lower", key="kl4")
    order = list(kls)
    for more, fewer in zip(order, order[1:]):
        assert kls[more] < kls[fewer], (
            f"KL at {more} bits ({kls[more]:.3g}) should be below KL at {fewer} bits ({kls[fewer]:.3g})"
        )


@pytest.mark.task("model")
def test_eight_bit_greedy_generation_agrees_with_the_float_model(kata):
    """The shipped teacher at 8 bits writes the float teacher's 32 greedy
    characters. The quantized weights are loaded into a fresh reference Model,
    so the reference code, not the code under test, runs the generation, and
    reference.lm's cached decoder keeps it to a few tens of milliseconds."""
    teacher = Model.pretrained("teacher")
    prompt = encode("Return the number of ")
    quantized = kata.quantize_model(teacher, 8)
    rebuilt = Model(teacher.config, {name: np.asarray(w) for name, w in quantized.weights.items()})
    want = generate_cached(CachedLM(teacher), prompt, 32)
    got = generate_cached(CachedLM(rebuilt), prompt, 32)
    agree = float(np.mean(np.array(got) == np.array(want)))
    assert agree >= GREEDY_AGREEMENT, (
        f"the 8-bit teacher writes {agree:.0%} of the float teacher's 32 greedy characters; needs "
        f"{GREEDY_AGREEMENT:.0%}"
    )


@pytest.mark.task("model")
@pytest.mark.parametrize("bits, group_size", [(1, 32), (9, 32), (8, 5), (8, 0)])
def test_quantize_model_rejects_bad_bits_and_group_size(kata, small_model, bits, group_size):
    with pytest.raises(ValueError):
        kata.quantize_model(small_model, bits, group_size)


@pytest.mark.task("model")
def test_quantize_model_names_the_weight_whose_input_width_group_size_does_not_divide(kata):
    # d_model 32 and d_ff 40: groups of 16 divide every input width but that of the MLP's down projection.
    config = Config(vocab_size=48, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=40, max_seq_len=16)
    model = Model.random(config, seed=4)
    with pytest.raises(ValueError) as info:
        kata.quantize_model(model, 4, 16)
    message = str(info.value)
    assert "w_down" in message, f"the error should name the weight whose input width 40 is no multiple of 16: {message}"


@pytest.mark.task("model")
@pytest.mark.parametrize(
    "bits, group_size, scale_bytes, want",
    [(4, 32, 2, 4.5), (8, 32, 2, 8.5), (4, 64, 2, 4.25), (3, 16, 4, 5.0), (8, 128, 0, 8.0), (2, 1, 2, 18.0)],
)
def test_bits_per_weight_counts_the_scales(kata, bits, group_size, scale_bytes, want):
    got = float(kata.bits_per_weight(bits, group_size, scale_bytes))
    if (bits, group_size, scale_bytes) == (4, 32, 2):
        common.figure(
            "bits per weight, 4-bit groups of 32 with fp16 scales", got, unit="bits", better="lower", key="bpw4"
        )
    assert math.isclose(got, want), (
        f"bits_per_weight({bits}, {group_size}, scale_bytes={scale_bytes}) is {got}, expected {want}"
    )


@pytest.mark.task("model")
@pytest.mark.parametrize("bits, group_size, scale_bytes", [(1, 32, 2), (9, 32, 2), (4, 0, 2), (4, 32, -1)])
def test_bits_per_weight_rejects_sizes_outside_their_ranges(kata, bits, group_size, scale_bytes):
    with pytest.raises(ValueError):
        kata.bits_per_weight(bits, group_size, scale_bytes)


# ---------------------------------------------------------------- calibrate

CALIBRATIONS = ("minmax", "percentile", "mse")
# Calibrated scales may differ from the float64 formula by this many units in the last place of x's dtype
# (the cast of a float64 value, computed in another order).
SCALE_ULPS = 4
# The mse scale's squared error may exceed the least over the grid by this share (another summation order),
# plus N * (SCALE_ULPS * eps * max|x|)^2 in float64 where both are at rounding level (an x on the grid: 0).
MSE_RTOL = 1e-9
# A squared error at a scale cast to float32 may exceed the one at another cast scale it matched in float64
# by this share (the casts move each scale by up to half a float32 unit, 6e-8 of it).
CAST_RTOL = 1e-6
# On heavy-tailed data at 4 bits, percentile and mse must leave at most this share of min-max's squared
# error (measured over seeds 0-299: at most 0.80 for percentile and 0.53 for mse on the Student-t draws).
HEAVY_TAIL_SHARE = 0.9
# The KL check's held-out text: the first tokens of the validation docstrings.
KL_TOKENS = 96
# The KL check's mse grid: 20 candidate clips (0.05 max|w| apart) keep its search over the teacher's 1.8M
# weights to a few tenths of a second and land within a few percent of the default grid's KL.
KL_GRID = 20
# calibrate takes "a float array of any shape": 0-d too, and float16 (its scale comes back in float16).
CALIBRATION_TENSORS = tensors(
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=7),
    st.sampled_from([np.float16, np.float32, np.float64]),
)
# Student-t draws beyond this magnitude are drawn again: a lone value of 120 (one draw in ~100 of 4096) is
# the outlier so large that min-max is already the least-squares choice, where clipping cannot pay.
HEAVY_TAIL_CAP = 50.0


@pytest.fixture(scope="module")
def cal(kata):
    _probe(lambda: kata.calibrate(np.ones(4, np.float32), 8))
    return kata


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


def _rounding_level(x: np.ndarray) -> float:
    """A squared error at float64 rounding level for x: N * (SCALE_ULPS * eps * max|x|)^2."""
    amax = float(np.max(np.abs(x.astype(np.float64))))
    return x.size * (SCALE_ULPS * np.finfo(np.float64).eps * amax) ** 2


def _linear_percentile(x: np.ndarray, percentile: float) -> float:
    """The percentile of |x| interpolated linearly between the sorted values at rank (N - 1) * percentile / 100."""
    a = np.sort(np.abs(x.astype(np.float64)).ravel())
    rank = (a.size - 1) * percentile / 100
    lo = math.floor(rank)
    hi = min(lo + 1, a.size - 1)
    return float(a[lo] + (rank - lo) * (a[hi] - a[lo]))


def _calibrated(cal, x: np.ndarray, bits: int, *args, **kwargs) -> float:
    """The learner's scale, checked to be a scalar of x's float dtype, as a float."""
    scale = cal.calibrate(x, bits, *args, **kwargs)
    assert isinstance(scale, np.floating), (
        f"calibrate returned a {type(scale).__name__}; the scale is a NumPy scalar of x's dtype (np.{x.dtype})"
    )
    shape, dtype = np.shape(scale), np.asarray(scale).dtype
    assert shape == (), f"calibrate returned shape {shape}; the scale is one number for the whole tensor"
    assert dtype == x.dtype, f"calibrate returned a scale of dtype {dtype} for x of dtype {x.dtype}; it comes in x's"
    return float(scale)


def _assert_scale_is(got: float, want: float, x: np.ndarray, what: str, slack: float = 0.0) -> None:
    """got equals the float64 value want cast to x's dtype, within SCALE_ULPS units in its last place (plus
    slack, for a value interpolated between two others: float64 rounding relative to their spread)."""
    want = float(np.asarray(want).astype(x.dtype))
    ulp = float(np.spacing(np.asarray(abs(want), dtype=x.dtype)))
    assert abs(got - want) <= SCALE_ULPS * ulp + slack, f"calibrate gave scale {got:.9g}; {what} is {want:.9g}"


# The explicit inputs of the calibration checks: all zeros, one outlier among small values (of both signs),
# values of one magnitude (min-max is exact there), and a symmetric run where |x| and x differ.
_OUTLIER = np.array([100.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1.5], dtype=np.float32)
CALIBRATION_EXAMPLES = [
    np.zeros((2, 3), dtype=np.float32),
    _OUTLIER,
    np.array([[1.0, -1.0], [-1.0, 1.0]], dtype=np.float64),
    np.array([-4.0, -3.0, -2.0, -1.0, 1.0, 2.0, 3.0, 4.0], dtype=np.float64),
    np.array(-41.1875, dtype=np.float32),  # 0-d
    np.array([[0.5, -3.0, 7.25], [1.0, 0.0, -0.125]], dtype=np.float16),
]


def _calibration_examples(**fixed):
    def add(test):
        for x in reversed(CALIBRATION_EXAMPLES):
            test = example(x=x, bits=4, **fixed)(test)
        return test

    return add


@pytest.mark.task("calibrate")
@given(x=CALIBRATION_TENSORS, bits=BITS)
@_calibration_examples()
def test_calibrate_minmax_is_max_abs_over_qmax(cal, x, bits):
    want = float(np.max(np.abs(x.astype(np.float64)))) / (2 ** (bits - 1) - 1)
    _assert_scale_is(_calibrated(cal, x, bits, "minmax"), want, x, "max|x| / qmax")
    _assert_scale_is(_calibrated(cal, x, bits), want, x, "with the default method, minmax, max|x| / qmax")


@pytest.mark.task("calibrate")
@given(x=CALIBRATION_TENSORS, bits=BITS, percentile=st.sampled_from([None, 12.5, 50, 90, 99, 99.9, 100]))
@_calibration_examples(percentile=50)
@example(x=_OUTLIER, bits=3, percentile=None)
@example(x=_OUTLIER, bits=4, percentile=100)
@example(x=np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32), bits=8, percentile=50)
def test_calibrate_percentile_is_the_linear_percentile_of_abs_x_over_qmax(cal, x, bits, percentile):
    p = 99.9 if percentile is None else percentile
    kwargs = {} if percentile is None else {"percentile": percentile}
    got = _calibrated(cal, x, bits, "percentile", **kwargs)
    qmax = 2 ** (bits - 1) - 1
    slack = 16 * np.finfo(np.float64).eps * float(np.max(np.abs(x.astype(np.float64)))) / qmax
    want = _linear_percentile(x, p) / qmax
    _assert_scale_is(got, want, x, f"the {p}th percentile of |x| (linear interpolation) / qmax", slack)


@pytest.mark.task("calibrate")
@given(x=CALIBRATION_TENSORS, bits=BITS, grid=st.sampled_from([None, 1, 2, 5, 16, 100]))
@_calibration_examples(grid=None)
@example(x=_OUTLIER, bits=2, grid=7)
def test_calibrate_mse_is_the_grid_clip_of_least_squared_error(cal, x, bits, grid):
    n = 100 if grid is None else grid
    got = _calibrated(cal, x, bits, "mse", **({} if grid is None else {"grid": grid}))
    qmax = 2 ** (bits - 1) - 1
    clips, errors = _grid_errors(x, bits, n)
    if clips[-1] == 0:
        assert got == 0, f"an all-zero x should get scale 0, got {got:.6g}"
        return
    scales = (clips / qmax).astype(x.dtype).astype(np.float64)
    ulps = np.spacing(scales.astype(x.dtype)).astype(np.float64)
    match = np.flatnonzero(np.abs(scales - got) <= SCALE_ULPS * ulps)
    assert match.size, (
        f"calibrate gave scale {got:.9g}, which is no candidate c_i / qmax, c_i = max|x| * i / {n}, i = 1..{n}"
    )
    i = int(match[-1])
    best = int(np.flatnonzero(errors == errors.min())[-1])
    assert errors[i] <= errors.min() * (1 + MSE_RTOL) + _rounding_level(x), (
        f"calibrate chose the clip {clips[i]:.6g} (i = {i + 1}) with squared error {errors[i]:.6g}; the clip "
        f"{clips[best]:.6g} (i = {best + 1}) gives {errors[best]:.6g}"
    )


# Exact ties: small integers with the clips c_i whole numbers, so every error is exact whatever the order of
# the sums. (x, bits, grid, the two tied clips, the scale of the larger: c / qmax.)
MSE_TIES = {
    "2 bits, clips 2 and 3 of 4": ([4.0, 2.0, -2.0, 2.0], 2, 4, (2.0, 3.0), 3.0),
    "2 bits, clips 6 and 7 of 8": ([8.0, 5.0], 2, 8, (6.0, 7.0), 7.0),
    "3 bits, clips 9 and 12 of 12": ([12.0, 2.0, 10.0, -10.0], 3, 4, (9.0, 12.0), 4.0),
    "2 bits, clips 2 and 4 of 4": ([4.0, 2.0], 2, 2, (2.0, 4.0), 4.0),
}


@pytest.mark.task("calibrate")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(MSE_TIES), ids=str)
def test_calibrate_mse_breaks_a_tie_toward_the_larger_clip(cal, case, dtype):
    values, bits, grid, tied, want = MSE_TIES[case]
    x = np.array(values, dtype=dtype)
    qmax = 2 ** (bits - 1) - 1
    errors = [_squared_error(x, c / qmax, bits) for c in tied]
    assert errors[0] == errors[1], f"the suite's tie case {case!r} is no tie: {errors}"  # the suite's own promise
    got = _calibrated(cal, x, bits, "mse", grid=grid)
    assert got == want, (
        f"calibrate({values}, bits={bits}, 'mse', grid={grid}) gave scale {got:g}; the clips {tied[0]:g} and "
        f"{tied[1]:g} tie at squared error {errors[0]:g} and the larger wins: scale {tied[1]:g} / {qmax} = {want:g}"
    )


# Near-ties: at x = [4, t], 2 bits, grid 4, the clips 3 and 4 tie at t = 5/3 (errors 1 + (3 - t)^2 and t^2).
# Off it by a few millionths, one clip is the least by a few millionths of the error: far above float64's
# rounding, so it is no tie (x, bits, grid, the clip that wins, the runner-up).
MSE_NEAR_TIES = {
    "clip 3 beats 4 by 7e-6": ([4.0, 1.66667], 2, 4, 3.0, 4.0),
    "clip 4 beats 3 by 1e-5": ([4.0, 1.66666], 2, 4, 4.0, 3.0),
    "clip 0.003 beats 0.004 by 7e-6, small values": ([0.004, 0.00166667, -0.001], 2, 4, 0.003, 0.004),
}


@pytest.mark.task("calibrate")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(MSE_NEAR_TIES), ids=str)
def test_calibrate_mse_takes_the_least_error_of_a_near_tie(cal, case, dtype):
    values, bits, grid, win, other = MSE_NEAR_TIES[case]
    x = np.array(values, dtype=dtype)
    qmax = 2 ** (bits - 1) - 1
    clips, errors = _grid_errors(x, bits, grid)
    i, j = (int(np.argmin(np.abs(clips - c))) for c in (win, other))
    gap = errors[j] / errors[i] - 1
    assert np.argmin(errors) == i and 1e-7 < gap < 1e-4, f"the suite's case {case!r} is no near-tie: {errors}"
    got = _calibrated(cal, x, bits, "mse", grid=grid)
    _assert_scale_is(
        got,
        clips[i] / qmax,
        x,
        f"the scale of clip {clips[i]:.6g}, whose squared error {errors[i]:.9g} is less than clip {clips[j]:.6g}'s "
        f"{errors[j]:.9g} by {gap:.2g} of it (a near-tie is no tie: only equal errors go to the larger clip)",
    )


# Error curves over the grid with more than one local minimum, the least neither the first met from i = 1 nor
# from i = grid (x, bits, grid): a search that stops at the first rise misses it. Quarters, exact in float32.
MSE_MANY_MINIMA = {
    "2 bits, grid 10": ([0.5, -0.25, -1.75, 0.5, 0.0, -0.75], 2, 10),
    "2 bits, grid 11": ([-4.75, 1.5, -0.25, 2.0], 2, 11),
    "2 bits, grid 12": ([1.25, 0.5, 3.0, 0.75, -1.0, 0.75], 2, 12),
}


def _first_local_minimum(errors: np.ndarray) -> int:
    """The index where a walk from errors[0] stops at its first rise."""
    i = 0
    while i + 1 < errors.size and errors[i + 1] <= errors[i]:
        i += 1
    return i


@pytest.mark.task("calibrate")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(MSE_MANY_MINIMA), ids=str)
def test_calibrate_mse_searches_the_whole_grid_past_a_local_minimum(cal, case, dtype):
    values, bits, grid = MSE_MANY_MINIMA[case]
    x = np.array(values, dtype=dtype)
    qmax = 2 ** (bits - 1) - 1
    clips, errors = _grid_errors(x, bits, grid)
    best = int(np.argmin(errors))
    walks = (_first_local_minimum(errors), errors.size - 1 - _first_local_minimum(errors[::-1]))
    assert best not in walks and np.sum(errors == errors[best]) == 1, f"the suite's case {case!r}: {errors}"
    _assert_scale_is(
        _calibrated(cal, x, bits, "mse", grid=grid),
        clips[best] / qmax,
        x,
        f"the scale of clip {clips[best]:.6g} (i = {best + 1}), the least squared error {errors[best]:.6g} over "
        f"the grid {np.round(errors, 4).tolist()}, which has a local minimum at i = {walks[0] + 1} and {walks[1] + 1}",
    )


@pytest.mark.task("calibrate")
def test_calibrate_mse_works_in_float64_for_a_float16_x(cal):
    """Float16 values in the thousands: their squared errors overflow float16 (65504) for every candidate, so
    a search in x's dtype finds nothing to prefer and keeps min-max's clip; in float64 clipping pays."""
    x = (_heavy_tailed("normal with outliers") * 1000).astype(np.float16)
    bits, grid = 4, 20
    qmax = 2 ** (bits - 1) - 1
    clips, errors = _grid_errors(x, bits, grid)
    best = int(np.argmin(errors))
    assert best < grid - 1 and np.sum(errors == errors[best]) == 1, f"the suite's float16 case: {errors}"
    _assert_scale_is(
        _calibrated(cal, x, bits, "mse", grid=grid),
        clips[best] / qmax,
        x,
        f"the scale of clip {clips[best]:.6g} (i = {best + 1} of {grid}), of least squared error in float64",
    )


@pytest.mark.task("calibrate")
@given(x=CALIBRATION_TENSORS, bits=BITS)
@_calibration_examples()
def test_calibrate_mse_is_never_worse_than_minmax(cal, x, bits):
    """Both scales come cast to x's dtype, which moves each reconstruction code * s by at most qmax times the
    scale's move: so the root of the squared error may grow by sqrt(N) * qmax * (both moves), SCALE_ULPS units
    of each scale's dtype (an absolute slack, which holds where both errors are at rounding level, even 0)."""
    qmax = 2 ** (bits - 1) - 1
    mse_scale = _calibrated(cal, x, bits, "mse")
    minmax_scale = float((np.max(np.abs(x.astype(np.float64))) / qmax).astype(x.dtype))  # the scale min-max returns
    mse, minmax = _squared_error(x, mse_scale, bits), _squared_error(x, minmax_scale, bits)
    ulps = [float(np.spacing(np.asarray(s, dtype=x.dtype))) for s in (mse_scale, minmax_scale)]
    slack = math.sqrt(x.size) * qmax * SCALE_ULPS * sum(ulps)
    assert math.sqrt(mse) <= math.sqrt(minmax) + slack, (
        f"the mse scale gives squared error {mse:.6g}, worse than min-max's {minmax:.6g}; is max|x| a candidate?"
    )


def _heavy_tailed(kind: str) -> np.ndarray:
    """4096 float32 values: Student-t with 3 degrees of freedom (beyond HEAVY_TAIL_CAP drawn again), or a standard
    normal with four values at +-20."""
    g = rng(61 if kind == "student-t" else 62)
    if kind == "student-t":
        x = g.standard_t(3, 4096)
        while np.any(far := np.abs(x) > HEAVY_TAIL_CAP):
            x[far] = g.standard_t(3, int(np.count_nonzero(far)))
        return x.astype(np.float32)
    x = g.standard_normal(4096)
    x[g.choice(4096, 4, replace=False)] = 20.0 * np.array([1, -1, 1, -1])
    return x.astype(np.float32)


@pytest.mark.task("calibrate")
@pytest.mark.parametrize("kind", ["student-t", "normal with outliers"])
def test_calibrate_percentile_and_mse_beat_minmax_on_heavy_tailed_data(cal, kind):
    x, bits = _heavy_tailed(kind), 4
    errors = {method: _squared_error(x, _calibrated(cal, x, bits, method), bits) for method in CALIBRATIONS}
    for method in ("percentile", "mse"):
        share = errors[method] / errors["minmax"]
        if kind == "student-t":
            common.figure(f"{method} squared error over min-max's, 4 bits, Student-t", share, better="lower")
        assert share <= HEAVY_TAIL_SHARE, (
            f"on {kind} data at 4 bits the {method} scale leaves squared error {errors[method]:.4g}, "
            f"{share:.2f} of min-max's {errors['minmax']:.4g}; allowed {HEAVY_TAIL_SHARE}"
        )


BAD_CALIBRATIONS = {
    "method 'max'": ((np.ones(4, np.float32), 4, "max"), {}),
    "method 'MSE'": ((np.ones(4, np.float32), 4, "MSE"), {}),
    "method None": ((np.ones(4, np.float32), 4, None), {}),
    "bits=1": ((np.ones(4, np.float32), 1, "mse"), {}),
    "bits=9": ((np.ones(4, np.float32), 9, "minmax"), {}),
    "bits=4.0": ((np.ones(4, np.float32), 4.0, "minmax"), {}),
    "percentile=0": ((np.ones(4, np.float32), 4, "percentile"), {"percentile": 0}),
    "percentile=100.5": ((np.ones(4, np.float32), 4, "percentile"), {"percentile": 100.5}),
    "percentile=nan": ((np.ones(4, np.float32), 4, "percentile"), {"percentile": float("nan")}),
    "percentile=-5 with mse": ((np.ones(4, np.float32), 4, "mse"), {"percentile": -5}),
    "grid=0": ((np.ones(4, np.float32), 4, "mse"), {"grid": 0}),
    "grid=2.5": ((np.ones(4, np.float32), 4, "mse"), {"grid": 2.5}),
    "grid=5.0, a whole float": ((np.ones(4, np.float32), 4, "mse"), {"grid": 5.0}),
    "grid=0 with percentile": ((np.ones(4, np.float32), 4, "percentile"), {"grid": 0}),
    "integers": ((np.arange(4), 4, "minmax"), {}),
    "nan": ((_one_bad(np.nan), 4, "mse"), {}),
    "inf": ((_one_bad(np.inf), 4, "percentile"), {}),
    "empty": ((np.zeros(0, np.float32), 4, "minmax"), {}),
}


@pytest.mark.task("calibrate")
@pytest.mark.parametrize("case", list(BAD_CALIBRATIONS), ids=str)
def test_calibrate_rejects_bad_arguments(cal, case):
    args, kwargs = BAD_CALIBRATIONS[case]
    with pytest.raises(ValueError) as info:
        cal.calibrate(*args, **kwargs)
    if case.startswith("method"):
        message = str(info.value)
        assert all(name in message for name in CALIBRATIONS), (
            f"the error for a bad method should name the three allowed, {', '.join(CALIBRATIONS)}: {message}"
        )


def _fake_quantized(w: np.ndarray, scale: float, bits: int) -> np.ndarray:
    """w through codes clip(round(w / scale), -qmax, qmax) and back, in float64 then w's dtype."""
    qmax = 2 ** (bits - 1) - 1
    return (np.clip(np.round(w.astype(np.float64) / scale), -qmax, qmax) * scale).astype(w.dtype)


@pytest.mark.task("calibrate")
def test_a_4_bit_teacher_calibrated_by_mse_is_closer_to_the_float_teacher_than_minmax(cal):
    """Every linear weight of the shipped teacher (those quantize_model quantizes; an expert stack as one
    tensor) gets one 4-bit scale per tensor from calibrate (mse with grid=KL_GRID); the suite quantizes with
    it. Mean KL(float || quantized) of the next-token distributions over the start of the held-out text,
    min-max against mse: about 0.10 against 0.035 nats."""
    bits, qmax = 4, 7
    teacher = Model.pretrained("teacher")
    text = (WEIGHTS_DIR.parent / "data" / "val.txt").read_text(encoding="ascii")
    tokens = encode(text)[:KL_TOKENS]
    p = probs_from_logits(teacher.forward(tokens), 1.0)
    weights = {method: dict(teacher.weights) for method in ("minmax", "mse")}
    for name, w in teacher.weights.items():
        if name.split(".")[-1] not in LINEAR:
            continue
        amax = float(np.max(np.abs(w.astype(np.float64))))
        minmax, mse = _calibrated(cal, w, bits, "minmax"), _calibrated(cal, w, bits, "mse", grid=KL_GRID)
        _assert_scale_is(minmax, amax / qmax, w, f"max|{name}| / qmax")
        i = mse * qmax / amax * KL_GRID
        assert 0 < mse and abs(i - round(i)) < 1e-3 and 1 <= round(i) <= KL_GRID, (
            f"the mse scale of {name!r} is {mse:.6g}, no candidate max|w| * i / {KL_GRID} / qmax"
        )
        assert _squared_error(w, mse, bits) <= _squared_error(w, minmax, bits) * (1 + CAST_RTOL), (
            f"the mse scale of {name!r} gives a larger squared error than its min-max scale"
        )
        weights["minmax"][name] = _fake_quantized(w, minmax, bits)
        weights["mse"][name] = _fake_quantized(w, mse, bits)
    kl = {}
    for method, ws in weights.items():
        q = probs_from_logits(Model(teacher.config, ws).forward(tokens), 1.0)
        kl[method] = float(np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=-1)))
    common.figure("mean KL of the 4-bit teacher, per-tensor min-max scales", kl["minmax"], unit="nats", better="lower")
    common.figure("mean KL of the 4-bit teacher, per-tensor mse scales", kl["mse"], unit="nats", better="lower")
    assert kl["mse"] < kl["minmax"], (
        f"the 4-bit teacher with mse scales is {kl['mse']:.4g} nats (mean KL) from the float teacher, no closer "
        f"than with min-max scales ({kl['minmax']:.4g})"
    )


# ---------------------------------------------------------------- sensitive

PLAN_CHOICES = (2, 3, 4, 8)
# Groups of 16: two per input column of the small models' width 32.
MIXED_GROUP = 16
# A sensitivity may differ from the suite's float64 quantization by this share (plus SENS_ATOL nats): float32
# arithmetic moves a code only where a value sits at a near-tie, which moves a mean KL by far less.
SENS_RTOL = 1e-2
SENS_ATOL = 1e-8
# The small model's mean KL with the plan at the bytes of uniform b bits, over uniform b bits', may be at most
# this (measured over seeds 0-2: 0.67-0.77 at 3 bits, 0.49-0.94 at 4).
MIXED_SHARE = {3: 0.85, 4: 1.0}
# The calibration and held-out tokens of the small models.
MIXED_TOKENS = 64
NAMES = ("wq.a", "wv.b", "out", "router.c", "w_up.d", "w_down.e")  # plan checks' weight names, not all sorted


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


def _linear_names(model: Model) -> list[str]:
    return [name for name in model.weights if name.split(".")[-1] in LINEAR]


def _with(model: Model, replaced: dict[str, np.ndarray]) -> Model:
    """A fresh reference Model: model's weights with some replaced."""
    return Model(model.config, {**model.weights, **{n: np.asarray(w) for n, w in replaced.items()}})


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


@pytest.fixture(scope="module")
def planner(kata):
    _probe(lambda: kata.mixed_precision_plan({2: {"a": 0.0}}, {"a": 32}, 100, choices=(2,)))
    return kata


@st.composite
def plan_inputs(draw):
    """(sensitivity, sizes, budget, choices, group_size): up to six weights of up to 8 groups, sensitivities
    in [0, 1] drawn independently per width (so some drops are negative; often from a few levels, so some
    gains tie), a budget from below the least spent on the smallest choice to above the most."""
    group_size = draw(st.sampled_from([16, 32]))
    choices = tuple(draw(st.lists(st.integers(2, 8), min_size=1, max_size=4, unique=True)))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=len(NAMES), unique=True))
    sizes = {name: group_size * draw(st.integers(1, 8)) for name in names}
    level = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0.0, 1.0))  # a few levels: ties come up
    sensitivity = {b: {name: draw(level) for name in names} for b in choices}
    least = sum(_bits_of(n, min(choices), group_size) for n in sizes.values()) / 8
    most = sum(_bits_of(n, max(choices), group_size) for n in sizes.values()) / 8
    budget = draw(st.one_of(st.integers(int(least) + 1, int(most) + 8), st.just(least), st.just(most)))
    return sensitivity, sizes, budget, choices, group_size


def _plan(planner, sensitivity, sizes, budget, choices, group_size) -> dict[str, int]:
    got = planner.mixed_precision_plan(sensitivity, sizes, budget, choices=choices, group_size=group_size)
    assert isinstance(got, dict) and set(got) == set(sizes), (
        f"the plan must give bits to exactly the weights of sizes {sorted(sizes)}, got {got!r}"
    )
    bad = {name: b for name, b in got.items() if b not in choices}
    assert not bad, f"the plan gives bits outside choices {choices}: {bad}"
    assert list(got) == list(sizes), f"the plan must list the weights in the order of sizes {list(sizes)}: {list(got)}"
    return {name: int(b) for name, b in got.items()}


@pytest.mark.task("sensitive")
@pytest.mark.parametrize("bits, group_size", [(3, 16), (2, 32)])
def test_layer_sensitivity_is_the_mean_kl_of_quantizing_each_linear_weight_alone(kata, small_model, bits, group_size):
    tokens = rng(61).integers(0, MODEL_CONFIG.vocab_size, 24)
    got = kata.layer_sensitivity(small_model, tokens, bits, group_size=group_size)
    names = _linear_names(small_model)
    assert isinstance(got, dict) and set(got) == set(names), (
        f"layer_sensitivity must give one KL for each linear weight {names}, got keys {sorted(got)[:5]}"
    )
    p_log = _log_probs(small_model, tokens)
    for name in names:
        want = _kl_to(
            p_log, _with(small_model, {name: _grouped_back(small_model.weights[name], bits, group_size)}), tokens
        )
        assert math.isclose(float(got[name]), want, rel_tol=SENS_RTOL, abs_tol=SENS_ATOL), (
            f"the sensitivity of {name!r} at {bits} bits in groups of {group_size} is {float(got[name]):.6g} nats; "
            f"quantizing that weight alone moves the predictions {want:.6g} nats (mean KL over the positions)"
        )


@pytest.mark.task("sensitive")
def test_layer_sensitivity_leaves_the_model_untouched(kata):
    # The model the code is given is the jail's own copy, kept for every later call given the same model: a
    # second call measures on whatever the first left in it, and must still give the float model's figures.
    model = Model.random(MODEL_CONFIG, seed=5)
    tokens = rng(62).integers(0, MODEL_CONFIG.vocab_size, 8)
    kata.layer_sensitivity(model, tokens, 3, group_size=MIXED_GROUP)
    again = kata.layer_sensitivity(model, tokens, 3, group_size=MIXED_GROUP)
    p_log = _log_probs(model, tokens)
    for name in _linear_names(model):
        want = _kl_to(p_log, _with(model, {name: _grouped_back(model.weights[name], 3, MIXED_GROUP)}), tokens)
        assert math.isclose(float(again[name]), want, rel_tol=SENS_RTOL, abs_tol=SENS_ATOL), (
            f"called again on the same model, layer_sensitivity gives {float(again[name]):.6g} nats for {name!r} "
            f"where the float model gives {want:.6g}: the first call changed the model it was given"
        )


@pytest.mark.task("sensitive")
@pytest.mark.parametrize(
    "bits, group_size, tokens",
    [(1, 32, [1, 2]), (9, 32, [1, 2]), (3, 0, [1, 2]), (3, 5, [1, 2]), (3, 32, [48]), (3, 32, [])],
)
def test_layer_sensitivity_rejects_bad_bits_group_size_and_tokens(kata, small_model, bits, group_size, tokens):
    with pytest.raises(ValueError):
        kata.layer_sensitivity(small_model, np.array(tokens, dtype=np.int64), bits, group_size=group_size)


@pytest.mark.task("sensitive")
@given(case=plan_inputs())
# One weight of 32 values, 10 bytes at 2 bits: 14 bytes buy the step to 3 bits, not the one on to 8.
@example(case=({2: {"a": 1.0}, 3: {"a": 0.5}, 8: {"a": 0.0}}, {"a": 32}, 14, (2, 3, 8), 32))
# The best upgrade per byte ("a", 40 bytes) does not fit the 10 bytes left; the next ("b", 4 bytes) does.
@example(case=({2: {"a": 1.0, "b": 0.05}, 3: {"a": 0.0, "b": 0.0}}, {"a": 320, "b": 32}, 120, (2, 3), 32))
def test_mixed_plan_is_the_greedy_choice_by_sensitivity_drop_per_byte(planner, case):
    sensitivity, sizes, budget, choices, group_size = case
    want = _greedy_plan(sensitivity, sizes, budget, choices, group_size)
    got = _plan(planner, sensitivity, sizes, budget, choices, group_size)
    assert got == want, (
        f"with choices {choices}, sizes {sizes}, budget {budget} bytes and sensitivities {sensitivity}, the plan "
        f"is {got}; upgrading greedily by sensitivity drop per extra byte gives {want}"
    )


@pytest.mark.task("sensitive")
@given(case=plan_inputs())
def test_mixed_plan_stays_within_the_budget_and_stops_only_when_no_upgrade_fits(planner, case):
    sensitivity, sizes, budget, choices, group_size = case
    got = _plan(planner, sensitivity, sizes, budget, choices, group_size)
    spent = sum(_bits_of(sizes[name], b, group_size) for name, b in got.items())
    assert spent <= 8 * budget, f"the plan {got} takes {spent / 8:g} bytes, over the budget of {budget}"
    ladder = sorted(choices)
    for name, b in got.items():
        if b != ladder[-1]:
            up = ladder[ladder.index(b) + 1]
            assert spent + sizes[name] * (up - b) > 8 * budget, (
                f"the plan {got} leaves {budget - spent / 8:g} bytes unspent, enough to move {name!r} from {b} "
                f"to {up} bits"
            )


@pytest.mark.task("sensitive")
def test_mixed_plan_ranks_by_the_drop_per_byte_not_by_the_drop_alone(kata):
    # Upgrading "big" (3200 values) from 2 to 3 bits drops 1.0 for 400 bytes; "small" (32 values) drops 0.1
    # for 4 bytes, ten times more per byte. The budget holds one of the two upgrades.
    sizes = {"big": 3200, "small": 32}
    sensitivity = {2: {"big": 1.5, "small": 0.3}, 3: {"big": 0.5, "small": 0.2}}
    least = sum(_bits_of(n, 2, 32) for n in sizes.values()) / 8
    got = kata.mixed_precision_plan(sensitivity, sizes, least + 400, choices=(2, 3))
    assert dict(got) == {"big": 2, "small": 3}, (
        f"the plan is {dict(got)}; 'small' buys 0.025 nats per byte and 'big' 0.0025, so 'small' goes first and "
        "'big' no longer fits"
    )


@pytest.mark.task("sensitive")
def test_mixed_plan_breaks_a_tie_toward_the_name_that_sorts_first(kata):
    sizes = {"layers.1.wq": 64, "layers.0.wq": 64}  # the later name first, so dict order does not decide
    same = {"layers.1.wq": 0.5, "layers.0.wq": 0.5}
    sensitivity = {2: same, 4: {name: 0.1 for name in sizes}}
    least = sum(_bits_of(n, 2, 32) for n in sizes.values()) / 8
    got = kata.mixed_precision_plan(sensitivity, sizes, least + 16, choices=(2, 4))
    assert dict(got) == {"layers.0.wq": 4, "layers.1.wq": 2}, (
        f"two upgrades gain exactly as much per byte and one fits: the name that sorts first, 'layers.0.wq', "
        f"takes it; the plan is {dict(got)}"
    )


@pytest.mark.task("sensitive")
def test_mixed_plan_refuses_a_budget_below_the_least_naming_it(kata):
    sizes = {"a": 1024, "b": 2048}
    sensitivity = {b: {"a": 0.0, "b": 0.0} for b in PLAN_CHOICES}
    least = sum(_bits_of(n, 2, 32) for n in sizes.values()) // 8  # 960 bytes
    with pytest.raises(ValueError) as info:
        kata.mixed_precision_plan(sensitivity, sizes, least - 1)
    message = str(info.value).replace(",", "")
    assert str(least) in message, f"the error should name the least budget, {least} bytes: {info.value}"
    kata.mixed_precision_plan(sensitivity, sizes, least)  # the least budget itself is allowed


@pytest.mark.task("sensitive")
@pytest.mark.parametrize(
    "case",
    [
        "choices empty",
        "choices repeat",
        "choices out of range",
        "size not a multiple",
        "size zero",
        "a width unmeasured",
        "a name unmeasured",
        "a name not in sizes",
        "sensitivity NaN",
        "budget NaN",
        "budget infinite",
        "group_size zero",
    ],
)
def test_mixed_plan_rejects_bad_choices_sizes_sensitivity_and_budget(kata, case):
    sizes = {"a": 64, "b": 32}
    sensitivity = {b: {"a": 0.2, "b": 0.1} for b in PLAN_CHOICES}
    kwargs = {"choices": PLAN_CHOICES, "group_size": 32}
    budget = 1000.0
    if case == "choices empty":
        kwargs["choices"] = ()
    elif case == "choices repeat":
        kwargs["choices"] = (2, 2, 4)
    elif case == "choices out of range":
        kwargs["choices"] = (1, 4)
    elif case == "size not a multiple":
        sizes = {"a": 48, "b": 32}
    elif case == "size zero":
        sizes = {"a": 0, "b": 32}
    elif case == "a width unmeasured":
        sensitivity = {b: v for b, v in sensitivity.items() if b != 8}
    elif case == "a name unmeasured":
        sensitivity[3] = {"a": 0.2}
    elif case == "a name not in sizes":
        sensitivity[3] = {"a": 0.2, "b": 0.1, "c": 0.3}
    elif case == "sensitivity NaN":
        sensitivity[4] = {"a": float("nan"), "b": 0.1}
    elif case == "budget NaN":
        budget = float("nan")
    elif case == "budget infinite":
        budget = float("inf")
    else:
        kwargs["group_size"] = 0
    with pytest.raises(ValueError):
        kata.mixed_precision_plan(sensitivity, sizes, budget, **kwargs)


@pytest.mark.task("sensitive")
def test_quantize_model_mixed_quantizes_each_weight_at_its_planned_bits(kata, small_model):
    names = _linear_names(small_model)
    plan = {name: PLAN_CHOICES[i % len(PLAN_CHOICES)] for i, name in enumerate(names)}
    out = kata.quantize_model_mixed(small_model, plan, group_size=MIXED_GROUP)
    assert isinstance(out, Model) and out is not small_model, "quantize_model_mixed must return a new Model"
    for name, w in small_model.weights.items():
        got = np.asarray(out.weights[name], dtype=np.float64)
        if name not in plan:
            assert np.array_equal(got, w), f"{name!r} is a norm or the embedding table and must stay in float"
            continue
        rows, back = np.swapaxes(w.astype(np.float64), -1, -2), np.swapaxes(got, -1, -2)  # (..., out, in)
        _assert_within_half_a_step(
            rows, back, _group_amax(rows, MIXED_GROUP), plan[name], f" at its planned {plan[name]} bits ({name})"
        )
        again = _grouped_back(got, plan[name], MIXED_GROUP)
        assert np.allclose(again, got, rtol=0, atol=REL_TOL * np.max(np.abs(w))), (
            f"{name!r} is not on the grid of {plan[name]}-bit groups of {MIXED_GROUP}: quantizing it again moves it"
        )


@pytest.mark.task("sensitive")
def test_quantize_model_mixed_leaves_the_model_it_is_given_untouched(kata):
    # As with layer_sensitivity: a second call on the same model starts from whatever the first left in it.
    model = Model.random(MODEL_CONFIG, seed=6)
    names = _linear_names(model)
    kata.quantize_model_mixed(model, dict.fromkeys(names, 2), group_size=MIXED_GROUP)
    out = kata.quantize_model_mixed(model, dict.fromkeys(names, 8), group_size=MIXED_GROUP)
    for name, w in model.weights.items():
        got = np.asarray(out.weights[name], dtype=np.float64)
        if name not in names:
            assert np.array_equal(got, w), f"{name!r} changed: the first call changed the model it was given"
            continue
        rows, back = np.swapaxes(w.astype(np.float64), -1, -2), np.swapaxes(got, -1, -2)
        _assert_within_half_a_step(
            rows, back, _group_amax(rows, MIXED_GROUP), 8, f" at 8 bits after a 2-bit call on the same model ({name})"
        )


@pytest.mark.task("sensitive")
@pytest.mark.parametrize("case", ["a weight missing", "a norm added", "bits 9", "a model that is no Model"])
def test_quantize_model_mixed_rejects_a_plan_that_misses_or_adds_a_weight(kata, small_model, case):
    plan = dict.fromkeys(_linear_names(small_model), 4)
    model = small_model
    if case == "a weight missing":
        del plan["out"]
    elif case == "a norm added":
        plan["norm"] = 4
    elif case == "bits 9":
        plan["out"] = 9
    else:
        model = {"weights": dict(small_model.weights)}
    with pytest.raises(ValueError):
        kata.quantize_model_mixed(model, plan, group_size=MIXED_GROUP)


@pytest.mark.task("sensitive")
@pytest.mark.parametrize("bits", [3, 4])
def test_the_mixed_plan_at_the_bytes_of_uniform_bits_is_closer_to_the_float_model(kata, small_model, bits):
    """Sensitivities on calibration tokens at every choice, a plan at the bytes of uniform `bits` bits, the
    model quantized by it; its mean KL on other tokens against uniform `bits` bits (the suite's own).

    The same texts under every grading seed: what a plan gains over uniform weights depends on the text
    it is measured on (0.56-0.85x at 3 bits and 0.48-1.05x at 4 over the texts of seeds 0-19), so a bar that
    held on the suite's own texts could fail a correct plan on another's. On these, the reference's plan
    gives 0.56x and 0.77x."""
    gen = np.random.default_rng(63)
    calib, held_out = (gen.integers(0, MODEL_CONFIG.vocab_size, MIXED_TOKENS) for _ in range(2))
    names = _linear_names(small_model)
    sizes = {name: int(small_model.weights[name].size) for name in names}
    budget = sum(_bits_of(n, bits, MIXED_GROUP) for n in sizes.values()) / 8
    sensitivity = {b: kata.layer_sensitivity(small_model, calib, b, group_size=MIXED_GROUP) for b in PLAN_CHOICES}
    plan = {
        name: int(b)
        for name, b in kata.mixed_precision_plan(sensitivity, sizes, budget, group_size=MIXED_GROUP).items()
    }
    spent = sum(_bits_of(sizes[name], plan[name], MIXED_GROUP) for name in names) / 8
    assert spent <= budget, f"the plan takes {spent:g} bytes, over the {budget:g} of uniform {bits}-bit weights"
    mixed = kata.quantize_model_mixed(small_model, plan, group_size=MIXED_GROUP)
    p_log = _log_probs(small_model, held_out)
    kl_mixed = _kl_to(p_log, _with(small_model, {n: mixed.weights[n] for n in names}), held_out)
    uniform = {n: _grouped_back(small_model.weights[n], bits, MIXED_GROUP) for n in names}
    kl_uniform = _kl_to(p_log, _with(small_model, uniform), held_out)
    share = kl_mixed / kl_uniform
    if bits == 3:
        common.figure(
            "mean KL, mixed plan at the bytes of uniform 3-bit", kl_mixed, unit="nats", better="lower", key="mixed3"
        )
        common.figure("mean KL, uniform 3-bit", kl_uniform, unit="nats", better="lower", key="uniform3")
    common.figure(f"mixed plan's KL over uniform {bits}-bit's, same bytes", share, MIXED_SHARE[bits], better="lower")
    assert share <= MIXED_SHARE[bits], (
        f"at the bytes of uniform {bits}-bit weights the mixed plan's model is {kl_mixed:.4g} nats (mean KL) from "
        f"the float model, {share:.2f}x uniform {bits}-bit's {kl_uniform:.4g}; allowed {MIXED_SHARE[bits]}x"
    )


# ---------------------------------------------------------------- salient

SUITE_ALPHAS = tuple(i / 19 for i in range(20))  # the documented default grid
MIN_MEAN = 1e-8  # the documented floor of a channel's mean |x|
# Scales are float64 formulas: they may differ from the suite's by this share (another order of operations).
SCALE_RTOL = 1e-9
# A chosen alpha's output error may exceed the least over the grid by this share (summation order).
AWQ_RTOL = 1e-6
# A scale read back from a float32 RMSNorm gain (float model's gain over the quantized model's) is this close.
GAIN_RTOL = 1e-5
# Activation-aware 3-bit over plain grouped 3-bit, mean KL on a small model with outlier channels: at most
# this (measured over seeds 0-2: 0.41-0.57).
AWQ_SHARE = 0.8
OUTLIERS = 4  # outlier channels per RMSNorm of the suite's outlier models
OUTLIER_GAIN = 20.0  # their gain; the rows of the weights that read them are divided by as much
DENSE_CONFIG = Config(vocab_size=48, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=64)


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


def _outlier_model(config: Config, seed: int) -> Model:
    """A random model computing what Model.random(config, seed) computes, but OUTLIERS channels of every
    RMSNorm gain are OUTLIER_GAIN times larger and the rows of the weights after it that read them as many
    times smaller: large activations meeting small weights, which plain grouped quantization rounds away."""
    w = dict(Model.random(config, seed=seed).weights)
    gen = np.random.default_rng(seed + 100)
    readers = {"attn_norm": ("wq", "wk", "wv"), "mlp_norm": ("router", "w_gate", "w_up")}
    groups = [
        (f"layers.{i}.{norm}", [f"layers.{i}.{n}" for n in names])
        for i in range(config.n_layers)
        for norm, names in readers.items()
    ]
    for norm, names in [*groups, ("norm", ["out"])]:
        channels = gen.choice(config.d_model, OUTLIERS, replace=False)
        w[norm] = w[norm].copy()
        w[norm][channels] *= OUTLIER_GAIN
        for name in names:
            if name in w:  # a dense model has no router
                w[name] = w[name].copy()
                w[name][..., channels, :] /= OUTLIER_GAIN
    return Model(config, w)


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


@pytest.fixture(scope="module")
def scales(kata):
    _probe(lambda: kata.activation_scales(np.ones((2, 2), np.float32), 0.5))
    return kata


@st.composite
def activations(draw):
    shape = (draw(st.integers(1, 6)), draw(st.integers(1, 8)))
    return draw(hnp.arrays(draw(FLOATS), shape, elements=VALUE))


@pytest.mark.task("salient")
@given(x=activations(), alpha=st.floats(0.0, 1.0))
@example(x=np.array([[1.0, -4.0, 0.0]], np.float32), alpha=0.0)
@example(x=np.array([[1.0, -4.0, 0.0], [3.0, 2.0, 0.0]]), alpha=1.0)
def test_activation_scales_are_mean_abs_to_the_alpha_over_their_geometric_mean(scales, x, alpha):
    got = np.asarray(scales.activation_scales(x, alpha))
    want = _scales(x, alpha)
    assert got.shape == want.shape, (
        f"scales for x of shape {x.shape} have shape {got.shape}, expected (D,) = {want.shape}"
    )
    assert got.dtype == np.float64, f"the scales come in float64, got {got.dtype}"
    assert np.allclose(got, want, rtol=SCALE_RTOL, atol=0), (
        f"for x {x.tolist()} and alpha {alpha}, the scales are {got.tolist()}; mean |x| per column (floored at "
        f"{MIN_MEAN}) to the alpha, over their geometric mean, is {want.tolist()}"
    )


@pytest.mark.task("salient")
@pytest.mark.parametrize(
    "x, alpha",
    [
        (np.ones((2, 3), np.float32), -0.1),
        (np.ones((2, 3), np.float32), 1.5),
        (np.ones((2, 3), np.float32), True),
        (np.ones(3, np.float32), 0.5),
        (np.ones((0, 3), np.float32), 0.5),
        (np.ones((2, 3), np.int64), 0.5),
        (np.array([[1.0, np.nan]]), 0.5),
    ],
)
def test_activation_scales_rejects_bad_x_and_alpha(kata, x, alpha):
    with pytest.raises(ValueError):
        kata.activation_scales(x, alpha)


def _salient_case(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """w (64, 48) and x (96, 64) whose four channels run 20x the others, as large activations in LLMs do."""
    gen = rng(seed)
    x = gen.standard_normal((96, 64)).astype(np.float32)
    x[:, gen.choice(64, 4, replace=False)] *= 20
    return (gen.standard_normal((64, 48)) / 8).astype(np.float32), x


def _assert_awq_result(
    got, w: np.ndarray, x: np.ndarray, bits: int, group_size: int, alphas=SUITE_ALPHAS, s_rtol: float = SCALE_RTOL
) -> float:
    """got = (w_hat, s, alpha) is the documented search's: alpha of the grid with the least output error
    (the smaller on a tie), s its scales (within s_rtol), w_hat its dequantized scaled weight over s.
    Returns alpha."""
    w_hat, s, alpha = np.asarray(got[0]), np.asarray(got[1], dtype=np.float64), float(got[2])
    errors = _awq_errors(w, x, bits, group_size, alphas)
    assert any(math.isclose(alpha, a, abs_tol=1e-12) for a in alphas), f"alpha {alpha} is not one of {alphas}"
    alpha = min(alphas, key=lambda a: abs(a - alpha))
    error, want_s, dq = errors[alpha]
    least = min(e for e, _, _ in errors.values())
    first = min(a for a, (e, _, _) in errors.items() if e <= least * (1 + AWQ_RTOL))
    assert error <= least * (1 + AWQ_RTOL) and alpha == first, (
        f"alpha {alpha} leaves an output error of {error:.6g}; the least over the grid is {least:.6g}, at alpha "
        f"{first} (the output (x / s) @ dequantized against x @ w, not the weights, decides)"
    )
    assert np.allclose(s, want_s, rtol=s_rtol, atol=0), f"the scales returned are not activation_scales(x, {alpha})"
    assert w_hat.shape == w.shape and w_hat.dtype == w.dtype, (
        f"w_hat must have w's shape {w.shape} and dtype {w.dtype}, got {w_hat.shape} {w_hat.dtype}"
    )
    scaled = w.astype(np.float64) * s[:, None]
    step = _group_amax(scaled.T, group_size).T / (2 ** (bits - 1) - 1)  # (D, F): each weight's group's step
    codes = np.round(w_hat * s[:, None] / np.where(step > 0, step, 1))
    ok = _codes_match(codes, scaled / np.where(step > 0, step, 1)) & np.isclose(
        w_hat * s[:, None], codes * step, rtol=1e-5, atol=1e-12
    )
    assert ok.all(), (
        f"w_hat times s at {_first(~ok)} is {(w_hat * s[:, None])[~ok][0]:.6g}, not w * s quantized in groups of "
        f"{group_size} along the input axis ({dq[~ok][0]:.6g}): w_hat is the dequantized scaled weight over s"
    )
    return alpha


@pytest.mark.task("salient")
@pytest.mark.parametrize("bits, group_size, seed", [(3, 32, 71), (4, 16, 72), (2, 32, 73)])
def test_awq_keeps_the_alpha_whose_output_is_closest_to_the_float_output(kata, bits, group_size, seed):
    w, x = _salient_case(seed)
    _assert_awq_result(kata.awq_quantize(w, x, bits, group_size=group_size), w, x, bits, group_size)


@pytest.mark.task("salient")
def test_awq_is_no_worse_than_plain_grouped_quantization_on_its_activations(kata):
    w, x = _salient_case(74)
    w_hat, _, alpha = kata.awq_quantize(w, x, 3)
    x64, want = x.astype(np.float64), x.astype(np.float64) @ w.astype(np.float64)
    awq = float(np.sum((x64 @ np.asarray(w_hat, dtype=np.float64) - want) ** 2))
    plain = float(np.sum((x64 @ _grouped_back(w.astype(np.float64), 3, 32) - want) ** 2))
    common.figure(
        "AWQ's output error over plain grouped quantization's, 3 bits, outlier channels", awq / plain, better="lower"
    )
    assert awq < plain, (
        f"x @ w_hat is {awq:.4g} (squared error) from x @ w, no closer than plain grouped 3-bit quantization "
        f"({plain:.4g}), though four input channels carry 20x the activations (alpha {alpha})"
    )


@pytest.mark.task("salient")
def test_awq_breaks_a_tie_toward_the_smaller_alpha(kata):
    # Every channel has mean |x| = 1, so every alpha gives scales of 1 and the same error.
    gen = rng(75)
    x = np.where(gen.random((16, 32)) < 0.5, -1.0, 1.0).astype(np.float32)
    w = gen.standard_normal((32, 8)).astype(np.float32)
    for alphas, want in ((SUITE_ALPHAS, 0.0), ((0.75, 0.25, 0.5), 0.25)):
        kwargs = {} if alphas is SUITE_ALPHAS else {"alphas": alphas}
        got = float(kata.awq_quantize(w, x, 3, **kwargs)[2])
        assert got == want, f"every alpha of {alphas} gives the same error; the smallest, {want}, wins, not {got}"


@pytest.mark.task("salient")
def test_awq_honours_the_alphas_it_is_given(kata):
    w, x = _salient_case(76)
    _assert_awq_result(kata.awq_quantize(w, x, 3, alphas=(0.5,)), w, x, 3, 32, (0.5,))
    _assert_awq_result(kata.awq_quantize(w, x, 3, alphas=[0.9, 0.1, 0.3]), w, x, 3, 32, (0.1, 0.3, 0.9))


@pytest.mark.task("salient")
@pytest.mark.parametrize(
    "case",
    [
        "w 1-D",
        "w integer",
        "w inf",
        "x narrower",
        "group_size 5",
        "no alphas",
        "alpha 1.5",
        "bits 9",
        "x NaN",
        "x no rows",
    ],
)
def test_awq_quantize_rejects_bad_input(kata, case):
    w, x = np.ones((32, 4), np.float32), np.ones((3, 32), np.float32)
    kwargs, bits = {}, 3
    if case == "w 1-D":
        w = np.ones(32, np.float32)
    elif case == "w integer":
        w = np.ones((32, 4), np.int64)
    elif case == "w inf":
        w[3, 1] = np.inf
    elif case == "x narrower":
        x = np.ones((3, 16), np.float32)
    elif case == "group_size 5":
        kwargs["group_size"] = 5
    elif case == "no alphas":
        kwargs["alphas"] = ()
    elif case == "alpha 1.5":
        kwargs["alphas"] = (0.5, 1.5)
    elif case == "bits 9":
        bits = 9
    elif case == "x NaN":
        x[1, 2] = np.nan
    else:
        x = np.ones((0, 32), np.float32)
    with pytest.raises(ValueError):
        kata.awq_quantize(w, x, bits, **kwargs)


def _awq_models(kata, config: Config, bits: int):
    model = _outlier_model(config, seed=7)
    calib = rng(77).integers(0, config.vocab_size, MIXED_TOKENS)
    return model, calib, kata.quantize_model_awq(model, calib, bits, group_size=MIXED_GROUP)


def _norm_groups(config: Config) -> list[tuple[str, list[str], str | None, int | None]]:
    """(norm, the weights after it, the activation key, the layer) of every RMSNorm before linear weights."""
    mlp = ["router", "w_gate", "w_up"] if config.is_moe else ["w_gate", "w_up"]
    groups = []
    for i in range(config.n_layers):
        groups.append((f"layers.{i}.attn_norm", [f"layers.{i}.{n}" for n in ("wq", "wk", "wv")], "attn", i))
        groups.append((f"layers.{i}.mlp_norm", [f"layers.{i}.{n}" for n in mlp], "mlp", i))
    return groups + [("norm", ["out"], None, None)]


def _side_by_side(model: Model, names: list[str]) -> np.ndarray:
    """The weights `names` (each (in, out), or an expert stack (E, in, out)) side by side: (in, columns)."""
    mats = [np.asarray(model.weights[n]) for n in names]
    return np.concatenate([m if m.ndim == 2 else np.concatenate(list(m), axis=1) for m in mats], axis=1)


@pytest.mark.task("salient")
@pytest.mark.parametrize("config", [MODEL_CONFIG, DENSE_CONFIG], ids=["moe", "dense"])
def test_quantize_model_awq_folds_the_inverse_scale_into_the_norm_before_each_matrix(kata, config):
    """After an RMSNorm the scale is shared by every weight that reads it; the model must hold gain / s
    and the weights w * s quantized: the effective pair is awq_quantize's search on them side by side."""
    bits = 3
    model, calib, out = _awq_models(kata, config, bits)
    layers, final = _reaching(model, calib)
    for norm, names, key, layer in _norm_groups(config):
        x = final if key is None else layers[layer][key]
        gain = np.asarray(out.weights[norm], dtype=np.float64)
        assert np.all(gain != 0), f"the gain of {norm!r} holds a 0"
        s = model.weights[norm].astype(np.float64) / gain  # the scale folded in
        stored = _side_by_side(out, names)
        got = ((stored / s[:, None]).astype(stored.dtype), s, _alpha_of(s, x, norm))
        _assert_awq_result(got, _side_by_side(model, names), x, bits, MIXED_GROUP, s_rtol=GAIN_RTOL)


def _alpha_of(s: np.ndarray, x: np.ndarray, norm: str) -> float:
    """The alpha of the grid whose scales are s, or a failure saying that none is."""
    for alpha in SUITE_ALPHAS:
        if np.allclose(s, _scales(x, alpha), rtol=GAIN_RTOL, atol=0):
            return alpha
    raise AssertionError(
        f"{norm!r}'s gain over the float model's is no 1 / activation_scales(x, alpha) of the activations after "
        "it for any alpha of the grid: is the inverse scale folded into the gain, with the weights after it scaled?"
    )


@pytest.mark.task("salient")
@pytest.mark.parametrize("config", [MODEL_CONFIG, DENSE_CONFIG], ids=["moe", "dense"])
def test_quantize_model_awq_folds_the_inverse_scale_of_wo_and_w_down_into_the_weight(kata, config):
    bits = 3
    model, calib, out = _awq_models(kata, config, bits)
    layers, _ = _reaching(model, calib)
    for i, acts in enumerate(layers):
        pairs = [(f"layers.{i}.wo", model.weights[f"layers.{i}.wo"], out.weights[f"layers.{i}.wo"], acts["wo"])]
        downs = model.weights[f"layers.{i}.w_down"].reshape(-1, config.d_ff, config.d_model)
        got = np.asarray(out.weights[f"layers.{i}.w_down"]).reshape(downs.shape)
        pairs += [(f"layers.{i}.w_down[{e}]", d, g, x) for e, (d, g, x) in enumerate(zip(downs, got, acts["down"]))]
        for name, w, stored, x in pairs:
            stored = np.asarray(stored)
            if len(x) == 0:  # an expert no row reaches: plain grouped quantization
                assert np.allclose(stored, _grouped_back(w, bits, MIXED_GROUP), atol=REL_TOL), (
                    f"{name} is not plain grouped"
                )
                continue
            best = min(_awq_errors(w, x, bits, MIXED_GROUP).items(), key=lambda kv: kv[1][0])
            alpha, (_, s, _) = best
            _assert_awq_result((stored, s, alpha), w, x, bits, MIXED_GROUP)


@pytest.mark.task("salient")
def test_quantize_model_awq_is_closer_to_the_float_model_than_plain_grouped_on_outlier_channels(kata):
    bits = 3
    model, _, out = _awq_models(kata, MODEL_CONFIG, bits)
    held_out = rng(78).integers(0, MODEL_CONFIG.vocab_size, MIXED_TOKENS)
    p_log = _log_probs(model, held_out)
    kl_awq = _kl_to(p_log, _with(model, dict(out.weights)), held_out)
    plain = {n: _grouped_back(model.weights[n], bits, MIXED_GROUP) for n in _linear_names(model)}
    kl_plain = _kl_to(p_log, _with(model, plain), held_out)
    share = kl_awq / kl_plain
    common.figure("mean KL, activation-aware 3-bit, outlier channels", kl_awq, unit="nats", better="lower", key="awq3")
    common.figure("mean KL, plain grouped 3-bit, outlier channels", kl_plain, unit="nats", better="lower", key="plain3")
    common.figure("activation-aware KL over plain grouped KL, 3 bits", share, AWQ_SHARE, better="lower")
    assert share <= AWQ_SHARE, (
        f"the activation-aware 3-bit model is {kl_awq:.4g} nats (mean KL) from the float model on held-out "
        f"tokens, {share:.2f}x plain grouped 3-bit's {kl_plain:.4g}; allowed {AWQ_SHARE}x"
    )


@pytest.mark.task("salient")
def test_quantize_model_awq_leaves_the_model_untouched_and_the_embedding_in_float(kata):
    # The jail keeps its copy of the model for every call given the same model: had the first call changed
    # it, the second would scale and quantize what the first left, and the two would differ.
    model = _outlier_model(MODEL_CONFIG, seed=8)
    tokens = rng(79).integers(0, MODEL_CONFIG.vocab_size, 16)
    first = kata.quantize_model_awq(model, tokens, 4, group_size=MIXED_GROUP)
    again = kata.quantize_model_awq(model, tokens, 4, group_size=MIXED_GROUP)
    assert isinstance(first, Model), f"quantize_model_awq must return a Model, got {type(first).__name__}"
    differ = [n for n, w in first.weights.items() if not np.array_equal(np.asarray(w), np.asarray(again.weights[n]))]
    assert not differ, (
        f"called twice on the same model, quantize_model_awq gives other weights {differ[:3]} the second time: "
        "the first call changed the model it was given"
    )
    assert np.array_equal(np.asarray(again.weights["tok_emb"]), model.weights["tok_emb"]), "tok_emb must stay in float"


@pytest.mark.task("salient")
def test_quantize_model_awq_quantizes_an_expert_no_calibration_row_reaches_plainly(kata):
    # One calibration token reaches top_k of the experts of each layer; the others see no activations to scale by.
    bits, model = 3, _outlier_model(MODEL_CONFIG, seed=9)
    calib = np.array([5], dtype=np.int64)
    out = kata.quantize_model_awq(model, calib, bits, group_size=MIXED_GROUP)
    layers, _ = _reaching(model, calib)
    unreached = 0
    for i, acts in enumerate(layers):
        downs = model.weights[f"layers.{i}.w_down"]
        got = np.asarray(out.weights[f"layers.{i}.w_down"], dtype=np.float64)
        for e, x in enumerate(acts["down"]):
            if len(x) == 0:
                unreached += 1
                want = _grouped_back(downs[e], bits, MIXED_GROUP)
                assert np.allclose(got[e], want, rtol=0, atol=REL_TOL * np.max(np.abs(downs[e]))), (
                    f"layers.{i}.w_down of expert {e}, which no calibration row reaches, must be plain grouped "
                    f"{bits}-bit quantization of the float weight"
                )
    assert unreached, "the calibration token reached every expert: the check needs one it does not"


@pytest.mark.task("salient")
@pytest.mark.parametrize(
    "bits, group_size, tokens", [(1, 16, [1, 2]), (9, 16, [1, 2]), (3, 0, [1, 2]), (3, 5, [1, 2]), (3, 16, [48])]
)
def test_quantize_model_awq_rejects_bad_bits_group_size_and_tokens(kata, small_model, bits, group_size, tokens):
    with pytest.raises(ValueError):
        kata.quantize_model_awq(small_model, np.array(tokens, dtype=np.int64), bits, group_size=group_size)


# ---------------------------------------------------------------------- speed


@pytest.mark.task("speed")
@pytest.mark.speed
def test_grouped_quantization_is_vectorized(kata):
    """1M float32 values (1024 rows of 1024) in groups of 32: 32768 groups.

    The issue asks for "within 10x of one np.round over the same array", but
    with NumPy 2 the max over each group of 32 alone costs 10-20 np.rounds
    (a reduction over a short last axis pays per row), so a correct
    vectorized implementation lands at 20-35x. The baseline is therefore a
    minimal vectorized grouped quantization (baseline_quantization.py, the
    same handful of whole-array calls), timed through the same channel:
    correct vectorized code measures about 1x, a Python loop over the
    groups about 13x and one over single values far more, so the bar sits
    at 5x.
    """
    gen = rng(51)

    def inputs(i):  # the warm-up (i = -1) on an eighth of the rows
        return gen.random((128 if i < 0 else 1024, 1024), dtype=np.float32) - np.float32(0.5), 4, 32

    ratio = time_ratio(
        kata.quantize_grouped,
        load_baseline("quantization").quantize_grouped,
        inputs,
        repeats=3,
        what="quantize_grouped",
    )
    common.figure("quantize_grouped time over whole-array numpy", ratio, SPEED_RATIO, better="lower")
    assert ratio < SPEED_RATIO, (
        f"quantize_grouped took {ratio:.1f}x the time of a few whole-array numpy calls doing the same job "
        f"on 1M values; allowed {SPEED_RATIO:g}x (a Python loop over groups or rows?)"
    )
