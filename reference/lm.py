"""Language-model adapters: a reference `Model` behind one method,
`logits(tokens) -> (T, V)`, the logits at every position of a sequence.

Code that only needs "score this sequence" (the speculative decoding loop, a
benchmark) talks to these adapters and never to the model's pieces:

    lm = CachedLM(model)
    lm.logits(prompt)             # (T, V); computes every position
    lm.logits(prompt + [t1, t2])  # reuses the prompt's keys/values, computes 2 positions
    lm.calls, lm.positions        # 2 calls, T + 2 positions pushed through the model

`BigramLM` is a lookup table behind the same method. `shipped_model` loads
a shipped model for code that falls back on a stand-in before the weights ship.

`CachedLM` keeps its own small KV cache: the keys and values of the longest
prefix shared with the previous call are reused, everything after it is
recomputed. It is built from the model's pieces (embed, qkv, attend, mlp,
logits) and does not depend on any kata. `PlainLM` recomputes the whole
sequence on every call with `Model.forward`.
"""

from __future__ import annotations

import numpy as np

from reference.model import WEIGHTS_DIR, Config, Model
from reference.sampling import check_n_new, check_sampling, decode
from reference.tokenizer import VOCAB_SIZE


class PlainLM:
    """A model behind `logits(tokens)`, recomputing every position on every call.

    calls: how many times `logits` ran (one forward pass each).
    positions: token positions pushed through the model, summed over calls.
    """

    def __init__(self, model: Model):
        if not isinstance(model, Model):
            raise ValueError(f"PlainLM wraps a reference.model.Model, got {type(model).__name__}")
        self.model = model
        self.calls = 0
        self.positions = 0

    def logits(self, tokens) -> np.ndarray:
        """Logits (T, V) at every position of tokens (T,), from a full forward pass."""
        tokens = self.model.check_tokens(tokens)
        self.calls += 1
        self.positions += tokens.size
        return self.model.forward(tokens)


class PrefixCachedLM:
    """What CachedLM and NGramLM share: `logits(tokens) -> (T, V)` that
    computes only the positions after the prefix this call shares with the
    previous one. A subclass says how to check tokens (`check_tokens`), how
    long a sequence may be (`max_len`), and how to compute rows n..T-1 into
    `self._logits` (`_extend`), where a row may depend only on the tokens up
    to its own position.

    calls: how many times `logits` ran.
    positions: token positions actually computed, summed over calls (prefix
        positions taken from the cache are not counted).
    """

    def __init__(self, vocab_size: int, max_len: int):
        self.calls = 0
        self.positions = 0
        self._vocab_size, self._max_len = vocab_size, max_len
        self._logits = self._new_logits()  # (max_len, V)
        self._handed_out = 0  # rows of _logits some returned view shows: never written again
        self._tokens = np.zeros(0, dtype=np.int64)  # the sequence the cache holds
        self._list: list[int] = []  # the same, as a list of ints

    def check_tokens(self, tokens) -> np.ndarray:
        """tokens as a (T,) int64 array, or a ValueError saying what is wrong."""
        raise NotImplementedError

    def _extend(self, tokens: np.ndarray, n: int) -> None:
        """Compute rows n..T-1 of self._logits for tokens (T,) (rows < n hold the cached prefix's)."""
        raise NotImplementedError

    def _new_logits(self) -> np.ndarray:
        return np.empty((self._max_len, self._vocab_size), dtype=np.float32)

    def reset(self) -> None:
        """Forget the cached sequence (the counters are kept)."""
        self._tokens = np.zeros(0, dtype=np.int64)
        self._list = []

    def logits(self, tokens) -> np.ndarray:
        """Logits (T, V) at every position of tokens (T,), computing only the
        positions after the prefix shared with the previous call.

        The array is read-only, and no later call changes it (a call that
        rewrites rows an earlier answer shows writes them to a new buffer), so
        a decode step costs no copy of the T rows. A list that starts with the
        cached sequence (a decoding loop's) has only its new ids checked and
        converted: a prefix item equal to the cached id (1.0 or True for 1) is
        taken as that id."""
        continued = self._continuation(tokens)
        if continued is None:
            tokens = self.check_tokens(tokens)  # a new array, ours to keep
            n, as_list = self._shared_prefix(tokens), tokens.tolist()
        else:
            n, tokens, as_list = continued
        self.calls += 1
        T = tokens.size
        if n < T:
            # what stays true of the cache if computing the rest stops part way
            self._tokens, self._list = self._tokens[:n], self._list[:n]
            if n < self._handed_out:  # rows n.. of some earlier answer: keep them as they are
                fresh = self._new_logits()
                fresh[:n] = self._logits[:n]
                self._logits, self._handed_out = fresh, n
            self._extend(tokens, n)
        self._tokens, self._list = tokens, as_list
        self._handed_out = max(self._handed_out, T)
        out = self._logits[:T]
        out.flags.writeable = False  # a view: the buffer itself stays writable
        return out

    def _continuation(self, tokens) -> tuple[int, np.ndarray, list[int]] | None:
        """(n, the whole sequence as an array and as a list) when tokens is a
        list that starts with the n cached ids, else None. Only the new ids are
        checked, in one check_tokens call, and the caller's list is never kept
        (its caller may change it)."""
        cached = self._list
        n = len(cached)
        if type(tokens) is not list or not n or not n <= len(tokens) <= self._max_len:
            return None
        try:
            if tokens[:n] != cached:
                return None
        except ValueError:  # an item is an array (its == is one per element): check_tokens says what is wrong
            return None
        if len(tokens) == n:
            return n, self._tokens, cached
        new = self.check_tokens(tokens[n:])
        return n, np.concatenate([self._tokens, new]), cached + new.tolist()

    def _shared_prefix(self, tokens: np.ndarray) -> int:
        """Length of the longest common prefix of tokens and the cached sequence."""
        m = min(tokens.size, self._tokens.size)
        differ = np.flatnonzero(tokens[:m] != self._tokens[:m])
        return int(differ[0]) if differ.size else m


