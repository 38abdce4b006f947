"""Checks of the paged task: PagedKVCache reads back what a dense cache holds, in as few
blocks as its sequences need, and refuses what does not fit without corrupting any sequence.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grader.suites import common
from grader.suites.kv_cache.checks import _accepted, _check_contents, _refused
from grader.suites.kv_cache.strategies import KV_DTYPES, _kv_pair

P_LAYERS, P_HKV, P_DH, P_BLOCKS, P_BLOCK = 2, 1, 2, 6, 4

paged_ops = st.lists(
    st.tuples(st.sampled_from(["add", "update", "update", "free"]), st.integers(0, 2), st.integers(1, 6)), max_size=30
)


def _run_paged(kata, ops, after_each, dtype=np.float32):
    """Apply ops to a PagedKVCache, skipping those that do not apply or would
    need more blocks than are free, checking every read against a dense copy;
    keys and values are written in dtype (exact in the float32 pool). Calls
    after_each(cache, lengths) after every op."""
    rng = common.rng(15)
    cache = kata.PagedKVCache(P_LAYERS, P_HKV, P_DH, P_BLOCKS, block_size=P_BLOCK)
    dense: dict[int, list[list[np.ndarray]]] = {}
    blocks = lambda n: -(-n // P_BLOCK)  # noqa: E731
    for i, (op, seq, t) in enumerate(ops):
        if op == "add" and seq not in dense:
            cache.add_sequence(seq)
            dense[seq] = [[np.zeros((P_HKV, 0, P_DH), np.float32)] * 2 for _ in range(P_LAYERS)]
        elif op == "free" and seq in dense:
            cache.free(seq)
            del dense[seq]
        elif op == "update" and seq in dense:
            held = dense[seq][0][0].shape[1]
            taken = sum(blocks(d[0][0].shape[1]) for d in dense.values())
            if taken - blocks(held) + blocks(held + t) > P_BLOCKS:
                continue
            for layer in range(P_LAYERS):
                k, v = (x.astype(dtype) for x in _kv_pair(rng, t, P_HKV, P_DH))
                got = _accepted(
                    lambda: cache.update(seq, layer, k, v),
                    f"sequence {seq}, layer {layer}, op {i} of {ops[: i + 1]} in {np.dtype(dtype).name} (enough blocks "
                    "are free)",
                )
                dense[seq][layer] = [
                    np.concatenate([dense[seq][layer][0], k], axis=1),
                    np.concatenate([dense[seq][layer][1], v], axis=1),
                ]
                _check_contents(*got, *dense[seq][layer], f"sequence {seq}, layer {layer}, op {i} of {ops[: i + 1]}")
        after_each(cache, {s: d[0][0].shape[1] for s, d in dense.items()})


@pytest.mark.task("paged")
@given(ops=paged_ops, dtype=st.sampled_from(KV_DTYPES))
@example(ops=[("add", 0, 1), ("update", 0, 3), ("add", 1, 1), ("update", 1, 5), ("update", 0, 1)], dtype=np.float16)
@example(
    dtype=np.float64,
    ops=[
        ("add", 0, 1),
        ("add", 1, 1),
        ("update", 0, 5),
        ("update", 1, 6),
        ("update", 0, 3),
        ("free", 0, 1),
        ("add", 2, 1),
        ("update", 2, 6),
        ("update", 1, 4),
    ],
)
def test_paged_cache_reads_back_what_a_dense_cache_holds(kata, ops, dtype):
    _run_paged(kata, ops, lambda cache, lengths: None, dtype)


@pytest.mark.task("paged")
@given(ops=paged_ops)
@example(ops=[("add", 0, 1), ("update", 0, 5), ("add", 1, 1), ("update", 1, 3), ("free", 0, 1), ("update", 1, 6)])
def test_paged_blocks_in_use_is_never_more_than_the_sequences_need(kata, ops):
    def check(cache, lengths):
        need = sum(-(-n // P_BLOCK) for n in lengths.values())
        used = int(cache.blocks_in_use)
        assert used <= need, (
            f"blocks_in_use is {used}, but sequences of {sorted(lengths.values())} tokens need only {need} blocks "
            f"of {P_BLOCK}"
        )

    _run_paged(kata, ops, check)


@pytest.mark.task("paged")
@given(ops=paged_ops)
@example(ops=[("add", 0, 1), ("update", 0, 5), ("add", 1, 1), ("update", 1, 3), ("free", 0, 1), ("update", 1, 6)])
def test_paged_blocks_in_use_is_exactly_what_the_sequences_need(kata, ops):
    def check(cache, lengths):
        need = sum(-(-n // P_BLOCK) for n in lengths.values())
        used = int(cache.blocks_in_use)
        assert used == need, (
            f"blocks_in_use is {used}, but sequences of {sorted(lengths.values())} tokens hold exactly {need} blocks "
            f"of {P_BLOCK} (a block partly filled is held too)"
        )

    _run_paged(kata, ops, check)


@pytest.mark.task("paged")
def test_paged_cache_reuses_freed_blocks(kata):
    rng = common.rng(16)
    cache = kata.PagedKVCache(P_LAYERS, P_HKV, P_DH, 2, block_size=P_BLOCK)
    cache.add_sequence("a")
    for layer in range(P_LAYERS):
        _accepted(
            lambda: cache.update("a", layer, *_kv_pair(rng, 2 * P_BLOCK, P_HKV, P_DH)),
            f"writing {2 * P_BLOCK} tokens to an empty pool of 2 blocks of {P_BLOCK}",
        )
    cache.free("a")
    assert int(cache.blocks_in_use) == 0, (
        f"after freeing the only sequence, blocks_in_use is {cache.blocks_in_use}, expected 0"
    )
    cache.add_sequence("b")
    for layer in range(P_LAYERS):
        k, v = _kv_pair(rng, 2 * P_BLOCK, P_HKV, P_DH)
        got = _accepted(
            lambda: cache.update("b", layer, k, v),  # needs both blocks "a" gave back
            "a new sequence taking the blocks a freed sequence gave back",
        )
        _check_contents(*got, k, v, f"a new sequence in the blocks a freed one gave back, layer {layer}")
    assert int(cache.blocks_in_use) == 2, (
        f"blocks_in_use is {cache.blocks_in_use} with {2 * P_BLOCK} tokens cached, expected 2"
    )


@pytest.mark.task("paged")
def test_paged_cache_out_of_blocks_raises_and_corrupts_no_sequence(kata):
    rng = common.rng(17)
    cache = kata.PagedKVCache(P_LAYERS, P_HKV, P_DH, 3, block_size=P_BLOCK)
    written = {}
    for seq, n in (("a", P_BLOCK + 1), ("b", P_BLOCK)):
        cache.add_sequence(seq)
        written[seq] = [_kv_pair(rng, n, P_HKV, P_DH) for _ in range(P_LAYERS)]
        for layer in range(P_LAYERS):
            _accepted(
                lambda: cache.update(seq, layer, *written[seq][layer]),
                f"writing {n} tokens to sequence {seq} with enough blocks free",
            )
    # A full pool: b's next token needs a 4th block.
    _refused(
        kata.CacheFullError,
        lambda: cache.update("b", 0, *_kv_pair(rng, 1, P_HKV, P_DH)),
        "an update that needs a block when all 3 are taken",
    )
    assert int(cache.blocks_in_use) == 3, f"after a refused update, blocks_in_use is {cache.blocks_in_use}, expected 3"
    for layer in range(P_LAYERS):
        k, v = _kv_pair(rng, P_BLOCK - 1, P_HKV, P_DH)  # fits the blocks sequence a already holds
        got = _accepted(
            lambda: cache.update("a", layer, k, v), f"sequence a, writing {P_BLOCK - 1} tokens into its own block"
        )
        old_k, old_v = written["a"][layer]
        _check_contents(
            *got,
            np.concatenate([old_k, k], axis=1),
            np.concatenate([old_v, v], axis=1),
            f"sequence a, layer {layer}, after sequence b ran out of blocks",
        )
    cache.free("a")
    for layer in range(P_LAYERS):
        k, v = _kv_pair(rng, 1, P_HKV, P_DH)
        got = _accepted(
            lambda: cache.update("b", layer, k, v), "sequence b, writing a token after a freed sequence made room"
        )
        old_k, old_v = written["b"][layer]
        _check_contents(
            *got,
            np.concatenate([old_k, k], axis=1),
            np.concatenate([old_v, v], axis=1),
            f"sequence b, layer {layer}, continuing after its refused update",
        )


@pytest.mark.task("paged")
@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((0, 1, 2, 4), {}),
        ((1, 0, 2, 4), {}),
        ((1, 1, -2, 4), {}),
        ((1, 1, 2, 0), {}),
        ((1, 1, 2, 4), {"block_size": 0}),
        ((1, 1, 2, 2.5), {}),
    ],
    ids=["n_layers 0", "n_kv_heads 0", "head_dim -2", "num_blocks 0", "block_size 0", "num_blocks not an int"],
)
def test_paged_constructor_rejects_sizes_that_are_not_positive(kata, args, kwargs):
    _refused(ValueError, lambda: kata.PagedKVCache(*args, **kwargs), f"PagedKVCache{args} {kwargs}")


@pytest.mark.task("paged")
def test_paged_blocks_hold_16_tokens_by_default(kata):
    rng = common.rng(40)
    cache = kata.PagedKVCache(1, P_HKV, P_DH, 2)  # block_size left at its default, 16
    cache.add_sequence("a")
    k, v = _kv_pair(rng, 16, P_HKV, P_DH)
    got = _accepted(lambda: cache.update("a", 0, k, v), "writing 16 tokens to an empty pool of 2 default blocks")
    _check_contents(*got, k, v, "16 tokens in a pool of default blocks")
    assert int(cache.blocks_in_use) == 1, (
        f"16 tokens took {cache.blocks_in_use} blocks of the default size, expected 1 (block_size defaults to 16)"
    )
    more_k, more_v = _kv_pair(rng, 16, P_HKV, P_DH)
    _accepted(lambda: cache.update("a", 0, more_k, more_v), "writing 16 more tokens: the second default block")
    assert int(cache.blocks_in_use) == 2, f"32 tokens took {cache.blocks_in_use} default blocks, expected 2"
    _refused(
        kata.CacheFullError,
        lambda: cache.update("a", 0, *_kv_pair(rng, 1, P_HKV, P_DH)),
        "a 33rd token in a pool of 2 blocks of 16",
    )


def _paged_with(kata, num_blocks: int, held: dict, rng) -> tuple[object, dict]:
    """A pool of num_blocks blocks of P_BLOCK holding sequences of held[seq]
    tokens in every layer; also returns what each layer of each was written."""
    cache = kata.PagedKVCache(P_LAYERS, P_HKV, P_DH, num_blocks, block_size=P_BLOCK)
    written = {}
    for seq, n in held.items():
        _accepted(lambda: cache.add_sequence(seq), f"adding sequence {seq!r} to a new pool")
        written[seq] = [_kv_pair(rng, n, P_HKV, P_DH) for _ in range(P_LAYERS)]
        for layer in range(P_LAYERS):
            _accepted(
                lambda: cache.update(seq, layer, *written[seq][layer]),
                f"writing {n} tokens to sequence {seq!r} with enough blocks free",
            )
    return cache, written


def _paged_continues(kata, cache, seq, written, rng, what: str) -> None:
    """Sequence seq takes one more token in every layer and reads back all it was written plus that token."""
    for layer in range(P_LAYERS):
        k, v = _kv_pair(rng, 1, P_HKV, P_DH)
        got = _accepted(lambda: cache.update(seq, layer, k, v), f"{what}, writing a token to sequence {seq!r}")
        old_k, old_v = written[layer]
        _check_contents(
            *got,
            np.concatenate([old_k, k], axis=1),
            np.concatenate([old_v, v], axis=1),
            f"{what}, sequence {seq!r}, layer {layer}",
        )


@pytest.mark.task("paged")
def test_paged_update_needing_more_blocks_than_are_free_takes_none(kata):
    rng = common.rng(26)
    cache, written = _paged_with(kata, 3, {"a": P_BLOCK + 1, "b": 1}, rng)  # a holds 2 blocks, b 1: none free
    cache.free("b")  # one block free
    cache.add_sequence("c")
    _refused(
        kata.CacheFullError,
        lambda: cache.update("c", 0, *_kv_pair(rng, 2 * P_BLOCK, P_HKV, P_DH)),
        f"an update of {2 * P_BLOCK} tokens (2 blocks) with 1 block free",
    )
    assert int(cache.blocks_in_use) == 2, (
        f"after an update refused for want of a second block, blocks_in_use is {cache.blocks_in_use}, expected 2 "
        "as before: a refused update takes no block"
    )
    for layer in range(P_LAYERS):
        k, v = _kv_pair(rng, P_BLOCK, P_HKV, P_DH)
        got = _accepted(
            lambda: cache.update("c", layer, k, v),
            "after a refused update, writing one block's worth into the free one",
        )
        _check_contents(*got, k, v, f"sequence 'c', layer {layer}, after its refused update")
    _paged_continues(kata, cache, "a", written["a"], rng, "after sequence 'c' was refused")


def _bad_paged_updates():
    rng = common.rng(27)
    k, v = _kv_pair(rng, 2, P_HKV, P_DH)
    return {
        "an unknown sequence": ("z", 0, k, v),
        "layer -1": ("a", -1, k, v),
        "layer n_layers": ("a", P_LAYERS, k, v),
        "integer keys": ("a", 0, np.ones((P_HKV, 2, P_DH), np.int64), np.ones((P_HKV, 2, P_DH), np.int64)),
        "one kv head too many": ("a", 0, *_kv_pair(rng, 2, P_HKV + 1, P_DH)),
        "wrong head width": ("a", 0, *_kv_pair(rng, 2, P_HKV, P_DH + 1)),
        "values shorter than keys": ("a", 0, k, v[:, :1]),
    }


BAD_PAGED_UPDATES = _bad_paged_updates()


@pytest.mark.task("paged")
@pytest.mark.parametrize("case", list(BAD_PAGED_UPDATES))
def test_paged_bad_update_raises_value_error_and_changes_nothing(kata, case):
    rng = common.rng(28)
    cache, written = _paged_with(kata, P_BLOCKS, {"a": P_BLOCK}, rng)  # one full block: the next token needs another
    seq, layer, k, v = BAD_PAGED_UPDATES[case]
    _refused(ValueError, lambda: cache.update(seq, layer, k, v), f"a paged update with {case}")
    assert int(cache.blocks_in_use) == 1, (
        f"after a refused update ({case}), blocks_in_use is {cache.blocks_in_use}, expected 1 as before: a refused "
        "update takes no block"
    )
    _paged_continues(kata, cache, "a", written["a"], rng, f"after a refused update ({case})")


@pytest.mark.task("paged")
def test_paged_add_sequence_refuses_a_live_name_and_keeps_its_tokens(kata):
    rng = common.rng(29)
    cache, written = _paged_with(kata, P_BLOCKS, {"a": 3}, rng)
    _refused(ValueError, lambda: cache.add_sequence("a"), "add_sequence('a') while sequence 'a' is live")
    assert int(cache.blocks_in_use) == 1, (
        f"after a refused add_sequence, blocks_in_use is {cache.blocks_in_use}, expected 1 as before"
    )
    _paged_continues(kata, cache, "a", written["a"], rng, "after a refused add_sequence('a')")


@pytest.mark.task("paged")
def test_paged_free_refuses_an_unknown_sequence_and_ends_a_live_one(kata):
    rng = common.rng(30)
    cache, written = _paged_with(kata, P_BLOCKS, {"a": 3, "b": 2}, rng)
    _refused(ValueError, lambda: cache.free("z"), "free('z') of a sequence never added")
    cache.free("a")
    _refused(ValueError, lambda: cache.free("a"), "free('a') of a sequence already freed")
    _refused(
        ValueError,
        lambda: cache.update("a", 0, *_kv_pair(rng, 1, P_HKV, P_DH)),
        "update of sequence 'a' after free('a')",
    )
    assert int(cache.blocks_in_use) == 1, (
        f"with sequence 'a' freed and 'b' holding 2 tokens, blocks_in_use is {cache.blocks_in_use}, expected 1"
    )
    _accepted(lambda: cache.add_sequence("a"), "add_sequence('a') after free('a')")
    for layer in range(P_LAYERS):
        k, v = _kv_pair(rng, 2, P_HKV, P_DH)
        got = _accepted(lambda: cache.update("a", layer, k, v), "writing to sequence 'a' added again after its free")
        _check_contents(*got, k, v, f"sequence 'a' added again after free('a'), layer {layer}: it starts empty")
    _paged_continues(kata, cache, "b", written["b"], rng, "after sequence 'a' was freed and added again")
