"""`kata play stack`'s demo: the teacher served one bargain at a time (re-reading everything, a KV
cache, 8-bit weights, speculative decoding from an n-gram table draft), each way timed like a
benchmark against the one before, as data; grader/learn/play_screens.py renders it. Kata code runs as in every demo
(grader.learn.play): in a jail, here once per timed run of a row, so no round trip per token or per
round is on the clock."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from grader.jailer.remote import JailCachedLM
from grader.learn.play import Source, cached_tokens, naive_steps, quantized_model, speculative_rounds, weight_bytes
from grader.learn.play_jails import LearnerError
from grader.learn.table_draft import table_bytes
from grader.measure import timing
from reference.model import Model
from reference.ngram import NGramLM

# The stack's own defaults: docstring-like text (the kind of text the table draft was distilled on,
# train.txt's), and the k that paid best on it. The n-gram table agrees with the int8 teacher on most
# of its 48 characters there; on 'Return the ' (the other demos' prompt) it agrees on about half, and
# speculation there is about even with plain cached decoding (docs/play.md has both, as measured).
PROMPT = "Return True if the "
K = 5

BANDWIDTH = 100e9  # bytes/s of the bandwidth-bound device the int8 row projects onto (a laptop's memory bus)


@dataclass(frozen=True)
class Bargain:
    """One row of the stack: a way of serving the teacher, measured."""

    name: str
    seconds: float  # wall clock for the whole generation: the first row's median, then the row before's / speedup
    speedup: float | None  # median over paired rounds of the row before's time / this row's (None for the first row)
    tokens: list[int]  # what it wrote
    weight_bytes: int  # the weights it holds: float32, or 8.5 bits per linear weight once quantized (+ the draft)
    cache_bytes: int  # keys and values held at the end
    macs_per_token: float  # multiply-accumulates per new token, every model counted
    bytes_per_token: float  # weights and keys/values read per new token (Work), at the bits they are stored in


@dataclass(frozen=True)
class _Way:
    """A way of serving the teacher, before it is measured."""

    name: str
    models: list[Model]
    run: Callable[[], list[int]]
    weight_bytes: int
    cache_bytes: int
    bits: float  # bits per matmul weight of its first model as stored (32, or 8.5 once quantized)


def _cache_bytes(model: Model, length: int) -> int:
    c = model.config
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * 4 * length  # keys and values, float32


def _ways(teacher: Model, draft: NGramLM, prompt: list[int], n_new: int, k: int, sources: dict[str, Source]):
    length = len(prompt) + n_new
    cache = _cache_bytes(teacher, length)
    int8 = quantized_model(teacher, 8, sources["quantization"])
    yield _Way(
        "re-read everything",
        [teacher],
        lambda: [s.token for s in naive_steps(teacher, prompt, n_new)],
        weight_bytes(teacher, None),
        0,
        32,
    )
    yield _Way(
        "+ KV cache",
        [teacher],
        lambda: cached_tokens(teacher, prompt, n_new, sources["kv_cache"]),
        weight_bytes(teacher, None),
        cache,
        32,
    )
    yield _Way(
        "+ int8 weights (grouped, G=32)",
        [int8],
        lambda: cached_tokens(int8, prompt, n_new, sources["kv_cache"]),
        weight_bytes(int8, 8),
        cache,
        8.5,
    )
    yield _Way(
        f"+ speculative (n-gram, k={k})",
        [int8],
        lambda: speculative_tokens(int8, draft, prompt, n_new, k, sources["speculative"]),
        weight_bytes(int8, 8) + table_bytes(draft),
        cache,
        8.5,
    )


def stack(
    teacher: Model, draft: NGramLM, prompt: list[int], n_new: int, k: int, sources: dict[str, Source], rounds: int = 5
) -> Iterator[Bargain]:
    """The bargains one at a time, each yielded as soon as it is measured:
    re-reading everything; + a KV cache (sources['kv_cache']'s generate); + 8-bit grouped
    weights (sources['quantization']); + speculative decoding from the n-gram table draft,
    k guesses a round (sources['speculative']'s speculative_generate, the whole run in its jail).
    Every row decodes greedily.
    Each row is timed like a benchmark: at least `rounds` rounds taking turns with the row
    before (grader.measure.timing), so a busy spell slows both alike. Its speed-up is the
    median over those rounds of the row before's time over its own, each pair of times from
    one round; its seconds are the row before's seconds over that speed-up (the first row's,
    the median of its rounds), so the columns always agree. Dividing medians that two
    different pairings measured instead let a busy spell in one of them show the int8 row,
    which computes what the row before it does, 1.57x and 1.76x faster in two of six runs."""
    before, before_seconds = None, 0.0
    for way in _ways(teacher, draft, prompt, n_new, k, sources):
        with contextlib.ExitStack() as counting:
            works = [counting.enter_context(m.count_work()) for m in way.models]
            tokens = way.run()  # counted once, untimed (kata code drives handles of the models: the count is ours)
        way.run()  # uncounted, untimed: a jail gets its copies of the models off the clock, and the row warms up
        runs = [timing.ignoring_round(way.run)] + ([] if before is None else [timing.ignoring_round(before.run)])
        measured = timing.interleave(runs, rounds=rounds, spread=0.10, budget_seconds=8.0, warmup=False)
        read = works[0].weight_bytes_at(way.bits) + works[0].cache_bytes
        read += sum(w.weight_bytes + w.cache_bytes for w in works[1:])
        speedup = None if before is None else measured.ratio(1, 0)  # the row before's time / this row's, per round
        seconds = measured.median(0) if speedup is None else before_seconds / speedup
        yield Bargain(
            way.name,
            seconds,
            speedup,
            tokens,
            way.weight_bytes,
            way.cache_bytes,
            sum(w.macs for w in works) / len(tokens),
            read / len(tokens),
        )
        before, before_seconds = way, seconds


def speculative_tokens(target: Model, draft, prompt: list[int], n_new: int, k: int, source: Source) -> list[int]:
    """Greedy speculative decoding, for a demo that times it: source's speculative_generate in one call
    (the whole run in its jail, around a CachedLM of the target and a copy of the draft (a Model, wrapped
    in a CachedLM, or an NGramLM) made there: no round trip per round on the clock), or the tokens of
    speculative_rounds with the model package's own rule."""
    if source.module is None:
        return [t for r in speculative_rounds(target, draft, prompt, n_new, k, source) for t in r.emitted]
    drafter = JailCachedLM(draft) if isinstance(draft, Model) else draft
    out = source.module.speculative_generate(JailCachedLM(target), drafter, prompt, n_new, k=k, temperature=0.0)
    tokens = out[0] if type(out) in (tuple, list) and len(out) == 2 else None
    if type(tokens) not in (list, tuple, np.ndarray) or len(tokens) != n_new:
        raise LearnerError(f"speculative_generate returned what a demo cannot use: not ({n_new} tokens, stats)")
    try:
        return [int(t) for t in tokens]
    except (TypeError, ValueError):
        raise LearnerError("speculative_generate returned tokens that are not ints") from None
