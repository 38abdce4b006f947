"""A character n-gram model with back-off: a draft that costs almost nothing.

A table maps each context (the last few characters, up to order - 1 of them)
to a next-character distribution. The shipped table is distilled from the
teacher: each row is the teacher's own next-token distribution averaged over
every place the context occurs in train.txt (soft targets, the distillation
lesson in its simplest form), not counts of what came next. Scoring a
position is a few dictionary look-ups, so drafting with it costs a few
microseconds where a one-layer transformer costs a quarter of the teacher:

    lm = NGramLM.pretrained()
    lm.logits(tokens)          # (T, V) log-probabilities, one row per position
    lm.logits(tokens + [t])    # continues the last call: computes one row

Back-off: the row at position t is the table's row for the longest suffix of
tokens[: t + 1] (at most order - 1 ids) that the table holds; the empty
context, which every table holds, is the last resort.

A table is three arrays, the format `distill_ngram` of the distillation kata
returns and `merge_tables` and `prune_table` take and give:
    contexts: (R, C) ints, C = order - 1; a context's ids right-aligned, -1
        before a shorter context's first id (the empty context is all -1);
    probs: (R, V) next-token distributions (rows of non-negative numbers
        summing to 1);
    counts: (R,) how many positions each row averages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reference.checks import checked_token_ids, is_int
from reference.lm import PrefixCachedLM
from reference.model import REBUILD_HINT, WEIGHTS_DIR

NGRAM_PATH = WEIGHTS_DIR / "ngram.npz"
MAX_SEQ_LEN = 256  # the longest sequence a call scores: the shipped teacher's max_seq_len
LOGP_STEP = 1 / 16  # nats: the shipped table stores -log p in steps of this, as uint8
LOGP_FLOOR = -255 * LOGP_STEP  # the lowest log-probability a stored row holds (about -15.9 nats)
ROW_SUM_TOLERANCE = 1e-3  # how far a probability row's sum may stray from 1


class NGramLM(PrefixCachedLM):
    """A character n-gram table behind `logits(tokens) -> (T, V)`.

    contexts, probs: a table (module docstring); it must hold the empty
        context, and no context twice.
    max_seq_len: the longest sequence a call takes (the target's, so that
        both models refuse the same input).

    logits(tokens) returns float32 log-probabilities, a full distribution at
    every row (log p floored at LOGP_FLOOR), and refuses what a model's
    `logits` refuses, with the same errors. A call that continues the last
    call's sequence computes only the new rows (calls and positions count
    them, as for CachedLM).
    """

    def __init__(self, contexts, probs, *, max_seq_len: int = MAX_SEQ_LEN):
        contexts, probs = checked_table(contexts, probs)
        V = probs.shape[1]
        if V > 256:
            raise ValueError(f"NGramLM keys contexts by bytes: the vocabulary may hold at most 256 ids, got {V}")
        if not is_int(max_seq_len) or max_seq_len < 1:
            raise ValueError(f"max_seq_len must be an int >= 1, got {max_seq_len!r}")
        super().__init__(V, int(max_seq_len))
        self.order = contexts.shape[1] + 1
        self.vocab_size = V
        # Each context as the bytes of its ids (right-aligned, so a row of n ids is the last n bytes of its C).
        C, ids = contexts.shape[1], contexts.astype(np.uint8).tobytes()
        lengths = (contexts >= 0).sum(axis=1).tolist()
        self._index = {ids[(r + 1) * C - n : (r + 1) * C]: r for r, n in enumerate(lengths)}
        if len(self._index) != len(contexts):
            raise ValueError("contexts must not hold the same context twice")
        if b"" not in self._index:
            raise ValueError("contexts must hold the empty context (a row of -1), the last resort of back-off")
        with np.errstate(divide="ignore"):
            self._rows = np.maximum(np.log(probs), LOGP_FLOOR).astype(np.float32)  # (R, V)
        self.contexts, self.probs = contexts, probs

    @classmethod
    def pretrained(cls, path: str | Path = NGRAM_PATH) -> "NGramLM":
        """The shipped table, distilled from the teacher (tools/train.py --ngram-only)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"the n-gram table is missing ({path}); {REBUILD_HINT} --ngram-only")
        try:
            with np.load(path, allow_pickle=False) as data:
                contexts, neg_logp = data["contexts"], data["neg_logp"]
        except Exception as exc:  # a truncated or foreign file: say so plainly
            raise ValueError(f"{path} is not a readable n-gram table ({exc}); {REBUILD_HINT} --ngram-only") from exc
        if neg_logp.dtype != np.uint8:
            raise ValueError(f"{path}: neg_logp must be uint8, got {neg_logp.dtype}")
        probs = np.exp(-LOGP_STEP * neg_logp.astype(np.float64))
        return cls(contexts, probs / probs.sum(axis=1, keepdims=True))

    def save(self, path: str | Path) -> None:
        """Write the table as `pretrained` reads it: contexts as int8, -log p
        in steps of LOGP_STEP as uint8 (compressed)."""
        neg_logp = np.clip(np.rint(-self._rows.astype(np.float64) / LOGP_STEP), 0, 255).astype(np.uint8)
        with open(path, "wb") as f:
            np.savez_compressed(f, contexts=self.contexts.astype(np.int8), neg_logp=neg_logp)

    def check_tokens(self, tokens) -> np.ndarray:
        return checked_token_ids(tokens, self.vocab_size, self._max_len)

    def _extend(self, tokens: np.ndarray, n: int) -> None:
        """Rows n..T-1: each the row of the longest suffix the table holds."""
        C, T = self.order - 1, tokens.size
        start = max(0, n - C + 1)
        ids = bytes(tokens[start:T].tolist())  # ids < 256: one byte each
        index, found = self._index, []
        for t in range(n - start + 1, T - start + 1):  # t: the end of position n.. within ids
            for c in range(min(C, t), -1, -1):
                r = index.get(ids[t - c : t])
                if r is not None:
                    found.append(r)
                    break
        self._logits[n:T] = self._rows[found]
        self.positions += T - n


