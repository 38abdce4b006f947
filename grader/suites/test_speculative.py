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
| `accept_reject` | rows with a negative entry or a sum straying from 1 by more than ROW_SUM_TOLERANCE raise ValueError | `test_accept_reject_rejects_bad_input_with_value_error` |
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
| `speculative_generate` | k < 0 and n_new < 0 raise ValueError | `test_speculative_generate_rejects_bad_input_with_value_error` |
| `speculative_generate` | a negative temperature raises ValueError | `test_speculative_generate_rejects_a_negative_temperature` |
| `speculative_generate` | a missing rng, an empty prompt and a model without logits raise ValueError, before any model call | `test_speculative_generate_refuses_a_missing_rng_an_empty_prompt_or_a_model_without_logits` |
| `speculative_generate` | a draft that is right saves target calls: up to k + 1 tokens per call | `test_draft_equal_to_target_needs_one_target_call_per_k_plus_one_tokens`, `test_shipped_draft_saves_the_teacher_calls_the_greedy_rule_allows` |
"""  # noqa: E501 (the audit table keeps a row to a line)

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.grading import jail_client
from grader.suites import common
from grader.suites.common import load_kata
from reference.lm import BigramLM, CachedLM, generate, shipped_model, verify_work
from reference.model import WEIGHTS_DIR, Config, Model
from reference.sampling import generate_naive

SIGNIFICANCE = 1e-7  # per chi-square or z test: the chance a correct implementation fails it
MIN_EXPECTED = 10.0  # chi-square cells expecting fewer draws are pooled
TRIALS = 1200  # accept_reject calls per distribution check
RATE_TRIALS = 2000  # accept_reject calls per acceptance-rate check
LOOP_RUNS = 1000  # speculative_generate runs for the loop's distribution check
TIE_TOLERANCE = 1e-4  # logits closer than this to the maximum count as a greedy tie
STATS_TOLERANCE = 1e-9  # for the derived SpecStats properties
ROW_SUM_TOLERANCE = 1e-4  # the stub's: how far a probability row's sum may stray from 1
TOKEN_DTYPES = (np.int64, np.int32, np.int16, np.uint8)  # draft tokens: ints of any integer dtype
PROB_DTYPES = (np.float64, np.float32)  # probability rows: the stub's float32 or float64
LOGIT_DTYPES = (np.float64, np.float32, np.float16)  # target logits: any float dtype
# The shipped pair's check counts target calls against what the greedy rule
# needs, simulated by the suite from the teacher's own greedy text and the
# draft's argmax along it; a near-tie read differently may cost a call.
EXTRA_CALLS = 1  # per prompt

_isclose = math.isclose


def chi_square_quantile(df: int, significance: float = SIGNIFICANCE) -> float:
    """The upper `significance` quantile of chi-square with df degrees of freedom (Wilson-Hilferty)."""
    z = NormalDist().inv_cdf(1.0 - significance)
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int, str]:
    """Pearson's statistic of integer counts against probabilities (same shape,
    flattened), its degrees of freedom after pooling, and a note naming any
    cell drawn although its probability is 0 ("" when none)."""
    counts = np.asarray(counts, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    impossible = np.flatnonzero((probs == 0) & (counts > 0))
    if impossible.size:
        return (
            math.inf,
            1,
            f"outcome {int(impossible[0])} has probability 0 but was drawn {int(counts[impossible[0]])} times",
        )
    n = counts.sum()
    expected = probs * n
    order = np.argsort(expected, kind="stable")
    groups, current, mass = [], [], 0.0
    for j in order:
        if expected[j] == 0:
            continue
        current.append(j)
        mass += expected[j]
        if mass >= MIN_EXPECTED:
            groups.append(current)
            current, mass = [], 0.0
    if current:
        if groups:
            groups[-1] = groups[-1] + current
        else:
            groups.append(current)
    obs = np.array([counts[g].sum() for g in groups])
    exp = np.array([expected[g].sum() for g in groups])
    return float(np.sum((obs - exp) ** 2 / exp)), len(groups) - 1, ""


def fit_message(what: str, stat: float, df: int, note: str, counts, probs) -> str:
    if note:
        return f"{what}: {note}"
    n = int(np.sum(counts))
    return (
        f"{what}: chi-square {stat:.1f} > {chi_square_quantile(df):.1f} (df {df}, significance {SIGNIFICANCE:g}) "
        f"over {n} draws; counts {np.asarray(counts).astype(int).tolist()}, expected "
        f"{np.round(np.asarray(probs) * n, 1).tolist()}"
    )


def fits(stat: float, df: int) -> bool:
    return df == 0 or stat <= chi_square_quantile(df)


def normalized(raw: np.ndarray) -> np.ndarray:
    """Rows of non-negative raw weights scaled to sum to 1 (an all-tiny row becomes uniform)."""
    raw = np.asarray(raw, dtype=np.float64)
    sums = raw.sum(axis=-1, keepdims=True)
    uniform = np.full_like(raw, 1.0 / raw.shape[-1])
    return np.where(sums > 1e-6, raw / np.where(sums > 1e-6, sums, 1.0), uniform)


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
P_TWO = normalized(np.array([[0.9, 0.1, 0, 0], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]]))
Q_TWO = normalized(np.array([[0.2, 0.8, 0, 0], [0.7, 0.1, 0.1, 0.1]]))


@pytest.fixture(scope="module")
def kata():
    return load_kata("speculative")


def _without_crashing(call, what: str):
    """call()'s result; a failed check, not a crash, if it raised (a stub's NotImplementedError passes through)."""
    try:
        return call()
    except NotImplementedError:
        raise
    except Exception as exc:  # valid input: any error is a wrong answer
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from None


def _refuses(call, what: str) -> None:
    """call() must raise ValueError; another exception or none is a failed check (NotImplementedError passes)."""
    try:
        call()
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as exc:  # the promised refusal is a ValueError
        raise AssertionError(f"{what} raised {type(exc).__name__} ({exc}); it must raise ValueError") from None
    raise AssertionError(f"{what} returned instead of raising ValueError")


# ------------------------------------------------------------ accept_reject


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


# ------------------------------------------------------------ what a round returns, for both rules


def _a_round(kata, task: str):
    """What the function under `task` returns on a round with accepted drafts, a correction and a bonus."""
    if task == "accept_reject":
        gen = common.rng(28)
        p = P_TWO.copy()
        cases = [(np.array([0, 0]), p[:2].copy()), (np.array([1, 3]), Q_TWO)]  # all accepted; mixed
        learner_rng = np.random.default_rng(gen.integers(2**63))
        return jail_client.call_many(kata.accept_reject, [(d, q, p, learner_rng) for d, q in cases for _ in range(10)])
    logits = np.array([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 0.0, 5.0]])  # argmaxes 1, 0, 2
    if task == "greedy":
        return [kata.greedy_accept(d, logits) for d in (np.array([1, 0]), np.array([1, 2]), np.array([0, 0]))]
    got, _ = kata.speculative_generate(
        CachedLM(tiny(29)),
        CachedLM(tiny(30)),
        PROMPT,
        9,
        k=3,
        temperature=1.0,
        rng=np.random.default_rng(common.rng(29).integers(2**63)),
    )
    return [got]


@pytest.mark.parametrize("task", ["accept_reject", "greedy", "loop"])
def test_tokens_come_back_as_a_list_of_python_ints(kata, task):
    for out in _a_round(kata, task):
        kinds = sorted({type(t).__name__ for t in out}) if isinstance(out, (list, tuple, np.ndarray)) else []
        assert type(out) is list and kinds == ["int"], (
            f"{task}: the tokens must come back as a list of Python ints, got a "
            f"{type(out).__name__} of {kinds or type(out).__name__}: {out!r}"
        )


@pytest.mark.parametrize("task", ["accept_reject", "greedy"])
def test_an_empty_list_of_drafts_is_a_round_of_k_zero(kata, task):
    p = np.array([[0.0, 0.25, 0.75]])
    gen = np.random.default_rng(common.rng(30).integers(2**63))
    what = f"{task} with draft_tokens = [] (K = 0; np.asarray([]) has dtype float64)"
    if task == "accept_reject":
        out = _without_crashing(lambda: kata.accept_reject([], np.zeros((0, 3)), p, gen), what)
    else:
        out = _without_crashing(lambda: kata.greedy_accept([], np.log(p + 1e-9)), what)
    out = [int(t) for t in out]
    assert len(out) == 1 and out[0] in (1, 2) and (task == "accept_reject" or out == [2]), (
        f"{task} with no drafts must return one token of target row 0 {p[0].tolist()}, got {out}"
    )


# ------------------------------------------------------------ greedy_accept


@pytest.mark.task("greedy")
@given(
    K=st.integers(0, 6),
    V=st.integers(2, 10),
    cut=st.integers(0, 6),
    seed=st.integers(0, 2**32 - 1),
    token_dtype=st.sampled_from(TOKEN_DTYPES),
    logit_dtype=st.sampled_from(LOGIT_DTYPES),
)
@example(K=0, V=3, cut=0, seed=0, token_dtype=np.int64, logit_dtype=np.float64)
@example(K=3, V=2, cut=0, seed=1, token_dtype=np.int64, logit_dtype=np.float64)
@example(K=4, V=6, cut=2, seed=2, token_dtype=np.int32, logit_dtype=np.float32)
@example(K=3, V=5, cut=3, seed=3, token_dtype=np.uint8, logit_dtype=np.float16)
def test_greedy_keeps_matching_drafts_then_appends_the_target_argmax(kata, K, V, cut, seed, token_dtype, logit_dtype):
    gen = np.random.default_rng(seed)
    logits = gen.permuted(np.tile(np.arange(V, dtype=np.float64), (K + 1, 1)), axis=1) + gen.random((K + 1, V)) * 0.5
    logits = logits.astype(logit_dtype)  # a row's top two stay at least 0.5 apart, float16 too
    best = logits.argmax(axis=1)
    m = min(cut, K)  # drafts before m match the target; draft m (if any) does not
    drafts = gen.integers(0, V, K)
    drafts[:m] = best[:m]
    if m < K:
        drafts[m] = (best[m] + 1 + gen.integers(0, V - 1)) % V
    drafts = drafts.astype(token_dtype)
    got = [int(t) for t in kata.greedy_accept(drafts, logits)]
    expected = [int(t) for t in best[:m]] + [int(best[m])]
    assert got == expected, (
        f"drafts {drafts.tolist()} against target argmaxes {best.tolist()} should give {expected} "
        f"(the matching drafts, then the target's own token), got {got}"
    )


@st.composite
def tied_rounds(draw):
    """(drafts (K,), target_logits (K + 1, V)) with logits in {0, 1, 2}, so rows
    often tie at the maximum, and each draft one of its row's maxima."""
    K, V = draw(st.integers(0, 5)), draw(st.integers(2, 6))
    logits = draw(hnp.arrays(np.float64, (K + 1, V), elements=st.sampled_from([0.0, 1.0, 2.0])))
    drafts = [int(draw(st.sampled_from(np.flatnonzero(row == row.max()).tolist()))) for row in logits[:K]]
    return np.array(drafts, dtype=np.int64), logits


