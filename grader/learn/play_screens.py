"""`kata play`'s screens: each demo of grader.learn.play as the lines the command prints.

A demo is a generator of Lines that the command prints as they come (on a terminal a demo redraws
its line while the model writes). A demo that cannot run raises DemoError, whose message is the one
line to show: a prompt or option the demo refuses, or what the kata code did instead of answering
(raised, crashed its jail, ran past its time), escaped. Each demo runs inside
grader.learn.play_jails.jails: the jails of the kata code it ran end with its generator, however it ends.
"""

from __future__ import annotations

import contextlib
import functools
import textwrap
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import click
import numpy as np

from grader.kata.text import printable
from grader.learn import play as demos
from grader.learn import play_jails, play_stack
from grader.learn.table_draft import table_draft
from grader.measure import blas
from reference.lm import CachedLM, generate
from reference.model import Model
from reference.sampling import generate_naive
from reference.tokenizer import decode, encode


class DemoError(Exception):
    """A demo cannot go on: its message says why, in one line. usage: it refuses what it was asked (a
    prompt, an option), not what some code did."""

    def __init__(self, message: str, usage: bool = False):
        super().__init__(message)
        self.usage = usage


def room_problem(prompt_chars: int, new: int, max_len: int) -> str | None:
    """Why a prompt of prompt_chars characters and `new` more do not fit a model of max_len positions,
    naming what to change; None when they fit."""
    if not prompt_chars:
        return "the prompt is empty: give it at least one character"
    if new >= max_len:
        return f"{new} new characters do not fit: the model holds {max_len} in all, the prompt's included"
    if prompt_chars + new > max_len:
        return (
            f"a prompt of {prompt_chars} characters and {new} new ones do not fit the model's {max_len}: "
            f"give a prompt of at most {max_len - new} characters"
            + (f", or ask for at most {max_len - prompt_chars} new ones" if prompt_chars < max_len else "")
        )
    return None


@dataclass(frozen=True)
class Line:
    """A piece of a demo's screen: its text, then a new line unless nl is False. A painted line
    holds colours, which its printer drops where there should be none (NO_COLOR)."""

    text: str
    nl: bool = True
    painted: bool = False


def _teacher() -> Model:
    try:
        return Model.pretrained("teacher")
    except (ValueError, FileNotFoundError) as exc:
        raise DemoError(str(exc)) from None


def _jailed(demo: Callable[..., Iterator[Line]]) -> Callable[..., Iterator[Line]]:
    """demo, run inside grader.learn.play_jails.jails(): the jails of the kata code it runs are stopped when its
    generator ends, raises or is closed (the command interrupted between two lines)."""

    @functools.wraps(demo)
    def lines(*args, **kwargs) -> Iterator[Line]:
        with play_jails.jails():
            yield from demo(*args, **kwargs)

    return lines


def _source(kata: str, functions: tuple[str, ...], target: str) -> demos.Source:
    """Whose code a demo of kata runs (grader.learn.play.kata_source)."""
    try:
        return demos.kata_source(kata, functions, target)
    except ValueError as exc:
        raise DemoError(play_jails.safe_line(str(exc))) from None


def _prompt_ids(prompt: str, tokens: int, model: Model) -> list[int]:
    """The prompt's token ids, when it and `tokens` more fit the model."""
    try:
        ids = encode(prompt)
    except ValueError as exc:
        raise DemoError(str(exc), usage=True) from None
    problem = room_problem(len(ids), tokens, model.config.max_seq_len)
    if problem:
        raise DemoError(problem, usage=True)
    return ids


