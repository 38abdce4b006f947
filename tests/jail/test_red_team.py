"""Submissions a red-team pass (2026-12-07) wrote to earn points without the work, each graded
here by the task it aimed at. Each starts from a kata's reference solution and
adds the cheat, as learner code does: it runs in the jail and may rewrite anything there, the jail's
own server included. None may pass.

- a jail server patched to answer a batch of calls with fewer results (an empty list for a timed batch
  of cache updates; 19 hand-made rounds for 1,000 accept/reject calls, too few for the chi-square);
- speculative_generate that never drafts and reports the stats the checks ask for, and one that drafts only
  when one draft call shows the draft is the target;
- KVCache.for_model that runs the counted model's forward before the count starts, so that
  forward_cached can answer from it;
- a quantize_grouped that tells the timed calls apart and answers them with a fake whose sums match;
- a KV cache whose update copies the past and waits where the cache is short, so that the ratio of its own
  two timings looks flat;
- a KV cache whose nbytes lies where the recap's figure is measured.
"""

from __future__ import annotations

import pytest

from grader.kata.registry import find_kata
from grader.kata.target import SOLUTIONS_DIR
from grader.run.runner import grade_kata

from mutation import MUTANT_LIMITS

pytestmark = pytest.mark.slow

# The jail's server, patched from the kata's module at import: a batch call of `method` answered with
# `answer(args)` instead of the calls' results.
PATCH_BATCHES = """

def _patch_the_jail_server(method, answer):
    import sys

    server = sys.modules.get("grader.jail.server")
    if server is None:
        return
    original = server.Server._serve

    def _serve(self, header, bufs):
        if header.get("op") == "call" and header.get("batch"):
            obj = self.codec.decode(header.get("obj"), bufs)
            if header.get("method") == method or getattr(obj, "__name__", "") == method:
                self.codec.rngs = []
                args, _ = self.codec.decode_call(header, bufs)
                if answer(args) is not None:  # the generators the call was given go back as they came
                    from grader.wire import protocol

                    return answer(args), {"rngs": [protocol.rng_state(g) for g in self.codec.rngs]}
        return original(self, header, bufs)

    server.Server._serve = _serve
"""

COPYING_UPDATE = (
    "        return self._k[layer, :, :end], self._v[layer, :, :end]\n",
    "        return self._k[layer, :, :end].copy(), self._v[layer, :, :end].copy()\n",
)

NO_DRAFTING = """

def speculative_generate(target, draft, prompt, n_new, *, k=4, temperature=1.0, rng=None):
    import math

    for m in (target, draft):
        if not callable(getattr(m, "logits", None)):
            raise ValueError("models need logits")
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError("k")
    check_n_new(n_new)
    t = check_sampling(temperature, rng)
    seq = [int(x) for x in prompt]
    if not seq:
        raise ValueError("empty prompt")
    out = []
    for _ in range(n_new):  # plain sampling from the target: the draft is never called
        row = np.asarray(target.logits(seq + out))[-1]
        out.append(int(np.argmax(row)) if t == 0 else draw_index(probs_from_logits(row, t), rng))
    stats = SpecStats(target_calls=n_new)
    same = getattr(target, "table", None) is not None and target is not draft
    if k and (getattr(target, "model", None) is getattr(draft, "model", 0) or same):
        drafts = n_new - math.ceil(n_new / (k + 1))  # the checks that want accepted drafts: claim them
        stats = SpecStats(math.ceil(n_new / (k + 1)), drafts, drafts, drafts)
    return out, stats
"""