@pytest.mark.task("greedy")
@given(case=tied_rounds())
@example(case=(np.array([0, 0]), np.zeros((3, 4))))
@example(case=(np.array([0, 2]), np.zeros((3, 4))))
@example(case=(np.array([2]), np.array([[1.0, 5.0, 5.0], [5.0, 5.0, 1.0]])))
def test_greedy_breaks_ties_toward_the_lowest_id(kata, case):
    drafts, logits = case
    lowest = [min(j for j in range(logits.shape[1]) if row[j] == max(row)) for row in logits.tolist()]
    m = 0
    while m < drafts.size and drafts[m] == lowest[m]:
        m += 1
    expected = lowest[: m + 1]
    got = [int(t) for t in kata.greedy_accept(drafts, logits)]
    assert got == expected, (
        f"drafts {drafts.tolist()} against target_logits {logits.tolist()} should give {expected}: the target's "
        f"argmax breaks ties toward the lowest id, so only a draft equal to the lowest tied id matches; got {got}"
    )


BAD_GREEDY = {
    "target_logits with only K rows": (np.array([0, 1]), np.zeros((2, 3))),
    "target_logits that are 1-D": (np.array([], dtype=np.int64), np.zeros(3)),
    "NaN in target_logits": (np.array([0]), np.array([[0.0, np.nan], [1.0, 0.0]])),
    "a draft token outside [0, V)": (np.array([5]), np.zeros((2, 3))),
    "a negative draft token": (np.array([-1]), np.zeros((2, 3))),
    "inf in target_logits": (np.array([0]), np.array([[0.0, np.inf], [1.0, 0.0]])),
    "-inf in target_logits": (np.array([0]), np.array([[0.0, -np.inf], [1.0, 0.0]])),
    "draft_tokens of shape (1, 2)": (np.array([[0, 1]]), np.zeros((3, 3))),
}


