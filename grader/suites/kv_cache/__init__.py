"""Grading suite of the kv_cache kata: the cache's contents and errors,
cached forward passes equal to a full recompute, generation equal to
`generate_naive`, the paged cache, and the speed (exact work counts and
wall-clock ratios) a cache buys.

Expected values come from the reference model (`Model.forward`,
`generate_naive`) or from the suite's own bookkeeping of what was written.
The checks that count work count it on a model drawn afresh at every grading
(common.secret_model) whose weights never reach the jail, and check its
answers too: rows pushed through its pieces for show, beside answers made from
a copy of some model in the jail, fail.

The checks are in one module per task, in the registry's order (test_1_cache.py to
test_6_speed.py); the expected answers they compare with in oracles.py, the
inputs they draw in strategies.py, the assertions several modules share in
checks.py and the fixtures in conftest.py.

Audit: each promise of the stub's docstrings that a learner could get wrong, and the checks that
fail without it.

| where | promise | checks |
|---|---|---|
| `CacheFullError` | is a ValueError, raised when tokens do not fit, the cache left as it was | `test_writing_past_max_len_raises_cache_full_error_saying_what_fits`, `test_writing_past_max_len_leaves_the_cache_unchanged` |
| `KVCache.__init__` | keeps n_layers, n_kv_heads, head_dim, max_len and dtype (default float32) as given | `test_the_constructor_keeps_its_sizes_and_dtype_as_attributes` |
| `KVCache.__init__` | preallocates keys and values of the given floating dtype | `test_nbytes_is_two_times_layers_heads_width_max_len_itemsize`, `test_update_returns_keys_and_values_in_the_cache_dtype` |
| `KVCache.__init__` | refuses a size that is not a positive int with ValueError | `test_the_constructor_rejects_sizes_that_are_not_positive` |
| `KVCache.__init__` | refuses a dtype that is not floating point, or no dtype at all, with ValueError | `test_the_constructor_rejects_a_dtype_that_is_not_floating_point` |
| `KVCache.for_model` | an empty float32 cache of the model's layers, kv heads and head width, max_len defaulting to max_seq_len, both ends of 1..max_seq_len accepted | `test_for_model_sizes_the_cache_for_the_model` |
| `KVCache.for_model` | refuses max_len outside 1..max_seq_len or not an int | `test_for_model_rejects_max_len_outside_one_to_max_seq_len` |
| `KVCache.update` | returns every key and value written to that layer, for any sizes of update | `test_update_returns_everything_written_so_far` |
| `KVCache.update` | takes keys and values of any floating dtype (float16, float32, float64), stored in the cache's | `test_update_returns_everything_written_so_far` |
| `KVCache.update` | appends after the tokens that layer already holds, in any order of layers | `test_update_appends_after_the_layer_own_tokens_in_any_order_of_layers` |
| `KVCache.update` | len advances once every layer holds the new tokens (len is what every layer holds) | `test_length_advances_once_every_layer_holds_the_new_tokens`, `test_len_is_what_every_layer_holds_in_any_order_of_layers` |
| `KVCache.update` | returns the cache's dtype | `test_update_returns_keys_and_values_in_the_cache_dtype` |
| `KVCache.update` | never copies the past (views of the buffers) | `test_an_update_at_4096_cached_tokens_costs_at_most_4x_one_at_16` |
| `KVCache.update` | past max_len raises CacheFullError saying what is held and what fits, changing nothing | `test_writing_past_max_len_raises_cache_full_error_saying_what_fits`, `test_writing_past_max_len_leaves_the_cache_unchanged` |
| `KVCache.update` | a bad layer, shape or dtype of keys or values raises ValueError, changing nothing | `test_a_wrong_shape_dtype_or_layer_raises_value_error_and_keeps_the_cache` |
| `KVCache.crop` | forgets every token after the first n in every layer; the next write lands at n | `test_crop_forgets_everything_after_the_first_n_tokens`, `test_continuing_after_crop_matches_a_fresh_cache` |
| `KVCache.crop` | refuses n outside 0..len, len being what every layer holds, changing nothing | `test_crop_rejects_n_outside_zero_to_len`, `test_crop_rejects_n_past_what_every_layer_holds` |
| `KVCache.nbytes` | 2 x layers x Hkv x Dh x max_len x itemsize | `test_nbytes_is_two_times_layers_heads_width_max_len_itemsize`, `test_for_model_sizes_the_cache_for_the_model` |
| `forward_cached` | logits (t, V) equal to model.forward for any chunking, dense, GQA and MoE | `test_chunked_forward_cached_matches_a_full_forward` |
| `forward_cached` | places the new tokens at len(cache) onward, so crop rolls back | `test_continuing_after_crop_matches_a_fresh_cache` |
| `forward_cached` | pushes only the new tokens through each layer, and its logits come from those rows (counted on a model the jail can neither read nor rebuild) | `test_forward_cached_pushes_only_the_new_tokens_through_each_layer` |
| `forward_cached` | tokens that do not fit raise CacheFullError, len unchanged | `test_forward_cached_past_the_cache_raises_cache_full_error` |
| `forward_cached` | a cache of other layers, kv heads or head width raises ValueError | `test_forward_cached_rejects_a_cache_of_another_shape` |
| `forward_cached` | a cache of fewer or more layers is refused before anything is written: its length and contents unchanged | `test_forward_cached_refuses_a_cache_of_other_layers_before_writing_to_it` |
| `forward_cached` | bad tokens and positions past max_seq_len raise ValueError | `test_forward_cached_rejects_bad_tokens_and_positions_past_max_seq_len` |
| `generate` | greedy output equals generate_naive, also for a 1-token prompt, max_seq_len filled and n_new 0 | `test_greedy_generate_matches_generate_naive` |
| `generate` | sampled output equals generate_naive with the same seeded rng, an int temperature too | `test_sampled_generate_matches_generate_naive_with_the_same_seed` |
| `generate` | one prefill and a decode step per token but the last: p + n - 1 positions per layer, the text chosen from those rows (counted on a model the jail can neither read nor rebuild) | `test_generate_pushes_prompt_plus_n_minus_one_positions_through_each_layer` |
| `generate` | refuses a negative n_new, prompt + n_new past max_seq_len, a negative temperature, temperature > 0 without an rng | `test_generate_rejects_bad_arguments` |
| `generate` | is faster than generate_naive | `test_cached_generation_is_at_least_3x_faster_than_naive_at_384_tokens` |
| `PagedKVCache.__init__` | refuses a size that is not a positive int | `test_paged_constructor_rejects_sizes_that_are_not_positive` |
| `PagedKVCache.__init__` | block_size defaults to 16 tokens | `test_paged_blocks_hold_16_tokens_by_default` |
| `PagedKVCache.update` | reads back what a dense cache holds, for any interleaving of sequences | `test_paged_cache_reads_back_what_a_dense_cache_holds` |
| `PagedKVCache.update` | takes keys and values of any floating dtype (float16, float32, float64), stored as float32 | `test_paged_cache_reads_back_what_a_dense_cache_holds` |
| `PagedKVCache.update` | takes blocks only as needed | `test_paged_blocks_in_use_is_never_more_than_the_sequences_need`, `test_paged_blocks_hold_16_tokens_by_default` |
| `PagedKVCache.update` | too few free blocks raise CacheFullError, no block taken, no sequence corrupted | `test_paged_cache_out_of_blocks_raises_and_corrupts_no_sequence`, `test_paged_update_needing_more_blocks_than_are_free_takes_none` |
| `PagedKVCache.update` | an unknown sequence, bad layer, shape or dtype raises ValueError, changing nothing | `test_paged_bad_update_raises_value_error_and_changes_nothing` |
| `PagedKVCache.add_sequence` | starts an empty sequence; a live name raises ValueError keeping its tokens | `test_paged_add_sequence_refuses_a_live_name_and_keeps_its_tokens`, `test_paged_free_refuses_an_unknown_sequence_and_ends_a_live_one` |
| `PagedKVCache.free` | returns the blocks, which others reuse; an unknown sequence raises ValueError | `test_paged_cache_reuses_freed_blocks`, `test_paged_free_refuses_an_unknown_sequence_and_ends_a_live_one` |
| `PagedKVCache.blocks_in_use` | the blocks the live sequences hold | `test_paged_cache_reuses_freed_blocks`, `test_paged_blocks_in_use_is_never_more_than_the_sequences_need` |
| `PagedKVCache.blocks_in_use` | exactly the blocks the sequences need, a partly filled last block counted | `test_paged_blocks_in_use_is_exactly_what_the_sequences_need` |
| `QuantizedKVCache` | codes int8 of shape (layers, Hkv, max_len, Dh), scales float32 (layers, Hkv, max_len) | `test_quantized_buffers_hold_int8_codes_and_float32_scales_and_update_returns_float32` |
| `QuantizedKVCache` | scale max abs over 127 of each token and head's vector, in float32 | `test_quantized_scales_are_max_abs_over_127_of_each_token_and_head`, `test_quantized_codes_of_hand_computed_vectors_round_half_to_even` |
| `QuantizedKVCache` | the scale in float32 for float16, float32 and float64 keys and values alike | `test_quantized_scales_are_max_abs_over_127_of_each_token_and_head` |
| `QuantizedKVCache` | codes round half to even; a zero vector gets scale 0 and comes back exactly zero | `test_quantized_codes_of_hand_computed_vectors_round_half_to_even` |
| `QuantizedKVCache.__init__` | keeps its sizes as attributes; refuses a size that is not a positive int | `test_quantized_constructor_keeps_its_sizes_as_attributes`, `test_quantized_constructor_rejects_sizes_that_are_not_positive` |
| `QuantizedKVCache.for_model` | sized for the model, max_len defaulting to max_seq_len; refuses max_len outside 1..max_seq_len | `test_quantized_for_model_sizes_the_cache_for_the_model` |
| `QuantizedKVCache.update` | returns every token of the layer within half its own step, float32, in any order of layers | `test_quantized_update_returns_every_token_within_half_a_step_in_any_order_of_layers`, `test_quantized_buffers_hold_int8_codes_and_float32_scales_and_update_returns_float32` |
| `QuantizedKVCache.update` | the new tokens too come back as code x scale | `test_quantized_codes_of_hand_computed_vectors_round_half_to_even` |
| `QuantizedKVCache.update` | returns new arrays: a caller's edits to them change nothing later updates return | `test_quantized_update_returns_new_arrays_that_later_calls_do_not_share` |
| `QuantizedKVCache.update` | len advances once every layer holds the new tokens | `test_quantized_len_is_what_every_layer_holds_in_any_order_of_layers` |
| `QuantizedKVCache.update` | past max_len raises CacheFullError, no code, scale or length changed | `test_quantized_writing_past_max_len_raises_cache_full_error_and_changes_nothing` |
| `QuantizedKVCache.update` | a bad layer, shape, dtype or a non-finite value raises ValueError, changing nothing | `test_quantized_bad_update_raises_value_error_and_changes_nothing` |
| `QuantizedKVCache.update` | the teacher on it agrees with float32 greedy decoding at 98% of 256 positions | `test_the_teacher_on_a_quantized_cache_agrees_with_float32_greedy_decoding_at_98_percent_of_256_positions` |
| `QuantizedKVCache.crop` | forgets every token after n; refuses n outside 0..len, changing nothing | `test_quantized_crop_forgets_everything_after_the_first_n_tokens`, `test_quantized_crop_rejects_n_outside_zero_to_len` |
| `QuantizedKVCache.bytes_per_token` | 2 x layers x Hkv x (Dh + 4) | `test_quantized_nbytes_and_bytes_per_token_count_the_codes_and_the_scales` |
| `QuantizedKVCache.nbytes` | bytes_per_token x max_len, codes and scales | `test_quantized_nbytes_and_bytes_per_token_count_the_codes_and_the_scales`, `test_quantized_for_model_sizes_the_cache_for_the_model` |
| `tokens_that_fit` | (budget - ceil(params x bits / 8)) // bytes per token, float32 or int8, 0 when the weights fill it | `test_tokens_that_fit_is_what_the_budget_holds_beside_the_weights` |
| `tokens_that_fit` | an MoE model's weights are all its experts' (n_params), not the K a token runs | `test_tokens_that_fit_counts_every_expert_of_an_moe_model` |
| `tokens_that_fit` | returns an int, 0 (not 0.0) when the weights fill the budget | `test_tokens_that_fit_returns_an_int_even_when_nothing_fits` |
| `tokens_that_fit` | any positive finite weight_bits, int or float: 64, 1, 0.5 included | `test_tokens_that_fit_takes_any_positive_finite_weight_bits` |
| `tokens_that_fit` | refuses a bad budget, cache name or weight_bits | `test_tokens_that_fit_rejects_bad_arguments` |
"""  # noqa: E501 (a row of the audit table is one line, as tests/test_katas.py reads it)