def checked_table(contexts, probs) -> tuple[np.ndarray, np.ndarray]:
    """contexts (R, C) int64 and probs (R, V) float64 as a table holds them,
    or a ValueError saying what is wrong."""
    ctx, p = np.asarray(contexts), np.asarray(probs)
    if ctx.ndim != 2 or ctx.shape[0] < 1:
        raise ValueError(f"contexts must be a 2-D array (R, order - 1) with a row per context, got shape {ctx.shape}")
    if ctx.dtype.kind not in "iu":
        raise ValueError(f"contexts must be integers, got dtype {ctx.dtype}")
    if p.ndim != 2 or p.shape[0] != ctx.shape[0] or p.shape[1] < 1:
        raise ValueError(f"probs must have shape (R = {ctx.shape[0]}, V): one row per context, got {p.shape}")
    if p.dtype.kind not in "fiu":
        raise ValueError(f"probs must be numbers, got dtype {p.dtype}")
    ctx, p = ctx.astype(np.int64), p.astype(np.float64)
    V = p.shape[1]
    if ctx.size and (ctx.min() < -1 or ctx.max() >= V):
        raise ValueError(f"context ids must lie in [0, V={V}), with -1 before a shorter context's first id")
    present = ctx >= 0
    if ctx.shape[1] > 1 and np.any(present[:, :-1] & ~present[:, 1:]):
        raise ValueError("a context's ids must be right-aligned: no -1 after an id")
    if not np.all(np.isfinite(p)) or p.min() < 0:
        raise ValueError("probs must hold finite probabilities >= 0")
    sums = p.sum(axis=1)
    if np.abs(sums - 1).max() > ROW_SUM_TOLERANCE:
        r = int(np.argmax(np.abs(sums - 1)))
        raise ValueError(f"row {r} of probs sums to {sums[r]:.6g}; every row must sum to 1")
    return ctx, p


KEY_IDS = 7  # the most ids a context key holds: 257 ** 7 < 2 ** 63 < 257 ** 8