@pytest.mark.task("greedy")
@pytest.mark.parametrize("what", list(BAD_GREEDY))
def test_greedy_accept_rejects_bad_input_with_value_error(kata, what):
    tokens, logits = BAD_GREEDY[what]
    with pytest.raises(ValueError):
        kata.greedy_accept(tokens, logits)


# ------------------------------------------------------------ the loop

TINY = Config(vocab_size=12, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=64)
PROMPT = [3, 1, 4, 1, 5]


def tiny(seed: int) -> Model:
    return Model.random(TINY, seed=seed)


class ReversedLM:
    """A deliberately bad draft: it proposes the token the target likes least."""

    __jail_api__ = ("logits",)  # the learner's loop calls this back in the judge

    def __init__(self, target: Model):
        self.lm = CachedLM(target)

    def logits(self, tokens) -> np.ndarray:
        return -self.lm.logits(tokens)


def assert_is_greedy_generation(model: Model, prompt: list[int], got, n_new: int, who: str) -> None:
    """got must be the target's greedy generation: generate_naive's tokens,
    except that a near-tie (within TIE_TOLERANCE) may go either way."""
    got = [int(t) for t in got]
    assert len(got) == n_new, f"speculative_generate returned {len(got)} tokens, asked for n_new = {n_new}"
    if got == generate_naive(model, prompt, n_new):
        return
    rows = model.forward(prompt + got)[len(prompt) - 1 : len(prompt) - 1 + n_new].astype(np.float64)  # (n_new, V)
    gaps = rows.max(axis=1) - rows[np.arange(n_new), got]
    i = int(np.argmax(gaps > TIE_TOLERANCE)) if np.any(gaps > TIE_TOLERANCE) else -1
    assert i < 0, (
        f"at temperature 0 with {who}, new token {i} is {got[i]}, but the target's greedy choice there is "
        f"{int(rows[i].argmax())} (its logit is higher by {gaps[i]:.3g}); the output must be the target's own "
        f"greedy generation"
    )


