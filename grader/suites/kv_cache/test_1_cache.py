"""Checks of the cache task: KVCache's contents, length, sizes, errors and crop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.suites import common
from grader.suites.kv_cache.checks import _accepted, _check_contents, _in_layer_order, _refused, array_equal
from grader.suites.kv_cache.strategies import (
    BAD_UPDATES,
    CONFIG_NAMES,
    DH,
    HKV,
    KV_DTYPES,
    LAYERS,
    MAX_LEN,
    MAX_SEQ,
    MODELS,
    ORDER_EXAMPLES,
    _kv_pair,
    layer_orders,
)
from reference.lm import shipped_model


def _every_layer_takes_more(cache, written, rng: np.random.Generator, t: int, when: str) -> None:
    """Every layer of cache accepts t more tokens, returning what written[layer] (keys, values) holds, then them."""
    for layer in range(len(written)):
        k, v = _kv_pair(rng, t)
        got = _accepted(lambda: cache.update(layer, k, v), f"{when}, writing {t} token(s) to layer {layer}")
        _check_contents(
            *got,
            np.concatenate([written[layer][0], k], axis=1),
            np.concatenate([written[layer][1], v], axis=1),
            f"layer {layer}, {when}",
        )


def _fill(cache, n: int, rng) -> list[list[np.ndarray]]:
    """Write n tokens into each of the LAYERS layers of cache; returns what was written, per layer [k, v]."""
    written = []
    for layer in range(LAYERS):
        k, v = _kv_pair(rng, n)
        _accepted(lambda: cache.update(layer, k, v), f"writing {n} tokens to layer {layer} of an empty cache")
        written.append([k, v])
    return written


@pytest.mark.task("cache")
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=6), dtype=st.sampled_from(KV_DTYPES))
@example(sizes=[MAX_LEN], dtype=np.float32)
@example(sizes=[1] * MAX_LEN, dtype=np.float16)
@example(sizes=[3, 1, 2], dtype=np.float64)
def test_update_returns_everything_written_so_far(kata, sizes, dtype):
    rng = common.rng(1)
    cache = kata.KVCache(LAYERS, HKV, DH, 24)  # float32: keys of another floating dtype are stored as float32
    written = [[np.zeros((HKV, 0, DH), np.float32)] * 2 for _ in range(LAYERS)]
    for step, t in enumerate(sizes):
        for layer in range(LAYERS):
            k, v = (x.astype(dtype) for x in _kv_pair(rng, t))  # float16 and float32 values are exact in float32
            got_k, got_v = _accepted(
                lambda: cache.update(layer, k, v),
                f"layer {layer}, after updates of {sizes[:step]} tokens, update of {t} in {np.dtype(dtype).name}",
            )
            written[layer] = [
                np.concatenate([written[layer][0], k], axis=1),
                np.concatenate([written[layer][1], v], axis=1),
            ]
            _check_contents(got_k, got_v, *written[layer], f"layer {layer} after updates of {sizes[: step + 1]} tokens")


@pytest.mark.task("cache")
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=6))
@example(sizes=[2, 1])
def test_length_advances_once_every_layer_holds_the_new_tokens(kata, sizes):
    rng = common.rng(2)
    cache = kata.KVCache(3, HKV, DH, 24)
    assert int(len(cache)) == 0, f"a new cache has len {len(cache)}, expected 0"
    total = 0
    for t in sizes:
        for layer in range(3):
            assert int(len(cache)) == total, (
                f"len(cache) is {len(cache)} after {layer} of 3 layers took {t} new tokens; "
                f"it should stay {total} until every layer holds them"
            )
            k, v = _kv_pair(rng, t)
            _accepted(lambda: cache.update(layer, k, v), f"with {total} tokens cached, writing {t} to layer {layer}")
        total += t
        assert int(len(cache)) == total, (
            f"len(cache) is {len(cache)} after every layer took {t} new tokens, expected {total}"
        )


@pytest.mark.task("cache")
@given(ops=layer_orders)
@example(ops=ORDER_EXAMPLES[0])
@example(ops=ORDER_EXAMPLES[1])
def test_update_appends_after_the_layer_own_tokens_in_any_order_of_layers(kata, ops):
    def check(cache, what, got, written, held):
        _check_contents(*got, *written, what)

    _in_layer_order(kata.KVCache(3, HKV, DH, MAX_LEN), ops, check)


@pytest.mark.task("cache")
@given(ops=layer_orders)
@example(ops=ORDER_EXAMPLES[0])
@example(ops=ORDER_EXAMPLES[1])
def test_len_is_what_every_layer_holds_in_any_order_of_layers(kata, ops):
    def check(cache, what, got, written, held):
        assert int(len(cache)) == min(held), (
            f"{what}, the layers hold {held} tokens, so len(cache) should be {min(held)}, the number every layer "
            f"holds; it is {len(cache)}"
        )

    _in_layer_order(kata.KVCache(3, HKV, DH, MAX_LEN), ops, check)


@pytest.mark.task("cache")
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=lambda d: np.dtype(d).name)
def test_nbytes_is_two_times_layers_heads_width_max_len_itemsize(kata, dtype):
    cache = kata.KVCache(3, 2, 8, 40, dtype=dtype)
    want = 2 * 3 * 2 * 8 * 40 * np.dtype(dtype).itemsize
    assert int(cache.nbytes) == want, (
        f"KVCache(3, 2, 8, 40, dtype={np.dtype(dtype).name}).nbytes is {cache.nbytes}, "
        f"expected 2 x 3 layers x 2 heads x 8 wide x 40 tokens x {np.dtype(dtype).itemsize} bytes = {want}"
    )
    if dtype is np.float32:  # for the recap: what one token costs in a cache shaped like the shipped teacher's
        teacher = shipped_model("teacher")
        if teacher is not None:
            c = teacher.config
            shape = (c.n_layers, c.n_kv_heads, c.d_model // c.n_heads, c.max_seq_len)
            teacher_cache, want = kata.KVCache(*shape), 2 * int(np.prod(shape)) * 4
            assert int(teacher_cache.nbytes) == want, (  # the figure the recap shows is checked before it is
                f"KVCache{shape}.nbytes is {teacher_cache.nbytes}, expected 2 x {' x '.join(map(str, shape))} x 4 "
                f"bytes = {want}"
            )
            common.figure(
                "bytes per cached token (teacher, float32)",
                want / c.max_seq_len,
                unit="B/token",
                better="lower",
                key="bytes_per_token",
            )


@pytest.mark.task("cache")
@pytest.mark.parametrize("dtype", [None, np.float16, np.float64], ids=["default dtype", "float16", "float64"])
def test_the_constructor_keeps_its_sizes_and_dtype_as_attributes(kata, dtype):
    cache = kata.KVCache(3, 2, 8, 40) if dtype is None else kata.KVCache(3, 2, 8, 40, dtype=dtype)
    got = tuple(int(getattr(cache, a)) for a in ("n_layers", "n_kv_heads", "head_dim", "max_len"))
    assert got == (3, 2, 8, 40), f"KVCache(3, 2, 8, 40) has (n_layers, n_kv_heads, head_dim, max_len) {got}"
    want = np.dtype(np.float32 if dtype is None else dtype)
    assert np.dtype(cache.dtype) == want, (
        f"KVCache(3, 2, 8, 40{'' if dtype is None else f', dtype={want.name}'}).dtype is {cache.dtype!r}, expected "
        f"{want.name}" + (" (the default)" if dtype is None else "")
    )


@pytest.mark.task("cache")
@pytest.mark.parametrize("dtype", [np.float16, np.float64], ids=lambda d: np.dtype(d).name)
def test_update_returns_keys_and_values_in_the_cache_dtype(kata, dtype):
    rng = common.rng(31)
    cache = kata.KVCache(LAYERS, HKV, DH, MAX_LEN, dtype=dtype)
    want = np.dtype(dtype)
    for t in (3, 2):
        k, v = _kv_pair(rng, t)  # float32, stored as the cache's dtype
        got_k, got_v = (np.asarray(x) for x in _accepted(lambda: cache.update(0, k, v), f"a {want.name} cache update"))
        assert got_k.dtype == want and got_v.dtype == want, (
            f"a KVCache made with dtype={want.name} returned keys of {got_k.dtype} and values of {got_v.dtype}: its "
            f"buffers hold {want.name}, and update returns views of them"
        )
        assert array_equal(got_k[:, -t:], k.astype(want)) and array_equal(got_v[:, -t:], v.astype(want)), (
            f"a {want.name} cache returned keys or values other than the ones written, rounded to {want.name}"
        )


@pytest.mark.task("cache")
@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_for_model_sizes_the_cache_for_the_model(kata, name):
    model = MODELS[name]
    c = model.config
    full = kata.KVCache.for_model(model)
    short = kata.KVCache.for_model(model, max_len=5)
    per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4
    assert int(len(full)) == 0, f"KVCache.for_model gave a cache of len {len(full)}, expected an empty one"
    assert int(full.nbytes) == per_token * c.max_seq_len, (
        f"KVCache.for_model(model).nbytes is {full.nbytes}, expected {per_token} bytes per token x "
        f"max_seq_len {c.max_seq_len} (float32)"
    )
    assert int(short.nbytes) == per_token * 5, (
        f"KVCache.for_model(model, max_len=5).nbytes is {short.nbytes}, expected {per_token} x 5"
    )
    for max_len in (1, c.max_seq_len):  # both ends of [1, max_seq_len]
        cache = _accepted(
            lambda: kata.KVCache.for_model(model, max_len=max_len),
            f"KVCache.for_model(model, max_len={max_len}) for a model of max_seq_len={c.max_seq_len}",
        )
        assert int(cache.nbytes) == per_token * max_len, (
            f"KVCache.for_model(model, max_len={max_len}).nbytes is {cache.nbytes}, expected {per_token} x {max_len}"
        )


@pytest.mark.task("cache")
@pytest.mark.parametrize(
    "max_len", [0, MAX_SEQ + 1, 2.5], ids=["max_len 0", "max_len past max_seq_len", "max_len not an int"]
)
def test_for_model_rejects_max_len_outside_one_to_max_seq_len(kata, max_len):
    _refused(
        ValueError,
        lambda: kata.KVCache.for_model(MODELS["dense"], max_len=max_len),
        f"KVCache.for_model(model, max_len={max_len}) for a model of max_seq_len={MAX_SEQ}",
    )


@pytest.mark.task("cache")
def test_writing_past_max_len_raises_cache_full_error_saying_what_fits(kata):
    assert isinstance(kata.CacheFullError, type) and issubclass(kata.CacheFullError, ValueError), (
        "CacheFullError must be a subclass of ValueError"
    )
    rng = common.rng(3)
    cache = kata.KVCache(LAYERS, HKV, DH, MAX_LEN)
    _fill(cache, 9, rng)
    error = _refused(
        kata.CacheFullError,
        lambda: cache.update(0, *_kv_pair(rng, 4)),
        f"writing 4 tokens to a cache holding 9 with max_len={MAX_LEN}",
    )
    message = str(error)
    assert "9" in message and str(MAX_LEN) in message, (
        f"the overflow error should say how many tokens are cached (9) and how many fit ({MAX_LEN}); it says: {message}"
    )


@pytest.mark.task("cache")
@given(held=st.integers(0, MAX_LEN), extra=st.integers(1, 2 * MAX_LEN))
@example(held=0, extra=MAX_LEN + 1)
@example(held=MAX_LEN, extra=1)
def test_writing_past_max_len_leaves_the_cache_unchanged(kata, held, extra):
    if held + extra <= MAX_LEN:
        extra = MAX_LEN - held + 1
    rng = common.rng(4)
    cache = kata.KVCache(LAYERS, HKV, DH, MAX_LEN)
    written = _fill(cache, held, rng) if held else [[np.zeros((HKV, 0, DH), np.float32)] * 2] * LAYERS
    for layer in range(LAYERS):
        _refused(
            kata.CacheFullError,
            lambda: cache.update(layer, *_kv_pair(rng, extra)),
            f"writing {extra} tokens to layer {layer} of a cache holding {held} with max_len={MAX_LEN}",
        )
    assert int(len(cache)) == held, f"after a refused write, len(cache) is {len(cache)}, expected {held} as before"
    if held < MAX_LEN:
        for layer in range(LAYERS):
            k, v = _kv_pair(rng, 1)
            got = _accepted(
                lambda: cache.update(layer, k, v), f"after a refused write, writing 1 token to layer {layer}"
            )
            _check_contents(
                *got,
                np.concatenate([written[layer][0], k], axis=1),
                np.concatenate([written[layer][1], v], axis=1),
                f"layer {layer}, after a refused write of {extra} tokens to a cache holding {held}",
            )


@pytest.mark.task("cache")
@pytest.mark.parametrize("case", list(BAD_UPDATES))
def test_a_wrong_shape_dtype_or_layer_raises_value_error_and_keeps_the_cache(kata, case):
    rng = common.rng(6)
    cache = kata.KVCache(LAYERS, HKV, DH, MAX_LEN)
    written = _fill(cache, 3, rng)
    layer, k, v = BAD_UPDATES[case]
    _refused(ValueError, lambda: cache.update(layer, k, v), f"update with {case}")
    assert int(len(cache)) == 3, f"after a refused update ({case}), len(cache) is {len(cache)}, expected 3 as before"
    _every_layer_takes_more(cache, written, rng, 2, f"after a refused update ({case})")


@pytest.mark.task("cache")
@pytest.mark.parametrize(
    "args",
    [
        (0, HKV, DH, MAX_LEN),
        (LAYERS, 0, DH, MAX_LEN),
        (LAYERS, HKV, -4, MAX_LEN),
        (LAYERS, HKV, DH, 0),
        (LAYERS, HKV, DH, MAX_LEN + 0.5),
    ],
    ids=["n_layers 0", "n_kv_heads 0", "head_dim -4", "max_len 0", "max_len not an int"],
)
def test_the_constructor_rejects_sizes_that_are_not_positive(kata, args):
    _refused(ValueError, lambda: kata.KVCache(*args), f"KVCache{args}")


@pytest.mark.task("cache")
@pytest.mark.parametrize("dtype", [np.int32, np.bool_, "not a dtype"], ids=["int32", "bool", "not a dtype"])
def test_the_constructor_rejects_a_dtype_that_is_not_floating_point(kata, dtype):
    _refused(
        ValueError,
        lambda: kata.KVCache(LAYERS, HKV, DH, MAX_LEN, dtype=dtype),
        f"KVCache({LAYERS}, {HKV}, {DH}, {MAX_LEN}, dtype={dtype!r})",
    )


@pytest.mark.task("cache")
@given(held=st.integers(1, MAX_LEN), n=st.integers(0, MAX_LEN), more=st.integers(1, 4))
@example(held=MAX_LEN, n=0, more=1)
@example(held=5, n=5, more=1)
def test_crop_forgets_everything_after_the_first_n_tokens(kata, held, n, more):
    n = min(n, held)
    rng = common.rng(7)
    cache = kata.KVCache(LAYERS, HKV, DH, MAX_LEN)
    written = _fill(cache, held, rng)
    _accepted(lambda: cache.crop(n), f"crop({n}) of a cache holding {held} tokens")
    assert int(len(cache)) == n, f"after crop({n}) of {held} tokens, len(cache) is {len(cache)}, expected {n}"
    more = min(more, MAX_LEN - n)
    if more == 0:  # crop(MAX_LEN) of a full cache: nothing more fits, and an empty write is not part of the API
        return
    for layer in range(LAYERS):
        k, v = _kv_pair(rng, more)
        got = _accepted(
            lambda: cache.update(layer, k, v), f"after crop({n}) of {held} tokens, writing {more} to layer {layer}"
        )
        _check_contents(
            *got,
            np.concatenate([written[layer][0][:, :n], k], axis=1),
            np.concatenate([written[layer][1][:, :n], v], axis=1),
            f"layer {layer}, writing {more} tokens after crop({n}) of {held}",
        )


@pytest.mark.task("cache")
@pytest.mark.parametrize("n", [-1, 4], ids=["n -1", "n past len"])
def test_crop_rejects_n_outside_zero_to_len(kata, n):
    cache = kata.KVCache(LAYERS, HKV, DH, MAX_LEN)
    _fill(cache, 3, common.rng(8))
    _refused(ValueError, lambda: cache.crop(n), f"crop({n}) of a cache holding 3 tokens")
    assert int(len(cache)) == 3, f"after a refused crop({n}), len(cache) is {len(cache)}, expected 3 as before"


@pytest.mark.task("cache")
def test_crop_rejects_n_past_what_every_layer_holds(kata):
    rng = common.rng(32)
    cache = kata.KVCache(LAYERS, HKV, DH, MAX_LEN)
    written = _fill(cache, 3, rng)
    k, v = _kv_pair(rng, 2)
    _accepted(lambda: cache.update(0, k, v), "writing 2 more tokens to layer 0 only")  # layer 0 holds 5, layer 1 3
    written[0] = [np.concatenate([written[0][0], k], axis=1), np.concatenate([written[0][1], v], axis=1)]
    _refused(ValueError, lambda: cache.crop(4), "crop(4) when layer 0 holds 5 tokens but layer 1 only 3 (len 3)")
    assert int(len(cache)) == 3, f"after a refused crop(4), len(cache) is {len(cache)}, expected 3 as before"
    _every_layer_takes_more(cache, written, rng, 1, "after a refused crop(4)")
