"""Checks of the ngram task: distill_ngram averages the teacher's distributions over each context."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.jailer import jail_client
from grader.suites import common
from grader.suites.common import float_arrays
from grader.suites.distillation.oracles import _ngram_table64
from reference.lm import shipped_model
from reference.ngram import TEXT_PATH, NGramLM, teacher_logits
from reference.tokenizer import encode

ROW_TOLERANCE = 1e-6  # means of a few rows: summation order or a softmax in float32 (4e-8) may differ
TRAIN_CHARS, HELD_OUT_CHARS = 6000, 1500  # text the shipped teacher reads for the real-data check
MIN_AGREEMENT = 0.45  # in-domain agreement of a correct order-5 table from these 6,000 characters: 0.58


@st.composite
def texts(draw, max_len=14, max_vocab=4):
    """(logits (N, V) float64, tokens (N,) of an integer dtype, order (an int or a NumPy int), temperature):
    few ids, so contexts repeat."""
    v = draw(st.integers(2, max_vocab))
    n = draw(st.integers(1, max_len))
    dtype = draw(st.sampled_from([np.int64, np.int32, np.uint8]))
    tokens = draw(hnp.arrays(dtype, (n,), elements=st.integers(0, v - 1)))
    logits = draw(float_arrays((n, v), -4.0, 4.0, dtype=np.float64))
    order = draw(st.sampled_from([int, np.int64]))(draw(st.integers(1, 4)))
    temperature = draw(st.sampled_from([1.0, 0.5, 2, 3.0]))
    return logits, tokens, order, temperature


def _as_dict(kata_out, order, v):
    """The returned table as {context: (row, count)}, after checking its shapes, dtypes and padding."""
    assert type(kata_out) in (tuple, list) and len(kata_out) == 3, (
        "distill_ngram must return a tuple (contexts, probs, counts)"
    )
    contexts, probs, counts = (np.asarray(a) for a in kata_out)
    r = contexts.shape[0] if contexts.ndim == 2 else -1
    assert contexts.shape == (r, order - 1) and r >= 0, (
        f"contexts has shape {contexts.shape}; expected (R, order - 1) = (R, {order - 1})"
    )
    assert probs.shape == (r, v) and counts.shape == (r,), (
        f"probs {probs.shape} and counts {counts.shape} must be (R, V) = ({r}, {v}) and (R,) = ({r},)"
    )
    assert contexts.dtype == np.int64 and counts.dtype == np.int64 and probs.dtype == np.float64, (
        f"dtypes are contexts {contexts.dtype}, probs {probs.dtype}, counts {counts.dtype}; "
        "expected int64, float64, int64"
    )
    table = {}
    for row, p, n in zip(contexts.tolist(), probs, counts.tolist()):
        ids = [x for x in row if x != -1]
        assert row == [-1] * (len(row) - len(ids)) + ids, (
            f"context {row}: ids are right-aligned, with -1 only before a shorter context's first id"
        )
        assert tuple(ids) not in table, f"context {row} appears twice; each distinct context has one row"
        table[tuple(ids)] = (p, n)
    return table


@pytest.mark.task("ngram")
@given(texts())
@example((np.array([[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]]), np.array([1, 0, 1]), 3, 1.0))
@example((np.array([[1000.0, 0.0], [0.0, -1000.0], [990.0, 1000.0]]), np.array([0, 1, 0]), 2, 1.0))  # exp overflows
def test_each_row_is_the_mean_teacher_distribution_of_its_context(kata, text):
    """The logits and tokens are kept in the jail and passed as those very arrays: after the call they hold
    what they held."""
    logits, tokens, order, temperature = text
    kept = [jail_client.put(kata.distill_ngram, a) for a in (logits, tokens)]
    got = _as_dict(kata.distill_ngram(*kept, order, temperature), order, logits.shape[1])
    for name, proxy, before in zip(("logits", "tokens"), kept, (logits, tokens)):
        after = np.asarray(proxy.copy())
        assert np.array_equal(after, before), (
            f"distill_ngram changed the caller's {name}: {before.tolist()} is now {after.tolist()}"
        )
    want = _ngram_table64(logits, tokens, order, temperature)
    assert set(got) == set(want), (
        f"for tokens {tokens.tolist()} at order {order} the contexts are {sorted(got)}, expected {sorted(want)} "
        "(every suffix of 0..order-1 ids ending at each position, the position's own id last)"
    )
    for ctx, (row, n) in want.items():
        assert got[ctx][1] == n, f"context {list(ctx)} counts {got[ctx][1]} positions, expected {n}"
        assert np.allclose(got[ctx][0], row, rtol=0, atol=ROW_TOLERANCE), (
            f"context {list(ctx)} (T={temperature}): row {np.round(got[ctx][0], 6).tolist()}, expected the mean of "
            f"softmax(logits / T) over its {n} positions, {np.round(row, 6).tolist()} (off by up to "
            f"{np.nanmax(np.abs(np.asarray(got[ctx][0], dtype=float) - row)):.3g}; allowed {ROW_TOLERANCE:g})"
        )


@pytest.mark.task("ngram")
@given(texts())
def test_every_length_counts_each_position_that_has_that_many_ids_once(kata, text):
    logits, tokens, order, _ = text
    got = _as_dict(kata.distill_ngram(logits, tokens, order), order, logits.shape[1])
    n = tokens.size
    for c in range(order):
        total = sum(count for ctx, (_, count) in got.items() if len(ctx) == c)
        want = max(n - c + 1, 0) if c else n
        assert total == want, (
            f"the contexts of {c} ids count {total} positions in all; of {n} positions, {want} have {c} ids "
            "behind them (themselves included), and each of those belongs to exactly one such context"
        )
    for ctx, (row, _) in got.items():
        assert abs(row.sum() - 1) < ROW_TOLERANCE, (
            f"the row of context {list(ctx)} sums to 1 {row.sum() - 1:+.3g}; allowed {ROW_TOLERANCE:g} from 1"
        )


@pytest.mark.task("ngram")
def test_order_one_is_the_teacher_mean_distribution(kata):
    logits = np.array([[0.0, np.log(3.0)], [np.log(3.0), 0.0], [0.0, 0.0]])
    contexts, probs, counts = kata.distill_ngram(logits, np.array([1, 0, 1]), 1)
    assert np.shape(contexts) == (1, 0) and np.asarray(counts).tolist() == [3], (
        f"order 1 gives one empty context counting every position; got contexts of shape {np.shape(contexts)}, "
        f"counts {np.asarray(counts).tolist()}"
    )
    assert np.allclose(probs, [[0.5, 0.5]]), f"order 1's row is {np.asarray(probs).tolist()}, expected [[0.5, 0.5]]"


@pytest.mark.task("ngram")
def test_a_table_of_huge_logits_worked_out_by_hand(kata):
    """Order 2 at T = 2 over tokens [1, 0]: softmax([2000, 0] / 2) is [1, 0] (exp(1000) overflows unless the
    row's maximum comes off first) and softmax([0, 2 ln 3] / 2) is [1/4, 3/4]; the empty context averages
    both, [5/8, 3/8], and each one-id context holds its position's row."""
    logits = np.array([[2000.0, 0.0], [0.0, 2 * np.log(3.0)]])
    contexts, probs, counts = (np.asarray(a) for a in kata.distill_ngram(logits, np.array([1, 0]), 2, 2.0))
    want = {(-1,): ([5 / 8, 3 / 8], 2), (1,): ([1.0, 0.0], 1), (0,): ([1 / 4, 3 / 4], 1)}
    got = {tuple(c): (p, int(n)) for c, p, n in zip(contexts.tolist(), probs, counts.tolist())}
    assert set(got) == set(want), f"the contexts are {sorted(got)}, expected {sorted(want)} (-1 pads the empty one)"
    for ctx, (row, n) in want.items():
        assert got[ctx][1] == n and np.allclose(got[ctx][0], row, rtol=0, atol=ROW_TOLERANCE), (
            f"context {list(ctx)}: row {np.round(got[ctx][0], 6).tolist()} counting {got[ctx][1]}, expected {row} "
            f"counting {n}: the mean of softmax(logits / T) over its positions, finite for logits whose exp overflows"
        )


@pytest.mark.task("ngram")
def test_distill_ngram_leaves_the_callers_logits_and_tokens_unchanged(kata):
    """The logits and tokens are kept in the jail and passed as those very arrays (float64 and int64, which
    np.asarray does not copy): after the call they hold what they held, for the caller that uses them again."""
    logits, tokens = common.rng(47).standard_normal((6, 3)) * 3, np.array([0, 2, 1, 2, 0, 1])
    for temperature in (1.0, 2.0):
        kept = [jail_client.put(kata.distill_ngram, a) for a in (logits, tokens)]
        kata.distill_ngram(*kept, 3, temperature)
        for name, proxy, before in zip(("logits", "tokens"), kept, (logits, tokens)):
            after = np.asarray(proxy.copy())
            assert np.array_equal(after, before), (
                f"distill_ngram(T={temperature:g}) changed the caller's {name}: {np.round(before, 3).tolist()} is now "
                f"{np.round(after, 3).tolist()}"
            )


@pytest.mark.task("ngram")
def test_empty_text_gives_an_empty_table(kata):
    contexts, probs, counts = (np.asarray(a) for a in kata.distill_ngram(np.zeros((0, 5)), np.zeros(0, np.int64), 3))
    assert (contexts.shape, probs.shape, counts.shape) == ((0, 2), (0, 5), (0,)), (
        f"N = 0 gives empty arrays (0, order - 1), (0, V), (0,); got {contexts.shape}, {probs.shape}, {counts.shape}"
    )


BAD_NGRAM_INPUTS = {
    "logits that are not 2-D": (np.zeros(4), np.zeros(4, np.int64), 2, 1.0),
    "tokens of the wrong length": (np.zeros((4, 3)), np.zeros(3, np.int64), 2, 1.0),
    "a token >= V": (np.zeros((2, 3)), np.array([0, 3]), 2, 1.0),
    "a negative token": (np.zeros((2, 3)), np.array([-1, 0]), 2, 1.0),
    "float tokens": (np.zeros((2, 3)), np.array([0.0, 1.0]), 2, 1.0),
    "NaN logits": (np.array([[0.0, np.nan, 0.0], [0.0, 0.0, 0.0]]), np.array([0, 1]), 2, 1.0),
    "an inf logit": (np.array([[0.0, 0.0, 0.0], [0.0, np.inf, 0.0]]), np.array([0, 1]), 2, 1.0),
    "a -inf logit": (np.array([[0.0, -np.inf, 0.0], [0.0, 0.0, 0.0]]), np.array([0, 1]), 2, 1.0),
    "order 0": (np.zeros((2, 3)), np.array([0, 1]), 0, 1.0),
    "a float order": (np.zeros((2, 3)), np.array([0, 1]), 2.0, 1.0),
    "order True": (np.zeros((2, 3)), np.array([0, 1]), True, 1.0),
    "temperature 0": (np.zeros((2, 3)), np.array([0, 1]), 2, 0.0),
    "a negative temperature on empty text": (np.zeros((0, 3)), np.zeros(0, np.int64), 2, -1.0),
}


@pytest.mark.task("ngram")
@pytest.mark.parametrize("case", list(BAD_NGRAM_INPUTS))
def test_distill_ngram_rejects_bad_input(kata, case):
    with pytest.raises(ValueError):
        kata.distill_ngram(*BAD_NGRAM_INPUTS[case])


@pytest.fixture(scope="module")
def shipped_text():
    """The shipped teacher's logits on the start of train.txt, and two held-out texts: val.txt (the
    same kind of text) and code.txt (Python source), each with the teacher's greedy choice per position."""
    teacher = shipped_model("teacher")
    if teacher is None:
        pytest.skip("the shipped teacher's weights are missing")
    data = TEXT_PATH.parent
    train = np.array(encode((data / "train.txt").read_text(encoding="ascii")[:TRAIN_CHARS]))
    held = {}
    for name in ("val.txt", "code.txt"):
        ids = np.array(encode((data / name).read_text(encoding="ascii")[:HELD_OUT_CHARS]))
        held[name] = (ids, teacher_logits(teacher, ids).argmax(axis=1))
    return teacher_logits(teacher, train), train, held


def _agreement(lm: NGramLM, ids: np.ndarray, best: np.ndarray) -> float:
    hits = 0
    for s in range(0, ids.size, 256):
        lm.reset()
        hits += int(np.sum(np.asarray(lm.logits(ids[s : s + 256])).argmax(axis=1) == best[s : s + 256]))
    return hits / ids.size


@pytest.mark.task("ngram")
def test_a_table_distilled_from_the_shipped_teacher_drafts_like_it_on_its_kind_of_text(kata, shipped_text):
    """An order-5 table from the shipped teacher's distributions on 6,000 characters of train.txt, checked
    row by row, then used as a draft: its argmax agrees with the teacher's on 58% of the first 1,500
    characters of val.txt (docstrings, the kind of text it learned from) and 45% of code.txt's (Python
    source, which it never saw). The texts are fixed, so these figures are the same under every seed."""
    logits, train, held = shipped_text
    got = _as_dict(kata.distill_ngram(logits, train, 5), 5, logits.shape[1])
    want = _ngram_table64(logits, train, 5)
    assert set(got) == set(want), f"the table has {len(got)} contexts, expected {len(want)}"
    worst = max(float(np.abs(got[ctx][0] - row).max()) for ctx, (row, _) in want.items())
    assert worst < 1e-6, f"a row is {worst:.3g} from the mean of the teacher's distributions over its positions"
    rows = np.array([got[ctx][0] for ctx in want])
    contexts = np.array([[-1] * (4 - len(ctx)) + list(ctx) for ctx in want], dtype=np.int64).reshape(-1, 4)
    lm = NGramLM(contexts, rows)
    in_domain, out_of_domain = (_agreement(lm, *held[name]) for name in ("val.txt", "code.txt"))
    common.figure("agreement with the teacher on val.txt", in_domain, unit="", key="agree_val")
    common.figure("agreement with the teacher on code.txt", out_of_domain, unit="", key="agree_code")
    assert in_domain >= MIN_AGREEMENT, (
        f"as a draft the table agrees with the teacher on {in_domain:.1%} of val.txt; a correct one: 58%"
    )
