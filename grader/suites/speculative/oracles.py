"""The speculative suite's oracle: the target calls greedy speculative decoding needs,
simulated here in the judge from the target's greedy text and the draft's argmax.
"""

from __future__ import annotations

from reference.lm import CachedLM, generate
from reference.model import Model


def greedy_target_calls(target: Model, draft: Model, prompt: list[int], n_new: int, k: int) -> int:
    """Target calls greedy speculative decoding needs for n_new tokens: each
    round keeps the draft's argmaxes while they equal the target's greedy
    tokens (at most k, fewer in the last round) plus one target token."""
    text = generate(CachedLM(target), prompt, n_new)  # the target's greedy tokens
    guess = draft.forward(prompt + text)[len(prompt) - 1 :].argmax(axis=1)  # the draft's argmax before each
    done = calls = 0
    while done < n_new:
        k_round, kept = min(k, n_new - done - 1), 0
        while kept < k_round and guess[done + kept] == text[done + kept]:
            kept += 1
        done, calls = done + kept + 1, calls + 1
    return calls