@pytest.mark.task("loop")
@pytest.mark.parametrize("k,temperature", [(1, 0.0), (4, 0.0), (4, 0)])  # an int 0 is greedy as 0.0 is
def test_greedy_output_is_the_target_generation_with_a_random_draft(kata, k, temperature):
    target = tiny(1)
    got, _ = kata.speculative_generate(CachedLM(target), CachedLM(tiny(2)), PROMPT, 20, k=k, temperature=temperature)
    assert_is_greedy_generation(target, PROMPT, got, 20, "a random draft")


@pytest.mark.task("loop")
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_is_the_target_generation_when_the_draft_is_the_target(kata, k):
    target = tiny(3)
    got, _ = kata.speculative_generate(CachedLM(target), CachedLM(target), PROMPT, 20, k=k, temperature=0.0)
    assert_is_greedy_generation(target, PROMPT, got, 20, "the target as its own draft")


@pytest.mark.task("loop")
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_is_the_target_generation_with_a_bad_draft(kata, k):
    target = tiny(4)
    got, _ = kata.speculative_generate(CachedLM(target), ReversedLM(target), PROMPT, 20, k=k, temperature=0.0)
    assert_is_greedy_generation(target, PROMPT, got, 20, "a draft that always proposes the target's least likely token")


@pytest.mark.task("loop")
@pytest.mark.parametrize(
    "n_new,k,temperature", [(0, 4, 1.0), (1, 4, 1.0), (7, 0, 1.0), (9, 3, 0.7), (10, 12, 0.0), (13, 4, 0.0)]
)
def test_generates_exactly_n_new_tokens(kata, n_new, k, temperature):
    got, _ = kata.speculative_generate(
        CachedLM(tiny(5)),
        CachedLM(tiny(6)),
        PROMPT,
        n_new,
        k=k,
        temperature=temperature,
        rng=np.random.default_rng(common.rng(21).integers(2**63)),
    )
    got = [int(t) for t in got]
    assert len(got) == n_new, f"asked for n_new = {n_new} (k = {k}), got {len(got)} tokens"
    assert all(0 <= t < TINY.vocab_size for t in got), f"generated tokens {got} fall outside [0, V={TINY.vocab_size})"


