"""Assertions several kv_cache modules share: what update returns is everything written so
far, a call refuses or accepts its input as documented, and updates applied in any order of
layers.
"""

from __future__ import annotations

import numpy as np

from grader.suites import common
from grader.suites.kv_cache.strategies import DH, HKV, MAX_LEN, _kv_pair

# Bound before any learner code is imported.
array_equal = np.array_equal


def _check_contents(got_k, got_v, want_k, want_v, what: str) -> None:
    got_k, got_v = np.asarray(got_k), np.asarray(got_v)
    assert got_k.shape == want_k.shape, (
        f"{what}: update returned keys of shape {got_k.shape}, expected {want_k.shape} "
        "(Hkv, every token cached so far, Dh)"
    )
    assert got_v.shape == want_v.shape, (
        f"{what}: update returned values of shape {got_v.shape}, expected {want_v.shape}"
    )
    assert array_equal(got_k, want_k), f"{what}: the keys update returned differ from everything written so far"
    assert array_equal(got_v, want_v), f"{what}: the values update returned differ from everything written so far"


def _refused(error: type, call, what: str) -> BaseException:
    """The error call() raised; a failed check if it raised none, or another kind."""
    try:
        call()
    except error as exc:
        return exc
    except NotImplementedError:
        raise
    except Exception as exc:  # the wrong error is a wrong answer, not a crash of the check
        raise AssertionError(f"{what} raised {type(exc).__name__} ({exc}), expected {error.__name__}") from None
    raise AssertionError(f"{what} raised no error, expected {error.__name__}")


def _accepted(call, what: str):
    """call()'s result; a failed check if it refused valid input with a ValueError."""
    try:
        return call()
    except ValueError as exc:
        raise AssertionError(f"{what} raised {type(exc).__name__} for valid input: {exc}") from None


def _in_layer_order(cache, ops, after_each, data=_kv_pair) -> None:
    """Apply the updates ops to cache (3 layers, HKV heads of width DH,
    max_len MAX_LEN), skipping any a layer has no room for, each writing
    data(rng, t); after each, calls after_each(cache, what, returned, written,
    held): the update's result, what that layer was written so far and how
    many tokens each layer holds."""
    rng = common.rng(25)
    written = [[np.zeros((HKV, 0, DH), np.float32)] * 2 for _ in range(3)]
    for step, (layer, t) in enumerate(ops):
        if written[layer][0].shape[1] + t > MAX_LEN:
            continue
        k, v = data(rng, t)
        what = f"after the updates (layer, tokens) {ops[: step + 1]}"
        got = _accepted(lambda: cache.update(layer, k, v), what)
        written[layer] = [
            np.concatenate([written[layer][0], k], axis=1),
            np.concatenate([written[layer][1], v], axis=1),
        ]
        after_each(cache, what, got, written[layer], [w[0].shape[1] for w in written])
