"""Properties of the sampling helpers and the naive generator (reference/sampling.py)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reference.model import Config, Model
from reference.sampling import check_n_new, check_rng, draw_index, generate_naive, probs_from_logits, sample_token

# Draws per frequency check, and how many binomial standard deviations an
# observed count may stray from N * p. At 5 sigma a correct sampler fails one
# category with probability < 6e-7, so < 4e-6 over the 6 categories checked.
N_DRAWS = 20_000
SIGMA_BOUND = 5.0

CONFIG = Config(vocab_size=24, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=16, max_seq_len=16)
MODEL = Model.random(CONFIG, seed=0)
PROMPT = [3, 1, 4]

logit_vectors = st.lists(
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=40
).map(lambda xs: np.array(xs, dtype=np.float32))


def softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = logits.astype(np.float64) / temperature
    e = np.exp(z - z.max())
    return e / e.sum()


# ---------------------------------------------------------------- sample_token


@given(logit_vectors)
@example(np.array([1.0, 1.0, 1.0], dtype=np.float32))
@example(np.array([-5.0], dtype=np.float32))
@example(np.array([0.0, 3e38, -3e38, 3e38], dtype=np.float32))
def test_temperature_zero_returns_the_argmax(logits):
    assert sample_token(logits, 0.0) == int(np.argmax(logits))


@given(st.floats(0.05, 10.0), st.integers(0, 2**32 - 1))
def test_sampling_from_one_overwhelming_logit_always_returns_it(temperature, seed):
    logits = np.full(10, -1e6, dtype=np.float32)
    logits[7] = 1e6
    assert sample_token(logits, temperature, np.random.default_rng(seed)) == 7


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_draws_at_temperature_t_follow_softmax_of_logits_over_t(temperature):
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0], dtype=np.float32)
    rng = np.random.default_rng(1234)
    counts = np.bincount([sample_token(logits, temperature, rng) for _ in range(N_DRAWS)], minlength=logits.size)
    p = softmax(logits, temperature)
    bound = SIGMA_BOUND * np.sqrt(N_DRAWS * p * (1 - p))
    assert np.all(np.abs(counts - N_DRAWS * p) <= bound), (counts, N_DRAWS * p)


@given(logit_vectors, st.floats(0.01, 100.0), st.integers(0, 2**32 - 1))
def test_each_sample_advances_the_generator_by_exactly_one_random_call(logits, temperature, seed):
    rng = np.random.default_rng(seed)
    expected = copy.deepcopy(rng)
    sample_token(logits, temperature, rng)
    expected.random()
    assert rng.bit_generator.state == expected.bit_generator.state


@pytest.mark.parametrize(
    "temperature, rng, words",
    [
        (-0.5, np.random.default_rng(0), ["temperature", ">= 0", "-0.5"]),
        (math.nan, np.random.default_rng(0), ["temperature", "nan"]),
        (1.0, None, ["rng", "default_rng"]),
        (None, None, ["temperature", "None"]),  # float(None): a TypeError before
        ("0.5", np.random.default_rng(0), ["temperature", "'0.5'"]),  # float("0.5") took it
        (True, np.random.default_rng(0), ["temperature", "True"]),
        (1.0, 0, ["rng", "default_rng", "0"]),  # 0.random(): an AttributeError before
        (1.0, np.random.RandomState(0), ["rng", "default_rng"]),
    ],
    ids=["negative", "nan", "no-rng", "none", "str", "bool", "int-rng", "legacy-rng"],
)
def test_a_bad_temperature_or_missing_rng_raises_a_value_error_naming_it(temperature, rng, words):
    with pytest.raises(ValueError) as info:
        sample_token(np.zeros(4, dtype=np.float32), temperature, rng)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "logits, words",
    [
        (np.zeros((2, 3)), ["1-D", "(2, 3)"]),
        (np.zeros(0), ["non-empty"]),
        (np.array([0.0, np.nan]), ["NaN"]),
        (np.array(["a", "b"]), ["numbers", "<U1"]),
        (np.array([1.0, None]), ["numbers", "object"]),
    ],
    ids=["2-d", "empty", "nan", "strings", "objects"],
)
def test_bad_logits_raise_a_value_error_that_says_what_is_wrong(logits, words):
    with pytest.raises(ValueError) as info:
        sample_token(logits, 0.0)
    for word in words:
        assert word in str(info.value)


# -------------------------------------------------------------- generate_naive


def test_greedy_generation_equals_a_hand_loop_of_argmax_of_forward():
    tokens = list(PROMPT)
    for _ in range(8):
        tokens.append(int(np.argmax(MODEL.forward(tokens)[-1])))
    assert generate_naive(MODEL, PROMPT, 8) == tokens[len(PROMPT) :]


def test_sampled_generation_makes_one_sample_call_on_the_last_rows_logits_per_token():
    rng = np.random.default_rng(42)
    tokens = list(PROMPT)
    for _ in range(8):
        tokens.append(sample_token(MODEL.forward(tokens)[-1], 1.3, rng))
    assert generate_naive(MODEL, PROMPT, 8, temperature=1.3, rng=np.random.default_rng(42)) == tokens[len(PROMPT) :]


def test_sampled_generation_with_the_same_seed_is_reproducible():
    first = generate_naive(MODEL, PROMPT, 10, temperature=1.0, rng=np.random.default_rng(7))
    second = generate_naive(MODEL, PROMPT, 10, temperature=1.0, rng=np.random.default_rng(7))
    assert first == second


def test_generating_zero_tokens_returns_an_empty_list():
    assert generate_naive(MODEL, PROMPT, 0) == []


@pytest.mark.parametrize(
    "prompt, n_new, kwargs, words",
    [
        (PROMPT, -1, {}, ["n_new", ">= 0", "-1"]),
        (PROMPT, 2.0, {}, ["n_new", "int"]),
        (PROMPT, 14, {}, ["prompt (3)", "n_new (14)", "max_seq_len=16"]),
        (PROMPT, 2, {"temperature": -1.0}, ["temperature", ">= 0"]),
        (PROMPT, 2, {"temperature": 0.8}, ["rng"]),
        ([], 2, {}, ["empty"]),
        ([3, 24], 2, {}, ["token id 24", "[0, 24)"]),
    ],
    ids=["negative-n-new", "float-n-new", "too-long", "negative-temperature", "no-rng", "empty-prompt", "bad-token"],
)
def test_bad_generation_arguments_raise_a_value_error_naming_the_problem(prompt, n_new, kwargs, words):
    with pytest.raises(ValueError) as info:
        generate_naive(MODEL, prompt, n_new, **kwargs)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("bad", [None, 3, np.random.RandomState(0)])
def test_check_rng_accepts_only_a_numpy_generator(bad):
    gen = np.random.default_rng(0)
    assert check_rng(gen) is gen
    with pytest.raises(ValueError, match="rng must be a numpy Generator"):
        check_rng(bad)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_check_n_new_accepts_only_an_int_of_at_least_zero(bad):
    assert check_n_new(np.int64(4)) == 4 and type(check_n_new(np.int64(4))) is int and check_n_new(0) == 0
    with pytest.raises(ValueError, match="n_new must be an int >= 0"):
        check_n_new(bad)


def test_draw_index_follows_the_weights_and_never_draws_a_zero_weight():
    weights = np.array([0.0, 3.0, 0.0, 1.0, 0.0])
    gen = np.random.default_rng(5)
    draws = np.array([draw_index(weights, gen) for _ in range(4000)])
    assert set(np.unique(draws)) == {1, 3}
    assert abs(np.mean(draws == 1) - 0.75) < 0.03
    probs = weights / weights.sum()
    a, b = np.random.default_rng(9), np.random.default_rng(9)
    assert [draw_index(probs, a, rescale=False) for _ in range(50)] == [draw_index(weights, b) for _ in range(50)]


@pytest.mark.parametrize(
    "weights, rng, words",
    [
        (np.zeros(3), np.random.default_rng(0), ["finite weights >= 0", "not all 0"]),  # an IndexError before
        (np.array([1.0, np.nan, 1.0]), np.random.default_rng(0), ["finite weights"]),  # drew index 1
        (np.array([1.0, np.inf]), np.random.default_rng(0), ["finite weights"]),
        (np.array([2.0, -1.0]), np.random.default_rng(0), ["weights >= 0"]),
        (np.ones((2, 2)), np.random.default_rng(0), ["1-D", "(2, 2)"]),
        (np.array([]), np.random.default_rng(0), ["non-empty"]),
        (np.ones(3), 7, ["rng must be a numpy Generator"]),
    ],
    ids=["zeros", "nan", "inf", "negative", "2-d", "empty", "int-rng"],
)
def test_draw_index_refuses_what_are_not_weights_with_a_value_error(weights, rng, words):
    with pytest.raises(ValueError) as info:
        draw_index(weights, rng)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "temperature", [0, 0.0, -1.0, math.inf, None], ids=["int-0", "zero", "negative", "inf", "none"]
)
def test_a_distribution_needs_a_finite_temperature_above_zero(temperature):
    # at 0 it was all NaN, at -1 the reversed distribution
    with pytest.raises(ValueError, match="temperature"):
        probs_from_logits(np.array([1.0, 2.0, 3.0]), temperature)
    np.testing.assert_allclose(probs_from_logits(np.array([0.0, math.log(3.0)]), 1), [0.25, 0.75])


def test_a_temperature_past_any_float_or_a_0_d_array_of_one_is_read_as_a_number():
    with pytest.raises(ValueError, match="temperature must be a finite number"):  # an OverflowError from float()
        sample_token(np.zeros(3), 10**400, np.random.default_rng(0))
    assert sample_token(np.array([0.0, 5.0]), np.array(0.0)) == 1  # a 0-d array of a number is one number
