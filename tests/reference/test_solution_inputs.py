"""Bad input the reference solutions' docstrings refuse gets a ValueError naming it, where a red-team pass
found a TypeError, an OverflowError or an AttributeError from inside, or a silent answer. (The suites hold
a learner's code to the promises they check; these hold the reference to the rest.)"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from reference.model import Model
from reference.solutions import distillation, kv_cache, moe, quantization

from helpers import GQA

LOGITS = np.zeros((2, 3))


def _cases():
    model = Model.random(GQA, seed=1)
    return [
        ("softmax-axis-none", lambda: distillation.softmax(LOGITS, axis=None), ["axis must be an int", "None"]),
        ("softmax-axis-bool", lambda: distillation.log_softmax(LOGITS, axis=True), ["axis must be an int", "True"]),
        ("softmax-temperature-none", lambda: distillation.softmax(LOGITS, temperature=None), ["temperature", "None"]),
        (
            "loss-alpha-none",
            lambda: distillation.distillation_loss(LOGITS, LOGITS, np.array([0, 1]), 1.0, None),
            ["alpha must be a number", "None"],
        ),
        ("cache-none", lambda: kv_cache.forward_cached(model, [1, 2], None), ["one-sequence cache", "None"]),
        (
            "cache-paged",
            lambda: kv_cache.forward_cached(model, [1, 2], kv_cache.PagedKVCache(2, 2, 8, 4)),
            ["one-sequence cache", "PagedKVCache"],
        ),
        (
            "paged-unhashable",
            lambda: kv_cache.PagedKVCache(2, 2, 8, 4).add_sequence([1]),
            ["sequence id must be hashable", "[1]"],
        ),
        ("paged-free-unhashable", lambda: kv_cache.PagedKVCache(2, 2, 8, 4).free([1]), ["no sequence [1]"]),
        ("axis-of-0-d", lambda: quantization.quantize_symmetric(np.float32(1), 8, axis=0), ["0-D input", "got 0"]),
        ("q8-none", lambda: quantization.dequantize_q8_0(None, 32), ["data must be bytes", "NoneType"]),
        ("q8-int", lambda: quantization.dequantize_q8_0(34, 32), ["data must be bytes", "int"]),  # 34 zero bytes
        (
            "plan-names",
            lambda: quantization.mixed_precision_plan({2: {"a": 1.0, 1: 1.0}}, {"a": 32, 1: 32}, 100, choices=(2,)),
            ["named by str", "1"],
        ),
        (
            "awq-0-d-alphas",
            lambda: quantization.awq_quantize(
                np.ones((32, 4), np.float32), np.ones((2, 32), np.float32), 4, alphas=np.array(0.5)
            ),
            ["alphas must be a non-empty sequence"],
        ),
    ]


@pytest.mark.parametrize("call, words", [c[1:] for c in _cases()], ids=[c[0] for c in _cases()])
def test_bad_input_to_a_reference_solution_raises_a_value_error_naming_it(call, words):
    with pytest.raises(ValueError) as info:
        call()
    for word in words:
        assert word in str(info.value)


def test_a_capacity_past_any_float_is_the_formula_worked_exactly():
    # ceil(1e308 x 10 x 2 / 4) overflowed a float: an OverflowError before
    assert moe.expert_capacity(10, 4, 2, 1e308) == math.ceil(Fraction(1e308) * 10 * 2 / 4) > 10**308


def test_weights_past_any_float_leave_no_token_room_and_raise_nothing():
    # ceil(n_params x 1e308 / 8) overflowed to an OverflowError
    assert kv_cache.tokens_that_fit(Model.random(GQA, seed=1), 10**6, weight_bits=1e308) == 0


def test_q8_0_blocks_read_from_a_uint8_array_as_from_bytes():
    data = quantization.quantize_q8_0(np.linspace(-1, 1, 64, dtype=np.float32))
    np.testing.assert_array_equal(
        quantization.dequantize_q8_0(np.frombuffer(data, np.uint8), 64), quantization.dequantize_q8_0(data, 64)
    )


def test_a_float16_weight_width_fits_as_many_tokens_as_the_same_width_in_float64():
    model = Model.random(GQA, seed=1)  # n_params x float16(8) overflowed float16: 0 tokens fit
    assert (
        kv_cache.tokens_that_fit(model, 10**6, weight_bits=np.float16(8))
        == kv_cache.tokens_that_fit(model, 10**6, weight_bits=8.0)
        > 0
    )