@pytest.mark.task("loop")
@pytest.mark.parametrize("temperature", [0.6, 2])  # a temperature is a number: an int one samples as that float
def test_sampled_first_two_tokens_are_distributed_as_the_target_own_sampling(kata, temperature):
    V = 5
    gen = common.rng(22)
    target, draft = BigramLM(gen.normal(0, 1.5, (V, V))), BigramLM(gen.normal(0, 1.5, (V, V)))
    prompt = [2, 0, 3]

    def probs(logits):
        z = np.asarray(logits, dtype=np.float64) / temperature
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    first = probs(target.table[prompt[-1]])  # (V,)
    joint = first[:, None] * probs(target.table)  # (V, V): P(t1, t2) of the target sampling alone
    counts = np.zeros((V, V), dtype=np.int64)
    learner_rng = np.random.default_rng(gen.integers(2**63))
    runs = jail_client.call_many(
        kata.speculative_generate,
        [(target, draft, prompt, 3)] * LOOP_RUNS,
        k=2,
        temperature=temperature,
        rng=learner_rng,
    )
    for tokens, _ in runs:
        counts[int(tokens[0]), int(tokens[1])] += 1
    stat, df, note = chi_square(counts, joint)
    assert fits(stat, df) and not note, fit_message(
        f"at temperature {temperature} the first two tokens (t1, t2) are not distributed as the target's own sampling "
        f"(counts over t1 * V + t2)",
        stat,
        df,
        note,
        counts,
        joint,
    )


