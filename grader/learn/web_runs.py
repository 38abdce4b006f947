"""The widgets of `kata play --web` and of grader.notebook, as data: each widget's run, the JSON its page
animates, made by `kata play`'s demos (grader.learn.play, grader.learn.play_stack) on the shipped teacher.

Kata code runs as `kata play` runs it: in its jail (grader.learn.play_jails), the learner's once its
tasks pass, the model package's own code before that, and the run says whose (each source's `own` is
True for the model's own code, with the tasks that would make it yours). A run that cannot go on is
data too, never a traceback: an `error` line, safe to show, and `finish` when the kata code raised
NotImplementedError (a stub): the kata and the task whose function it was, and the command to grade it.

A run is a stream of parts (dicts), so that a page can draw the rows of a slow widget as they come:
`stream` yields them, `run` merges them into the one JSON object `GET /api/WIDGET` returns (a part
{"row": ...} is appended to its "rows"; any other part's keys are set).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from grader.kata.registry import find_kata
from grader.learn import play as demos
from grader.learn import play_jails, play_screens, play_stack
from grader.learn.table_draft import table_draft
from reference.lm import CachedLM, generate
from reference.model import Model
from reference.tokenizer import decode, encode

WIDGETS = ("cache", "quantize", "speculate", "stack")
QUANTIZE_WIDTHS = (8, 7, 6, 5, 4, 3, 2)  # the bit widths the quantize widget steps down through
TEXT_CHARS = 24  # what the quantized teacher writes, in characters
HELD_OUT_CHARS = 128  # the held-out text KL and top-1 agreement are measured on
SENTENCE = (
    "A deployed model is a stack of small bargains: an MoE teacher (storage for compute), its weights in "
    "8 bits (precision for memory), served with a KV cache (memory for time) and speculative decoding "
    "from a draft distilled from it (compute for wall-clock)."
)


class ParamError(ValueError):
    """A widget was asked for an option it does not take, or a value out of its range."""


@dataclass(frozen=True)
class Param:
    """One option of a widget, as the page's query string gives it."""

    default: Any
    low: int = 1  # ints only: the range allowed
    high: int = 0
    help: str = ""


PARAMS: dict[str, dict[str, Param]] = {
    "cache": {
        "prompt": Param("R", help="the text the teacher continues"),
        "n": Param(9, 1, 64, "characters to write"),
    },
    "quantize": {
        "weight": Param("layers.0.wq", help="which of the teacher's weight matrices"),
        "index": Param(5, 0, 10**9, "which weight of it (its group of 32 is the row shown)"),
        "prompt": Param("Return the ", help="the text the quantized teacher continues"),
    },
    "speculate": {
        "prompt": Param("Return the ", help="the text the teacher continues"),
        "n": Param(40, 1, 200, "characters to write"),
        "k": Param(4, 1, 8, "draft guesses per round"),
    },
    "stack": {
        "prompt": Param(play_stack.PROMPT, help="the text the teacher continues"),
        "n": Param(48, 1, 200, "characters to write"),
        "k": Param(play_stack.K, 1, 8, "draft guesses per round"),
        "rounds": Param(3, 1, 9, "timed rounds behind each row's speed"),
    },
}