class CachedLM(PrefixCachedLM):
    """A model behind `logits(tokens)`, reusing the keys and values of the
    longest prefix this call shares with the previous one.

    calls: how many times `logits` ran (one forward pass each).
    positions: token positions actually pushed through the model, summed over
        calls (prefix positions taken from the cache are not counted).

    The cache holds, per layer, keys and values (Hkv, max_seq_len, Dh) and the
    logits (max_seq_len, V) of the last sequence scored. A call with a
    sequence that diverges from the cached one at position n keeps positions
    < n and recomputes the rest, so going back (rejected drafts) costs
    nothing extra.
    """

    def __init__(self, model: Model):
        if not isinstance(model, Model):
            raise ValueError(f"CachedLM wraps a reference.model.Model, got {type(model).__name__}")
        c = model.config
        self.model = model
        super().__init__(c.vocab_size, c.max_seq_len)
        shape = (c.n_layers, c.n_kv_heads, c.max_seq_len, c.head_dim)
        self._keys = np.zeros(shape, dtype=np.float32)  # (layers, Hkv, max_seq_len, Dh)
        self._values = np.zeros(shape, dtype=np.float32)  # (layers, Hkv, max_seq_len, Dh)
        self._positions = np.arange(c.max_seq_len)  # every position, sliced for each call

    def check_tokens(self, tokens) -> np.ndarray:
        return self.model.check_tokens(tokens)

    def _extend(self, tokens: np.ndarray, n: int) -> None:
        """Compute positions n..T-1 of tokens over the cached keys/values of 0..n-1."""
        model, T = self.model, tokens.size
        new_pos, all_pos = self._positions[n:T], self._positions[:T]
        x = model.embed(tokens[n:])  # (T - n, D)
        for layer in range(model.config.n_layers):
            q, k, v = model.qkv(layer, x, new_pos)  # (H, T-n, Dh), (Hkv, T-n, Dh) x2
            keys, values = self._keys[layer], self._values[layer]  # (Hkv, max_seq_len, Dh)
            keys[:, n:T] = k
            values[:, n:T] = v
            x = x + model.attend(layer, q, keys[:, :T], values[:, :T], new_pos, all_pos)
            x = x + model.mlp(layer, x)
        self._logits[n:T] = model.logits(x)
        self.positions += T - n


