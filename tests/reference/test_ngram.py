"""The n-gram draft: back-off, cached rows, errors, the shipped table."""

from __future__ import annotations

import numpy as np
import pytest

from reference.model import Config, Model
from reference.ngram import (
    LOGP_FLOOR,
    LOGP_STEP,
    NGRAM_PATH,
    NGramLM,
    checked_table,
    context_keys,
    distil,
    merge_tables,
    prune_table,
)
from reference.tokenizer import VOCAB_SIZE, encode

V = 4


def table(rows: dict[tuple[int, ...], list[float]], C: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """A table from {context ids: probabilities}: contexts right-aligned in C columns."""
    contexts = np.array([[-1] * (C - len(ctx)) + list(ctx) for ctx in rows], dtype=np.int64).reshape(len(rows), C)
    return contexts, np.array(list(rows.values()), dtype=np.float64)


HAND = {
    (): [0.25, 0.25, 0.25, 0.25],
    (1,): [0.7, 0.1, 0.1, 0.1],
    (2, 1): [0.1, 0.1, 0.1, 0.7],
    (3,): [0.0, 0.0, 1.0, 0.0],
}


def test_each_row_is_the_row_of_the_longest_suffix_the_table_holds():
    lm = NGramLM(*table(HAND))
    got = np.exp(lm.logits([0, 1, 2, 1, 3, 0]))
    want = [HAND[()], HAND[(1,)], HAND[()], HAND[(2, 1)], HAND[(3,)], HAND[()]]
    np.testing.assert_allclose(got, np.maximum(want, np.exp(LOGP_FLOOR)), rtol=1e-6)


def test_a_zero_probability_is_floored_so_every_row_is_a_full_distribution():
    row = NGramLM(*table(HAND)).logits([3])[0]
    assert np.all(np.isfinite(row)) and row.min() == pytest.approx(LOGP_FLOOR)


def test_a_call_that_continues_the_last_one_computes_only_the_new_rows():
    lm = NGramLM(*table(HAND))
    first = lm.logits([0, 1, 2])
    kept = first.copy()
    second = lm.logits([0, 1, 2, 1])
    assert (lm.calls, lm.positions) == (2, 4)
    np.testing.assert_array_equal(second[:3], kept)
    lm.logits([0, 1, 3, 3])  # diverges at position 2: two rows recomputed
    assert lm.positions == 6
    np.testing.assert_array_equal(first, kept)  # an earlier answer is never rewritten
    assert not second.flags.writeable


def test_an_array_and_a_list_give_the_same_rows():
    lm = NGramLM(*table(HAND))
    a = lm.logits(np.array([1, 2, 1, 3], dtype=np.uint8)).copy()
    lm.reset()
    np.testing.assert_array_equal(lm.logits([1, 2, 1, 3]), a)


@pytest.mark.parametrize(
    "tokens", [[], [[1, 2]], [0.5, 1.0], [True, False], [0, V], [-1, 2], list(range(V)) * 3], ids=repr
)
def test_bad_tokens_get_the_errors_a_model_gives(tokens):
    model = Model.random(Config(vocab_size=V, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=8, max_seq_len=8))
    with pytest.raises(ValueError) as from_model:
        model.forward(tokens)
    with pytest.raises(ValueError) as from_table:
        NGramLM(*table(HAND), max_seq_len=8).logits(tokens)
    assert str(from_table.value) == str(from_model.value)


@pytest.mark.parametrize(
    "rows, message",
    [
        ({(1,): [1.0, 0, 0, 0]}, "empty context"),
        ({(): [0.5, 0.5, 0, 0], (1, -1): [1.0, 0, 0, 0]}, "right-aligned"),
        ({(): [0.5, 0.4, 0, 0]}, "sum to 1"),
        ({(): [1.5, -0.5, 0, 0]}, ">= 0"),
        ({(): [1.0, 0, 0, 0], (7,): [1.0, 0, 0, 0]}, "context ids"),
    ],
)
def test_a_malformed_table_is_refused_with_what_is_wrong(rows, message):
    with pytest.raises(ValueError, match=message):
        NGramLM(*table(rows))


def test_a_context_held_twice_is_refused():
    contexts, probs = table(HAND)
    with pytest.raises(ValueError, match="twice"):
        NGramLM(np.vstack([contexts, contexts[:1]]), np.vstack([probs, probs[:1]]))


def test_merging_weighs_each_row_by_its_count():
    contexts, probs = table(HAND)
    counts = np.array([4, 1, 2, 3])
    other_probs = np.tile([0.0, 1.0, 0.0, 0.0], (4, 1))
    ctx, merged, n = merge_tables([(contexts, probs, counts), (contexts[:2], other_probs[:2], np.array([4, 3]))])
    assert len(ctx) == 4 and sorted(n.tolist()) == [2, 3, 4, 8]
    row = merged[[i for i, c in enumerate(ctx.tolist()) if c == [-1, 1]][0]]
    np.testing.assert_allclose(row, (1 * np.array(HAND[(1,)]) + 3 * other_probs[0]) / 4)


def test_pruning_keeps_short_contexts_and_the_rows_that_add_most():
    contexts, probs = table({**HAND, (0, 1): [0.7, 0.1, 0.1, 0.1], (3, 1): [0.1, 0.7, 0.1, 0.1]})
    counts = np.array([9, 9, 9, 9, 50, 5])
    ctx, _, _ = prune_table(contexts, probs, counts, max_rows=5)
    kept = {tuple(c) for c in ctx.tolist()}
    assert kept == {(-1, -1), (-1, 1), (-1, 3), (2, 1), (3, 1)}  # (0, 1) repeats its back-off row: no help


def test_saved_tables_load_back_within_a_step(tmp_path):
    lm = NGramLM(*table(HAND))
    lm.save(tmp_path / "t.npz")
    back = NGramLM.pretrained(tmp_path / "t.npz")
    seq = [0, 1, 2, 1, 3]
    shift = back.logits(seq) - lm.logits(seq)  # rows are renormalised after loading: equal up to a constant
    spread = shift - shift.mean(axis=1, keepdims=True)
    assert np.abs(spread).max() <= LOGP_STEP


def test_a_missing_or_foreign_table_file_says_how_to_rebuild(tmp_path):
    with pytest.raises(FileNotFoundError, match="--ngram-only"):
        NGramLM.pretrained(tmp_path / "none.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable n-gram table"):
        NGramLM.pretrained(tmp_path / "bad.npz")


def test_checked_table_refuses_probs_of_the_wrong_shape():
    with pytest.raises(ValueError, match="one row per context"):
        checked_table(np.full((2, 2), -1), np.ones((3, 4)) / 4)


@pytest.mark.skipif(not NGRAM_PATH.is_file(), reason="the n-gram table has not been built")
def test_the_shipped_table_is_small_and_agrees_with_its_own_training_text():
    assert NGRAM_PATH.stat().st_size <= 3 * 1024 * 1024
    lm = NGramLM.pretrained()
    assert lm.order == 5 and lm.vocab_size == VOCAB_SIZE
    text = encode("Return True if the path is a file.\nReturn True if the path is a directory.\n")
    rows = lm.logits(text)
    hits = np.mean(rows[:-1].argmax(axis=1) == np.array(text[1:]))
    assert hits > 0.6  # a table that backs off wrongly or mixes up rows predicts English far worse


@pytest.mark.skipif(not NGRAM_PATH.is_file(), reason="the n-gram table has not been built")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_shipped_table_drafts_for_the_reference_loop_at_any_temperature(temperature):
    from reference.lm import CachedLM, generate
    from reference.solutions.speculative import speculative_generate

    teacher, prompt = Model.pretrained("teacher"), encode("Return True if the path is a file.\n")
    rng = np.random.default_rng(0) if temperature else None
    tokens, stats = speculative_generate(
        CachedLM(teacher), NGramLM.pretrained(), prompt, 24, k=4, temperature=temperature, rng=rng
    )
    assert len(tokens) == 24 and stats.accepted > 0
    if temperature == 0:
        assert tokens == generate(CachedLM(teacher), prompt, 24)  # greedy: exactly the teacher's own text


def test_contexts_too_long_for_an_exact_key_are_refused_not_merged():
    # order 9 over 256 ids: base-257 keys of 8 ids overflow int64, and these two contexts got the same key
    contexts = np.array([[-1, -1, -1, -1, -1, -1, -1, 0], [248, 26, 200, 68, 200, 26, 248, 1]])
    probs = np.full((2, 256), 1 / 256)
    with pytest.raises(ValueError, match=r"up to 7 ids \(order <= 8\)"):
        merge_tables([(contexts, probs, np.array([1, 1]))])
    keys = context_keys(contexts[:, 1:])  # seven ids: exact
    assert keys[0] != keys[1]
    with pytest.raises(ValueError, match=r"\[0, 256\)"):
        context_keys(np.array([[300]]))


@pytest.mark.parametrize(
    "tables, words",
    [
        ([], ["at least one table"]),
        ([(*table(HAND), np.array([1, 0, 1, 1]))], ["counts", "ints >= 1"]),  # a count of 0 made a NaN row
        ([(*table(HAND), np.array([1, 1]))], ["counts must be (4,)"]),
    ],
    ids=["none", "zero-count", "short-counts"],
)
def test_merging_refuses_no_tables_and_counts_that_are_not_one_positive_int_a_row(tables, words):
    with pytest.raises(ValueError) as info:
        merge_tables(tables)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(max_rows=-1), ["max_rows must be an int >= 3", "-1"]),  # -1 dropped the last row
        (dict(max_rows=0), ["max_rows", "empty and one-id contexts"]),  # 0 dropped the empty context too
        (dict(max_rows=1.5), ["max_rows", "1.5"]),
        (dict(max_rows=4, min_count=None), ["min_count", "None"]),
    ],
    ids=["negative", "zero", "float", "none-min-count"],
)
def test_pruning_refuses_a_max_rows_that_cannot_keep_the_short_contexts(kwargs, words):
    with pytest.raises(ValueError) as info:
        prune_table(*table(HAND), np.array([9, 9, 9, 9]), **kwargs)
    for word in words:
        assert word in str(info.value)
    assert len(prune_table(*table(HAND), np.array([9, 9, 9, 9]), max_rows=3)[0]) == 3


@pytest.mark.parametrize(
    "ids, chunk, words",
    [([], 100, ["tokens must not be empty"]), ([1, 2, 3], 0, ["chunk must be an int >= 1", "0"])],
    ids=["no-text", "zero-chunk"],
)
def test_distilling_refuses_no_text_and_a_chunk_below_one(ids, chunk, words):
    teacher = Model.random(Config(vocab_size=V, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=8, max_seq_len=8))
    with pytest.raises(ValueError) as info:
        distil(lambda *a: None, teacher, ids, order=2, chunk=chunk)
    for word in words:
        assert word in str(info.value)