def options(widget: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The widget's options from a query string (name -> text): each given one checked and typed, the
    others at their defaults. A ParamError names a widget, option or value not allowed, and what is."""
    if widget not in PARAMS:
        raise ParamError(f"there is no widget {widget!r}; there are {', '.join(WIDGETS)}")
    params = PARAMS[widget]
    unknown = sorted(set(query) - set(params))
    if unknown:
        raise ParamError(f"the {widget} widget takes {', '.join(params)}, not {', '.join(unknown)}")
    out = {}
    for name, param in params.items():
        text = query.get(name)
        if text is None:
            out[name] = param.default
        elif isinstance(param.default, int):
            # ASCII digits alone: isdigit() also takes "²" (which int() refuses) and "٣" (which it reads as 3)
            if not (text.isascii() and text.isdigit()) or not param.low <= int(text) <= param.high:
                raise ParamError(f"{name} ({param.help}) must be a whole number in [{param.low}, {param.high}]")
            out[name] = int(text)
        else:
            out[name] = text
    return out


class _KataFailed(Exception):
    """Kata code did not answer a widget's call: the message says whose code and what it did instead."""

    def __init__(self, message: str, finish: dict | None = None):
        super().__init__(message)
        self.finish = finish


class _Watched:
    """A jailed kata module (grader.learn.play_jails.Jailed) as a widget calls it: what its call does
    instead of answering becomes a _KataFailed naming whose code it was, and a NotImplementedError names
    the task that writes the function called."""

    def __init__(self, module: Any, kata: str, says: str, path: tuple[str, ...] = ()):
        self._module, self._kata, self._says, self._path = module, kata, says, path

    def __getattr__(self, name: str) -> "_Watched":
        if name.startswith("_"):
            raise AttributeError(name)
        return _Watched(getattr(self._module, name), self._kata, self._says, (*self._path, name))

    def __call__(self, *args, **kwargs):
        try:
            return self._module(*args, **kwargs)
        except play_jails.LearnerError as exc:
            finish = None
            if exc.not_written:
                task = next(t.name for t in find_kata(self._kata).tasks if self._path[0] in t.functions)
                finish = {"kata": self._kata, "task": task, "function": ".".join(self._path)}
                finish["command"] = f"kata grade {self._kata}:{task}"
            raise _KataFailed(f"{self._says} {exc}", finish) from None


def _source(kata: str, functions: tuple[str, ...], target: str) -> tuple[demos.Source, dict]:
    """Whose code a widget of kata runs (grader.learn.play.kata_source), watched; and what the page says of
    it: the kata, the sentence, whether it is the model's own code, and the tasks that make it the learner's."""
    try:
        found = demos.kata_source(kata, functions, target)
    except ValueError as exc:
        raise _KataFailed(play_jails.safe_line(str(exc))) from None
    tasks = [t.name for t in find_kata(kata).tasks if set(t.functions) & set(functions)]
    about = {"kata": kata, "says": found.says, "own": found.module is None, "tasks": tasks}
    if found.module is None:
        return found, about
    return demos.Source(_Watched(found.module, kata, found.says), found.says), about


def _models(*names: str) -> list[Model]:
    try:
        return [Model.pretrained(name) for name in names]
    except (ValueError, FileNotFoundError) as exc:
        raise _KataFailed(str(exc)) from None


def _prompt_ids(prompt: str, n: int, model: Model) -> list[int]:
    """The prompt's token ids, when it and n more characters fit the model."""
    try:
        ids = encode(prompt)
    except ValueError as exc:
        raise ParamError(f"prompt: {exc}") from None
    problem = play_screens.room_problem(len(ids), n, model.config.max_seq_len)
    if problem:
        raise ParamError(problem)
    return ids


def _vocab(model: Model) -> list[str]:
    """Each token id's text: the page draws tokens by id."""
    return [decode([i]) for i in range(model.config.vocab_size)]


# ------------------------------------------------------------------ the widgets


def _cache(opts: dict, target: str) -> Iterator[dict]:
    """The teacher writes n characters after prompt re-reading everything, then with target's KV cache:
    each token's work (token positions through layer 0, from the model's own counter) and the totals."""
    (model,) = _models("teacher")
    ids = _prompt_ids(opts["prompt"], opts["n"], model)
    source, about = _source("kv_cache", ("KVCache", "forward_cached"), target)
    yield {"sources": [about], "vocab": _vocab(model)}
    ways = {
        "naive": list(demos.naive_steps(model, ids, opts["n"])),
        "cached": list(demos.cached_steps(model, ids, opts["n"], source)),
    }
    out: dict[str, Any] = {}
    for name, steps in ways.items():
        before = [0] + [s.positions for s in steps[:-1]]
        out[name] = [
            {"token": s.token, "positions": s.positions, "work": s.positions - b, "macs": s.macs}
            for s, b in zip(steps, before)
        ]
    naive, cached = ways["naive"][-1], ways["cached"][-1]
    ratio = demos.work_ratio(naive, cached)
    same = [s.token for s in ways["naive"]] == [s.token for s in ways["cached"]]
    yield {**out, "same": same, "ratio": [ratio.numerator, ratio.denominator], "macs_ratio": cached.macs / naive.macs}


def _speculate(opts: dict, target: str) -> Iterator[dict]:
    """Greedy speculative decoding of n characters, k draft guesses a round, with target's greedy_accept:
    each round's guesses, how many the teacher kept, its own token after them (the correction of the first
    guess it refused, or its bonus token when it kept them all); and the teacher's own greedy text."""
    teacher, draft = _models("teacher", "draft")
    ids = _prompt_ids(opts["prompt"], opts["n"], teacher)
    source, about = _source("speculative", ("greedy_accept",), target)
    yield {"sources": [about], "vocab": _vocab(teacher)}
    rounds = list(demos.speculative_rounds(teacher, draft, ids, opts["n"], opts["k"], source))
    tokens = [t for r in rounds for t in r.emitted]
    own = [int(t) for t in generate(CachedLM(teacher), ids, opts["n"])]
    yield {
        "rounds": [
            {
                "drafts": [int(t) for t in r.drafted],
                "kept": r.accepted,
                "emitted": [int(t) for t in r.emitted],
                "correction": int(r.emitted[-1]) if r.accepted < len(r.drafted) else None,
                "bonus": int(r.emitted[-1]) if r.accepted == len(r.drafted) else None,
            }
            for r in rounds
        ],
        "tokens": tokens,
        "target_tokens": own,
        "same": tokens == own,
        "target_calls": len(rounds),
        "plain_calls": len(tokens),
        "draft_calls": sum(len(r.drafted) for r in rounds),
    }


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - np.max(x, axis=-1, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def _quantize(opts: dict, target: str) -> Iterator[dict]:
    """One group of 32 of the teacher's weight `weight` (the one holding weight `index`, along the input
    axis) at each width of QUANTIZE_WIDTHS, through target's quantize_grouped and dequantize_grouped: its
    levels and where each value lands; the teacher quantized at that width by target's quantize_model:
    what it writes after prompt, its mean KL from the float teacher on held-out text and how often their
    likeliest next characters agree."""
    (model,) = _models("teacher")
    name, index = opts["weight"], opts["index"]
    if name not in model.weights or name.split(".")[-1] not in demos.LINEAR:
        raise ParamError(f"weight: the teacher has no quantized weight {name!r}; try layers.0.wq or out")
    flat = np.swapaxes(model.weights[name], -1, -2).reshape(-1)  # groups run along the input axis
    if index >= flat.size:
        raise ParamError(f"index must be in [0, {flat.size}) for {name}")
    start = index - index % demos.GROUP
    group = flat[start : start + demos.GROUP].astype(np.float32)
    ids = _prompt_ids(opts["prompt"], TEXT_CHARS, model)
    source, about = _source("quantization", ("quantize_grouped", "dequantize_grouped", "quantize_model"), target)
    held = encode(demos.held_out_text(HELD_OUT_CHARS))
    p_log = _log_softmax(model.forward(held).astype(np.float64))
    yield {
        "sources": [about],
        "values": group.tolist(),
        "first": start,
        "full_text": decode(generate(CachedLM(model), ids, TEXT_CHARS)),
        "float_bytes": demos.weight_bytes(model, None),
    }
    for bits in QUANTIZE_WIDTHS:
        yield {"row": _width(model, group, bits, ids, held, p_log, source)}


def _width(model: Model, group: np.ndarray, bits: int, ids, held, p_log: np.ndarray, source: demos.Source) -> dict:
    """The quantize widget at one width (see _quantize)."""
    qmax = 2 ** (bits - 1) - 1
    if source.module is None:
        step = float(np.max(np.abs(group))) / qmax
        back = demos.grouped(group[None, :], bits).reshape(-1)
    else:
        q, scales = source.module.quantize_grouped(group[None, :], bits, demos.GROUP)
        step = float(np.asarray(scales, dtype=np.float64).reshape(-1)[0])
        back = np.asarray(source.module.dequantize_grouped(q, scales, demos.GROUP), dtype=np.float64).reshape(-1)
    quantized = demos.quantized_model(model, bits, source)
    q_log = _log_softmax(quantized.forward(held).astype(np.float64))
    return {
        "bits": bits,
        "step": step,
        "levels": (np.arange(-qmax, qmax + 1) * step).tolist(),
        "snapped": [float(v) for v in back],
        "text": decode(generate(CachedLM(quantized), ids, TEXT_CHARS)),
        "kl": float(np.mean(np.sum(np.exp(p_log) * (p_log - q_log), axis=-1))),
        "top1": float(np.mean(np.argmax(p_log, axis=-1) == np.argmax(q_log, axis=-1))),
        "model_bytes": demos.weight_bytes(model, bits),
    }


def _stack(opts: dict, target: str) -> Iterator[dict]:
    """`kata play stack`'s rows (grader.learn.play_stack), each as soon as it is measured, with the note
    `kata play stack` prints under it; then whether speculative decoding kept the int8 teacher's text."""
    (teacher,) = _models("teacher")
    ids = _prompt_ids(opts["prompt"], opts["n"], teacher)
    try:
        draft, whose = table_draft(teacher, target, make=False)
    except (play_jails.LearnerError, ValueError, FileNotFoundError) as exc:
        raise _KataFailed(str(exc)) from None
    found = {
        "kv_cache": _source("kv_cache", ("KVCache", "forward_cached", "generate"), target),
        "quantization": _source("quantization", ("quantize_grouped", "quantize_model"), target),
        "speculative": _source("speculative", ("greedy_accept", "speculative_generate"), target),
    }
    draft_about = {"kata": "draft", "says": whose, "own": False, "tasks": []}  # an entry like each kata's
    about = [about for _, about in found.values()] + [draft_about]
    yield {"sources": about, "blas": play_screens.blas_line(), "sentence": SENTENCE}
    sources = {kata: source for kata, (source, _) in found.items()}
    rows: list[play_stack.Bargain] = []
    for row in play_stack.stack(teacher, draft, ids, opts["n"], opts["k"], sources, rounds=opts["rounds"]):
        rows.append(row)
        notes = list(play_screens.stack_row(rows, 100))[1:]
        yield {
            "row": {
                **dataclasses.asdict(row),
                "chars_per_second": len(row.tokens) / row.seconds,
                "text": decode(row.tokens),
                "same": row.tokens == rows[0].tokens,
                "note": " ".join(" ".join(line.text.split()) for line in notes),
            }
        }
    yield {"kept": rows[-1].tokens == rows[-2].tokens, "overall": rows[0].seconds / rows[-1].seconds}


_RUNS: dict[str, Callable[[dict, str], Iterator[dict]]] = {
    "cache": _cache,
    "quantize": _quantize,
    "speculate": _speculate,
    "stack": _stack,
}


def stream(widget: str, opts: dict, target: str = "katas") -> Iterator[dict]:
    """The parts of widget's run with options opts (from `options`) on target's code, each as soon as it is
    made; the last is {"error": ..., "finish": ...} when the run could not go on. The first part holds the
    widget, its options and target. Kata code runs in jails (grader.learn.play_jails.jails) that end with
    the stream, however it ends."""
    if widget not in _RUNS:
        raise ParamError(f"there is no widget {widget!r}; there are {', '.join(WIDGETS)}")
    yield {"widget": widget, "options": opts, "target": target}
    with play_jails.jails():
        try:
            yield from _RUNS[widget](opts, target)
        except _KataFailed as exc:
            yield {"error": str(exc), "finish": exc.finish}
        except ValueError as exc:  # an option the widget refuses (ParamError), or what the kata code answered
            yield {"error": play_jails.safe_line(str(exc)), "finish": None}
        except Exception as exc:  # on what the kata code answered: say what, in one line
            line = f"the kata code answered what the widget cannot use: {type(exc).__name__}: {exc}"
            yield {"error": play_jails.safe_line(line), "finish": None}


def merge(parts: Iterator[dict]) -> dict:
    """One object from a run's parts: a {"row": ...} part appended to "rows", the others' keys set."""
    out: dict[str, Any] = {"rows": []}
    for part in parts:
        if "row" in part:
            out["rows"].append(part["row"])
        else:
            out.update(part)
    if not out["rows"]:
        del out["rows"]
    return out


def run(widget: str, opts: dict, target: str = "katas") -> dict:
    """widget's whole run (stream's parts merged): the JSON `GET /api/WIDGET` returns."""
    return merge(stream(widget, opts, target))


def jsonable(value: Any) -> Any:
    """A JSON encoder's fallback for what a run holds beyond JSON's types (NumPy's numbers and arrays)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")
