"""Checks of the accept_reject task: the rule's tokens are distributed as the target's, at
the acceptance rate the formula gives.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.jailer import jail_client
from grader.suites import common
from grader.suites.speculative.checks import (
    MIN_EXPECTED,
    SIGNIFICANCE,
    _without_crashing,
    chi_square,
    chi_square_quantile,
    fit_message,
    fits,
)
from grader.suites.speculative.strategies import P_TWO, Q_TWO, TOKEN_DTYPES, normalized

TRIALS = 1200  # accept_reject calls per distribution check
RATE_TRIALS = 2000  # accept_reject calls per acceptance-rate check
ROW_SUM_TOLERANCE = 1e-4  # the stub's: how far a probability row's sum may stray from 1
PROB_DTYPES = (np.float64, np.float32)  # probability rows: the stub's float32 or float64


def sample_rows(q: np.ndarray, n: int, gen: np.random.Generator) -> np.ndarray:
    """n independent draws of one token per row of q (K, V): (n, K) ints."""
    K, V = q.shape
    cdf = np.cumsum(q, axis=-1)  # (K, V)
    u = gen.random((n, K))
    hit = cdf[None, :, :] > u[:, :, None]  # (n, K, V)
    idx = hit.argmax(axis=-1)
    last = np.array([int(np.flatnonzero(row > 0)[-1]) for row in q], dtype=np.int64)  # float-rounding guard
    return np.where(hit.any(axis=-1), idx, last[None, :])


def run_rounds(
    kata, p: np.ndarray, q: np.ndarray, trials: int, salt: int, token_dtype=np.int64
) -> tuple[np.ndarray, list[list[int]]]:
    """Drafts (trials, K) of token_dtype drawn from q and the learner's accept_reject output for each."""
    gen = common.rng(salt)
    drafts = sample_rows(q, trials, gen).astype(token_dtype)
    learner_rng = np.random.default_rng(gen.integers(2**63))
    outs = jail_client.call_many(kata.accept_reject, [(drafts[n], q, p, learner_rng) for n in range(trials)])
    return drafts, [[int(t) for t in out] for out in outs]


def tokens_at(outs: list[list[int]], i: int, V: int) -> np.ndarray:
    """Counts (V,) of the token at output position i, over the rounds that reached it."""
    counts = np.zeros(V, dtype=np.int64)
    for out in outs:
        if len(out) > i:
            counts[out[i]] += 1
    return counts


@st.composite
def rounds(draw, min_k: int = 1, max_k: int = 4, max_v: int = 8, near: bool = False):
    """(p (K + 1, V), q (K, V)): random distributions. With near=True each q_i
    is p_i mixed with at most half of another distribution, so drafts are
    often accepted."""
    K = draw(st.integers(min_k, max_k))
    V = draw(st.integers(2, max_v))
    weights = st.floats(0.0, 1.0)
    p = normalized(draw(hnp.arrays(np.float64, (K + 1, V), elements=weights)))
    r = normalized(draw(hnp.arrays(np.float64, (K, V), elements=weights)))
    if not near:
        return p, r
    lam = draw(st.floats(0.0, 0.5))
    return p, (1 - lam) * p[:K] + lam * r


# Pinned rounds where every listed mistake is far from the right distribution.
P_SKEWED = normalized(np.array([[8.0, 1, 1, 4, 0, 2], [1, 6, 1, 1, 3, 4], [2, 2, 7, 1, 1, 3], [5, 1, 1, 1, 1, 7]]))
Q_SKEWED = normalized(np.array([[1.0, 6, 2, 1, 3, 1], [6, 1, 1, 4, 1, 1], [1, 3, 1, 6, 2, 1]]))


@pytest.mark.task("accept_reject")
@settings(max_examples=4)
@given(case=rounds())
@example(case=(P_SKEWED, Q_SKEWED))
@example(case=(P_TWO, Q_TWO))
def test_first_emitted_token_is_distributed_as_target_row_0(kata, case):
    p, q = case
    _, outs = run_rounds(kata, p, q, TRIALS, salt=11)
    counts = tokens_at(outs, 0, p.shape[1])
    stat, df, note = chi_square(counts, p[0])
    assert fits(stat, df) and not note, fit_message(
        "the first emitted token is not distributed as target_probs[0]", stat, df, note, counts, p[0]
    )