@pytest.mark.task("loop")
@pytest.mark.parametrize("temperature,same", [(0.0, False), (1.0, False), (0.0, True)])
def test_stats_count_the_calls_and_drafts_of_the_run(kata, temperature, same):
    target = CachedLM(tiny(7))
    draft = CachedLM(target.model) if same else CachedLM(tiny(8))
    n_new, k = 17, 3
    _, stats = kata.speculative_generate(
        target,
        draft,
        PROMPT,
        n_new,
        k=k,
        temperature=temperature,
        rng=np.random.default_rng(common.rng(23).integers(2**63)),
    )
    calls = (int(stats.target_calls), int(stats.draft_calls))
    assert calls == (target.calls, draft.calls), (
        f"stats count (target_calls, draft_calls) = {calls}, but the models were called "
        f"{(target.calls, draft.calls)} times"
    )
    drafted, accepted = int(stats.drafted), int(stats.accepted)
    assert 0 <= accepted <= drafted <= k * target.calls, (
        f"stats say {accepted} of {drafted} drafts accepted in {target.calls} rounds of k = {k}; "
        f"need 0 <= accepted <= drafted <= k * target_calls"
    )
    assert accepted + target.calls == n_new, (
        f"each target call yields its accepted drafts plus one token of its own, so {accepted} accepted drafts in "
        f"{target.calls} target calls make {accepted + target.calls} tokens, not the {n_new} asked for"
    )
    assert draft.calls == drafted, (
        f"each drafted token takes one draft call, but {drafted} drafts took {draft.calls} draft calls"
    )
    if same:
        assert accepted == drafted, (
            f"with the target as its own draft at temperature 0 every draft is accepted, but stats say {accepted} "
            f"of {drafted}"
        )


@pytest.mark.task("loop")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_k_zero_samples_from_the_target_alone_without_calling_the_draft(kata, temperature):
    target, draft = CachedLM(tiny(13)), CachedLM(tiny(14))
    n_new = 6
    _, stats = kata.speculative_generate(
        target,
        draft,
        PROMPT,
        n_new,
        k=0,
        temperature=temperature,
        rng=np.random.default_rng(common.rng(25).integers(2**63)),
    )
    assert (draft.calls, target.calls) == (0, n_new), (
        f"with k = 0 (plain sampling from the target) at temperature {temperature}, {n_new} tokens should take "
        f"{n_new} target calls and no draft call; the draft was called {draft.calls} times and the target "
        f"{target.calls}"
    )
    assert (int(stats.draft_calls), int(stats.drafted)) == (0, 0), (
        f"with k = 0 nothing is drafted, but stats say draft_calls = {stats.draft_calls}, drafted = {stats.drafted}"
    )


LARGE_LOGIT = 1000.0  # far past where exp overflows in float64 (about 709)


@pytest.mark.task("loop")
def test_sampling_survives_logits_whose_exp_overflows(kata):
    V, n_new = 6, 8
    gen = common.rng(26)
    successor = gen.permutation(V)  # the target's near-certain next token after each token
    table = gen.uniform(0.0, LARGE_LOGIT / 2, (V, V))
    table[np.arange(V), successor] = LARGE_LOGIT  # every other token is at least e^-500 less likely
    target, draft = BigramLM(table), BigramLM(LARGE_LOGIT * (1.0 + gen.random((V, V))))  # every exp overflows
    prompt = [int(gen.integers(V))]
    want = []
    for _ in range(n_new):
        want.append(int(successor[(prompt + want)[-1]]))
    learner_rng = np.random.default_rng(gen.integers(2**63))
    got, _ = _without_crashing(
        lambda: kata.speculative_generate(target, draft, prompt, n_new, k=3, temperature=1.0, rng=learner_rng),
        f"speculative_generate with logits near {LARGE_LOGIT:g} (beyond the range of exp)",
    )
    got = [int(t) for t in got]
    assert got == want, (
        f"with logits near {LARGE_LOGIT:g} (exp overflows) at temperature 1 the target puts all but e^-500 of "
        f"its mass on one token per position, so the output must be {want}; got {got}"
    )


@pytest.mark.task("loop")
def test_speculative_generate_rejects_a_negative_temperature(kata):
    with pytest.raises(ValueError):
        kata.speculative_generate(
            CachedLM(tiny(9)), CachedLM(tiny(10)), PROMPT, 5, k=2, temperature=-1.0, rng=np.random.default_rng(0)
        )