@contextlib.contextmanager
def _running(whose: str, *, value_errors_are_ours: bool = True):
    """Around code that runs the learner's: what the kata code did instead of answering (a
    grader.learn.play_jails.LearnerError), or what the demo raised on what it answered, becomes a DemoError
    that names whose code it was, in one line. With value_errors_are_ours, a ValueError is the demo's
    own refusal of a bad option or prompt, shown as it is."""
    try:
        yield
    except DemoError:
        raise
    except play_jails.LearnerError as exc:
        raise DemoError(f"{whose} {exc}") from None
    except ValueError as exc:
        if not value_errors_are_ours:
            raise DemoError(f"{whose} raised {type(exc).__name__}: {play_jails.safe_line(str(exc))}") from None
        raise DemoError(play_jails.safe_line(str(exc)), usage=True) from None
    except Exception as exc:  # on what the kata code answered: say what, in one line
        raise DemoError(f"{whose} raised {type(exc).__name__}: {play_jails.safe_line(str(exc))}") from None


def blas_line() -> str:
    """The BLAS kernel the timings ran on, and a word when a host forces an older one."""
    return blas.header("unset both to time on this CPU's own kernel")


# ------------------------------------------------------------------ kata play cache


def one_line(text: str) -> str:
    """Generated text on one line of a table or meter: newlines (and any other control character, and the
    backslash that would make them ambiguous) written as escapes."""
    return printable(text.replace("\\", "\\\\"), lines=False)


def quoted(text: str) -> str:
    return f"'{one_line(text)}'"


def _meter_line(text: str, meter: str, columns: int) -> str:
    """The live line of `kata play cache`: the newest end of the text (escaped) and the meter, within the
    terminal's width, so that a carriage return redraws it in place however long the text grows."""
    line, room = one_line(text) + meter, max(columns - 1, 10)
    if len(line) > room:
        line = "..." + line[len(line) - room + 3 :]
    return f"\r{line}\x1b[K"


@_jailed
def cache(prompt: str, tokens: int, target: str, *, live: bool, columns: int = 80) -> Iterator[Line]:
    """`kata play cache`: the teacher writes `tokens` characters after prompt twice, re-reading the
    whole text for every character, then with the KV cache of target; the work of each. live: redraw
    the line after every character, with its meter, within `columns` (the terminal's width)."""
    model = _teacher()
    ids = _prompt_ids(prompt, tokens, model)
    source = _source("kv_cache", ("KVCache", "forward_cached"), target)
    yield Line(f"The teacher writes {tokens} characters after {prompt!r}, twice; code: {source.says}.")
    yield Line(f"{blas_line()}\n")
    ways = (
        ("1. re-reading everything: the whole text through every layer, for every character", None),
        ("2. remembering: each character through each layer once (a KV cache)", source),
    )
    last = []
    for title, way in ways:
        yield Line(title)
        steps = demos.naive_steps(model, ids, tokens) if way is None else demos.cached_steps(model, ids, tokens, way)
        done = []
        with _running(source.says, value_errors_are_ours=False):
            for step in steps:
                done.append(step)
                if live:
                    meter = f"   [{step.positions:,} token passes per layer, {step.macs:,} MACs]"
                    yield Line(_meter_line(prompt + decode([s.token for s in done]), meter, columns), nl=False)
        end = done[-1]
        text = f"{prompt}{decode([s.token for s in done])}"
        yield Line(f"\r\x1b[K{text}" if live else text)
        yield Line(f"   {end.positions:,} token passes per layer, {end.macs:,} multiply-accumulates\n")
        last.append(done)
    naive, cached = last
    same = [s.token for s in naive] == [s.token for s in cached]
    ratio = demos.work_ratio(naive[-1], cached[-1])
    macs = cached[-1].macs / naive[-1].macs
    verdict = "same sentence" if same else "a DIFFERENT sentence (the cache changed what the model writes)"
    yield Line(f"{verdict}, {ratio} of the work ({macs:.2f}x the multiply-accumulates)")


# ------------------------------------------------------------------ kata play speculate


