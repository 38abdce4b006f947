"""Checks of the greedy task: greedy_accept; and the checks of what a round returns, for
both rules (and the loop), a case per task.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.jailer import jail_client
from grader.suites import common
from grader.suites.speculative.checks import _without_crashing
from grader.suites.speculative.strategies import P_TWO, PROMPT, Q_TWO, TOKEN_DTYPES, tiny
from reference.lm import CachedLM

LOGIT_DTYPES = (np.float64, np.float32, np.float16)  # target logits: any float dtype


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