def checked_counted(contexts, probs, counts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A table and its counts, (R,) ints >= 1 (positions each row was seen at), or a ValueError."""
    contexts, probs = checked_table(contexts, probs)
    counts = np.asarray(counts)
    if counts.shape != (len(contexts),) or counts.dtype.kind not in "iu" or (counts.size and counts.min() < 1):
        raise ValueError(f"counts must be ({len(contexts)},) ints >= 1, one per context, got {counts!r:.80}")
    return contexts, probs, counts.astype(np.int64)


def context_keys(contexts: np.ndarray) -> np.ndarray:
    """One int64 per context row (R, C), equal exactly when the contexts are:
    base 257 digits of the ids shifted by one (-1 becomes 0). A ValueError
    for contexts of more than KEY_IDS ids (order > 8) or ids outside
    [-1, 256), whose keys would collide."""
    contexts = np.asarray(contexts)
    if contexts.ndim != 2 or contexts.dtype.kind not in "iu":
        raise ValueError(f"contexts must be a 2-D int array (R, order - 1), got {contexts.shape} {contexts.dtype}")
    if contexts.shape[1] > KEY_IDS:
        raise ValueError(
            f"contexts of up to {KEY_IDS} ids (order <= {KEY_IDS + 1}) can be merged, got {contexts.shape[1]}"
        )
    if contexts.size and (contexts.min() < -1 or contexts.max() > 255):
        raise ValueError("context ids must lie in [0, 256), with -1 before a shorter context's first id")
    base = np.int64(257)
    keys = np.zeros(contexts.shape[0], dtype=np.int64)
    for column in contexts.T.astype(np.int64):
        keys = keys * base + (column + 1)
    return keys


def merge_tables(tables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One table from several (each (contexts, probs, counts), e.g. distilled
    from chunks of a corpus): a context's row is the count-weighted mean of
    its rows, its count the sum. Rows come out sorted by context. A
    ValueError for no tables, or counts that are not one int >= 1 a row."""
    tables = [checked_counted(*table) for table in tables]
    if not tables:
        raise ValueError("merge_tables needs at least one table")
    contexts = np.concatenate([ctx for ctx, _, _ in tables])  # (sum R, C) int64, as checked_counted gives them
    counts = np.concatenate([n for _, _, n in tables])  # (sum R,)
    sums = np.concatenate([p * n[:, None] for _, p, n in tables])  # (sum R, V) float64
    _, first, inverse = np.unique(context_keys(contexts), return_index=True, return_inverse=True)
    merged_counts = np.bincount(inverse, weights=counts).astype(np.int64)  # (R,)
    merged = np.zeros((first.size, sums.shape[1]))  # (R, V)
    np.add.at(merged, inverse, sums)
    return contexts[first], merged / merged_counts[:, None], merged_counts


def prune_table(contexts, probs, counts, *, max_rows: int, min_count: int = 2):
    """The max_rows rows of a table that help most: the empty context and
    every one-id context always, then the longer contexts seen at least
    min_count times, ranked by count x KL(row || the row of its context one
    id shorter), the information the row adds over backing off, in nats,
    summed over the positions it covers. Returns (contexts, probs, counts).
    A ValueError when max_rows cannot hold the rows always kept."""
    contexts, probs, counts = checked_counted(contexts, probs, counts)
    lengths = (contexts >= 0).sum(axis=1)
    always = int(np.count_nonzero(lengths <= 1))
    if not is_int(max_rows) or max_rows < always:
        raise ValueError(
            f"max_rows must be an int >= {always} (the empty and one-id contexts, always kept), got {max_rows!r}"
        )
    if not is_int(min_count):
        raise ValueError(f"min_count must be an int, got {min_count!r}")
    parents = contexts.copy()
    parents[np.arange(len(parents)), contexts.shape[1] - lengths.clip(1)] = -1  # drop the oldest id
    keys = context_keys(contexts)
    order = np.argsort(keys)
    where = order[np.searchsorted(keys, context_keys(parents), sorter=order).clip(0, len(keys) - 1)]
    has_parent = keys[where] == context_keys(parents)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(np.maximum(probs, 1e-300))
        kl = np.sum(probs * (logs - logs[where]), axis=1)
    score = np.where(has_parent & (counts >= min_count), counts * kl, -np.inf)
    score[lengths <= 1] = np.inf
    keep = np.sort(np.argsort(-score, kind="stable")[:max_rows])
    keep = keep[score[keep] > -np.inf]
    return contexts[keep], probs[keep], counts[keep]


TEXT_PATH = WEIGHTS_DIR.parent / "data" / "train.txt"
ORDER = 5  # the shipped table's: contexts of up to 4 characters
WINDOW = 256  # characters the teacher reads at once (its max_seq_len)
STRIDE = 224  # a window starts this far after the last: each position read with 32 characters of context at least
CHUNK = 100_000  # positions per call of a distilling function
LEARNER_CHARS = 250_000  # characters of train.txt a demo distils the learner's table on (about a minute, once)
MAX_ROWS = 30_000  # rows a table keeps once pruned (the shipped one: about 2.8 MB)


def teacher_logits(teacher, ids: np.ndarray) -> np.ndarray:
    """A model's logits (N, V) at every position of ids (N,), read in windows
    of WINDOW ids that overlap by WINDOW - STRIDE, so that every position past
    the first window is scored with that much context at least."""
    ids = np.asarray(ids)
    N = ids.size
    out = np.empty((N, teacher.config.vocab_size), dtype=np.float32)
    start = 0
    while True:
        s = max(0, min(start, N - WINDOW))
        logits = teacher.forward(ids[s : s + WINDOW])  # (WINDOW, V)
        first = 0 if s == 0 else WINDOW - STRIDE  # the rows before were scored with more context by the last window
        out[s + first : s + WINDOW] = logits[first:]
        if s + WINDOW >= N:
            return out
        start = s + STRIDE


def distil(
    distill, teacher, ids, *, order: int = ORDER, max_rows: int = MAX_ROWS, chunk: int = CHUNK, progress=None
) -> NGramLM:
    """An NGramLM distilled from `teacher` on the text ids by `distill`, a
    function with the distillation kata's `distill_ngram(teacher_logits,
    tokens, order)` contract (the reference's, or a learner's), called on
    chunks of `chunk` positions whose tables are merged and pruned to max_rows.
    progress(done, total) is called after each chunk. What distill returns is
    checked as a table (checked_counted) before it is used."""
    ids = checked_token_ids(ids, teacher.config.vocab_size, np.iinfo(np.int64).max)
    if not is_int(chunk) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    parts = []
    for s in range(0, ids.size, chunk):
        part = ids[s : s + chunk + WINDOW]  # a window past the chunk's end is read too, and its rows dropped
        logits = teacher_logits(teacher, part)[:chunk]
        parts.append(checked_counted(*distill(logits, part[:chunk], order)))
        if progress is not None:
            progress(min(s + chunk, ids.size), ids.size)
    contexts, probs, counts = prune_table(*merge_tables(parts), max_rows=max_rows)
    return NGramLM(contexts, probs)