@_jailed
def speculate(prompt: str, tokens: int, k: int, target: str, *, live: bool) -> Iterator[Line]:
    """`kata play speculate`: the distilled draft guesses k characters a round, the teacher checks
    them in one call with target's greedy_accept; a row per round (live: the guesses coloured)."""
    teacher = _teacher()
    draft = Model.pretrained("draft")
    source = _source("speculative", ("greedy_accept",), target)
    ids = _prompt_ids(prompt, tokens, teacher)
    rounds = []
    with _running(source.says):
        yield Line(
            f"The draft guesses {k} characters a round, the teacher checks them in one call; code: {source.says}."
        )
        yield Line(f"{blas_line()}\n")
        yield Line(f"{'round':>5}  {'guessed':<{k + 2}}  kept  {'teacher wrote':<16}  so far")
        for r in demos.speculative_rounds(teacher, draft, ids, tokens, k, source):
            rounds.append(r)
            yield Line(_round_row(rounds, k, live), painted=True)
    written = [t for r in rounds for t in r.emitted][:tokens]
    kept = "".join(
        click.style(decode(r.emitted[:-1]), fg="green") + click.style(decode(r.emitted[-1:]), fg="yellow")
        for r in rounds
    )
    yield Line(f"\n{prompt}{kept}", painted=True)
    own = generate(CachedLM(teacher), ids, tokens)
    yield Line(
        f"\n{len(rounds)} teacher calls for {len(written)} characters: {len(written) / len(rounds):.2f} per call "
        f"(plain decoding: 1); {sum(r.accepted for r in rounds)} of {sum(len(r.drafted) for r in rounds)} guesses kept"
    )
    same = "yes" if written == own else "NO: the rounds changed what the teacher writes"
    yield Line(f"the same text as the teacher's own greedy decoding: {same}")


def _round_row(rounds: list[demos.Round], k: int, live: bool) -> str:
    """The newest round's row: what the draft guessed (live: kept guesses green, the first refused
    red, the ones after it grey), how many the teacher kept, what it wrote, and the count so far."""
    r = rounds[-1]
    fix = decode(r.emitted[-1:])
    why = f" (not {quoted(decode(r.drafted[r.accepted : r.accepted + 1]))})" if r.accepted < len(r.drafted) else ""
    guessed = f"{quoted(decode(r.drafted)):<{k + 2}}"
    if live:
        kept = one_line(decode(r.drafted[: r.accepted]))
        refused = one_line(decode(r.drafted[r.accepted : r.accepted + 1]))
        rest, pad = one_line(decode(r.drafted[r.accepted + 1 :])), " " * (len(guessed) - len(quoted(decode(r.drafted))))
        paint = click.style(kept, fg="green") + click.style(refused, fg="red")
        guessed = f"'{paint}{click.style(rest, fg='bright_black')}'{pad}"
    so_far = sum(len(x.emitted) for x in rounds)
    counts = f"{so_far} chars in {len(rounds)} teacher calls, {so_far / len(rounds):.2f} a call"
    wrote = f"{quoted(fix)}{why}"
    return f"{len(rounds):>5}  {guessed}  {r.accepted:>4}  {wrote:<16}  {counts}"


# ------------------------------------------------------------------ kata play quantize


@_jailed
def quantize(name: str, index: int, prompt: str, target: str) -> Iterator[Line]:
    """`kata play quantize`: weight `index` of the teacher's matrix `name` snapping to the nearest
    level of 8 down to 2 bits (target's quantizers), the error, the teacher's bytes and what the
    quantized teacher writes after prompt; then the bytes of uniform weights spent where they matter."""
    model = _teacher()
    source = _source("quantization", ("quantize_symmetric", "quantize_grouped", "quantize_model"), target)
    with _running(source.says):
        rows = demos.snaps(model, name, index, (8, 6, 4, 3, 2), _prompt_ids(prompt, 24, model), 24, source)
    first = rows[0]
    span = float(first.levels[-1])
    yield Line(
        f"Weight {index} of {name} is {first.value:+.5f}; its group of 32 spans +-{span:.5f}; code: {source.says}.\n"
    )
    width = 57
    col = lambda v: int(round((v + span) / (2 * span) * (width - 1))) if span > 0 else width // 2  # noqa: E731
    for r in rows:
        line = ["-"] * width
        for level in r.levels:
            line[col(level)] = "|"
        line[col(r.snapped)] = "O"
        mark = [" "] * width
        mark[col(r.value)] = "v"
        yield Line(f"{'':>8}{''.join(mark)}")
        yield Line(f"{r.bits:>2} bits {''.join(line)}  {len(r.levels)} levels")
    yield Line(f"\n{'bits':>4}  {'grouped':>9}  {'error':>9}  {'per tensor':>10}  {'error':>9}  {'teacher bytes':>13}")
    for r in rows:
        yield Line(
            f"{r.bits:>4}  {r.snapped:>+9.5f}  {r.snapped - r.value:>+9.5f}  {r.per_tensor:>+10.5f}  "
            f"{r.per_tensor - r.value:>+9.5f}  {r.model_bytes:>13,}"
        )
    width = len(prompt) + len(rows[0].text) + 2
    yield Line(f"\nwhat the quantized teacher writes\n{'bits':>4}  {'grouped':<{width}}  per tensor")
    for r in rows:
        yield Line(f"{r.bits:>4}  {prompt + r.text!r:<{width}}  {prompt + r.text_per_tensor!r}")
    yield from _spent(model, encode(prompt), target)