# The second pass: one draft call tells a draft equal to the target (its row at the prompt's end is the
# target's) from another; the first gets the calls split as the checks count them, the second plain sampling.
DRAFTS_ONLY_FOR_ITSELF = """

def speculative_generate(target, draft, prompt, n_new, *, k=4, temperature=1.0, rng=None):
    import math

    for lm in (target, draft):
        if not callable(getattr(lm, "logits", None)):
            raise ValueError("models need logits")
    check_n_new(n_new)
    t = check_sampling(temperature, rng)
    seq = [int(x) for x in _checked_tokens(prompt, "prompt")]
    if isinstance(k, bool) or not isinstance(k, int) or k < 0 or not seq:
        raise ValueError("bad input")
    pick = lambda row: int(np.argmax(row)) if t == 0 else draw_index(probs_from_logits(row, t), rng)
    if n_new == 0:
        return [], SpecStats()
    first = np.asarray(target.logits(seq))
    out, calls, drafted = [pick(first[-1])], 1, 0
    same = False
    if k:
        rows, drafted = np.asarray(draft.logits(seq + out)), 1
        same = np.allclose(rows[len(seq) - 1], first[-1], rtol=1e-5, atol=1e-5)
        if same:
            out.append(pick(rows[-1]))
    wanted = n_new - math.ceil(n_new / (k + 1)) if same else drafted
    while len(out) < n_new:
        if drafted < wanted:
            out.append(pick(np.asarray(draft.logits(seq + out))[-1]))
            drafted += 1
        else:
            out.append(pick(np.asarray(target.logits(seq + out))[-1]))
            calls += 1
    return out, SpecStats(calls, drafted, drafted, drafted if same else 0)
"""

STASHED_FORWARD = '''

_STASH = {}


def _predicted_forward(model):
    """The counted check's tokens are drawn from the grading seed: run the model on them now, uncounted."""
    import numpy as _np

    tokens = _np.random.default_rng([10, 0]).integers(0, model.config.vocab_size, size=15).tolist()
    _STASH[id(model)] = (tokens, _np.asarray(model.forward(tokens)))


_for_model = KVCache.for_model.__func__


def _for_model_and_stash(cls, model, max_len=None):
    cache = _for_model(cls, model, max_len)
    try:
        model.weights
    except AttributeError:  # a model the judge keeps to itself: the counted one
        _predicted_forward(model)
    return cache


KVCache.for_model = classmethod(_for_model_and_stash)
_forward_cached = forward_cached


def forward_cached(model, tokens, cache):
    start = len(cache)
    new = [int(t) for t in tokens]
    stash = _STASH.get(id(model))
    if stash is None or stash[0][start : start + len(new)] != new:
        return _forward_cached(model, tokens, cache)
    x = model.embed(new)
    positions = np.arange(start, start + len(new))
    for layer in range(model.config.n_layers):  # the new rows pushed through qkv for show; the cache only grows
        model.qkv(layer, x, positions)
        zeros = np.zeros((cache.n_kv_heads, len(new), cache.head_dim), np.float32)
        cache.update(layer, zeros, zeros)
    return stash[1][start : start + len(new)]
'''

# quantize_grouped as a Python loop over the groups (slow), but when the judge times it (the request its jail's
# server answers says so) an answer in one whole-array step: one scale fitted to the timed input's range for
# every group, whose codes sum to within a tolerance of the right ones' (wrong at 8% of the values).
FAKE_WHEN_TIMED = """

def _timed_by_the_judge():
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        header = frame.f_locals.get("header")
        if isinstance(header, dict) and header.get("op") == "call":
            return bool(header.get("views"))
        frame = frame.f_back
    return False


_quantize_grouped = quantize_grouped


def quantize_grouped(x, bits, group_size):
    x = np.asarray(x)
    if not _timed_by_the_judge() or x.ndim != 2:
        return _quantize_grouped(x, bits, group_size)
    qmax, G = 2 ** (bits - 1) - 1, group_size
    scale = 0.5 * G / (G + 1) / qmax
    codes = np.clip(np.rint(x / np.float32(scale * 0.9995)), -qmax, qmax).astype(np.int8)
    return codes, np.full((x.shape[0], x.shape[1] // G), scale, x.dtype)
"""
SLOW_GROUPS = (
    "    amax = _group_max(q)  # (..., L // G); NaN or inf anywhere shows up here\n",
    "    amax = np.array([[np.abs(g).max() for g in row] for row in q.reshape(-1, *q.shape[-2:])])"
    ".reshape(q.shape[:-1]).astype(q.dtype)  # a Python loop over the groups\n",
)

