"""Speculative decoding: spend a little extra compute to save wall-clock time.

Checking is faster than writing. A small draft model guesses k tokens ahead;
the big target model scores all k guesses in one forward pass, which costs
about as much as generating one token where reading the weights is the
expensive part (a large model on a GPU; on a CPU at this project's size a
few rows cost about twice one, and on an MoE target they wake more experts,
so here it pays only with a draft that costs almost nothing: an n-gram table
distilled from the target wins, a one-layer transformer draft does not;
kata bench speculative measures both). Draft i is kept with probability min(1, p_i(x) / q_i(x)); at
the first rejection the target writes its own token from the residual
norm(max(0, p_i - q_i)), and when every draft survives it adds a bonus token
from its last row. Each target call then yields between 1 and k + 1 tokens,
and the output is distributed exactly as if the target had sampled alone
(Leviathan et al. 2023; Chen et al. 2023).

A language model here is anything with `logits(tokens) -> (T, V)`, the logits
at every position of a sequence (one forward pass per call); the grader wraps
reference models so that such calls reuse a KV cache for the shared prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference.sampling import check_n_new, check_rng, check_sampling, draw_index, probs_from_logits

ROW_SUM_TOLERANCE = 1e-4  # how far a probability row's sum may stray from 1


@dataclass
class SpecStats:
    """What one `speculative_generate` run did.

    target_calls: `target.logits` calls (forward passes of the target).
    draft_calls: `draft.logits` calls (forward passes of the draft).
    drafted: draft tokens proposed to the target, summed over rounds.
    accepted: draft tokens the target kept, summed over rounds.
    """

    target_calls: int = 0
    draft_calls: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted: the share of drafts kept (0.0 when nothing was drafted)."""
        raise NotImplementedError

    @property
    def tokens_per_target_call(self) -> float:
        """New tokens per target forward pass, (accepted + target_calls) /
        target_calls: each call yields its accepted drafts plus one token of
        the target's own (0.0 before any call)."""
        raise NotImplementedError


def accept_reject(draft_tokens, draft_probs, target_probs, rng) -> list[int]:
    """The tokens one speculative round emits, by the rejection rule that keeps
    the output distributed exactly as the target's own sampling.

    draft_tokens: (K,) ints in [0, V) of any integer dtype, the draft's
        guesses (K may be 0).
    draft_probs: (K, V) q_i, the draft's distribution at each drafted
        position, float32 or float64 (so is target_probs).
    target_probs: (K + 1, V) p_i, the target's distribution at the same
        positions plus the one after the last draft.
    rng: a numpy Generator, the only source of randomness.

    Draft i (token x) is accepted with probability min(1, p_i(x) / q_i(x)); a
    draft with q_i(x) = 0 is rejected. At the first rejection the replacement
    is drawn from norm(max(0, p_i - q_i)) (from p_i if that residual sums to
    zero through float error) and the round ends. If all K drafts are
    accepted, a bonus token is drawn from p_K.

    Returns the accepted drafts plus exactly one more token: a list of
    between 1 and K + 1 ints. Raises ValueError for shapes that do not fit
    together, rows that are not probability distributions, or token ids out
    of range.
    """
    raise NotImplementedError


def greedy_accept(draft_tokens, target_logits) -> list[int]:
    """The tokens one greedy speculative round emits: what the target would
    have written itself at temperature 0.

    draft_tokens: (K,) ints in [0, V) of any integer dtype, the draft's
        guesses (K may be 0).
    target_logits: (K + 1, V) the target's logits at each drafted position
        plus the one after the last draft, of any float dtype.

    Keeps the longest prefix of drafts equal to the target's argmax (lowest
    id on ties), then appends the target's argmax at the first mismatch, or
    at row K when every draft matched. Returns between 1 and K + 1 ints.
    Raises ValueError for shapes that do not fit, non-finite logits or token
    ids out of range.
    """
    raise NotImplementedError


def speculative_generate(target, draft, prompt, n_new, *, k=4, temperature=1.0, rng=None):
    """Generate n_new tokens after prompt with the target model, k draft tokens
    per round.

    target, draft: models with `logits(tokens) -> (T, V)`, the logits at every
        position of a sequence (one forward pass per call), of one vocabulary V.
    prompt: (T,) token ids, at least one; the caller's own is left unchanged.
    n_new: how many tokens to generate (>= 0).
    k: draft tokens per round (>= 0; 0 is plain sampling from the target).
    temperature: a number, int or float: 0 for greedy (the draft drafts its
        argmax and `greedy_accept` decides), else both models' logits are divided by it before the
        softmax and `accept_reject` decides.
    rng: a numpy Generator, required when temperature > 0: the run's only
        source of randomness (one seed, the same tokens).

    Per round: the draft proposes up to k tokens (one draft call each), the
    target scores prompt + tokens so far + drafts in one call, and the round
    emits the accepted drafts plus one target token. The last round drafts
    fewer so exactly n_new tokens come out.

    Returns (tokens, stats): the n_new new token ids as a list of ints and a
    SpecStats of the run. Raises ValueError for k < 0, n_new < 0, an empty
    prompt, a negative temperature, a missing rng, or models without `logits`.
    """
    raise NotImplementedError