def _spent(model: Model, prompt_ids: list[int], target: str) -> Iterator[Line]:
    """`kata play quantize`'s last rows: the bytes of uniform 4- and 3-bit weights spent by a mixed plan
    and by activation-aware scales, once the sensitive and salient tasks pass."""
    source = _source("quantization", demos.ART_FUNCTIONS, target)
    if source.module is None:
        why = source.says.split("since ", 1)[-1]
        yield Line(f"\n(no mixed-precision or activation-aware rows: they run only your code, and {why})")
        return
    calib = encode(demos.training_text(256))
    held_out = encode(demos.held_out_text(256))
    with _running(source.says, value_errors_are_ours=False):
        rows = demos.spent(model, (4, 3), calib, held_out, prompt_ids, 24, source)
    yield Line(
        f"\nthe bytes of uniform weights spent where they matter, code: {source.says}\n"
        "mean KL from the float teacher on held-out text (mixed: a plan from each matrix's sensitivity; "
        "AWQ: activation-aware scales)"
    )
    yield Line(f"{'bits':>4}  {'uniform':>8}  {'mixed':>8}  {'AWQ':>8}")
    for r in rows:
        yield Line(f"{r.bits:>4}  {r.kl['uniform']:>8.4f}  {r.kl['mixed']:>8.4f}  {r.kl['awq']:>8.4f}")
    prompt = decode(prompt_ids)
    width = len(prompt) + len(rows[0].text["mixed"]) + 2
    yield Line(f"\n{'bits':>4}  {'mixed':<{width}}  AWQ")
    for r in rows:
        yield Line(f"{r.bits:>4}  {prompt + r.text['mixed']!r:<{width}}  {prompt + r.text['awq']!r}")
    for r in rows:
        shown = ", ".join(f"{name} {b} bits ({kl:.4f})" for name, b, kl in r.protected[:6])
        more = f" and {len(r.protected) - 6} more" if len(r.protected) > 6 else ""
        yield Line(f"the {r.bits}-bit plan protects (sensitivity at {r.bits} bits, nats): {shown}{more}")


# ------------------------------------------------------------------ kata play distill


@_jailed
def distill(text: str, at: list[int], target: str) -> Iterator[Line]:
    """`kata play distill`: what the teacher thinks comes next after each position of `at` in text, beside
    its distilled draft and two bigram students target's distill_bigram trains, and how far each student is
    from the teacher (KL)."""
    teacher, draft = _teacher(), Model.pretrained("draft")
    source = _source("distillation", ("distill_bigram",), target)
    with _running(source.says):
        ids = encode(text)
        train = encode(demos.training_text(teacher.config.max_seq_len))
        positions, mean_kl = demos.distill_positions(teacher, draft, train, ids, at, source)
    yield Line(f"What comes next, by the teacher and its students; bigram students by: {source.says}.")
    for pos in positions:
        yield Line(f"\n...{pos.context[-24:]!r} -> next came {pos.next_char!r}")
        for name, probs in pos.probs.items():
            cells = "  ".join(
                f"{decode([t])!r} {probs[t]:>4.0%} {'#' * int(round(probs[t] * 20)):<20}" for t in pos.top
            )
            kl = f"  KL {pos.kl[name]:.2f}" if name in pos.kl else ""
            yield Line(f"  {name:<13} {cells}{kl}")
    means = ", ".join(f"{name} {kl:.2f}" for name, kl in mean_kl.items())
    yield Line(f"\nmean KL(teacher || student) over the text, in nats: {means}")
    if source.module is None:
        yield Line("(the bigram students join once your distillation task distill passes)")