@pytest.mark.task("accept_reject")
@settings(max_examples=3)
@given(case=rounds(near=True))
@example(case=(P_SKEWED, 0.6 * P_SKEWED[:3] + 0.4 * Q_SKEWED))
def test_token_after_i_accepted_drafts_is_distributed_as_target_row_i(kata, case):
    p, q = case
    K, V = q.shape
    _, outs = run_rounds(kata, p, q, TRIALS, salt=12)
    total, dof, worst = 0.0, 0, ""
    for i in range(1, K + 1):
        counts = tokens_at(outs, i, V)
        if counts.sum() < 2 * MIN_EXPECTED:
            continue
        stat, df, note = chi_square(counts, p[i])
        assert not note, f"after {i} accepted drafts, the next token is impossible under target_probs[{i}]: {note}"
        total, dof = total + stat, dof + df
        if not fits(stat, df):
            worst = fit_message(
                f"after {i} accepted drafts, the next token is not distributed as target_probs[{i}]",
                stat,
                df,
                note,
                counts,
                p[i],
            )
    assert fits(total, dof), worst or (
        f"the tokens after 1..{K} accepted drafts are not distributed as target_probs[1..{K}]: "
        f"chi-square {total:.1f} > {chi_square_quantile(dof):.1f} (df {dof}, significance {SIGNIFICANCE:g})"
    )


@pytest.mark.task("accept_reject")
@pytest.mark.parametrize("case", ["skewed", "two"])
def test_mean_accepted_drafts_match_the_acceptance_formula(kata, case):
    p_row, q_row = {"skewed": (P_SKEWED[0], Q_SKEWED[0]), "two": (P_TWO[1], Q_TWO[1])}[case]
    K = 4
    p, q = np.tile(p_row, (K + 1, 1)), np.tile(q_row, (K, 1))
    alpha = float(np.minimum(p_row, q_row).sum())
    expected = alpha * (1 - alpha**K) / (1 - alpha)
    law = np.array([alpha**j * (1 - alpha) for j in range(K)] + [alpha**K])  # P(j drafts accepted)
    sd = math.sqrt(float(np.sum(law * np.arange(K + 1) ** 2)) - expected**2)
    _, outs = run_rounds(kata, p, q, RATE_TRIALS, salt=13)
    mean = float(np.mean([len(out) - 1 for out in outs]))
    z = NormalDist().inv_cdf(1 - SIGNIFICANCE / 2)
    allowed = z * sd / math.sqrt(RATE_TRIALS)
    assert abs(mean - expected) <= allowed, (
        f"with every row p and q alike (alpha = sum min(p, q) = {alpha:.3f}, K = {K}) the mean number of accepted "
        f"drafts should be alpha (1 - alpha^K) / (1 - alpha) = {expected:.3f}, got {mean:.3f} over {RATE_TRIALS} "
        f"rounds (allowed deviation {allowed:.3f}); accepted = len(output) - 1"
    )


@pytest.mark.task("accept_reject")
@given(case=rounds(max_k=5), token_dtype=st.sampled_from(TOKEN_DTYPES), prob_dtype=st.sampled_from(PROB_DTYPES))
@example(case=(P_SKEWED, Q_SKEWED), token_dtype=np.uint8, prob_dtype=np.float32)
@example(case=(P_TWO, Q_TWO), token_dtype=np.int32, prob_dtype=np.float64)
def test_returns_the_accepted_drafts_plus_exactly_one_token(kata, case, token_dtype, prob_dtype):
    p, q = (normalized(r).astype(prob_dtype) for r in case)  # float32 rows sum to 1 within ROW_SUM_TOLERANCE
    K, V = q.shape
    drafts, outs = run_rounds(kata, p, q, 30, salt=14, token_dtype=token_dtype)
    for out, d in zip(outs, drafts):
        assert 1 <= len(out) <= K + 1, (
            f"accept_reject returned {len(out)} tokens for K = {K}; it must return 1 to K + 1"
        )
        assert all(0 <= t < V for t in out), f"accept_reject returned {out}, with a token outside [0, V={V})"
        assert out[:-1] == d[: len(out) - 1].tolist(), (
            f"the tokens before the last must be the accepted drafts {d.tolist()[: len(out) - 1]}, got {out[:-1]}"
        )


@pytest.mark.task("accept_reject")
@given(p=hnp.arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(2, 8)), elements=st.floats(0.0, 1.0)))
@example(p=np.array([[1.0, 0.0], [0.0, 1.0]]))
def test_draft_equal_to_target_accepts_every_draft(kata, p):
    p = normalized(np.vstack([p, p[:1]]))  # K + 1 rows
    q = p[:-1].copy()
    drafts, outs = run_rounds(kata, p, q, 20, salt=15)
    for out, d in zip(outs, drafts):
        assert len(out) == len(d) + 1 and out[:-1] == d.tolist(), (
            f"with draft_probs equal to target_probs every draft must be accepted and a bonus token added: "
            f"drafts {d.tolist()} gave {out}"
        )


