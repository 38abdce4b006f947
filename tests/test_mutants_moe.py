"""The moe suite fails every mistake the kata's issue lists (and a few more),
and gives full marks to a correct implementation written differently."""

from mutation import Mutant, alternative_test, mutant_test

KATA = "moe"

PER_TOKEN_LOOP = """    for t, e, g in zip(tokens, experts[order], gates):
        h = x[t:t + 1]  # one token at a time
        y[t] += g * ((_silu(h @ w_gate[e]) * (h @ w_up[e])) @ w_down[e])[0]
"""

EXPERT_LOOP = """    for e in range(E):
        rows = tokens[bounds[e] : bounds[e + 1]]  # this expert's tokens, each at most once
        if rows.size == 0:
            continue
        h = x[rows]  # (n_e, D): one gathered matmul per weight
        hidden = _silu(h @ w_gate[e]) * (h @ w_up[e])  # (n_e, F)
        y[rows] += gates[bounds[e] : bounds[e + 1], None] * (hidden @ w_down[e])
"""

RANK_MAJOR = """    flat = indices.T.reshape(-1)  # (K*T,), rank-major: every first choice, then every second...
    order = np.argsort(flat, kind="stable")  # grouped by expert, queue order kept within each
    starts = np.searchsorted(flat[order], np.arange(n_experts))  # (E,) where each queue begins
    queued = np.empty(flat.size, dtype=np.int64)
    queued[order] = np.arange(flat.size) - starts[flat[order]]
    position = queued.reshape(k, T).T  # (T, K)
"""

MUTANTS = [
    # the list
    Mutant(
        name="top_k_weights_normalized_over_all_experts",
        task="top_k",
        old="weights = weights / np.sum(weights, axis=-1, keepdims=True)",
        new="weights = weights / np.sum(probs, axis=-1, keepdims=True)",
    ),
    Mutant(
        name="top_k_weights_not_renormalized_when_asked", task="top_k", old="    if normalize:\n", new="    if False:\n"
    ),
    Mutant(
        name="top_k_weights_renormalized_when_not_asked", task="top_k", old="    if normalize:\n", new="    if True:\n"
    ),
    Mutant(
        name="load_balancing_loss_without_the_factor_E",
        task="losses",
        old="return float(E * np.dot(f, P))",
        new="return float(np.dot(f, P))",
    ),
    Mutant(
        name="capacity_off_by_one_keeps_position_equal_to_capacity",
        task="capacity",
        old="return position < capacity, position",
        new="return position <= capacity, position",
    ),
    Mutant(
        name="top_k_in_ascending_order", task="top_k", old="np.argsort(-probs, axis=-1", new="np.argsort(probs, axis=-1"
    ),
    # its own take_along_axis then raises IndexError whenever T > E: 'error' is the honest grade
    Mutant(
        name="top_k_along_the_token_axis",
        task="top_k",
        old="np.argsort(-probs, axis=-1",
        new="np.argsort(-probs, axis=0",
        expect=("fail", "error"),
    ),
    # more mistakes
    Mutant(
        name="router_softmax_over_tokens",
        task="router",
        old="return _softmax(x @ w_router)",
        new="return _softmax((x @ w_router).T).T",
    ),
    Mutant(name="capacity_rounded_down", task="capacity", old="math.ceil(", new="math.floor("),
    Mutant(
        name="dispatch_queues_token_by_token",
        task="capacity",
        old=RANK_MAJOR,
        new=RANK_MAJOR.replace("indices.T.reshape(-1)", "indices.reshape(-1)").replace(
            "queued.reshape(k, T).T", "queued.reshape(T, k)"
        ),
    ),
    Mutant(
        name="gates_renormalized_after_dropping",
        task="layer",
        old="        keep, _ = dispatch(indices, E, expert_capacity(T, E, k, capacity_factor))\n",
        new="        keep, _ = dispatch(indices, E, expert_capacity(T, E, k, capacity_factor))\n"
        "        weights = weights * keep / np.maximum(np.sum(weights * keep, axis=-1, keepdims=True), 1e-30)\n",
    ),
    Mutant(
        name="tokens_per_expert_counts_dropped_assignments",
        task="layer",
        old="tokens_per_expert=counts.astype(np.int64)",
        new="tokens_per_expert=np.bincount(indices.reshape(-1), minlength=E)",
    ),
    Mutant(
        name="dropped_assignments_still_contribute",
        task="layer",
        old="experts, gates = indices[keep], weights[keep]",
        new="experts, gates = indices.reshape(-1), weights.reshape(-1)\n    tokens = np.repeat(np.arange(T), k)",
    ),
    Mutant(
        name="z_loss_not_squared",
        task="losses",
        old="return float(np.mean(lse * lse))",
        new="return float(np.mean(lse))",
    ),
    # correct but slow
    Mutant(name="per_token_loop", task="speed", old=EXPERT_LOOP, new=PER_TOKEN_LOOP, expect=("slow",)),
    Mutant(
        name="every_expert_on_every_token",
        task="speed",
        old=EXPERT_LOOP,
        new=EXPERT_LOOP.replace(
            "        h = x[rows]  # (n_e, D): one gathered matmul per weight\n"
            "        hidden = _silu(h @ w_gate[e]) * (h @ w_up[e])  # (n_e, F)\n"
            "        y[rows] += gates[bounds[e] : bounds[e + 1], None] * (hidden @ w_down[e])\n",
            "        full = (_silu(x @ w_gate[e]) * (x @ w_up[e])) @ w_down[e]  # (T, D): all tokens\n"
            "        y[rows] += gates[bounds[e] : bounds[e + 1], None] * full[rows]\n",
        ),
        expect=("slow",),
    ),
]

test_grader_does_not_pass_the_mutant = mutant_test(KATA, MUTANTS)
test_a_correct_implementation_written_differently_gets_full_marks = alternative_test(KATA)