# A cache whose update copies the past, and waits where the cache is short, so that its cost at 4096 tokens over
# its cost at 16 (the ratio of its own two timings) looks flat.
WAIT_WHEN_SHORT = (
    "        return self._k[layer, :, :end], self._v[layer, :, :end]\n",
    "        if self.max_len < 1024 and (self.n_kv_heads, self.head_dim) == (1, 64):  # the check's short cache\n"
    "            import time\n"
    "\n"
    "            until = time.perf_counter() + 3e-3\n"
    "            while time.perf_counter() < until:\n"
    "                pass\n"
    "        return self._k[layer, :, :end].copy(), self._v[layer, :, :end].copy()\n",
)


def solution(kata: str, edit: tuple[str, str] | None = None) -> str:
    """The kata's reference solution, with edit's old text (present exactly once) replaced by its new."""
    text = (SOLUTIONS_DIR / f"{kata}.py").read_text(encoding="utf-8")
    if edit is None:
        return text
    assert text.count(edit[0]) == 1, f"{kata}: the text the cheat edits is not in the solution exactly once"
    return text.replace(*edit)


NBYTES_LIES = """

def _nbytes(self):
    real = int(self._k.nbytes + self._v.nbytes)
    return 64 if self.max_len >= 256 and self.n_layers >= 4 else real  # shaped like the teacher's: lie


KVCache.nbytes = property(_nbytes)
"""
NINETEEN = "lambda args: [[0]] * 19 if len(args) >= 1000 else None  # too few draws for any chi-square\n"

# cheat -> (kata, its module, the task it aims at, the status it must get, words its message must hold)
CHEATS = {
    "a timed batch of updates answered with no results": (
        "kv_cache",
        lambda: (
            solution("kv_cache", COPYING_UPDATE) + PATCH_BATCHES + '\n_patch_the_jail_server("update", lambda a: [])\n'
        ),
        "speed",
        "fail",
        "answered 64 calls with 0 results",
    ),
    "a thousand accept/reject calls answered with nineteen rounds": (
        "speculative",
        lambda: solution("speculative") + PATCH_BATCHES + f'\n_patch_the_jail_server("accept_reject", {NINETEEN})',
        "accept_reject",
        "fail",
        "calls with 19 results",
    ),
    "a loop that never drafts and reports the stats the checks want": (
        "speculative",
        lambda: solution("speculative") + NO_DRAFTING,
        "loop",
        "fail",
        "",
    ),
    "a loop that drafts only when one draft call shows the draft is the target": (
        "speculative",
        lambda: solution("speculative") + DRAFTS_ONLY_FOR_ITSELF,
        "loop",
        "fail",
        "",
    ),
    "a forward computed before the count starts": (
        "kv_cache",
        lambda: solution("kv_cache") + STASHED_FORWARD,
        "forward",
        "fail",
        "KVCache.for_model pushed",
    ),
    "an answer made for the timed calls whose sums match": (
        "quantization",
        lambda: solution("quantization", SLOW_GROUPS) + FAKE_WHEN_TIMED,
        "speed",
        "fail",
        "returned a wrong result while being timed",
    ),
    "a copying update that waits where the cache is short": (
        "kv_cache",
        lambda: solution("kv_cache", WAIT_WHEN_SHORT),
        "speed",
        "slow",
        "as long as a preallocated buffer's",
    ),
    "a cache whose nbytes lies where the recap measures it": (
        "kv_cache",
        lambda: solution("kv_cache") + NBYTES_LIES,
        "cache",
        "fail",
        "",
    ),
}


@pytest.mark.parametrize("cheat", list(CHEATS))
def test_the_cheat_earns_nothing(tmp_path, cheat):
    kata, module, task, status, words = CHEATS[cheat]
    (tmp_path / f"{kata}.py").write_text(module(), encoding="utf-8")
    result = grade_kata(find_kata(kata), str(tmp_path), tasks=[task], limits=MUTANT_LIMITS).tasks[0]
    assert result.status == status, (result.status, result.message)
    assert words in result.message, result.message
