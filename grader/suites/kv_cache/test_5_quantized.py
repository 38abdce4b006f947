"""Checks of the quantized task: QuantizedKVCache's int8 codes and scales, errors and
crop, tokens_that_fit, and the teacher's greedy agreement on an int8 cache.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from grader.jailer import jail_client
from grader.suites import common
from grader.suites.kv_cache.checks import _accepted, _in_layer_order, _refused, array_equal
from grader.suites.kv_cache.oracles import _fits, _float_greedy_text, _suite_forward
from grader.suites.kv_cache.strategies import (
    BAD_UPDATES,
    CONFIG_NAMES,
    DH,
    HKV,
    LAYERS,
    MAX_LEN,
    MAX_SEQ,
    MODELS,
    ORDER_EXAMPLES,
    layer_orders,
)
from reference.model import Config, Model

QUANT_SLACK = 1e-5  # beyond half a step, as a fraction of a vector's max|x|: float32 rounding of code x scale
SCALE_RTOL = 1e-6  # a stored scale against the suite's max|x| / 127 (a few float32 ulps)
MIN_AGREEMENT = 0.98  # top-1 agreement of the teacher on an int8 cache with float32, over 256 positions
AGREEMENT_PROMPT = "def main"
AGREEMENT_CHUNK = 8  # tokens per call after the prompt: teacher-forced, so chunks give what one-token steps give


def _varied_kv(rng: np.random.Generator, t: int, hkv: int = HKV, dh: int = DH) -> tuple[np.ndarray, np.ndarray]:
    """Keys and values (Hkv, t, Dh), float32, each (head, token) vector at a magnitude of its own (1e-3 to 1e2),
    about one in ten all zero: a scale shared across tokens or heads gives the small ones too coarse a step."""

    def one() -> np.ndarray:
        x = rng.standard_normal((hkv, t, dh)) * 10.0 ** rng.uniform(-3, 2, (hkv, t, 1))
        x[rng.random((hkv, t)) < 0.1] = 0.0
        return x.astype(np.float32)

    return one(), one()


def _check_dequantized(got_k, got_v, want_k, want_v, what: str) -> None:
    """got (update's result) is want, every (head, token) vector within half its own step max|x| / 127, float32."""
    for name, got, want in (("keys", got_k, want_k), ("values", got_v, want_v)):
        got = np.asarray(got)
        assert got.shape == want.shape, (
            f"{what}: update returned {name} of shape {got.shape}, expected {want.shape} (Hkv, every token cached, Dh)"
        )
        assert got.dtype == np.float32, f"{what}: update returned {name} of dtype {got.dtype}, expected float32"
        want = np.asarray(want, np.float64)
        absmax = np.max(np.abs(want), axis=-1)  # (Hkv, t)
        err = np.max(np.abs(got.astype(np.float64) - want), axis=-1)
        bad = np.argwhere(err > absmax * (0.5 / 127 + QUANT_SLACK))
        if bad.size:
            h, i = (int(j) for j in bad[0])
            raise AssertionError(
                f"{what}: the {name} of head {h}, token {i} came back off by {err[h, i]:.3g}, more than half a step "
                f"(max|x| / 127 / 2 = {absmax[h, i] / 254:.3g} for that token and head): each (token, head) vector "
                "needs its own scale, and codes round to the nearest"
            )


def _q_state(cache) -> tuple:
    """Everything a QuantizedKVCache shows: its length and its four buffers."""
    return (int(len(cache)), *(np.array(getattr(cache, n)) for n in ("keys", "values", "key_scales", "value_scales")))


def _check_unchanged(cache, before: tuple, what: str) -> None:
    after = _q_state(cache)
    assert after[0] == before[0], f"after {what}, len(cache) is {after[0]}, expected {before[0]} as before"
    for name, a, b in zip(("keys", "values", "key_scales", "value_scales"), after[1:], before[1:]):
        assert array_equal(a, b), f"after {what}, the cache's {name} changed: a refused update writes nothing"


def _q_fill(cache, n: int, rng) -> list[list[np.ndarray]]:
    """Write n varied tokens into each of the LAYERS layers of cache; returns what was written, per layer [k, v]."""
    written = []
    for layer in range(LAYERS):
        k, v = _varied_kv(rng, n)
        _accepted(lambda: cache.update(layer, k, v), f"writing {n} tokens to layer {layer} of an empty quantized cache")
        written.append([k, v])
    return written


def _q_every_layer_takes_more(cache, written, rng, t: int, when: str) -> None:
    """Every layer accepts t more tokens, returning what written[layer] holds, then them, within half a step."""
    for layer in range(len(written)):
        k, v = _varied_kv(rng, t)
        got = _accepted(lambda: cache.update(layer, k, v), f"{when}, writing {t} token(s) to layer {layer}")
        _check_dequantized(
            *got,
            np.concatenate([written[layer][0], k], axis=1),
            np.concatenate([written[layer][1], v], axis=1),
            f"layer {layer}, {when}",
        )


@pytest.mark.task("quantized")
@given(ops=layer_orders)
@example(ops=ORDER_EXAMPLES[0])
@example(ops=ORDER_EXAMPLES[1])
@example(ops=[(0, 4), (1, 4), (2, 4), (0, 4), (1, 4), (2, 4), (0, 4), (1, 4), (2, 4)])
def test_quantized_update_returns_every_token_within_half_a_step_in_any_order_of_layers(kata, ops):
    def check(cache, what, got, written, held):
        _check_dequantized(*got, *written, what)

    _in_layer_order(kata.QuantizedKVCache(3, HKV, DH, MAX_LEN), ops, check, data=_varied_kv)


@pytest.mark.task("quantized")
@given(ops=layer_orders)
@example(ops=ORDER_EXAMPLES[0])
@example(ops=ORDER_EXAMPLES[1])
def test_quantized_len_is_what_every_layer_holds_in_any_order_of_layers(kata, ops):
    def check(cache, what, got, written, held):
        assert int(len(cache)) == min(held), (
            f"{what}, the layers hold {held} tokens, so len(cache) should be {min(held)}; it is {len(cache)}"
        )

    cache = kata.QuantizedKVCache(3, HKV, DH, MAX_LEN)
    assert int(len(cache)) == 0, f"a new QuantizedKVCache has len {len(cache)}, expected 0"
    _in_layer_order(cache, ops, check, data=_varied_kv)


@pytest.mark.task("quantized")
@settings(max_examples=20)
@given(ops=layer_orders, dtype=st.sampled_from([np.float16, np.float32, np.float64]))
@example(ops=ORDER_EXAMPLES[1], dtype=np.float32)
@example(ops=ORDER_EXAMPLES[0], dtype=np.float16)
def test_quantized_scales_are_max_abs_over_127_of_each_token_and_head(kata, ops, dtype):
    """Keys and values of every floating dtype update takes: the scale is max|x| / 127 in float32 all the same
    (float16 arithmetic would round it to 11 bits)."""
    rng = common.rng(39)
    cache = kata.QuantizedKVCache(3, HKV, DH, MAX_LEN)
    written = [[np.zeros((HKV, 0, DH), dtype)] * 2 for _ in range(3)]
    for layer, t in ops:
        if written[layer][0].shape[1] + t <= MAX_LEN:
            k, v = (x.astype(dtype) for x in _varied_kv(rng, t))
            _accepted(lambda: cache.update(layer, k, v), f"the updates (layer, tokens) {ops}")
            written[layer] = [np.concatenate([w, x], axis=1) for w, x in zip(written[layer], (k, v))]
    for name, which in (("key_scales", 0), ("value_scales", 1)):
        scales = np.asarray(getattr(cache, name)).astype(np.float64)
        for layer in range(3):
            x = written[layer][which]
            got, want = scales[layer, :, : x.shape[1]], np.max(np.abs(x.astype(np.float64)), axis=-1) / 127
            bad = np.argwhere(np.abs(got - want) > SCALE_RTOL * want)
            if bad.size:
                h, i = (int(j) for j in bad[0])
                raise AssertionError(
                    f"after the updates (layer, tokens) {ops} of {np.dtype(dtype).name} keys and values, "
                    f"{name}[{layer}, {h}, {i}] is {got[h, i]!r}, expected max|x| / 127 = {want[h, i]!r} of that "
                    "token and head's vector, in float32"
                )


@pytest.mark.task("quantized")
def test_quantized_update_returns_new_arrays_that_later_calls_do_not_share(kata):
    """Each update returns new arrays: a caller that edits them (here, in the jail, where the code under test
    could see the edit) changes nothing that later updates return."""
    rng = common.rng(42)
    cache = kata.QuantizedKVCache(LAYERS, HKV, DH, MAX_LEN)
    written = []
    for layer in range(LAYERS):
        k, v = _varied_kv(rng, 3)
        for returned in jail_client.kept(cache.update, layer, k, v, items=(0, 1)):
            returned.fill(np.float32(1e6))
        written.append([k, v])
    for layer in range(LAYERS):
        k, v = _varied_kv(rng, 2)
        got = _accepted(lambda: cache.update(layer, k, v), f"a second update of layer {layer}")
        _check_dequantized(
            *got,
            np.concatenate([written[layer][0], k], axis=1),
            np.concatenate([written[layer][1], v], axis=1),
            f"layer {layer}, after the caller overwrote the keys and values its first update returned",
        )


# Hand-computed (Hkv=2, t=3, Dh=4) keys: scales that are powers of two, so every x / scale is exact, with .5 ties.
TIE_KEYS = np.array(
    [
        [[127, 0.5, 1.5, -2.5], [0, 0, 0, 0], [-254, 1, 3, -5]],  # scales 1, 0, 2
        [[31.75, 0.125, -0.375, 0.625], [-0.75, 0.5, 3.75, -95.25], [0.0, -1e-30, 0.0, 0.0]],  # 0.25, 0.75, tiny
    ],
    np.float32,
)
TIE_CODES = np.array(
    [
        [[127, 0, 2, -2], [0, 0, 0, 0], [-127, 0, 2, -2]],
        [[127, 0, -2, 2], [-1, 1, 5, -127], [0, -127, 0, 0]],
    ],
    np.int8,
)


@pytest.mark.task("quantized")
def test_quantized_codes_of_hand_computed_vectors_round_half_to_even(kata):
    # values: the keys doubled, heads swapped, so each has scales of its own
    keys, values = TIE_KEYS, 2 * TIE_KEYS[::-1]
    cache = kata.QuantizedKVCache(LAYERS, 2, 4, MAX_LEN)
    got_k, got_v = (np.asarray(x) for x in _accepted(lambda: cache.update(1, keys, values), "a hand-computed update"))
    for name, codes_name, want in (("keys", "keys", TIE_CODES), ("values", "values", TIE_CODES[::-1])):
        got = np.asarray(getattr(cache, codes_name))[1, :, :3]
        assert array_equal(got, want), (
            f"the int8 codes of hand-computed {name} are {got.tolist()}, expected {want.tolist()}: "
            "code = round(x / scale) with scale = max|x| / 127 per token and head, .5 rounding to the even neighbour "
            "(0.5 -> 0, 1.5 -> 2, -2.5 -> -2), a vector of zeros all 0"
        )
    for name, x in (("key_scales", keys), ("value_scales", values)):
        got_s = np.asarray(getattr(cache, name))[1, :, :3]
        want_s = np.max(np.abs(x.astype(np.float64)), axis=-1) / 127
        assert np.all(np.abs(got_s - want_s) <= SCALE_RTOL * want_s), (
            f"the {name} of the hand-computed vectors are {got_s.tolist()}, expected {want_s.tolist()} "
            "(max|x| / 127 per token and head; 0 for the vector of zeros)"
        )
    for name, got, codes, s in (
        ("keys", got_k, TIE_CODES, np.asarray(cache.key_scales)[1, :, :3]),
        ("values", got_v, TIE_CODES[::-1], np.asarray(cache.value_scales)[1, :, :3]),
    ):
        want = codes.astype(np.float32) * s[..., None]
        assert array_equal(got, want), (
            f"update returned the hand-computed {name} as {got.tolist()}, expected code x scale {want.tolist()}"
        )
    assert not np.any(got_k[0, 1]) and not np.any(got_v[1, 1]), "a vector of zeros must come back exactly zero"


@pytest.mark.task("quantized")
def test_quantized_constructor_keeps_its_sizes_as_attributes(kata):
    cache = kata.QuantizedKVCache(3, 2, 8, 40)
    got = tuple(int(getattr(cache, a)) for a in ("n_layers", "n_kv_heads", "head_dim", "max_len"))
    assert got == (3, 2, 8, 40), f"QuantizedKVCache(3, 2, 8, 40) has (n_layers, n_kv_heads, head_dim, max_len) {got}"


@pytest.mark.task("quantized")
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_quantized_buffers_hold_int8_codes_and_float32_scales_and_update_returns_float32(kata, dtype):
    cache = kata.QuantizedKVCache(LAYERS, HKV, DH, MAX_LEN)
    for name, want_dtype, shape in (
        ("keys", np.int8, (LAYERS, HKV, MAX_LEN, DH)),
        ("values", np.int8, (LAYERS, HKV, MAX_LEN, DH)),
        ("key_scales", np.float32, (LAYERS, HKV, MAX_LEN)),
        ("value_scales", np.float32, (LAYERS, HKV, MAX_LEN)),
    ):
        x = np.asarray(getattr(cache, name))
        assert x.dtype == want_dtype and x.shape == shape, (
            f"QuantizedKVCache{(LAYERS, HKV, DH, MAX_LEN)}.{name} is {x.dtype} of shape {x.shape}, expected "
            f"{np.dtype(want_dtype).name} of shape {shape}"
        )
    k, v = (x.astype(dtype) for x in _varied_kv(common.rng(33), 3))
    got = _accepted(lambda: cache.update(0, k, v), f"an update of {np.dtype(dtype).name} keys and values")
    for name, x in zip(("keys", "values"), got):
        x = np.asarray(x)
        assert x.dtype == np.float32, (
            f"update of {np.dtype(dtype).name} {name} returned {x.dtype}; a quantized cache dequantizes to float32"
        )
    _check_dequantized(*got, k.astype(np.float32), v.astype(np.float32), f"an update of {np.dtype(dtype).name}")


@pytest.mark.task("quantized")
@given(held=st.integers(0, MAX_LEN), extra=st.integers(1, 2 * MAX_LEN))
@example(held=0, extra=MAX_LEN + 1)
@example(held=MAX_LEN, extra=1)
@example(held=MAX_LEN - 1, extra=2)
def test_quantized_writing_past_max_len_raises_cache_full_error_and_changes_nothing(kata, held, extra):
    if held + extra <= MAX_LEN:
        extra = MAX_LEN - held + 1
    rng = common.rng(34)
    cache = kata.QuantizedKVCache(LAYERS, HKV, DH, MAX_LEN)
    written = _q_fill(cache, held, rng) if held else [[np.zeros((HKV, 0, DH), np.float32)] * 2] * LAYERS
    before = _q_state(cache)
    for layer in range(LAYERS):
        error = _refused(
            kata.CacheFullError,
            lambda: cache.update(layer, *_varied_kv(rng, extra)),
            f"writing {extra} tokens to layer {layer} of a quantized cache holding {held} with max_len={MAX_LEN}",
        )
        _check_unchanged(cache, before, f"a refused write of {extra} tokens to a cache holding {held}")
    message = str(error)
    assert str(held) in message and str(MAX_LEN) in message, (
        f"the overflow error should say how many tokens are cached ({held}) and how many fit ({MAX_LEN}); "
        f"it says: {message}"
    )
    if held < MAX_LEN:
        _q_every_layer_takes_more(cache, written, rng, 1, f"after a refused write of {extra} to {held} tokens")


def _bad_quantized_updates():
    cases = dict(BAD_UPDATES)
    k, v = _varied_kv(common.rng(35), 2)
    with np.errstate(over="ignore"):
        cases |= {
            "inf in the keys": (0, np.where(np.arange(DH) == 1, np.inf, k).astype(np.float32), v),
            "nan in the values": (0, k, np.where(np.arange(DH) == 2, np.nan, v).astype(np.float32)),
            "float64 values past float32's range": (0, k, np.full((HKV, 2, DH), 1e39)),
        }
    return cases


BAD_QUANTIZED_UPDATES = _bad_quantized_updates()


@pytest.mark.task("quantized")
@pytest.mark.parametrize("case", list(BAD_QUANTIZED_UPDATES))
def test_quantized_bad_update_raises_value_error_and_changes_nothing(kata, case):
    rng = common.rng(36)
    cache = kata.QuantizedKVCache(LAYERS, HKV, DH, MAX_LEN)
    written = _q_fill(cache, 3, rng)
    before = _q_state(cache)
    layer, k, v = BAD_QUANTIZED_UPDATES[case]
    _refused(ValueError, lambda: cache.update(layer, k, v), f"a quantized update with {case}")
    _check_unchanged(cache, before, f"a refused update ({case})")
    _q_every_layer_takes_more(cache, written, rng, 2, f"after a refused update ({case})")


@pytest.mark.task("quantized")
@given(held=st.integers(1, MAX_LEN), n=st.integers(0, MAX_LEN), more=st.integers(1, 4))
@example(held=MAX_LEN, n=0, more=1)
@example(held=5, n=5, more=1)
@example(held=9, n=2, more=4)
def test_quantized_crop_forgets_everything_after_the_first_n_tokens(kata, held, n, more):
    n = min(n, held)
    rng = common.rng(37)
    cache = kata.QuantizedKVCache(LAYERS, HKV, DH, MAX_LEN)
    written = _q_fill(cache, held, rng)
    _accepted(lambda: cache.crop(n), f"crop({n}) of a quantized cache holding {held} tokens")
    assert int(len(cache)) == n, f"after crop({n}) of {held} tokens, len(cache) is {len(cache)}, expected {n}"
    more = min(more, MAX_LEN - n)
    if more == 0:
        return
    kept = [[k[:, :n], v[:, :n]] for k, v in written]
    _q_every_layer_takes_more(cache, kept, rng, more, f"after crop({n}) of {held} tokens")


@pytest.mark.task("quantized")
@pytest.mark.parametrize("n", [-1, 4, 6], ids=["n -1", "n past len", "n past what every layer holds"])
def test_quantized_crop_rejects_n_outside_zero_to_len(kata, n):
    rng = common.rng(38)
    cache = kata.QuantizedKVCache(LAYERS, HKV, DH, MAX_LEN)
    written = _q_fill(cache, 3, rng)
    k, v = _varied_kv(rng, 3)
    _accepted(lambda: cache.update(0, k, v), "writing 3 more tokens to layer 0 only")  # layer 0 holds 6, layer 1 3
    written[0] = [np.concatenate([written[0][0], k], axis=1), np.concatenate([written[0][1], v], axis=1)]
    before = _q_state(cache)
    _refused(ValueError, lambda: cache.crop(n), f"crop({n}) when layer 0 holds 6 tokens and layer 1 3 (len 3)")
    _check_unchanged(cache, before, f"a refused crop({n})")
    _q_every_layer_takes_more(cache, written, rng, 1, f"after a refused crop({n})")


@pytest.mark.task("quantized")
@pytest.mark.parametrize(
    "args",
    [(0, HKV, DH, MAX_LEN), (LAYERS, 0, DH, MAX_LEN), (LAYERS, HKV, -4, MAX_LEN), (LAYERS, HKV, DH, 0), (2, 2, 4.0, 8)],
    ids=["n_layers 0", "n_kv_heads 0", "head_dim -4", "max_len 0", "head_dim not an int"],
)
def test_quantized_constructor_rejects_sizes_that_are_not_positive(kata, args):
    _refused(ValueError, lambda: kata.QuantizedKVCache(*args), f"QuantizedKVCache{args}")


@pytest.mark.task("quantized")
@pytest.mark.parametrize("sizes", [(3, 2, 8, 40), (1, 1, 1, 1), (4, 2, 32, 256)], ids=str)
def test_quantized_nbytes_and_bytes_per_token_count_the_codes_and_the_scales(kata, sizes):
    layers, hkv, dh, max_len = sizes
    cache = kata.QuantizedKVCache(*sizes)
    per_token = 2 * layers * hkv * (dh * 1 + 4)
    assert int(cache.bytes_per_token) == per_token, (
        f"QuantizedKVCache{sizes}.bytes_per_token is {cache.bytes_per_token}, expected 2 x {layers} layers x {hkv} "
        f"heads x ({dh} one-byte codes + a 4-byte scale) = {per_token}"
    )
    assert int(cache.nbytes) == per_token * max_len, (
        f"QuantizedKVCache{sizes}.nbytes is {cache.nbytes}, expected {per_token} bytes per token x {max_len} tokens "
        f"= {per_token * max_len}, codes and scales both"
    )


@pytest.mark.task("quantized")
@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_quantized_for_model_sizes_the_cache_for_the_model(kata, name):
    model = MODELS[name]
    c = model.config
    per_token = 2 * c.n_layers * c.n_kv_heads * (c.head_dim + 4)
    for max_len, cache in (
        (c.max_seq_len, kata.QuantizedKVCache.for_model(model)),
        (5, kata.QuantizedKVCache.for_model(model, max_len=5)),
    ):
        assert int(len(cache)) == 0, f"QuantizedKVCache.for_model gave a cache of len {len(cache)}, expected 0"
        shape = np.asarray(cache.keys).shape
        assert shape == (c.n_layers, c.n_kv_heads, max_len, c.head_dim), (
            f"QuantizedKVCache.for_model(model, max_len={max_len}).keys has shape {shape}, expected "
            f"{(c.n_layers, c.n_kv_heads, max_len, c.head_dim)}: the model's layers, kv heads and head width"
        )
        assert int(cache.nbytes) == per_token * max_len, (
            f"QuantizedKVCache.for_model(model, max_len={max_len}).nbytes is {cache.nbytes}, expected "
            f"{per_token} x {max_len}"
        )
    for max_len in (0, MAX_SEQ + 1, 2.5):
        _refused(
            ValueError,
            lambda: kata.QuantizedKVCache.for_model(model, max_len=max_len),
            f"QuantizedKVCache.for_model(model, max_len={max_len}) for a model of max_seq_len={MAX_SEQ}",
        )


# Sizes that are no multiple of 16: params x 8.5 / 8 and x 4.5 / 8 are not whole bytes.
ODD_MODEL = Model.random(
    Config(vocab_size=31, d_model=12, n_layers=1, n_heads=3, n_kv_heads=1, d_ff=10, max_seq_len=8), seed=5
)


@pytest.mark.task("quantized")
@pytest.mark.parametrize("cache", ["float32", "int8"])
@pytest.mark.parametrize("weight_bits", [32, 16, 8.5, 4.5], ids=lambda b: f"{b} bits")
def test_tokens_that_fit_is_what_the_budget_holds_beside_the_weights(kata, cache, weight_bits):
    model = ODD_MODEL  # 1,524 params: at 8.5 and 4.5 bits the weights end in a fraction of a byte
    c = model.config
    weights = -(-(c.n_params() * Fraction(weight_bits)) // 8)
    per_token = 2 * c.n_layers * c.n_kv_heads * (c.head_dim * 4 if cache == "float32" else c.head_dim + 4)
    for budget in (
        0,
        weights - 1,
        weights,
        weights + per_token - 1,
        weights + per_token,
        weights + 7 * per_token - 1,
        weights + 7 * per_token,
        2**30,
    ):
        want = _fits(c, int(budget), cache, weight_bits)
        got = kata.tokens_that_fit(model, int(budget), cache=cache, weight_bits=weight_bits)
        assert got == want, (
            f"tokens_that_fit(model, {budget}, cache={cache!r}, weight_bits={weight_bits}) is {got!r}, expected "
            f"{want}: ({budget} - ceil({c.n_params()} params x {weight_bits} bits / 8) = {weights} bytes of weights) "
            f"// {per_token} bytes per token, and 0 when the weights fill the budget"
        )


def _assert_fits(kata, model: Model, budget: int, cache: str, weight_bits) -> None:
    c = model.config
    want = _fits(c, budget, cache, weight_bits)
    got = _accepted(
        lambda: kata.tokens_that_fit(model, budget, cache=cache, weight_bits=weight_bits),
        f"tokens_that_fit(model, {budget}, cache={cache!r}, weight_bits={weight_bits!r})",
    )
    assert isinstance(got, (int, np.integer)) and not isinstance(got, bool), (
        f"tokens_that_fit(model, {budget}, cache={cache!r}, weight_bits={weight_bits!r}) returned a "
        f"{type(got).__name__} ({got!r}); a count of tokens is an int"
    )
    assert got == want, (
        f"tokens_that_fit(model, {budget}, cache={cache!r}, weight_bits={weight_bits!r}) is {got!r}, expected {want}: "
        f"({budget} - ceil({c.n_params()} params x {weight_bits} bits / 8)) // bytes per token, 0 when negative"
    )


@pytest.mark.task("quantized")
@pytest.mark.parametrize("cache", ["float32", "int8"])
def test_tokens_that_fit_counts_every_expert_of_an_moe_model(kata, cache):
    """Memory holds every expert's weights, not only the K a token runs: n_params of the whole model."""
    model = MODELS["moe"]
    c = model.config
    per_token = 2 * c.n_layers * c.n_kv_heads * (c.head_dim * 4 if cache == "float32" else c.head_dim + 4)
    for weight_bits in (32, 4.5):
        weights = int(-(-(c.n_params() * Fraction(weight_bits)) // 8))
        for budget in (weights - 1, weights + 3 * per_token, weights + 100 * per_token + 1):
            _assert_fits(kata, model, budget, cache, weight_bits)


@pytest.mark.task("quantized")
@pytest.mark.parametrize("weight_bits", [64, 1, 0.5, 2.25, np.float64(6.5)], ids=lambda b: f"{b!r} bits")
def test_tokens_that_fit_takes_any_positive_finite_weight_bits(kata, weight_bits):
    c = ODD_MODEL.config
    weights = int(-(-(c.n_params() * Fraction(float(weight_bits))) // 8))
    for budget in (weights - 1, weights, weights + 5 * 2 * c.n_layers * c.n_kv_heads * (c.head_dim + 4)):
        _assert_fits(kata, ODD_MODEL, budget, "int8", weight_bits)


@pytest.mark.task("quantized")
@pytest.mark.parametrize("cache", ["float32", "int8"])
def test_tokens_that_fit_returns_an_int_even_when_nothing_fits(kata, cache):
    c = ODD_MODEL.config
    weights = int(-(-(c.n_params() * 32) // 8))
    for budget in (0, weights - 1, weights, weights + 10**6):
        _assert_fits(kata, ODD_MODEL, budget, cache, 32)


@pytest.mark.task("quantized")
@pytest.mark.parametrize(
    "budget,cache,weight_bits",
    [
        (-1, "int8", 32),
        (1.5e6, "int8", 32),
        (True, "int8", 32),
        (10**6, "int4", 32),
        (10**6, "float16", 32),
        (10**6, "int8", 0),
        (10**6, "int8", -8),
        (10**6, "int8", float("nan")),
        (10**6, "int8", float("inf")),
        (10**6, "int8", True),
    ],
    ids=[
        "budget -1",
        "budget a float",
        "budget True",
        "cache int4",
        "cache float16",
        "0 bits",
        "-8 bits",
        "nan bits",
        "inf bits",
        "bits True",
    ],
)
def test_tokens_that_fit_rejects_bad_arguments(kata, budget, cache, weight_bits):
    _refused(
        ValueError,
        lambda: kata.tokens_that_fit(MODELS["dense"], budget, cache=cache, weight_bits=weight_bits),
        f"tokens_that_fit(model, {budget!r}, cache={cache!r}, weight_bits={weight_bits!r})",
    )


@pytest.mark.task("quantized")
def test_the_teacher_on_a_quantized_cache_agrees_with_float32_greedy_decoding_at_98_percent_of_256_positions(kata):
    """Teacher-forced along the float32 teacher's greedy text (an 8-token
    prompt and 248 greedy tokens, 256 = max_seq_len): at each of the 256
    positions, the argmax of the logits computed with the learner's
    QuantizedKVCache (driven by the suite's own cached forward: the prompt in
    one call, then chunks of AGREEMENT_CHUNK) against the argmax of the float
    model's given the same prefix (model.forward)."""
    from reference.tokenizer import encode

    teacher = Model.pretrained("teacher")
    length = teacher.config.max_seq_len
    text = _float_greedy_text(teacher, encode(AGREEMENT_PROMPT), length)
    want = np.argmax(teacher.forward(text), axis=-1)  # (256,)
    cache = kata.QuantizedKVCache.for_model(teacher)
    p = len(encode(AGREEMENT_PROMPT))
    spans = [(0, p)] + [(s, min(s + AGREEMENT_CHUNK, length)) for s in range(p, length, AGREEMENT_CHUNK)]
    got = np.concatenate([np.argmax(_suite_forward(teacher, text[a:b], a, cache.update), axis=-1) for a, b in spans])
    agreement = float(np.mean(got == want))
    common.figure(
        "int8 cache: teacher's top-1 agreement with float32 (256 positions)",
        100 * agreement,
        100 * MIN_AGREEMENT,
        unit="%",
        key="int8_agreement",
    )
    first = int(np.argmax(got != want)) if agreement < 1 else None
    assert agreement >= MIN_AGREEMENT, (
        f"with a QuantizedKVCache the teacher's next-token argmax agrees with the float32 model's at "
        f"{agreement:.1%} of {length} positions of its greedy text (first disagreement at position {first}); "
        f"int8 codes with a scale per token and head should keep at least {MIN_AGREEMENT:.0%}"
    )
