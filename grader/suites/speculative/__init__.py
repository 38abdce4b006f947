"""Grading suite of the speculative decoding kata (katas/speculative.py).

Exactness in distribution is judged by chi-square goodness-of-fit tests on
seeded draws. Each test compares its statistic with the chi-square quantile
at SIGNIFICANCE = 1e-7, so a correct implementation fails a given test in
about one grading in ten million draws of the randomness, and the whole kata
(a handful of such tests) in well under one in a million. Quantiles come from
the Wilson-Hilferty approximation (no scipy): chi2_{df, 1-a} ~=
df * (1 - 2/(9 df) + z_{1-a} sqrt(2/(9 df)))^3, which errs on the high
(lenient) side in the far tail for small df. Cells with fewer than
MIN_EXPECTED expected draws are pooled so the chi-square approximation holds;
a token drawn where its probability is exactly 0 fails outright.

Sample sizes are chosen so that every listed mistake (accepting by p alone,
resampling from p, an unnormalized residual, a skipped bonus token, the
residual taken from the wrong row) fails by a wide margin on the pinned
examples, while the learner's accept_reject is still called once per trial.

The checks are in one module per task, in the registry's order (test_1_accept_reject.py to
test_4_speed.py); the expected answers they compare with in oracles.py, the
inputs they draw in strategies.py, the assertions several modules share in
checks.py and the fixtures in conftest.py.

Audit: each promise of the stub's docstrings that a learner could get wrong, and the checks that
fail without it.

| where | promise | checks |
|---|---|---|
| `SpecStats` | target_calls and draft_calls count the target's and the draft's logits calls | `test_stats_count_the_calls_and_drafts_of_the_run`, `test_k_zero_samples_from_the_target_alone_without_calling_the_draft` |
| `SpecStats` | drafted and accepted sum the drafts proposed and kept, so accepted + target_calls is exactly n_new | `test_stats_count_the_calls_and_drafts_of_the_run`, `test_a_draft_equal_to_the_target_is_always_accepted_when_sampling` |
| `SpecStats.acceptance_rate` | accepted / drafted (drafted, not draft_calls) | `test_stats_derive_acceptance_rate_and_tokens_per_target_call` |
| `SpecStats.acceptance_rate` | 0.0 when nothing was drafted | `test_stats_derive_acceptance_rate_and_tokens_per_target_call` |
| `SpecStats.tokens_per_target_call` | (accepted + target_calls) / target_calls, and 0.0 before any call | `test_stats_derive_acceptance_rate_and_tokens_per_target_call` |
| `accept_reject` | draft x is kept with probability min(1, p_i(x) / q_i(x)) | `test_first_emitted_token_is_distributed_as_target_row_0`, `test_mean_accepted_drafts_match_the_acceptance_formula` |
| `accept_reject` | a draft with q_i(x) = 0 is rejected | `test_draft_the_draft_model_rules_out_is_rejected` |
| `accept_reject` | a draft the target gives probability 0 is rejected and never comes back as the replacement | `test_draft_the_target_rules_out_is_rejected_and_never_the_replacement` |
| `accept_reject` | the replacement comes from norm(max(0, p_i - q_i)) of the rejected row i | `test_first_emitted_token_is_distributed_as_target_row_0`, `test_token_after_i_accepted_drafts_is_distributed_as_target_row_i` |
| `accept_reject` | a residual summing to zero is replaced from p_i | `test_a_rejection_with_a_zero_residual_is_replaced_from_the_target_row` |
| `accept_reject` | when every draft is kept a bonus token comes from p_K | `test_token_after_i_accepted_drafts_is_distributed_as_target_row_i`, `test_draft_equal_to_target_accepts_every_draft` |
| `accept_reject` | returns the accepted drafts plus exactly one token (1 to K + 1) | `test_returns_the_accepted_drafts_plus_exactly_one_token`, `test_draft_equal_to_target_accepts_every_draft` |
| `accept_reject` | K may be 0 (plain sampling from p_0), also as draft_tokens = [] | `test_no_drafts_is_plain_sampling_from_target_row_0`, `test_an_empty_list_of_drafts_is_a_round_of_k_zero` |
| `accept_reject` | draft tokens of any integer dtype (int64, int32, int16, uint8), probability rows in float32 or float64 | `test_returns_the_accepted_drafts_plus_exactly_one_token` |
| `accept_reject` | rng is the only source of randomness | `test_the_same_seed_gives_the_same_tokens` |
| `accept_reject` | the tokens are a list of Python ints | `test_tokens_come_back_as_a_list_of_python_ints` |
| `accept_reject` | shapes that do not fit (2-D tokens, K or K + 1 rows, two V) raise ValueError | `test_accept_reject_rejects_bad_input_with_value_error` |
| `accept_reject` | rows with a negative or NaN entry, or a sum straying from 1 by more than ROW_SUM_TOLERANCE, raise ValueError, in rows the round never reads too | `test_accept_reject_rejects_bad_input_with_value_error` |
| `accept_reject` | rows straying from 1 by less than ROW_SUM_TOLERANCE are distributions | `test_rows_straying_from_1_by_less_than_row_sum_tolerance_are_distributions` |
| `accept_reject` | token ids outside [0, V), negative ones too, raise ValueError, even after a draft the round rejects | `test_accept_reject_rejects_bad_input_with_value_error` |
| `greedy_accept` | keeps the longest prefix of drafts equal to the argmax, then the argmax at the first mismatch or at row K | `test_greedy_keeps_matching_drafts_then_appends_the_target_argmax` |
| `greedy_accept` | draft tokens of any integer dtype (int64, int32, int16, uint8), logits of any float dtype (float64, float32, float16) | `test_greedy_keeps_matching_drafts_then_appends_the_target_argmax` |
| `greedy_accept` | argmax ties go to the lowest id | `test_greedy_breaks_ties_toward_the_lowest_id` |
| `greedy_accept` | K may be 0, also as draft_tokens = [] | `test_greedy_keeps_matching_drafts_then_appends_the_target_argmax`, `test_an_empty_list_of_drafts_is_a_round_of_k_zero` |
| `greedy_accept` | the tokens are a list of Python ints | `test_tokens_come_back_as_a_list_of_python_ints` |
| `greedy_accept` | shapes that do not fit (K rows, 1-D logits, 2-D draft tokens) raise ValueError | `test_greedy_accept_rejects_bad_input_with_value_error` |
| `greedy_accept` | NaN, inf and -inf logits raise ValueError | `test_greedy_accept_rejects_bad_input_with_value_error` |
| `greedy_accept` | token ids outside [0, V), negative ones too, raise ValueError | `test_greedy_accept_rejects_bad_input_with_value_error` |
| `speculative_generate` | at temperature 0 the output is the target's greedy generation, whatever the draft | `test_greedy_output_is_the_target_generation_with_a_random_draft`, `test_greedy_output_is_the_target_generation_when_the_draft_is_the_target`, `test_greedy_output_is_the_target_generation_with_a_bad_draft` |
| `speculative_generate` | sampled output is distributed as the target's own sampling, the target's logits divided by the temperature | `test_sampled_first_two_tokens_are_distributed_as_the_target_own_sampling` |
| `speculative_generate` | the temperature may be an int: 0 is greedy as 0.0 is, 2 samples as 2.0 does | `test_greedy_output_is_the_target_generation_with_a_random_draft`, `test_sampled_first_two_tokens_are_distributed_as_the_target_own_sampling` |
| `speculative_generate` | the draft's logits are divided by the temperature too (a draft equal to the target is always kept) | `test_a_draft_equal_to_the_target_is_always_accepted_when_sampling` |
| `speculative_generate` | exactly n_new tokens come out, n_new = 0 included | `test_generates_exactly_n_new_tokens` |
| `speculative_generate` | the last round drafts fewer: nothing is drafted only to be trimmed | `test_stats_count_the_calls_and_drafts_of_the_run` |
| `speculative_generate` | one draft call per drafted token and one target call per round | `test_stats_count_the_calls_and_drafts_of_the_run`, `test_draft_equal_to_target_needs_one_target_call_per_k_plus_one_tokens` |
| `speculative_generate` | k = 0 is plain sampling from the target, with no draft call | `test_k_zero_samples_from_the_target_alone_without_calling_the_draft` |
| `speculative_generate` | n_new = 0 calls neither model | `test_draft_equal_to_target_needs_one_target_call_per_k_plus_one_tokens` |
| `speculative_generate` | every softmax is stable for logits whose exp overflows | `test_sampling_survives_logits_whose_exp_overflows` |
| `speculative_generate` | the tokens are a list of Python ints | `test_tokens_come_back_as_a_list_of_python_ints` |
| `speculative_generate` | the stats are those of the run | `test_stats_count_the_calls_and_drafts_of_the_run` |
| `speculative_generate` | the caller's prompt is left unchanged | `test_the_callers_prompt_is_left_unchanged` |
| `speculative_generate` | rng is the run's only source of randomness: one seed, the same tokens | `test_the_loop_given_one_seed_twice_writes_the_same_tokens` |
| `speculative_generate` | k < 0 and n_new < 0 raise ValueError | `test_speculative_generate_rejects_bad_input_with_value_error` |
| `speculative_generate` | a negative temperature raises ValueError | `test_speculative_generate_rejects_a_negative_temperature` |
| `speculative_generate` | a missing rng, an empty prompt and a model without logits raise ValueError, before any model call | `test_speculative_generate_refuses_a_missing_rng_an_empty_prompt_or_a_model_without_logits` |
| `speculative_generate` | a draft that is right saves target calls: up to k + 1 tokens per call | `test_draft_equal_to_target_needs_one_target_call_per_k_plus_one_tokens`, `test_shipped_draft_saves_the_teacher_calls_the_greedy_rule_allows` |
"""  # noqa: E501 (the audit table keeps a row to a line)