# ------------------------------------------------------------------ kata play stack


@_jailed
def stack(prompt: str, tokens: int, k: int, target: str, rounds: int, *, columns: int) -> Iterator[Line]:
    """`kata play stack`: the MoE teacher, its weights in 8 bits, served with a KV cache and
    speculative decoding from an n-gram table draft (k guesses a round), one bargain a row, each row's speed the
    median of `rounds` rounds. columns: the terminal's width, which the notes under a row wrap to."""
    teacher = _teacher()
    sources = {
        "kv_cache": _source("kv_cache", ("KVCache", "forward_cached", "generate"), target),
        "quantization": _source("quantization", ("quantize_grouped", "quantize_model"), target),
        "speculative": _source("speculative", ("greedy_accept", "speculative_generate"), target),
    }
    ids = _prompt_ids(prompt, tokens, teacher)
    for kata, source in sources.items():
        yield Line(f"{kata}: {source.says}")
    yield Line("draft: an n-gram table, yours once distillation:ngram passes (distilled once per edit, about a minute)")
    with _running("the distillation kata's distill_ngram"):
        draft, whose = table_draft(teacher, target)
    yield Line(f"draft: {whose}")
    yield Line(f"\n{tokens} characters after {prompt!r}, greedy; {blas_line()}")
    yield Line(f"each row: at least {rounds} rounds taking turns with the row before, x before their median ratio\n")
    yield Line(f"{'':<32}{'chars/s':>8}{'x before':>9}{'weights':>12}{'cache':>10}{'MACs/char':>12}  text as float32")
    rows = []
    with _running("the kata code"):
        for row in play_stack.stack(teacher, draft, ids, tokens, k, sources, rounds=rounds):
            rows.append(row)
            yield from stack_row(rows, columns)
    kept = "yes" if rows[-1].tokens == rows[-2].tokens else "NO"
    yield Line(f"\nspeculative decoding wrote exactly what the int8 teacher writes on its own: {kept}")
    yield Line(f"{prompt}{decode(rows[-1].tokens)}")
    yield Line("\n(weights: bytes the model holds, 8.5 bits per linear weight once quantized, an fp16 scale per 32)")


_SLOWER = {
    "+ KV cache": "this text is short, so re-reading it is cheap; try more characters (-n 200)",
    "+ speculative": "each round pays k draft look-ups and a verify call that scores k + 1 characters at once, "
    "which on this CPU costs about two one-character calls (few-row products repack the weights) and on this "
    "MoE teacher wakes more experts; the draft must agree with the teacher often for that to pay. "
    "kata bench speculative prints what each costs",
}


def stack_row(rows: list[play_stack.Bargain], columns: int) -> Iterator[Line]:
    """The newest row of `kata play stack`, and why, when it is slower than the row before."""
    row, before = rows[-1], rows[-2] if len(rows) > 1 else None
    same = "same" if row.tokens == rows[0].tokens else "differs"
    speedup = "" if row.speedup is None else f"{row.speedup:.2f}x"
    yield Line(
        f"{row.name:<32}{len(row.tokens) / row.seconds:>8.0f}{speedup:>9}{row.weight_bytes:>12,}"
        f"{row.cache_bytes:>10,}{row.macs_per_token:>12,.0f}  {same}"
    )
    if row.name.startswith("+ int8"):
        projected = [play_stack.BANDWIDTH / r.bytes_per_token for r in (before, row)]
        yield _note(
            "here the int8 weights are kept dequantized in float32: they buy size, not speed. Projection from "
            f"the byte counts: a device bound by a {play_stack.BANDWIDTH / 1e9:.0f} GB/s memory bus reads "
            f"{row.bytes_per_token:,.0f} bytes a character instead of {before.bytes_per_token:,.0f}, "
            f"about {projected[1]:,.0f} chars/s instead of {projected[0]:,.0f} (a projection, not a measurement)",
            columns,
        )
    elif row.speedup is not None and row.speedup < 1:
        why = _SLOWER.get(row.name.split(" (")[0], "the trick's own bookkeeping costs more than it saves here")
        yield _note(f"slower than the row before: {why}", columns)