class BigramLM:
    """A language model whose logits at a position depend only on that
    position's token: logits(tokens) = table[tokens], with table (V, V).
    Tiny and exact, for checks that draw thousands of sequences. The grader
    copies it into the jail as its table (it keeps no counts)."""

    def __init__(self, table):
        try:
            table = np.asarray(table, dtype=np.float64)
        except (TypeError, ValueError):  # a dict, strings, a ragged list: NumPy's words name no table
            raise ValueError(f"table must be a square (V, V) array of logits, got {type(table).__name__}") from None
        if table.ndim != 2 or table.shape[0] != table.shape[1] or table.shape[0] < 1:
            raise ValueError(f"table must be a square (V, V) array, got shape {table.shape}")
        if not np.all(np.isfinite(table)):
            raise ValueError("table must hold finite logits")
        self.table = table

    def logits(self, tokens) -> np.ndarray:
        """Logits (T, V): row t is table[tokens[t]]."""
        tokens = np.asarray(tokens)
        V = self.table.shape[0]
        if (
            tokens.ndim != 1
            or tokens.size == 0
            or tokens.dtype.kind not in "iu"
            or tokens.min() < 0
            or tokens.max() >= V
        ):
            raise ValueError(f"tokens must be a non-empty 1-D int sequence in [0, {V}), got {tokens!r}")
        return self.table[tokens]


def generate(lm, prompt, n_new: int, *, temperature: float = 0.0, rng=None) -> list[int]:
    """Plain autoregressive decoding through an adapter: one `lm.logits` call
    per new token, each token drawn by `sample_token` from the last row.
    Returns only the n_new new tokens (T = len(prompt) + n_new at the end).
    A ValueError for a prompt that is not a non-empty 1-D sequence of int
    ids (lm.logits checks their range), n_new not an int >= 0, or a bad
    temperature or rng."""
    tokens = np.asarray(prompt)
    if tokens.ndim != 1:
        raise ValueError(f"prompt must be a 1-D sequence of token ids, got shape {tokens.shape}")
    if tokens.size == 0:
        raise ValueError("prompt must hold at least one token id")
    if tokens.dtype.kind not in "iu":
        raise ValueError(f"prompt must hold int token ids, got dtype {tokens.dtype}: {tokens!r:.60}")
    check_n_new(n_new)
    t = check_sampling(temperature, rng)
    return decode(lambda seq: lm.logits(seq)[-1], tokens, n_new, t, rng)


def verify_work(model: Model, prefix, new) -> tuple[float, float]:
    """What a cached call that scores the tokens `new` after `prefix` (a
    speculative round's verifying call) reads, counted by the model's work
    counter: its weight bytes over those of a call that scores new[:1] alone,
    and the experts per layer it runs (0 for a dense model). Each call starts
    from a CachedLM holding prefix. A ValueError when new holds no token."""
    if not len(new):
        raise ValueError("new must hold at least one token to score")
    works = []
    for tokens in (list(new)[:1], list(new)):
        lm = CachedLM(model)
        lm.logits(prefix)
        with model.count_work() as work:
            lm.logits(list(prefix) + tokens)
        works.append(work)
    c = model.config
    expert_bytes = 3 * c.d_model * c.d_ff * 4  # an expert's gate, up and down, float32
    experts = works[1].bytes_by_piece["experts"] / expert_bytes / c.n_layers if c.is_moe else 0.0
    return works[1].weight_bytes / works[0].weight_bytes, experts


# The shapes of the shipped models: tools/train.py trains them, and the benchmarks make random stand-ins of them.
SHIPPED_SHAPES = {
    "teacher": Config(
        vocab_size=VOCAB_SIZE,
        d_model=128,
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        d_ff=256,
        max_seq_len=256,
        n_experts=4,
        top_k=2,
    ),
    "draft": Config(vocab_size=VOCAB_SIZE, d_model=128, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=512, max_seq_len=256),
    # The teacher's shape with one SwiGLU as wide as its top_k experts together (2 x 256): a dense target of the
    # same active width, for the speculative decoding lesson (an MoE target's verify call wakes more experts).
    "dense": Config(vocab_size=VOCAB_SIZE, d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=512, max_seq_len=256),
}


def shipped_model(name: str) -> Model | None:
    """The shipped model `name` ('teacher', 'draft' or 'dense'), or None when its
    weights file is missing (before the weights ship). Weights that are there
    but do not load, and a name not of a shipped model, raise ValueError (Model.pretrained says why)."""
    if name not in tuple(SHIPPED_SHAPES):
        raise ValueError(f"shipped models are {tuple(SHIPPED_SHAPES)}, got {name!r}")
    if not (WEIGHTS_DIR / f"{name}.npz").is_file():
        return None
    return Model.pretrained(name)