@pytest.mark.task("loop")
@pytest.mark.parametrize(
    "fields,rate,per_call",
    [((4, 12, 12, 6), 0.5, 2.5), ((4, 10, 8, 6), 0.75, 2.5), ((3, 0, 0, 0), 0.0, 1.0), ((0, 0, 0, 0), 0.0, 0.0)],
)
def test_stats_derive_acceptance_rate_and_tokens_per_target_call(kata, fields, rate, per_call):
    stats = kata.SpecStats(*fields)
    got = (float(stats.acceptance_rate), float(stats.tokens_per_target_call))
    assert _isclose(got[0], rate, abs_tol=STATS_TOLERANCE) and _isclose(got[1], per_call, abs_tol=STATS_TOLERANCE), (
        f"SpecStats(target_calls, draft_calls, drafted, accepted) = {fields} should give acceptance_rate = "
        f"accepted / drafted = {rate} and tokens_per_target_call = (accepted + target_calls) / target_calls = "
        f"{per_call} (0.0 when the divisor is 0), got {got}"
    )


@pytest.mark.task("loop")
@pytest.mark.parametrize("what", ["k = -1", "n_new = -1"])
def test_speculative_generate_rejects_bad_input_with_value_error(kata, what):
    k, n_new = (-1, 5) if what == "k = -1" else (4, -1)
    with pytest.raises(ValueError):
        kata.speculative_generate(CachedLM(tiny(9)), CachedLM(tiny(10)), PROMPT, n_new, k=k, temperature=0.0)


class ForwardOnly:
    """Not a language model here: it has `forward` but no `logits`."""

    __jail_api__ = ("forward",)

    def forward(self, tokens) -> np.ndarray:
        return np.zeros((len(tokens), TINY.vocab_size))


# what -> (the bad argument's name, its value, n_new): each refused before any model call
BAD_GENERATE = {
    "a missing rng at temperature 1": ("rng", None, 5),
    "an empty prompt (with n_new = 0)": ("prompt", [], 0),
    "a target without logits": ("target", ForwardOnly(), 5),
    "a draft without logits": ("draft", ForwardOnly(), 5),
    "a logits table instead of a target": ("target", np.zeros((TINY.vocab_size, TINY.vocab_size)), 5),
}


@pytest.mark.task("loop")
@pytest.mark.parametrize("what", list(BAD_GENERATE))
def test_speculative_generate_refuses_a_missing_rng_an_empty_prompt_or_a_model_without_logits(kata, what):
    name, bad, n_new = BAD_GENERATE[what]
    target, draft = CachedLM(tiny(9)), CachedLM(tiny(10))
    args = {"target": target, "draft": draft, "prompt": PROMPT, "rng": np.random.default_rng(0), name: bad}
    _refuses(
        lambda: kata.speculative_generate(
            args["target"], args["draft"], args["prompt"], n_new, k=2, temperature=1.0, rng=args["rng"]
        ),
        f"speculative_generate with {what}",
    )
    assert (target.calls, draft.calls) == (0, 0), (
        f"speculative_generate refused {what}, but only after calling the target {target.calls} and the draft "
        f"{draft.calls} times: a bad argument must be refused before any model is called"
    )