def _note(text: str, columns: int) -> Line:
    """An indented note under a table row, wrapped to the terminal's width."""
    width = max(40, min(100, columns))
    return Line(textwrap.fill(text, width=width, initial_indent="    ", subsequent_indent="    "))


# ------------------------------------------------------------------ kata play moe


_EXPERT_COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red", "white", "bright_black")


@_jailed
def moe(prompt: str, layer: int, target: str) -> Iterator[Line]:
    """`kata play moe`: each character of prompt coloured by the expert layer's router (target's
    router_probs and top_k_gating) sends it to first, the experts of every rank, and each expert's
    load against an even split."""
    model = _teacher()
    source = _source("moe", ("router_probs", "top_k_gating"), target)
    with _running(source.says):
        ids = encode(prompt)
        if not 1 <= len(ids) <= model.config.max_seq_len:
            raise ValueError(f"the prompt needs 1 to {model.config.max_seq_len} characters")
        routed = demos.routing(model, ids, layer, source)
    c = model.config
    yield Line(f"Layer {layer} routes each character to {c.top_k} of {c.n_experts} experts; code: {source.says}.\n")
    shown = "".join(ch if ch.isprintable() else " " for ch in prompt)
    painted = "".join(
        click.style(ch, fg=_EXPERT_COLOURS[e % len(_EXPERT_COLOURS)]) for ch, e in zip(shown, routed.experts[:, 0])
    )
    yield Line(f"{'text':<8}{painted}", painted=True)
    for rank in range(c.top_k):
        label = ("first", "second", "third", "fourth")[rank] if rank < 4 else f"#{rank + 1}"
        yield Line(f"{label:<8}{''.join(str(e) if e < 10 else '+' for e in routed.experts[:, rank])}")
    yield Line(f"\nload per expert (an even split is {routed.even:g} each):")
    for e, n in enumerate(routed.load):
        bar = click.style("#" * int(n), fg=_EXPERT_COLOURS[e % len(_EXPERT_COLOURS)])
        yield Line(f"  expert {e}: {int(n):>3} ({n / routed.even:.2f}x)  {bar}", painted=True)


# ------------------------------------------------------------------ kata play write


def write(prompt: str, model_name: str, tokens: int, temperature: float, seed: int, no_cache: bool) -> tuple[str, str]:
    """`kata play write`: the shipped model model_name continues prompt by `tokens` characters
    (greedily at temperature 0, else sampled with seed), with a KV cache unless no_cache. Returns
    (prompt and what it wrote, a line saying how fast it wrote them)."""
    try:
        model = Model.pretrained(model_name)
    except (ValueError, FileNotFoundError) as exc:  # the weights, not what was asked
        raise DemoError(str(exc)) from None
    try:
        ids = encode(prompt)
        problem = room_problem(len(ids), tokens, model.config.max_seq_len)
        if problem:
            raise ValueError(problem)
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        if no_cache:
            new = generate_naive(model, ids, tokens, temperature=temperature, rng=rng)
        else:
            new = generate(CachedLM(model), ids, tokens, temperature=temperature, rng=rng)
        seconds = time.perf_counter() - t0
    except ValueError as exc:  # the prompt, or the sampling options
        raise DemoError(str(exc), usage=True) from None
    how = "without a KV cache" if no_cache else "with a KV cache"
    speed = f"\n[{len(new)} characters in {seconds:.2f} s {how}: {len(new) / max(seconds, 1e-9):.0f} chars/s]"
    return prompt + decode(new), speed
