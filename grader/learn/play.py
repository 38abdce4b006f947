"""`kata play`'s demos: a trick working on the shipped teacher, on the learner's
own code once it passes, and on the model package's own code before that.

The library runs a demo and returns plain data (the steps of a generation,
the experts of each character); grader/learn/play_screens.py renders it as text and
grader/cli/play.py prints that. Work is counted by the reference model's work counter,
never by the code the demo runs, so the figures are what the code did.

Kata code, the learner's or a folder's or the reference's, never runs in this
process: a demo calls it in a jail (grader.learn.play_jails), inside
`play_jails.jails()`, which stops every jail it started however the demo
ends. A model the demo counts the work of crosses as a handle (its pieces run
here, the count is ours); otherwise the jail gets a copy, sent once.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator

import numpy as np

from grader.jailer import jail_client
from grader.judge.events import DONE_HERE
from grader.kata import target as _target
from grader.kata.registry import find_kata
from grader.learn import progress as state
from grader.learn import vouch
from grader.learn.play_jails import CALL_SECONDS, Jailed
from reference.lm import CachedLM
from reference.model import Model, rms_norm, softmax, top_k_route
from reference.sampling import sample_token
from reference.tokenizer import decode


@dataclass(frozen=True)
class Source:
    """Whose code a demo runs: a kata module in its jail (None for the model
    package's own code) and a sentence that says which, and why."""

    module: Jailed | None
    says: str


def kata_source(kata: str, functions: tuple[str, ...], target: str = "katas", seconds: float = CALL_SECONDS) -> Source:
    """The kata module of target to run, in a jail whose calls may each take
    `seconds`, when it is meant to run: always for 'reference' or a folder (the
    caller asked for it), and for 'katas' (the learner's) once every task that
    writes one of `functions` passed its last grade, recorded by this account's
    grader on the file as it is now (grader.learn.vouch: a state file written by
    hand vouches for nothing). Otherwise Source(None, why), and the demo runs the
    model package's own code. Call it inside play_jails.jails(), which stops the jail."""
    registered = find_kata(kata)  # a ValueError naming the katas there are, for a typo
    tasks = [t.name for t in registered.tasks if set(t.functions) & set(functions)]
    if target == "katas":
        last = state.read(state.LAST_GRADE).get(kata, {})
        which = f"task {tasks[0]} does" if len(tasks) == 1 else f"tasks {' and '.join(tasks)} do"
        if not all(last.get(t) in DONE_HERE for t in tasks):
            return Source(None, f"the model's own, since your {kata} {which} not pass yet (kata grade {kata})")
        if not vouch.vouched(state.read(vouch.SEALS), kata, tasks, _target.kata_path(target, kata)):
            return Source(
                None,
                f"the model's own: your {kata} {which} not pass in a grade this account recorded of the file as "
                f"it is now (kata grade {kata})",
            )
    path = _target.kata_path(target, kata)
    jail_client.SETTINGS.target = target
    try:
        jail_client.prestart(kata)  # its interpreter starts while the demo loads the models
        module = jail_client.kata_module(kata)
    except jail_client.KataLoadError as exc:
        raise ValueError(str(exc)) from None
    whose = {"katas": "yours", "reference": "the reference solution's"}.get(target, "the one in that folder")
    return Source(Jailed(module, seconds), f"{whose}, {path}")


# ------------------------------------------------------------------ cache


@dataclass(frozen=True)
class Step:
    """One new token of a generation, and the work done so far."""

    token: int
    positions: int  # token positions pushed through each layer so far (layer 0's count)
    macs: int  # multiply-accumulates so far


def naive_steps(model: Model, prompt: list[int], n_new: int) -> Iterator[Step]:
    """Greedy generation that re-reads everything: model.forward on the whole
    text for every new token (reference.sampling.generate_naive, one step at a time)."""
    tokens = list(prompt)
    with model.count_work() as work:
        for _ in range(n_new):
            tokens.append(sample_token(model.forward(tokens)[-1], 0.0))
            yield Step(tokens[-1], work.positions.get(0, 0), work.macs)


def cached_steps(model: Model, prompt: list[int], n_new: int, source: Source) -> Iterator[Step]:
    """Greedy generation that remembers: the prompt once, then one token per
    step, through source's KVCache and forward_cached (or reference.lm.CachedLM)."""
    tokens = list(prompt)
    with model.count_work() as work:
        if source.module is None:
            lm = CachedLM(model)
            logits = lambda new: lm.logits(tokens)  # noqa: E731  (it reuses the prefix it holds)
        else:
            cache = source.module.KVCache.for_model(model)
            logits = lambda new: source.module.forward_cached(model, new, cache)  # noqa: E731
        new = list(prompt)
        for _ in range(n_new):
            tokens.append(sample_token(np.asarray(logits(new))[-1], 0.0))
            new = [tokens[-1]]
            yield Step(tokens[-1], work.positions.get(0, 0), work.macs)


def cached_tokens(model: Model, prompt: list[int], n_new: int, source: Source) -> list[int]:
    """Greedy generation with a KV cache, for a demo that times it: source's generate in one call (the
    whole generation in its jail: no round trip per token on the clock), or cached_steps' tokens with
    the model's own cache."""
    if source.module is None:
        return [s.token for s in cached_steps(model, prompt, n_new, source)]
    return [int(t) for t in source.module.generate(model, prompt, n_new)]


def work_ratio(naive: Step, cached: Step) -> Fraction:
    """The cached generation's token passes per layer, as an exact fraction of the naive one's."""
    return Fraction(cached.positions, naive.positions)


# ------------------------------------------------------------------ moe


@dataclass(frozen=True)
class Routing:
    """The experts a layer's router chose for every token of a text."""

    layer: int
    experts: np.ndarray  # (T, K) int: each token's experts, best first
    gates: np.ndarray  # (T, K): their normalized weights
    load: np.ndarray  # (E,) int: assignments per expert
    even: float  # T * K / E: each expert's load under an even split


def routing(model: Model, tokens: list[int], layer: int, source: Source) -> Routing:
    """Route the residual stream at layer's MoE block (the model's own
    forward up to there) through source's router_probs and top_k_gating
    (or the model's own softmax and top-k)."""
    c = model.config
    if not c.is_moe:
        raise ValueError("the model has no experts to route to (a dense model)")
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < c.n_layers:
        raise ValueError(f"layer must be in [0, {c.n_layers}), got {layer!r}")
    x = model.embed(tokens)
    positions = np.arange(x.shape[0])
    for i in range(layer + 1):
        q, k, v = model.qkv(i, x, positions)
        x = x + model.attend(i, q, k, v, positions, positions)
        if i < layer:
            x = x + model.mlp(i, x)
    w = model.weights
    h = rms_norm(x, w[f"layers.{layer}.mlp_norm"], c.norm_eps)  # what the block's router sees
    router = w[f"layers.{layer}.router"]
    if source.module is None:
        experts, gates = top_k_route(softmax(h @ router), c.top_k)
    else:
        probs = source.module.router_probs(h, router)
        experts, gates = source.module.top_k_gating(probs, c.top_k)
    experts, gates = np.asarray(experts, dtype=np.int64), np.asarray(gates, dtype=np.float64)
    load = np.bincount(experts.ravel(), minlength=c.n_experts)
    return Routing(layer, experts, gates, load, experts.size / c.n_experts)


# ------------------------------------------------------------------ speculate


@dataclass(frozen=True)
class Round:
    """One round of greedy speculative decoding."""

    drafted: list[int]  # the draft's k guesses
    emitted: list[int]  # what the round wrote: the accepted guesses, then the teacher's own token

    @property
    def accepted(self) -> int:
        return len(self.emitted) - 1


def speculative_rounds(target: Model, draft, prompt: list[int], n_new: int, k: int, source: Source):
    """Greedy speculative decoding, one round at a time: the draft (a Model,
    run through a CachedLM, or a language model such as an NGramLM) guesses up
    to k tokens (one call each), the teacher scores them all in one call, and
    source's greedy_accept (or the rule itself: the longest prefix of guesses
    equal to the teacher's argmax, then the teacher's argmax) keeps what the
    teacher would have written. Yields each Round."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int (draft tokens per round), got {k!r}")
    teacher, guesser = CachedLM(target), CachedLM(draft) if isinstance(draft, Model) else draft
    seq, done = list(prompt), 0
    while done < n_new:
        k_round = min(k, n_new - done - 1)
        drafted: list[int] = []
        for _ in range(k_round):
            drafted.append(sample_token(guesser.logits(seq + drafted)[-1], 0.0))
        scores = teacher.logits(seq + drafted)[len(seq) - 1 :]  # (k_round + 1, V)
        if source.module is None:
            best = np.argmax(scores, axis=-1)
            keep = next((i for i, x in enumerate(drafted) if x != best[i]), k_round)
            emitted = drafted[:keep] + [int(best[keep])]
        else:
            emitted = [int(t) for t in source.module.greedy_accept(drafted, scores)]
        if not 1 <= len(emitted) <= k_round + 1:
            raise ValueError(f"greedy_accept returned {len(emitted)} tokens for {k_round} guesses")
        seq += emitted
        done += len(emitted)
        yield Round(drafted, emitted)


# ------------------------------------------------------------------ quantize


@dataclass(frozen=True)
class Snap:
    """One weight of the teacher quantized at one width: the grid and where it lands."""

    bits: int
    value: float  # the weight
    step: float  # the grid's spacing in its group: max |group| / qmax
    levels: np.ndarray  # every value the width allows in its group (2 qmax + 1 of them)
    snapped: float  # what the weight comes back as, grouped
    per_tensor: float  # what it comes back as with one scale for the whole weight matrix
    model_bytes: int  # the teacher: linear weights at this width with an fp16 scale per group, the rest float32
    text: str  # what the teacher, quantized grouped at this width, writes after the prompt
    text_per_tensor: str  # ... and quantized with one scale per weight matrix


GROUP = 32  # weights per scale, as llama.cpp's Q4_0 and Q8_0
LINEAR = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router", "out")  # what quantize_model quantizes


def _linear(name: str) -> bool:
    """Whether weight `name` is one quantize_model quantizes."""
    return name.split(".")[-1] in LINEAR


def weight_bytes(model: Model, bits: int | None) -> int:
    """The model's weights in bytes: all float32 (bits None), or its linear weights at `bits` with an fp16
    scale per GROUP and the rest float32."""
    if bits is None:
        return model.config.n_params() * 4
    linear = sum(w.size for n, w in model.weights.items() if _linear(n))
    return linear * bits // 8 + linear // GROUP * 2 + (model.config.n_params() - linear) * 4


def grouped(x: np.ndarray, bits: int) -> np.ndarray:
    """x (..., L) through grouped quantization and back, by the rule: a scale
    max |group| / qmax per GROUP values, codes round(x / scale) half to even."""
    qmax = 2 ** (bits - 1) - 1
    g = x.reshape(*x.shape[:-1], -1, GROUP).astype(np.float64)
    scale = np.abs(g).max(axis=-1, keepdims=True) / qmax
    safe = np.where(scale > 0, scale, 1.0)
    return (np.round(g / safe) * scale).reshape(x.shape).astype(np.float32)


def quantized_model(model: Model, bits: int, source: Source) -> Model:
    if source.module is not None:
        return source.module.quantize_model(model, bits, GROUP)
    out = model.copy()
    for name, w in out.weights.items():
        if _linear(name):
            out.weights[name] = np.swapaxes(grouped(np.swapaxes(w, -1, -2), bits), -1, -2).copy()
    return out


def _per_tensor_model(model: Model, bits: int, source: Source) -> Model:
    """The teacher with every linear weight quantized with one scale for the whole
    matrix (each expert's its own): source's quantize_symmetric, or the rule."""
    qmax = 2 ** (bits - 1) - 1
    out = model.copy()
    for name, w in out.weights.items():
        if not _linear(name):
            continue
        mats = w.reshape(-1, *w.shape[-2:])  # (experts or 1, in, out)
        back = []
        for m in mats:
            if source.module is None:
                step = float(np.max(np.abs(m))) / qmax
                back.append(np.round(m / step) * step if step > 0 else np.zeros_like(m))
            else:
                q, scale = source.module.quantize_symmetric(m, bits)
                back.append(np.asarray(source.module.dequantize_symmetric(q, scale)))
        out.weights[name] = np.stack(back).reshape(w.shape).astype(np.float32)
    return out


def snaps(model: Model, name: str, index: int, widths, prompt: list[int], n_text: int, source: Source) -> list[Snap]:
    """Weight `index` (flat, along the input axis) of weight `name` at each
    width, grouped (source's quantize_grouped and dequantize_grouped, or the
    rule itself) and per tensor (quantize_symmetric, or the rule); and what
    the teacher quantized at that width writes, grouped (quantize_model, or
    the rule) and per tensor."""
    from reference.lm import generate

    if name not in model.weights or not _linear(name):
        raise ValueError(f"the teacher has no quantized weight {name!r}; try layers.0.wq or out")
    rows = np.swapaxes(model.weights[name], -1, -2)  # (..., out, in): groups run along the input axis
    flat = rows.reshape(-1)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < flat.size:
        raise ValueError(f"index must be in [0, {flat.size}), got {index!r}")
    start = index - index % GROUP
    group = flat[start : start + GROUP].astype(np.float32)
    out = []
    for bits in widths:
        if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
            raise ValueError(f"bits must be an int in [2, 8], got {bits!r}")
        qmax = 2 ** (bits - 1) - 1
        step = float(np.max(np.abs(group))) / qmax
        tensor_step = float(np.max(np.abs(rows))) / qmax
        if source.module is None:
            back = grouped(group[None, :], bits).reshape(-1)
            whole = float(np.round(flat[index] / tensor_step) * tensor_step)
        else:
            q, scales = source.module.quantize_grouped(group[None, :], bits, GROUP)
            back = np.asarray(source.module.dequantize_grouped(q, scales, GROUP), dtype=np.float64).reshape(-1)
            q, scale = source.module.quantize_symmetric(rows, bits)
            whole = float(np.asarray(source.module.dequantize_symmetric(q, scale)).reshape(-1)[index])
        text = generate(CachedLM(quantized_model(model, bits, source)), prompt, n_text)
        text_per_tensor = generate(CachedLM(_per_tensor_model(model, bits, source)), prompt, n_text)
        out.append(
            Snap(
                bits=bits,
                value=float(flat[index]),
                step=step,
                levels=np.arange(-qmax, qmax + 1) * step,
                snapped=float(back[index % GROUP]),
                per_tensor=whole,
                model_bytes=weight_bytes(model, bits),
                text=decode(text),
                text_per_tensor=decode(text_per_tensor),
            )
        )
    return out


ART_FUNCTIONS = (
    "layer_sensitivity",
    "mixed_precision_plan",
    "quantize_model_mixed",
    "activation_scales",
    "awq_quantize",
    "quantize_model_awq",
)  # what `spent` runs: the sensitive and salient tasks'
ART_CHOICES = (2, 3, 4, 8)  # the widths the mixed plan chooses from


@dataclass(frozen=True)
class Spent:
    """The teacher at the bytes of uniform `bits`-bit weights, spent three ways."""

    bits: int
    kl: dict[str, float]  # "uniform", "mixed", "awq" -> mean KL (nats) from the float model on held-out text
    text: dict[str, str]  # the same keys -> what that model writes after the prompt
    protected: list[tuple[str, int, float]]  # (matrix, its bits, its sensitivity at `bits`) given more than `bits`


def _mean_kl(p_log: np.ndarray, model: Model, tokens: list[int]) -> float:
    q_log = _log_softmax(model.forward(tokens).astype(np.float64))
    return float(np.mean(np.sum(np.exp(p_log) * (p_log - q_log), axis=-1)))


def spent(model: Model, widths, calib: list[int], held_out: list[int], prompt: list[int], n_text: int, source: Source):
    """For each width of widths: model quantized uniformly (source's quantize_model), by a mixed plan at
    the same bytes (source's layer_sensitivity on calib at every width of ART_CHOICES,
    mixed_precision_plan, quantize_model_mixed) and activation-aware (source's quantize_model_awq on
    calib); the mean KL of each from the float model on held_out, and what each writes. Needs the
    source's module: the model package has no code of its own for these."""
    from reference.lm import generate

    qz = source.module
    sensitivity = {b: qz.layer_sensitivity(model, calib, b, group_size=GROUP) for b in ART_CHOICES}
    sizes = {name: int(model.weights[name].size) for name in sensitivity[ART_CHOICES[0]]}
    p_log = _log_softmax(model.forward(held_out).astype(np.float64))
    out = []
    for bits in widths:
        budget = sum(n * (bits * GROUP + 16) / (8 * GROUP) for n in sizes.values())
        plan = qz.mixed_precision_plan(sensitivity, sizes, budget, group_size=GROUP)
        models = {
            "uniform": qz.quantize_model(model, bits, GROUP),
            "mixed": qz.quantize_model_mixed(model, plan, group_size=GROUP),
            "awq": qz.quantize_model_awq(model, calib, bits, group_size=GROUP),
        }
        protected = sorted(
            ((name, int(b), float(sensitivity[bits][name])) for name, b in plan.items() if b > bits),
            key=lambda row: -row[2],
        )
        out.append(
            Spent(
                bits=bits,
                kl={k: _mean_kl(p_log, m, held_out) for k, m in models.items()},
                text={k: decode(generate(CachedLM(m), prompt, n_text)) for k, m in models.items()},
                protected=protected,
            )
        )
    return out


# ------------------------------------------------------------------ distill


@dataclass(frozen=True)
class Position:
    """The next-character distributions of the models at one position of a text."""

    context: str  # the text up to the position
    next_char: str  # the character that came next
    probs: dict[str, np.ndarray]  # model name -> (V,) probabilities of the next character
    kl: dict[str, float]  # student name -> KL(teacher || student) here, in nats
    top: list[int]  # the teacher's three likeliest next characters, likeliest first


def training_text(n: int) -> str:
    """n characters of the corpus the shipped models were trained on (reference/data/train.txt)."""
    return _corpus("train", "training", n)


def held_out_text(n: int) -> str:
    """n characters of the held-out corpus (reference/data/val.txt)."""
    return _corpus("val", "held-out", n)


def _corpus(name: str, what: str, n: int) -> str:
    from reference.model import WEIGHTS_DIR

    path = WEIGHTS_DIR.parent / "data" / f"{name}.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"the {what} text is missing ({path}): {exc}") from None
    return text[:n]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - np.max(x, axis=-1, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def distill_positions(teacher: Model, draft: Model, train: list[int], text: list[int], at: list[int], source: Source):
    """The teacher's, the distilled draft's and (with source's distill_bigram)
    two bigram students' next-character distributions at positions `at` of
    text: one bigram distilled on the teacher's soft targets (T = 2, alpha =
    0.9), one on hard labels alone (alpha = 0), both trained on the teacher's
    logits over `train` with the same steps. Returns (positions, mean KL of
    each student over text)."""
    if len(text) < 2:
        raise ValueError(f"the text needs 2 characters at least, to show what comes after one; it has {len(text)}")
    if not at or any(not 1 <= i < len(text) for i in at):
        raise ValueError(f"--at positions must lie in [1, {len(text)}) for a text of {len(text)} characters, got {at}")
    logits = {"teacher": teacher.forward(text).astype(np.float64), "draft": draft.forward(text).astype(np.float64)}
    if source.module is not None:
        ids = np.asarray(train)
        soft_targets = teacher.forward(ids).astype(np.float64)[:-1]
        prev, nxt = ids[:-1], ids[1:]
        rng = np.random.default_rng(0)
        for name, alpha in (("bigram, soft", 0.9), ("bigram, hard", 0.0)):
            table = source.module.distill_bigram(
                soft_targets, prev, nxt, temperature=2.0, alpha=alpha, steps=150, lr=20.0, rng=rng
            )
            logits[name] = np.asarray(table, dtype=np.float64)[np.asarray(text)]  # each position's row: its token's
    # Row j of every model's logits predicts text[j + 1]: the character after position i reads row i - 1.
    logp = {name: _log_softmax(lg) for name, lg in logits.items()}
    p = np.exp(logp["teacher"])
    kl_all = {name: np.sum(p * (logp["teacher"] - lp), axis=-1) for name, lp in logp.items() if name != "teacher"}
    out = [
        Position(
            context=decode(text[:i]),
            next_char=decode(text[i : i + 1]),
            probs={name: np.exp(lp[i - 1]) for name, lp in logp.items()},
            kl={name: float(kl[i - 1]) for name, kl in kl_all.items()},
            top=[int(t) for t in np.argsort(-p[i - 1], kind="stable")[:3]],
        )
        for i in at
    ]
    return out, {name: float(np.mean(kl[:-1])) for name, kl in kl_all.items()}
