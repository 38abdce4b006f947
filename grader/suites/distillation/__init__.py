"""Grading suite of the distillation kata: temperature softmax, KL, the Hinton
loss and its gradient, distilling a bigram student from a teacher, and speed.

Every expected value comes from the suite's own float64 formulas (the `_..64`
helpers of oracles.py) or from the reference model, never from the code under test.

The checks are in one module per task, in the registry's order (test_1_softmax.py to
test_6_speed.py); the expected answers they compare with in oracles.py, the
inputs they draw in strategies.py, the assertions several modules share in
checks.py and the fixtures in conftest.py.

Audit: each promise of the stub's docstrings that a learner could get wrong, and the checks that
fail without it.

| where | promise | checks |
|---|---|---|
| `softmax` | softmax(logits / T) in the shape of the logits, each row summing to 1 | `test_softmax_rows_sum_to_one`, `test_softmax_of_huge_logits_is_finite_and_matches_float64` |
| `softmax` | a constant added to a row changes nothing | `test_softmax_ignores_a_constant_added_to_a_row` |
| `softmax` | stable for huge logits: each row's own maximum comes off, logits of 1e4 are fine | `test_softmax_of_huge_logits_is_finite_and_matches_float64` |
| `softmax` | float64 whatever the float dtype of the logits | `test_softmax_and_log_softmax_return_float64` |
| `softmax` | sums to 1 along `axis`, for logits of any shape | `test_softmax_normalizes_along_the_given_axis`, `test_softmax_and_log_softmax_normalize_along_the_given_axis_of_any_shape` |
| `softmax` | T above 1 flattens toward uniform, below 1 sharpens toward one-hot | `test_softmax_flattens_toward_uniform_as_temperature_grows`, `test_softmax_approaches_one_hot_as_temperature_shrinks` |
| `softmax` | ValueError for temperature <= 0 | `test_softmax_rejects_a_temperature_that_is_not_positive` |
| `softmax` | a temperature is a number: an int one is taken as that number | `test_softmax_and_log_softmax_take_an_int_temperature_as_that_number` |
| `softmax` | leaves the caller's logits as they were (float64 ones too, which np.asarray does not copy) | `test_softmax_and_log_softmax_leave_the_callers_logits_unchanged` |
| `softmax` | ValueError for NaN or inf logits | `test_softmax_and_log_softmax_reject_non_finite_logits` |
| `softmax` | ValueError for an axis the logits do not have | `test_softmax_and_log_softmax_reject_an_axis_the_logits_do_not_have` |
| `log_softmax` | log-probabilities matching float64, finite for logits of 1e4 (no log of an underflowed probability) | `test_log_softmax_of_huge_logits_is_finite_and_matches_float64` |
| `log_softmax` | float64 whatever the float dtype of the logits | `test_softmax_and_log_softmax_return_float64` |
| `log_softmax` | normalizes along `axis`, for logits of any shape | `test_softmax_and_log_softmax_normalize_along_the_given_axis_of_any_shape` |
| `log_softmax` | ValueError for temperature <= 0 | `test_softmax_rejects_a_temperature_that_is_not_positive` |
| `log_softmax` | an int temperature is taken as that number; the caller's logits are left as they were | `test_softmax_and_log_softmax_take_an_int_temperature_as_that_number`, `test_softmax_and_log_softmax_leave_the_callers_logits_unchanged` |
| `log_softmax` | ValueError for NaN or inf logits and for an axis the logits do not have | `test_softmax_and_log_softmax_reject_non_finite_logits`, `test_softmax_and_log_softmax_reject_an_axis_the_logits_do_not_have` |
| `kl_divergence` | per-row forward KL, teacher first, both logits divided by T, shape (N,) | `test_kl_matches_a_float64_formula`, `test_kl_is_never_negative` |
| `kl_divergence` | never negative | `test_kl_is_never_negative` |
| `kl_divergence` | 0 when the two rows differ only by a constant | `test_kl_is_zero_when_student_and_teacher_differ_by_a_row_constant` |
| `kl_divergence` | finite and matching float64 for logits of 1e4 | `test_kl_of_huge_logits_is_finite_and_matches_float64` |
| `kl_divergence` | float64 for float32 logits | `test_kl_gradient_and_trained_table_are_float64_for_float32_logits` |
| `kl_divergence` | ValueError for shapes that are not the same (N, V): mismatched, only broadcasting, 1-D or 3-D | `test_kl_rejects_bad_input` |
| `kl_divergence` | ValueError for non-finite logits or temperature <= 0 | `test_kl_rejects_bad_input` |
| `distillation_loss` | alpha T² mean KL + (1 - alpha) mean cross-entropy | `test_loss_matches_the_formula`, `test_loss_equals_hand_computed_values` |
| `distillation_loss` | alpha 1 is T² times the mean KL | `test_loss_with_alpha_one_is_the_scaled_soft_term` |
| `distillation_loss` | the hard cross-entropy uses temperature 1; alpha 0 is plain cross-entropy | `test_loss_with_alpha_zero_is_plain_cross_entropy_at_temperature_one`, `test_loss_equals_hand_computed_values` |
| `distillation_loss` | both means run over the kept rows alone | `test_ignored_rows_do_not_change_the_loss`, `test_loss_skips_the_rows_labelled_ignore_index_whatever_its_value` |
| `distillation_loss` | ignore_index of any value (negative, in [0, V), above V) marks the rows to skip | `test_loss_skips_the_rows_labelled_ignore_index_whatever_its_value` |
| `distillation_loss` | every row ignored gives 0.0 | `test_loss_of_an_all_ignored_batch_is_zero` |
| `distillation_loss` | returns a Python float | `test_loss_matches_the_formula`, `test_loss_of_an_all_ignored_batch_is_zero` |
| `distillation_loss` | ValueError for mismatched shapes, labels out of range, non-finite logits, T <= 0, alpha outside [0, 1] | `test_loss_rejects_bad_input` |
| `distillation_loss` | a label of -100 is out of range when ignore_index is another value | `test_label_minus_100_is_out_of_range_when_ignore_index_is_another_value` |
| `distillation_grad` | the exact gradient alpha T (q_T - p_T) / n + (1 - alpha) (q - onehot) / n, shape (N, V) | `test_gradient_matches_central_finite_differences` |
| `distillation_grad` | ignored rows get zeros and leave the other rows unchanged; an all-ignored batch is all zeros | `test_ignored_rows_get_zero_gradient_and_change_no_other_row`, `test_gradient_matches_central_finite_differences` |
| `distillation_grad` | ignore_index of any value marks the rows to skip | `test_gradient_skips_the_rows_labelled_ignore_index_whatever_its_value` |
| `distillation_grad` | each row sums to 0 | `test_gradient_rows_sum_to_zero` |
| `distillation_grad` | T² times the 1/T of the inner derivative leaves T: the soft gradient keeps its size as T grows | `test_soft_gradient_keeps_its_scale_as_temperature_grows`, `test_gradient_matches_central_finite_differences` |
| `distillation_grad` | float64 for float32 logits | `test_kl_gradient_and_trained_table_are_float64_for_float32_logits` |
| `distillation_grad` | ValueError for the inputs distillation_loss rejects | `test_gradient_rejects_bad_input`, `test_label_minus_100_is_out_of_range_when_ignore_index_is_another_value` |
| `distill_bigram` | W starts as 0.01 * rng.standard_normal((V, V)); steps=0 returns it | `test_distill_bigram_with_zero_steps_returns_the_initial_table` |
| `distill_bigram` | each step is W -= lr dL/dW at the given T and alpha, each position's gradient row added into its previous token's row, label -100 skipped | `test_each_distillation_step_adds_every_positions_gradient_into_its_previous_tokens_row` |
| `distill_bigram` | soft targets bring the student closer to the teacher than labels alone, and training lowers the loss | `test_soft_targets_bring_the_student_closer_to_the_teacher_than_hard_labels`, `test_distilling_lowers_the_distillation_loss` |
| `distill_bigram` | returns a float64 (V, V) table | `test_kl_gradient_and_trained_table_are_float64_for_float32_logits`, `test_distill_bigram_with_zero_steps_returns_the_initial_table` |
| `distill_bigram` | ValueError for bad shapes, tokens out of range, steps < 0, lr <= 0, a missing rng, or what the loss rejects | `test_distill_bigram_rejects_bad_input` |
| `distill_ngram` | a row per distinct context: every suffix of 0..order-1 ids ending with the position's own id, none running off the start | `test_each_row_is_the_mean_teacher_distribution_of_its_context`, `test_every_length_counts_each_position_that_has_that_many_ids_once` |
| `distill_ngram` | each row is the mean of softmax(logits / T) over its positions (probabilities, not logits), summing to 1, with its count | `test_each_row_is_the_mean_teacher_distribution_of_its_context`, `test_every_length_counts_each_position_that_has_that_many_ids_once` |
| `distill_ngram` | contexts int64 (R, order - 1) right-aligned with -1 padding, probs float64 (R, V), counts int64 (R,), rows in any order | `test_each_row_is_the_mean_teacher_distribution_of_its_context` |
| `distill_ngram` | order 1 is the teacher's mean distribution; N = 0 gives empty arrays | `test_order_one_is_the_teacher_mean_distribution`, `test_empty_text_gives_an_empty_table` |
| `distill_ngram` | ValueError for shapes that do not fit, ids not ints in range, non-finite logits (NaN, inf, -inf), an order not an int >= 1, T <= 0 on empty text too | `test_distill_ngram_rejects_bad_input` |
| `distill_ngram` | tokens of any integer dtype (int64, int32, uint8) and an order that is a NumPy int | `test_each_row_is_the_mean_teacher_distribution_of_its_context`, `test_every_length_counts_each_position_that_has_that_many_ids_once` |
| `distill_ngram` | stable for logits whose exp overflows | `test_each_row_is_the_mean_teacher_distribution_of_its_context`, `test_a_table_of_huge_logits_worked_out_by_hand` |
| `distill_ngram` | teacher_logits and tokens are left unchanged | `test_each_row_is_the_mean_teacher_distribution_of_its_context`, `test_distill_ngram_leaves_the_callers_logits_and_tokens_unchanged` |
| `distill_ngram` | on the shipped teacher, the table drafts like it on its kind of text | `test_a_table_distilled_from_the_shipped_teacher_drafts_like_it_on_its_kind_of_text` |
"""  # noqa: E501 (a row of the audit table is one line, as tests/test_katas.py reads it)
