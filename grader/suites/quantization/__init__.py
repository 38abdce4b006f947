"""Grading suite of the quantization kata: uniform (symmetric, affine,
per-channel), grouped, int4 packing, llama.cpp's Q8_0/Q4_0 bytes, a quantized
model, calibration, per-matrix sensitivity and a mixed-precision plan,
activation-aware scaling (AWQ), and the speed of grouped quantization.

Expected values come from the formulas of the issue, computed in oracles.py
in float64 (or float32 where llama.cpp computes in float32), never from the
code under test.

The checks are in one module per task, in the registry's order (test_1_uniform.py to
test_9_speed.py), with the public checks of what learners get wrong beside some of them
(test_6_calibrate_by_hand.py, test_7_sensitive_by_hand.py, test_8_salient_by_hand.py) and in
test_known_mistakes.py: values worked out by hand and relations between calls, which need no
oracle and so ship in the student edition. The expected answers of the other checks are in
oracles.py, the inputs the checks draw in strategies.py, the assertions several modules share
in checks.py and the fixtures in conftest.py.

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