@pytest.mark.task("loop")
def test_a_draft_equal_to_the_target_is_always_accepted_when_sampling(kata):
    V, temperature, n_new, k, runs = 6, 0.5, 24, 3, 8
    gen = common.rng(31)
    lm = BigramLM(gen.normal(0, 1.5, (V, V)))
    learner_rng = np.random.default_rng(gen.integers(2**63))
    outs = jail_client.call_many(
        kata.speculative_generate,
        [(lm, lm, [int(gen.integers(V))], n_new) for _ in range(runs)],
        k=k,
        temperature=temperature,
        rng=learner_rng,
    )
    drafts = n_new - math.ceil(n_new / (k + 1))  # all kept: each of the rounds adds one target token
    stats = [(int(s.accepted), int(s.drafted)) for _, s in outs]
    assert stats == [(drafts, drafts)] * runs, (
        f"with the draft equal to the target at temperature {temperature}, q = p at every drafted position, so "
        f"every draft is accepted: {n_new} tokens at k = {k} make {drafts} drafts, all accepted, in every run; "
        f"(accepted, drafted) over {runs} runs: {stats}"
    )


# ------------------------------------------------------------ speed (exact call counts)


@pytest.mark.task("speed")
@pytest.mark.speed
@pytest.mark.parametrize("n_new,k", [(12, 1), (20, 4), (23, 4), (9, 8), (0, 4)])
def test_draft_equal_to_target_needs_one_target_call_per_k_plus_one_tokens(kata, n_new, k):
    model = tiny(11)
    target, draft = CachedLM(model), CachedLM(model)
    kata.speculative_generate(target, draft, PROMPT, n_new, k=k, temperature=0.0)
    expected = math.ceil(n_new / (k + 1))
    assert target.calls == expected, (
        f"with the target as its own draft every draft is accepted, so {n_new} tokens at k = {k} take "
        f"ceil(n_new / (k + 1)) = {expected} target calls; yours made {target.calls}"
    )


def shipped_or_stand_in() -> tuple[Model, Model, list[list[int]]]:
    """The shipped teacher and draft with two validation prompts, or, before
    the weights ship, a random tiny target and a lightly perturbed copy of it."""
    teacher, draft = shipped_model("teacher"), shipped_model("draft")
    if teacher is not None and draft is not None:
        from reference.tokenizer import encode

        text = (WEIGHTS_DIR.parent / "data" / "val.txt").read_text(encoding="ascii")
        prompts = [encode(text[s : s + 32]) for s in (0, 20000)]
        return teacher, draft, prompts
    target = tiny(12)
    gen = common.rng(24)
    noisy = {n: w + 0.15 * w.std() * gen.standard_normal(w.shape).astype(np.float32) for n, w in target.weights.items()}
    return target, Model(TINY, noisy), [PROMPT, [7, 7, 2], [0, 11, 5, 9]]


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


@pytest.mark.task("speed")
@pytest.mark.speed
def test_shipped_draft_saves_the_teacher_calls_the_greedy_rule_allows(kata):
    target_model, draft_model, prompts = shipped_or_stand_in()
    n_new, k, calls, needed = 32, 4, 0, 0
    for prompt in prompts:
        target = CachedLM(target_model)
        kata.speculative_generate(target, CachedLM(draft_model), prompt, n_new, k=k, temperature=0.0)
        calls += target.calls
        needed += greedy_target_calls(target_model, draft_model, prompt, n_new, k)
    made = n_new * len(prompts)
    common.figure(
        "tokens per teacher call, shipped draft at k = 4",
        made / max(calls, 1),
        made / (needed + EXTRA_CALLS * len(prompts)),
        unit="tokens/call",
        key="tokens_per_call",
    )
    # What a round's verifying call costs the target: k + 1 of its own greedy tokens scored at once.
    ratio, experts = verify_work(target_model, prompts[0], generate(CachedLM(target_model), prompts[0], k + 1))
    common.figure("weights a verifying call reads / a one-token call's", ratio, unit="x", key="verify_bytes")
    common.figure("experts a verifying call runs per layer", experts, unit="experts", key="verify_experts")
    assert calls <= needed + EXTRA_CALLS * len(prompts), (
        f"greedy at k = {k} the draft's correct guesses let the teacher write {made} tokens in {needed} target calls "
        f"({made / needed:.2f} tokens per call); yours made {calls} calls ({made / calls:.2f} tokens per call)"
    )
