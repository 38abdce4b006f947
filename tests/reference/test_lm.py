"""The language-model adapters of reference/lm.py: CachedLM scores like a full
forward pass while recomputing only what changed since its previous call."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.lm import BigramLM, CachedLM, PlainLM, generate, shipped_model, verify_work
from reference.model import Config, Model
from reference.sampling import generate_naive

CONFIG = Config(vocab_size=11, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24, max_seq_len=40)
MOE = Config(
    vocab_size=11, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=24, max_seq_len=40, n_experts=3, top_k=2
)
ATOL = 1e-5  # float32 logits of a cached and a full pass may differ by summation order

tokens = st.lists(st.integers(0, 10), min_size=1, max_size=20)


@given(calls=st.lists(tokens, min_size=1, max_size=5))
def test_cached_logits_equal_a_full_forward_pass_after_any_sequence_of_calls(calls):
    for config in (CONFIG, MOE):
        model = Model.random(config, seed=3)
        lm = CachedLM(model)
        for seq in calls:
            np.testing.assert_allclose(lm.logits(seq), model.forward(seq), atol=ATOL)


@given(calls=st.lists(tokens, min_size=2, max_size=6))
def test_cached_logits_once_returned_never_change_and_cannot_be_written(calls):
    model = Model.random(CONFIG, seed=3)
    lm = CachedLM(model)
    answers = [(lm.logits(seq), model.forward(seq)) for seq in calls]
    for got, expected in answers:  # later calls that diverge earlier rewrite no row an answer shows
        np.testing.assert_allclose(got, expected, atol=ATOL)
    with pytest.raises(ValueError, match="read-only"):
        answers[-1][0][0, 0] = 1.0


def test_cached_lm_recomputes_only_the_positions_after_the_shared_prefix():
    model = Model.random(CONFIG, seed=4)
    lm = CachedLM(model)
    lm.logits([1, 2, 3, 4])
    with model.count_work() as work:
        lm.logits([1, 2, 3, 4, 5, 6])  # 2 new positions
        lm.logits([1, 2, 9])  # diverges at position 2: 1 new position
        lm.logits([1, 2])  # a prefix of the cached sequence: nothing new
    assert work.positions[0] == 3
    assert (lm.calls, lm.positions) == (4, 7)


def test_a_list_changed_in_place_after_a_call_is_scored_as_it_now_is():
    model = Model.random(CONFIG, seed=4)
    lm = CachedLM(model)
    seq = [1, 2, 3]
    lm.logits(seq)
    seq.append(4)  # a decoding loop's list, extended
    np.testing.assert_allclose(lm.logits(seq), model.forward(seq), atol=ATOL)
    seq[1] = 7  # changed inside what the cache holds
    np.testing.assert_allclose(lm.logits(seq), model.forward(seq), atol=ATOL)
    assert lm.positions == 3 + 1 + 3


@pytest.mark.parametrize("bad", [11, -1, 2.5], ids=["too-high", "negative", "float"])
def test_a_list_that_continues_the_cache_with_a_bad_id_raises_and_changes_nothing(bad):
    model = Model.random(CONFIG, seed=4)
    lm = CachedLM(model)
    lm.logits([1, 2])
    with pytest.raises(ValueError, match="token|integers"):
        lm.logits([1, 2, bad])
    assert (lm.calls, lm.positions) == (1, 2)
    np.testing.assert_allclose(lm.logits([1, 2, 3]), model.forward([1, 2, 3]), atol=ATOL)
    assert lm.positions == 3


def test_a_list_that_continues_the_cache_past_max_seq_len_raises():
    model = Model.random(CONFIG, seed=4)
    lm = CachedLM(model)
    seq = [1] * CONFIG.max_seq_len
    lm.logits(seq)
    with pytest.raises(ValueError, match="longer than max_seq_len"):
        lm.logits(seq + [2])


def test_a_call_stopped_part_way_leaves_a_cache_that_still_scores_right(monkeypatch):
    model = Model.random(CONFIG, seed=4)
    lm = CachedLM(model)
    lm.logits([1, 2, 3, 4])

    def stop(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(model, "logits", stop)  # after every layer's keys were written
        with pytest.raises(KeyboardInterrupt):
            lm.logits([1, 2, 9, 9, 9])
    np.testing.assert_allclose(lm.logits([1, 2, 3, 4]), model.forward([1, 2, 3, 4]), atol=ATOL)
    np.testing.assert_allclose(lm.logits([1, 2, 3, 4, 5]), model.forward([1, 2, 3, 4, 5]), atol=ATOL)


def test_plain_lm_counts_calls_and_recomputes_everything():
    model = Model.random(CONFIG, seed=5)
    lm = PlainLM(model)
    np.testing.assert_array_equal(lm.logits([1, 2, 3]), model.forward([1, 2, 3]))
    lm.logits([1, 2, 3, 4])
    assert (lm.calls, lm.positions) == (2, 7)


def test_generate_through_a_cached_lm_is_the_naive_generation():
    model = Model.random(CONFIG, seed=6)
    assert generate(CachedLM(model), [1, 2], 15) == generate_naive(model, [1, 2], 15)
    sampled = generate(CachedLM(model), [1, 2], 15, temperature=0.8, rng=np.random.default_rng(1))
    assert sampled == generate_naive(model, [1, 2], 15, temperature=0.8, rng=np.random.default_rng(1))


@pytest.mark.parametrize("adapter", [CachedLM, PlainLM])
def test_adapters_reject_what_is_not_a_model(adapter):
    with pytest.raises(ValueError, match="wraps a reference.model.Model"):
        adapter(object())


@pytest.mark.parametrize(
    "prompt, kwargs, words",
    [
        ([1.7, 2.9], {}, ["prompt must hold int token ids", "float64", "1.7"]),  # int(1.7) made it [1, 2] before
        ([[1, 2]], {}, ["prompt must be a 1-D sequence", "(1, 2)"]),
        (["1", "2"], {}, ["prompt must hold int token ids", "'1'"]),
        ([True, False], {}, ["prompt must hold int token ids", "bool"]),
        ([], {}, ["prompt must hold at least one token id"]),
        ([1, 2], {"temperature": 1.0, "rng": 0}, ["rng", "default_rng"]),  # 0.random(): an AttributeError before
        ([1, 2], {"temperature": None}, ["temperature", "None"]),
    ],
    ids=["floats", "2-d", "strings", "bools", "empty", "int-rng", "none-temperature"],
)
def test_generate_refuses_a_prompt_that_is_not_int_ids_and_bad_sampling_arguments(prompt, kwargs, words):
    lm = PlainLM(Model.random(CONFIG, seed=6))
    with pytest.raises(ValueError) as info:
        generate(lm, prompt, 2, **kwargs)
    for word in words:
        assert word in str(info.value)
    assert lm.calls == 0


def test_a_continuation_holding_an_array_is_refused_by_the_token_check():
    lm = CachedLM(Model.random(CONFIG, seed=4))
    lm.logits([1, 2])
    with pytest.raises(ValueError, match="tokens must be a 1-D sequence of ints"):  # not "truth value ... ambiguous"
        lm.logits([np.array([1, 2]), 3])


@pytest.mark.parametrize("name", ["techer", None, ["teacher"]], ids=["typo", "none", "list"])
def test_a_shipped_model_is_named_as_shipped_or_refused(name):
    with pytest.raises(ValueError, match="shipped models are .'teacher', 'draft', 'dense'."):  # None read as "not yet"
        shipped_model(name)


def test_verify_work_needs_a_token_to_score():
    with pytest.raises(ValueError, match="at least one token"):  # a ZeroDivisionError before
        verify_work(Model.random(CONFIG, seed=1), [1, 2], [])


@pytest.mark.parametrize("table", [{"a": 1}, [["x"]], [[1.0, 2.0], [3.0]]], ids=["dict", "strings", "ragged"])
def test_a_bigram_table_that_is_no_array_of_logits_is_refused_by_name(table):
    with pytest.raises(ValueError, match="table must be a square"):  # a TypeError from NumPy for the dict
        BigramLM(table)
