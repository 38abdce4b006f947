"""Public checks of tokens_that_fit: counts worked out by hand for two tiny models, in the
comments (their parameters counted shape by shape, the bytes of a token, the budget left). They
need no oracle, so the student edition ships them beside the hidden checks that compare many
budgets with the formula.
"""

from __future__ import annotations

import numpy as np
import pytest

from reference.model import Config, Model

# One layer, one kv head of width 4. Parameters: tok_emb 31 x 12 = 372, out 372, wq 144, wk 48, wv 48, wo 144,
# w_gate, w_up and w_down 120 each, three norms of 12: 1,524. A token's keys and values: 2 x 4 x 4 = 32 bytes in
# float32, 2 x (4 codes + a 4-byte scale) = 16 in int8. The weights: 6,096 bytes at 32 bits, 1,619.25 -> 1,620 at
# 8.5, 12,192 at 64, 95.25 -> 96 at 0.5.
DENSE = Config(vocab_size=31, d_model=12, n_layers=1, n_heads=3, n_kv_heads=1, d_ff=10, max_seq_len=8)
# Four experts, one run per token. Parameters: tok_emb 8 x 4 = 32, out 32, wq wk wv wo and the router 16 each,
# w_gate, w_up and w_down 4 experts x 8 each (96), three norms of 4: 252, of which the experts a token does not
# run hold 3 x 3 x 8 = 72. The weights: 1,008 bytes at 32 bits, 141.75 -> 142 at 4.5. A token: 32 bytes in
# float32, 16 in int8.
MOE = Config(vocab_size=8, d_model=4, n_layers=1, n_heads=1, n_kv_heads=1, d_ff=2, max_seq_len=8, n_experts=4, top_k=1)

# name -> (config, budget_bytes, cache, weight_bits, tokens that fit)
BY_HAND = {
    "7 float32 tokens and 31 bytes to spare": (DENSE, 6096 + 7 * 32 + 31, "float32", 32, 7),
    "weights one byte over the budget": (DENSE, 6095, "float32", 32, 0),
    "no budget at all": (DENSE, 0, "int8", 32, 0),
    "8.5-bit weights round up to 1,620 bytes, 15 left": (DENSE, 1635, "int8", 8.5, 0),
    "8.5-bit weights, then one int8 token": (DENSE, 1636, "int8", 8.5, 1),
    "int8 tokens of 16 bytes, scales included": (DENSE, 1620 + 3 * 16 + 15, "int8", 8.5, 3),
    "64-bit weights": (DENSE, 12192 + 5 * 16, "int8", 64, 5),
    "half-bit weights": (DENSE, 96 + 2 * 16, "int8", 0.5, 2),
    "every expert's weights in float32": (MOE, 1008 + 2 * 32, "float32", 32, 2),
    "every expert's weights at 4.5 bits": (MOE, 142 + 4 * 16, "int8", 4.5, 4),
}


@pytest.mark.task("quantized")
@pytest.mark.parametrize("case", list(BY_HAND), ids=str)
def test_tokens_that_fit_gives_the_counts_worked_out_by_hand(kata, case):
    config, budget, cache, weight_bits, want = BY_HAND[case]
    got = kata.tokens_that_fit(Model.random(config, seed=0), budget, cache=cache, weight_bits=weight_bits)
    assert isinstance(got, (int, np.integer)) and not isinstance(got, bool), (
        f"tokens_that_fit returned a {type(got).__name__} ({got!r}); a count of tokens is an int"
    )
    assert got == want, (
        f"tokens_that_fit(model of {config.n_params()} parameters, {budget}, cache={cache!r}, "
        f"weight_bits={weight_bits}) is {got!r}; worked out by hand ({case}): {want}"
    )