@pytest.mark.task("accept_reject")
@given(case=rounds(max_k=4), x=st.integers(0, 7))
def test_draft_the_target_rules_out_is_rejected_and_never_the_replacement(kata, case, x):
    p, q = case
    K, V = q.shape
    x = x % V
    p = p.copy()
    p[:, x] = 0.0
    p[p.sum(axis=1) <= 1e-6, (x + 1) % V] = 1.0  # a row that was all on x now puts its mass next door
    p = normalized(p)
    q = normalized(q + np.eye(V)[x])  # the draft likes x
    gen = np.random.default_rng(common.rng(16).integers(2**63))
    for _ in range(20):
        out = [int(t) for t in kata.accept_reject(np.full(K, x), q.copy(), p.copy(), gen)]
        assert len(out) == 1, f"draft token {x} has target probability 0 but was accepted: output {out}"
        assert out[0] != x, (
            f"the replacement of rejected draft {x} was {x} itself, which the target gives probability 0"
        )


@pytest.mark.task("accept_reject")
def test_draft_the_draft_model_rules_out_is_rejected(kata):
    p = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    q = np.array([[0.0, 0.4, 0.6]])  # q(0) = 0 but token 0 is drafted anyway
    gen = np.random.default_rng(common.rng(17).integers(2**63))
    for _ in range(50):
        out = [int(t) for t in kata.accept_reject(np.array([0]), q.copy(), p.copy(), gen)]
        assert len(out) == 1, f"draft token 0 has draft probability q = 0, so it must be rejected; got {out}"


@pytest.mark.task("accept_reject")
@given(p=hnp.arrays(np.float64, st.integers(2, 8), elements=st.floats(0.0, 1.0)))
@example(p=np.array([0.05, 0.6, 0.0, 0.35]))
@settings(max_examples=3)
def test_no_drafts_is_plain_sampling_from_target_row_0(kata, p):
    p = normalized(p[None, :])
    V = p.shape[1]
    _, outs = run_rounds(kata, p, np.zeros((0, V)), 600, salt=18)
    assert all(len(out) == 1 for out in outs), "with K = 0 drafts accept_reject must return exactly one token"
    counts = tokens_at(outs, 0, V)
    stat, df, note = chi_square(counts, p[0])
    assert fits(stat, df) and not note, fit_message(
        "with K = 0 the token is not distributed as target_probs[0]", stat, df, note, counts, p[0]
    )


@pytest.mark.task("accept_reject")
def test_a_rejection_with_a_zero_residual_is_replaced_from_the_target_row(kata):
    p = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    q = p[:1].copy()  # p == q, so max(0, p - q) sums to 0; token 2 is drafted though q(2) = 0
    gen = common.rng(19)
    outs = _without_crashing(
        lambda: jail_client.call_many(
            kata.accept_reject, [(np.array([2]), q, p, np.random.default_rng(gen.integers(2**63))) for _ in range(200)]
        ),
        "accept_reject of draft token 2 with q(2) = 0 and draft_probs equal to target_probs (a residual of zeros)",
    )
    outs = [[int(t) for t in out] for out in outs]
    assert all(len(out) == 1 and p[0, out[0]] > 0 for out in outs), (
        f"draft token 2 has q = 0, so it is rejected, and with p == q the residual max(0, p - q) is all zero, so "
        f"the replacement comes from target_probs[0] = {p[0].tolist()}; got {sorted(set(map(tuple, outs)))}"
    )
    counts = tokens_at(outs, 0, 3)
    assert counts[0] > 0 and counts[1] > 0, (
        f"the replacement should be drawn from target_probs[0] = {p[0].tolist()}, but over 200 rounds tokens 0 and 1 "
        f"came out {counts[:2].tolist()} times"
    )


@pytest.mark.task("accept_reject")
def test_the_same_seed_gives_the_same_tokens(kata):
    gen = common.rng(20)
    drafts = sample_rows(Q_SKEWED, 40, gen)
    seed = int(gen.integers(2**63))
    runs = []
    for _ in range(2):
        learner_rng = np.random.default_rng(seed)
        outs = jail_client.call_many(kata.accept_reject, [(d, Q_SKEWED, P_SKEWED, learner_rng) for d in drafts])
        runs.append([[int(t) for t in out] for out in outs])
    assert runs[0] == runs[1], (
        "40 rounds run twice with generators seeded alike gave different tokens; rng must be accept_reject's only "
        "source of randomness (no np.random.* functions, no generator of your own)"
    )


