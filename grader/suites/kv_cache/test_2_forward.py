"""Checks of the forward task: forward_cached equals a full forward pass, pushes only the new
tokens through each layer, and refuses what does not fit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from grader.suites import common
from grader.suites.kv_cache.checks import _accepted, _check_contents, _refused
from grader.suites.kv_cache.strategies import CONFIG_NAMES, MAX_SEQ, MODELS, V, _kv_pair

max_abs = lambda a, b: float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))  # noqa: E731

LOGITS_ATOL = 1e-4  # cached logits vs a full recompute, float32 throughout


def _chunks(n: int, sizes: list[int]) -> list[tuple[int, int]]:
    """[start, end) spans covering 0..n, taking sizes in turn; the last span takes the rest."""
    spans, start = [], 0
    for s in sizes:
        if start + s >= n:
            break
        spans.append((start, start + s))
        start += s
    spans.append((start, n))
    return spans


@pytest.mark.task("forward")
@settings(max_examples=30)
@given(
    name=st.sampled_from(CONFIG_NAMES),
    tokens=st.lists(st.integers(0, V - 1), min_size=1, max_size=MAX_SEQ),
    sizes=st.lists(st.integers(1, 8), max_size=8),
)
@example(name="dense", tokens=[7], sizes=[])
@example(name="gqa", tokens=[3], sizes=[])
@example(name="moe", tokens=[(5 * i) % V for i in range(MAX_SEQ)], sizes=[1, 6, 1, 1, 8])
@example(name="gqa", tokens=[(7 * i + 1) % V for i in range(MAX_SEQ)], sizes=[1] * MAX_SEQ)
@example(name="dense", tokens=[(3 * i + 2) % V for i in range(MAX_SEQ)], sizes=[10])
def test_chunked_forward_cached_matches_a_full_forward(kata, name, tokens, sizes):
    model = MODELS[name]
    want = model.forward(tokens)  # (T, V)
    cache = kata.KVCache.for_model(model, max_len=len(tokens))  # the sequence fills the cache exactly
    for start, end in _chunks(len(tokens), sizes):
        got = np.asarray(kata.forward_cached(model, tokens[start:end], cache))
        assert got.shape == (end - start, V), (
            f"forward_cached of {end - start} tokens returned shape {got.shape}, expected ({end - start}, {V})"
        )
        for row in range(end - start):
            d = max_abs(got[row], want[start + row])
            assert d <= LOGITS_ATOL, (
                f"{name} model: cached logits of the chunk at positions {start}..{end - 1} differ from a full "
                f"recompute at position {start + row} by {d:.3g} (allowed {LOGITS_ATOL:g})"
            )
        assert int(len(cache)) == end, f"after feeding {end} tokens, len(cache) is {len(cache)}, expected {end}"


@pytest.mark.task("forward")
@given(name=st.sampled_from(CONFIG_NAMES), held=st.integers(1, 12), n=st.integers(0, 12), tail=st.integers(1, 8))
@example(name="dense", held=12, n=0, tail=1)
@example(name="moe", held=7, n=3, tail=8)
def test_continuing_after_crop_matches_a_fresh_cache(kata, name, held, n, tail):
    n = min(n, held)
    model = MODELS[name]
    rng = common.rng(9)
    drafted = rng.integers(0, V, size=held).tolist()
    continuation = rng.integers(0, V, size=tail).tolist()
    cache = kata.KVCache.for_model(model)
    kata.forward_cached(model, drafted, cache)
    assert int(len(cache)) == held, (
        f"after forward_cached of {held} tokens, len(cache) is {len(cache)}, expected {held}"
    )
    cache.crop(n)
    got = np.asarray(
        _accepted(
            lambda: kata.forward_cached(model, continuation, cache),
            f"after {held} tokens and crop({n}), forward_cached of {tail} more",
        )
    )
    want = model.forward(drafted[:n] + continuation)[n:]
    assert got.shape == want.shape, f"forward_cached returned shape {got.shape} after crop, expected {want.shape}"
    d = max_abs(got, want)
    assert d <= LOGITS_ATOL, (
        f"{name} model: after feeding {held} tokens and crop({n}), the next {tail} tokens' logits differ from a "
        f"fresh cache fed the first {n} by {d:.3g} (allowed {LOGITS_ATOL:g})"
    )


@pytest.mark.task("forward")
@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_forward_cached_pushes_only_the_new_tokens_through_each_layer(kata, name):
    # Counted on a model the jail can neither read nor rebuild, whose answers are checked: the rows pushed
    # through its pieces must be the rows that make the logits.
    model = common.secret_model(MODELS[name].config)
    tokens = common.rng(10).integers(0, V, size=15).tolist()
    full = model.forward(tokens)  # (15, V)
    with model.count_work() as setup:  # counted too: no window in which the kata's code uses the model unseen
        cache = kata.KVCache.for_model(model)
    assert not setup.positions, (
        f"KVCache.for_model pushed {setup.positions} token positions through the model's layers: making a cache "
        "reads the model's config, and computes nothing"
    )
    for start, end in ((0, 10), (10, 14), (14, 15)):
        chunk = tokens[start:end]
        with model.count_work() as work:
            got = np.asarray(kata.forward_cached(model, chunk, cache))
        want = {layer: len(chunk) for layer in range(model.config.n_layers)}
        assert work.positions == want, (
            f"forward_cached of {len(chunk)} new tokens after {len(cache) - len(chunk)} cached ones pushed "
            f"{work.positions} token positions through the layers' projections, expected {want}: "
            "the cached tokens must not be recomputed"
        )
        assert got.shape == (end - start, V), (
            f"forward_cached of {end - start} tokens returned shape {got.shape}, expected ({end - start}, {V})"
        )
        d = max_abs(got, full[start:end])
        assert d <= LOGITS_ATOL, (
            f"{name} model: the logits forward_cached returned for positions {start}..{end - 1} differ from the "
            f"model's full forward by {d:.3g} (allowed {LOGITS_ATOL:g}): they must come from the rows pushed "
            "through the model's pieces"
        )


@pytest.mark.task("forward")
def test_forward_cached_past_the_cache_raises_cache_full_error(kata):
    model = MODELS["dense"]
    cache = kata.KVCache.for_model(model, max_len=6)
    kata.forward_cached(model, [1, 2, 3, 4], cache)
    _refused(
        kata.CacheFullError,
        lambda: kata.forward_cached(model, [5, 6, 7], cache),
        "forward_cached of 3 tokens into a cache holding 4 with max_len=6",
    )
    assert int(len(cache)) == 4, f"after a refused forward_cached, len(cache) is {len(cache)}, expected 4 as before"


@pytest.mark.task("forward")
@pytest.mark.parametrize(
    "shape", [(1, 2, 8), (2, 1, 6), (2, 1, 8)], ids=["too few layers", "wrong head width", "too few kv heads"]
)
def test_forward_cached_rejects_a_cache_of_another_shape(kata, shape):
    cache = kata.KVCache(*shape, MAX_SEQ)
    _refused(
        ValueError,
        lambda: kata.forward_cached(MODELS["dense"], [1, 2, 3], cache),
        f"forward_cached with a cache of {shape[0]} layers, {shape[1]} kv heads of width {shape[2]} "
        "for a model of 2 layers, 2 kv heads of width 8",
    )


@pytest.mark.task("forward")
@pytest.mark.parametrize("n_layers", [1, 3], ids=["too few layers", "too many layers"])
def test_forward_cached_refuses_a_cache_of_other_layers_before_writing_to_it(kata, n_layers):
    model = MODELS["dense"]
    c = model.config
    rng = common.rng(41)
    cache = kata.KVCache(n_layers, c.n_kv_heads, c.head_dim, MAX_SEQ)
    written = [_kv_pair(rng, 2, c.n_kv_heads, c.head_dim) for _ in range(n_layers)]
    for layer, (k, v) in enumerate(written):
        _accepted(lambda: cache.update(layer, k, v), f"writing 2 tokens to layer {layer} of a {n_layers}-layer cache")
    what = f"forward_cached with a {n_layers}-layer cache holding 2 tokens, for a model of {c.n_layers} layers"
    _refused(ValueError, lambda: kata.forward_cached(model, [1, 2, 3], cache), what)
    assert int(len(cache)) == 2, f"after {what} was refused, len(cache) is {len(cache)}, expected 2 as before"
    for layer, (k, v) in enumerate(written):
        k1, v1 = _kv_pair(rng, 1, c.n_kv_heads, c.head_dim)
        got = _accepted(lambda: cache.update(layer, k1, v1), f"writing 1 token to layer {layer} after {what}")
        _check_contents(
            *got,
            np.concatenate([k, k1], axis=1),
            np.concatenate([v, v1], axis=1),
            f"layer {layer} after {what} was refused (it must refuse before writing anything)",
        )


@pytest.mark.task("forward")
@pytest.mark.parametrize(
    "tokens,max_len",
    [([V], MAX_SEQ), ([-1], MAX_SEQ), ([[1, 2]], MAX_SEQ), ([1.5], MAX_SEQ), ([1] * (MAX_SEQ + 1), MAX_SEQ + 4)],
    ids=["token V", "token -1", "2-D tokens", "float tokens", "positions past max_seq_len (a larger cache)"],
)
def test_forward_cached_rejects_bad_tokens_and_positions_past_max_seq_len(kata, tokens, max_len):
    model = MODELS["dense"]
    c = model.config
    cache = kata.KVCache(c.n_layers, c.n_kv_heads, c.head_dim, max_len)
    _refused(
        ValueError,
        lambda: kata.forward_cached(model, tokens, cache),
        f"forward_cached of tokens {tokens} for a model of vocabulary {V} and max_seq_len {MAX_SEQ}",
    )
    assert int(len(cache)) == 0, f"after a refused forward_cached, len(cache) is {len(cache)}, expected 0 as before"
