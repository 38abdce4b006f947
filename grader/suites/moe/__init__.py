"""Grading suite of the moe kata: router, top-k gating, capacity and dispatch,
the MoE layer, its losses, and its speed.

Expected values come from the suite's own float64 formulas and loops, or from
the reference model; never from the code under test. Routing depends on the
order of probabilities, so wherever an expected value needs the exact top-k
the suite draws data whose k-th and (k+1)-th probabilities are clearly apart.

The checks are in one module per task, in the registry's order (test_1_router.py to
test_6_speed.py); the expected answers they compare with in oracles.py, the
inputs they draw in strategies.py, the assertions several modules share in
checks.py and the fixtures in conftest.py.

Audit: each promise of the stub's docstrings that a learner could get wrong, and the checks that
fail without it.

| where | promise | checks |
|---|---|---|
| `MoEAux` | load_balancing_loss is that of the routing: every chosen assignment counted, dropped ones too | `test_moe_forward_reports_the_losses_of_its_routing` |
| `MoEAux` | z_loss is the mean over tokens of logsumexp(router logits) squared | `test_moe_forward_reports_the_losses_of_its_routing` |
| `MoEAux` | tokens_per_expert is (E,) ints counting kept assignments only, 0 for an expert no token chose | `test_tokens_per_expert_never_exceed_capacity`, `test_experts_that_get_no_token_count_zero`, `test_expert_work_is_k_over_e_of_running_every_expert` |
| `MoEAux` | dropped is an int, the number of assignments past capacity | `test_dropped_counts_the_assignments_past_capacity`, `test_a_large_capacity_factor_drops_nothing` |
| `router_probs` | (T, E) softmax over experts (not tokens) of x @ w_router, each row summing to 1 | `test_router_probs_are_the_softmax_of_the_logits` |
| `router_probs` | x and w_router in float32 or float64 | `test_router_probs_are_the_softmax_of_the_logits` |
| `router_probs` | finite and right for router logits far past the range of exp | `test_router_probs_are_the_softmax_even_for_logits_of_a_thousand`, `test_router_probs_are_the_softmax_of_the_logits` |
| `router_probs` | ValueError for x not 2-D or of zero tokens, and for w_router not 2-D (1-D or 3-D) or not D rows high | `test_router_probs_rejects_mismatched_shapes` |
| `top_k_gating` | indices (T, K) ints, distinct experts, the K most probable in descending order, ties in any order | `test_top_k_indices_are_the_k_largest_in_descending_order` |
| `top_k_gating` | normalize=True rescales the K chosen probabilities (not all E) to sum to 1; weights have the shape of indices | `test_normalized_weights_are_the_chosen_probabilities_rescaled_to_sum_to_one` |
| `top_k_gating` | probs in float32 or float64 | `test_top_k_indices_are_the_k_largest_in_descending_order` |
| `top_k_gating` | normalize=False returns the chosen probabilities as they are | `test_unnormalized_weights_are_the_raw_probabilities` |
| `top_k_gating` | ValueError for k outside [1, E] | `test_top_k_rejects_k_outside_one_to_e` |
| `top_k_gating` | ValueError for probs that are not (T, E) distributions: a row summing off 1, a negative, a NaN, 1-D | `test_top_k_rejects_probabilities_that_are_not_distributions` |
| `top_k_gating` | a row is a distribution exactly when it sums to 1 within PROB_SUM_TOL (neither stricter nor looser) | `test_a_row_counts_as_a_distribution_exactly_when_it_sums_to_one_within_prob_sum_tol` |
| `expert_capacity` | max(1, ceil(factor * T * K / E)) as an int, not one more when the share is whole, 1 for T = 0 | `test_expert_capacity_is_the_rounded_up_even_share_times_the_factor` |
| `expert_capacity` | the factor a positive number, int or float: an int factor is taken as that number | `test_expert_capacity_is_the_rounded_up_even_share_times_the_factor` |
| `expert_capacity` | ValueError for a negative or non-integer n_tokens or n_experts, n_experts 0, and k not an integer in [1, E] | `test_expert_capacity_rejects_a_bad_count`, `test_expert_capacity_rejects_a_negative_factor_or_a_bad_k` |
| `expert_capacity` | ValueError for a factor that is not a positive finite number: negative, 0, inf, NaN, None | `test_expert_capacity_rejects_a_factor_that_is_not_positive_and_finite`, `test_expert_capacity_rejects_a_negative_factor_or_a_bad_k` |
| `dispatch` | every first choice queues before any second choice, tokens in order within a rank; positions 0-based, dropped ones too | `test_dispatch_drops_exactly_the_assignments_the_priority_rule_names`, `test_dispatch_matches_queueing_one_assignment_at_a_time` |
| `dispatch` | kept iff the queue position is below capacity (capacity 0 keeps nothing) | `test_dispatch_drops_exactly_the_assignments_the_priority_rule_names`, `test_dispatch_matches_queueing_one_assignment_at_a_time` |
| `dispatch` | keep (T, K) bools and position (T, K) ints | `test_dispatch_returns_bool_keep_and_integer_positions`, `test_dispatch_drops_exactly_the_assignments_the_priority_rule_names` |
| `dispatch` | indices of any integer dtype are ints | `test_dispatch_takes_indices_of_any_integer_dtype` |
| `dispatch` | ValueError for indices not 2-D, not ints, out of [0, E), repeating an expert anywhere in a row, or a negative capacity | `test_dispatch_rejects_bad_indices_or_a_negative_capacity` |
| `moe_forward` | y (T, D) is the sum over kept assignments of gate weight times the SwiGLU expert's output | `test_moe_forward_matches_a_float64_per_token_loop`, `test_moe_forward_matches_the_reference_model_block`, `test_moe_forward_matches_the_teachers_block_on_its_own_activations`, `test_moe_with_every_expert_and_no_capacity_is_the_dense_mixture`, `test_permuting_tokens_permutes_the_outputs` |
| `moe_forward` | x and every weight in float32 or float64 | `test_moe_forward_matches_a_float64_per_token_loop` |
| `moe_forward` | capacity_factor None means no limit; a factor with room for every assignment drops nothing | `test_a_large_capacity_factor_drops_nothing`, `test_moe_forward_matches_a_float64_per_token_loop` |
| `moe_forward` | dropped assignments contribute zero while kept ones keep their gate weights | `test_a_fully_dropped_token_outputs_zero`, `test_moe_forward_matches_a_float64_per_token_loop` |
| `moe_forward` | normalize reaches the gating | `test_moe_forward_matches_a_float64_per_token_loop`, `test_moe_forward_is_right_for_router_logits_past_the_range_of_exp` |
| `moe_forward` | finite and right for router logits past the range of exp in float32 | `test_moe_forward_is_right_for_router_logits_past_the_range_of_exp` |
| `moe_forward` | the aux holds the losses and counts of its own routing and capacity | `test_moe_forward_reports_the_losses_of_its_routing`, `test_dropped_counts_the_assignments_past_capacity`, `test_tokens_per_expert_never_exceed_capacity` |
| `moe_forward` | each expert runs once, on its own tokens only, vectorized: K/E of running every expert | `test_expert_work_is_k_over_e_of_running_every_expert`, `test_moe_forward_is_within_3x_of_a_vectorized_layer`, `test_moe_forward_is_10x_faster_than_a_per_token_loop`, `test_moe_forward_does_not_run_every_expert_on_every_token` |
| `moe_forward` | ValueError for mismatched shapes: E taken from the router, w_up and w_down widths that would broadcast | `test_moe_forward_rejects_bad_input` |
| `moe_forward` | ValueError for k out of range or a capacity_factor that is not positive and finite (0 and inf included) | `test_moe_forward_rejects_bad_input` |
| `load_balancing_loss` | E * sum_i f_i * P_i with f_i over the T*K assignments and P_i the mean probability | `test_load_balancing_loss_matches_its_float64_formula`, `test_load_balance_is_one_when_routing_and_probabilities_are_uniform` |
| `load_balancing_loss` | 1.0 when routing and probabilities are uniform | `test_load_balance_is_one_when_routing_and_probabilities_are_uniform` |
| `load_balancing_loss` | grows as routing concentrates on few experts | `test_load_balance_grows_as_routing_concentrates` |
| `load_balancing_loss` | ValueError for probs that are not distributions, to PROB_SUM_TOL exactly | `test_losses_reject_bad_input`, `test_a_row_counts_as_a_distribution_exactly_when_it_sums_to_one_within_prob_sum_tol` |
| `load_balancing_loss` | ValueError for indices that do not fit probs: an expert past E, a row count other than T | `test_losses_reject_bad_input` |
| `router_z_loss` | the mean over tokens of logsumexp(logits) squared | `test_z_loss_matches_its_float64_formula` |
| `router_z_loss` | right for logits of a thousand (no overflow in exp) | `test_z_loss_matches_its_float64_formula_even_for_logits_of_a_thousand` |
| `router_z_loss` | a float, never negative | `test_z_loss_is_never_negative` |
| `router_z_loss` | ValueError for logits that are not a non-empty 2-D array of finite floats: 1-D, 3-D, no tokens, NaN, inf, ints | `test_z_loss_rejects_logits_that_are_not_a_non_empty_2d_array_of_finite_floats`, `test_losses_reject_bad_input` |
"""  # noqa: E501 (a row of the audit table is one line, as tests/test_katas.py reads it)
