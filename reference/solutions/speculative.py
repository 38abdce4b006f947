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
        if self.drafted == 0:
            return 0.0
        return self.accepted / self.drafted

    @property
    def tokens_per_target_call(self) -> float:
        """New tokens per target forward pass, (accepted + target_calls) /
        target_calls: each call yields its accepted drafts plus one token of
        the target's own (0.0 before any call)."""
        if self.target_calls == 0:
            return 0.0
        return (self.accepted + self.target_calls) / self.target_calls


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
    tokens, q, p = _checked_round(draft_tokens, draft_probs, target_probs)
    check_rng(rng)
    out = []
    for i, x in enumerate(tokens):
        if q[i, x] > 0 and rng.random() * q[i, x] < p[i, x]:
            out.append(int(x))
            continue
        residual = np.maximum(p[i] - q[i], 0.0)
        total = residual.sum()
        if total <= 0:
            return out + [draw_index(p[i], rng, rescale=False)]
        residual = residual / total
        return out + [draw_index(residual, rng, rescale=False)]
    return out + [draw_index(p[len(tokens)], rng, rescale=False)]


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
    tokens = _checked_tokens(draft_tokens)
    logits = np.asarray(target_logits)
    K = tokens.size
    if logits.ndim != 2 or logits.shape[0] != K + 1 or logits.shape[1] == 0:
        raise ValueError(f"target_logits must have shape (K + 1 = {K + 1}, V) for {K} draft tokens, got {logits.shape}")
    if not np.issubdtype(logits.dtype, np.number) or not np.all(np.isfinite(logits)):
        raise ValueError("target_logits must be finite numbers (no NaN or inf)")
    _check_token_range(tokens, logits.shape[1])
    best = np.argmax(logits, axis=-1)  # (K + 1,)
    for i, x in enumerate(tokens):
        if x != best[i]:
            return [int(t) for t in tokens[:i]] + [int(best[i])]
    return [int(t) for t in tokens] + [int(best[K])]


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
    for name, lm in (("target", target), ("draft", draft)):
        if not callable(getattr(lm, "logits", None)):
            raise ValueError(f"{name} must have a method logits(tokens) -> (T, V), got {type(lm).__name__}")
    check_n_new(n_new)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k must be an int >= 0 (draft tokens per round), got {k!r}")
    t = check_sampling(temperature, rng)
    seq = [int(x) for x in _checked_tokens(prompt, "prompt")]
    if not seq:
        raise ValueError("prompt must hold at least one token")
    stats, new = SpecStats(), []
    while len(new) < n_new:
        k_round = min(k, n_new - len(new) - 1)  # the round emits at most k_round + 1 tokens
        drafts, q_rows = [], []
        for _ in range(k_round):
            row = np.asarray(draft.logits(seq + drafts))[-1]  # (V,)
            stats.draft_calls += 1
            if t == 0:
                drafts.append(int(np.argmax(row)))
            else:
                q = probs_from_logits(row, t)
                drafts.append(draw_index(q, rng, rescale=False))
                q_rows.append(q)
        scores = np.asarray(target.logits(seq + drafts))[len(seq) - 1 :]  # (k_round + 1, V)
        stats.target_calls += 1
        if t == 0:
            emitted = greedy_accept(drafts, scores)
        else:
            V = scores.shape[-1]
            q_arr = np.array(q_rows).reshape(k_round, V)
            emitted = accept_reject(drafts, q_arr, probs_from_logits(scores, t), rng)
        stats.drafted += k_round
        stats.accepted += len(emitted) - 1
        seq += emitted
        new += emitted
    return new, stats


def _checked_tokens(tokens, name: str = "draft_tokens") -> np.ndarray:
    """tokens as a (K,) int64 array, or a ValueError."""
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of ints, got shape {arr.shape}")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _check_token_range(tokens: np.ndarray, V: int) -> None:
    if tokens.size and (tokens.min() < 0 or tokens.max() >= V):
        i = int(np.flatnonzero((tokens < 0) | (tokens >= V))[0])
        raise ValueError(f"draft token {int(tokens[i])} at index {i} is out of range [0, V={V})")


def _checked_rows(probs, name: str, shape: tuple[int, int]) -> np.ndarray:
    """probs as a float64 array of `shape` whose rows are distributions, or a ValueError."""
    arr = np.asarray(probs)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or arr.dtype == bool:
        raise ValueError(f"{name} must hold floats, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0):
        raise ValueError(f"{name} must hold finite probabilities >= 0")
    sums = arr.sum(axis=-1)
    if sums.size and np.abs(sums - 1.0).max() > ROW_SUM_TOLERANCE:
        i = int(np.argmax(np.abs(sums - 1.0)))
        raise ValueError(f"row {i} of {name} sums to {sums[i]:.6g}; every row must sum to 1")
    return arr


def _checked_round(draft_tokens, draft_probs, target_probs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inputs of one accept/reject round, checked: tokens (K,), q (K, V), p (K + 1, V)."""
    tokens = _checked_tokens(draft_tokens)
    K = tokens.size
    p_shape = np.shape(target_probs)
    if len(p_shape) != 2 or p_shape[0] != K + 1 or p_shape[1] == 0:
        raise ValueError(f"target_probs must have shape (K + 1 = {K + 1}, V) for {K} draft tokens, got {p_shape}")
    V = p_shape[1]
    p = _checked_rows(target_probs, "target_probs", (K + 1, V))
    q = _checked_rows(draft_probs, "draft_probs", (K, V))
    _check_token_range(tokens, V)
    return tokens, q, p