BAD_ROUNDS = {
    "draft_probs with K + 1 rows": (np.array([0, 1]), np.full((3, 3), 1 / 3), np.full((3, 3), 1 / 3)),
    "target_probs with only K rows": (np.array([0, 1]), np.full((2, 3), 1 / 3), np.full((2, 3), 1 / 3)),
    "draft_tokens of shape (1, 2)": (np.array([[0, 1]]), np.full((2, 3), 1 / 3), np.full((3, 3), 1 / 3)),
    "draft_probs and target_probs of different V": (np.array([0, 1]), np.full((2, 4), 1 / 4), np.full((3, 3), 1 / 3)),
    "a target row summing to 2": (
        np.array([0, 1]),
        np.full((2, 3), 1 / 3),
        np.array([[1.0, 0.5, 0.5]] + [[1 / 3] * 3] * 2),
    ),
    "a draft row with a negative entry": (
        np.array([0, 1]),
        np.array([[1.5, -0.5, 0.0], [1 / 3] * 3]),
        np.full((3, 3), 1 / 3),
    ),
    "a draft token outside [0, V)": (np.array([0, 3]), np.full((2, 3), 1 / 3), np.full((3, 3), 1 / 3)),
    "a negative draft token": (np.array([0, -1]), np.full((2, 3), 1 / 3), np.full((3, 3), 1 / 3)),
    # draft 0 has target probability 0, so the round would end before reaching draft 1
    "a draft token outside [0, V) after one the target rules out": (
        np.array([0, 3]),
        np.full((2, 3), 1 / 3),
        np.array([[0.0, 0.5, 0.5]] + [[1 / 3] * 3] * 2),
    ),
    # draft 0 is ruled out (target probability 0): the round ends before it reads the rows holding the NaN
    "a NaN in the bonus row, which the round never reaches": (
        np.array([0, 1]),
        np.full((2, 3), 1 / 3),
        np.array([[0.0, 0.5, 0.5], [1 / 3] * 3, [np.nan, 0.5, 0.5]]),
    ),
    "a NaN in the draft's second row, which the round never reaches": (
        np.array([0, 1]),
        np.array([[1 / 3] * 3, [np.nan, 0.5, 0.5]]),
        np.array([[0.0, 0.5, 0.5]] + [[1 / 3] * 3] * 2),
    ),
    "a target row straying from 1 by 3 ROW_SUM_TOLERANCE": (
        np.array([0, 1]),
        np.full((2, 3), 1 / 3),
        np.array([[1 / 3] * 3, [1 / 3] * 3, [1 / 3 + ROW_SUM_TOLERANCE] * 3]),
    ),
}


@pytest.mark.task("accept_reject")
@pytest.mark.parametrize("what", list(BAD_ROUNDS))
def test_accept_reject_rejects_bad_input_with_value_error(kata, what):
    tokens, q, p = BAD_ROUNDS[what]
    with pytest.raises(ValueError):
        kata.accept_reject(tokens, q, p, np.random.default_rng(0))


@pytest.mark.task("accept_reject")
@pytest.mark.parametrize("stray", [0.5, -0.5])
def test_rows_straying_from_1_by_less_than_row_sum_tolerance_are_distributions(kata, stray):
    p = P_SKEWED * (1 + stray * ROW_SUM_TOLERANCE)  # each row sums to 1 +- ROW_SUM_TOLERANCE / 2
    q = Q_SKEWED * (1 - stray * ROW_SUM_TOLERANCE)
    gen = common.rng(27)
    drafts = sample_rows(Q_SKEWED, 5, gen)
    learner_rng = np.random.default_rng(gen.integers(2**63))
    outs = _without_crashing(
        lambda: jail_client.call_many(kata.accept_reject, [(d, q, p, learner_rng) for d in drafts]),
        f"accept_reject with rows summing to 1 {'+' if stray > 0 else '-'} {abs(stray) * ROW_SUM_TOLERANCE:g} "
        f"(within ROW_SUM_TOLERANCE = {ROW_SUM_TOLERANCE:g} of 1, so distributions)",
    )
    assert all(1 <= len(out) <= len(d) + 1 for out, d in zip(outs, drafts)), (
        f"accept_reject returned {outs} for {len(drafts[0])} drafts; it must return 1 to K + 1 tokens"
    )
