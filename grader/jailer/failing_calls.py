"""Readable examples for `kata grade -v`: the calls of the learner's
functions that a failing check made, as one line each, with the argument
names of the kata's stub.

    moe.router_probs(x=array([[0.5, -1.0]], dtype=float32), w_router=array(shape=(16, 4), dtype=float32, ...))
    kv_cache.generate(model=<Model n_layers=1, d_model=16>, prompt=[3, 1, 4], n_new=5)

Everything here runs in the judge (grader.judge.judge) on values the judge sent:
the judge records each call of learner code it makes (grader.jailer.jail_client.Jail.call)
as a Call whose arguments are frozen by `freeze`, a snapshot cheap enough to
take on every call (small arrays and lists are copied, large ones keep only
their shape, dtype or length). Argument names come from the trusted stub
(grader.kata.stubs.stub_for, made from the solution or stored with the grader),
parsed with `ast`; learner code is never imported.
When a check recorded no call, `hypothesis_text` tidies Hypothesis's own
"Falsifying example" note instead.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass, field

import numpy as np

from grader.kata.stubs import stub_for

SHOWN = 3  # calls an example shows: the last ones the failing execution made
MAX_CHARS = 400  # the whole example
VALUE_CHARS = 160  # one argument's value
ARRAY_ELEMENTS = 20  # arrays up to this size are shown whole, larger ones by shape and dtype
LIST_ITEMS = 20  # lists and tuples up to this length are shown whole
LIST_HEAD = 8  # items shown of a longer one, before its length
DEPTH = 3  # nesting a frozen value keeps


class Text:
    """A value already put into words (a summary, a placeholder)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


class Summary:
    """An array too large to show whole: its shape and dtype (put into words only when shown)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype):
        self.shape, self.dtype = shape, dtype


class Longer:
    """The rest of a long list or tuple: how many items it had in all."""

    __slots__ = ("total",)

    def __init__(self, total: int):
        self.total = total


@dataclass
class Call:
    """One call of learner code, as the judge made it.

    kata: the kata module's name; owner: the function's or class's name (for
    a method: the class of the object it was called on); kind: the
    proxy's kind ("function", "class" or "object"); method: the method's
    name, None for a plain call; batch: how many calls one round trip made
    (the arguments are those of the last of them)."""

    kata: str
    owner: str
    kind: str
    method: str | None
    args: tuple
    kwargs: dict = field(default_factory=dict)
    batch: int = 1


# ------------------------------------------------------------------ freezing


def freeze(value, depth: int = 0):
    """A snapshot of an argument that later changes to it cannot alter, and
    that costs little to take: small arrays and containers are copied, large
    arrays keep their shape and dtype, long lists their head and length, and
    every other object its description."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic)):
        return value
    if isinstance(value, np.ndarray):
        if value.size <= ARRAY_ELEMENTS and value.dtype.kind in "biufc":
            return value.copy()
        return Summary(value.shape, value.dtype)
    if isinstance(value, (list, tuple)):
        if depth >= DEPTH:
            return Text(f"<{type(value).__name__} of {len(value)}>")
        items = [freeze(v, depth + 1) for v in value[: LIST_HEAD if len(value) > LIST_ITEMS else LIST_ITEMS]]
        if len(value) > LIST_ITEMS:
            items.append(Longer(len(value)))
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        if depth >= DEPTH or len(value) > LIST_ITEMS:
            return Text(f"<dict of {len(value)}>")
        return {str(k): freeze(v, depth + 1) for k, v in value.items()}
    if isinstance(value, range):
        return Text(repr(value))
    return Text(describe(value))


def describe(value) -> str:
    """A short description of an object that is not plain data."""
    from reference.model import Config, Model

    if isinstance(value, Model):
        c = value.config
        extra = f", n_experts={c.n_experts}, top_k={c.top_k}" if c.n_experts else ""
        return f"<Model n_layers={c.n_layers}, d_model={c.d_model}{extra}>"
    if isinstance(value, Config):
        return f"<Config n_layers={value.n_layers}, d_model={value.d_model}>"
    if isinstance(value, np.random.Generator):
        return "<Generator>"
    if isinstance(value, np.dtype):
        return f"np.{value.name}"
    if isinstance(value, type):
        return f"np.{value.__name__}" if issubclass(value, np.generic) else value.__name__
    if type(value).__module__ in (
        "grader.jailer.jail_client",
        "grader.jailer.remote",
    ):  # a proxy of the learner's: named from its slots, no round trip
        proxy = type(value).__name__
        if proxy == "Remote":
            ref = value._ref
            return f"<{ref.get('type')}>" if ref.get("kind") == "object" else str(ref.get("type"))
        if proxy == "RemoteMethod":
            return f"<{value.owner._ref.get('type')}>.{value.name}"
        if proxy == "ModuleProxy":
            return "<the kata module>"
        return f"<{proxy}>"
    if isinstance(value, slice):
        return repr(value)
    return f"<{type(value).__name__}>"


# ------------------------------------------------------------------ values


def _float(v) -> str:
    """v as Python or NumPy writes it: the shortest digits that read back as the same value of its own dtype, so
    that the call shown reproduces the failure (np.float32 -41.187477, float -41.1874752770682)."""
    if not isinstance(v, np.floating):
        v = float(v)
    if math.isnan(v) or math.isinf(v):
        return str(float(v))
    if v != 0 and (abs(float(v)) >= 1e16 or abs(float(v)) < 1e-4):
        return np.format_float_scientific(v, unique=True, trim="-")
    return np.format_float_positional(v, unique=True, trim="0")


def _array_summary(a: np.ndarray | Summary) -> str:
    return f"array(shape={tuple(a.shape)}, dtype={a.dtype}, ...)"


def _array(a: np.ndarray) -> str:
    if a.size > ARRAY_ELEMENTS:
        return _array_summary(a)
    body = np.array2string(
        a,
        max_line_width=10**6,
        separator=", ",
        threshold=10**6,
        formatter={"float_kind": _float, "bool": lambda b: str(bool(b)), "int": str},
    )
    body = " ".join(body.split())
    extra = "" if a.size or a.ndim == 1 else f", shape={tuple(a.shape)}"
    dtype = "" if a.dtype in (np.float64, np.int64) or a.dtype.kind == "b" else f", dtype={a.dtype}"
    return f"array({body}{extra}{dtype})"


def value_text(value) -> str:
    """One compact line for a frozen value."""
    if isinstance(value, Text):
        return value.text
    if isinstance(value, Summary):
        return _array_summary(value)
    if isinstance(value, Longer):
        return f"... ({value.total} items)"
    if isinstance(value, np.ndarray):
        return _array(value)
    if value is None:
        return "None"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return _float(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, list):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(value_text(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {value_text(v)}" for k, v in value.items()) + "}"
    return describe(value)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _value_within(value, limit: int) -> str:
    """value_text within limit characters: an array too long to show whole by its shape and dtype."""
    text = value_text(value)
    if len(text) > limit and isinstance(value, np.ndarray):
        return _array_summary(value)
    return _clip(text, limit)


# ------------------------------------------------------------------ names


@dataclass(frozen=True)
class Params:
    """A stub function's positional parameters, self and cls left out (any
    argument past them, for *args, is shown without a name)."""

    positional: tuple[str, ...]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, bound: bool) -> Params:
    a = fn.args
    names = [p.arg for p in [*a.posonlyargs, *a.args]]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    if bound and not static and names:
        names = names[1:]
    return Params(tuple(names))


@functools.lru_cache(maxsize=16)
def _stub(kata: str) -> ast.Module | None:
    """The kata's untouched stub (trusted: made by the grader, never the learner's file), parsed."""
    try:
        return ast.parse(stub_for(kata))
    except (OSError, SyntaxError, ValueError):
        return None


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def params(kata: str, owner: str, kind: str, method: str | None) -> Params | None:
    """The parameters the stub gives the called function, or None if it does not name it."""
    tree = _stub(kata)
    if tree is None:
        return None
    classes = _classes(tree)
    if method is None and kind == "function":
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == owner:
                return _params(node, bound=False)
        found = [m for c in classes.values() for name, m in _methods(c).items() if name == owner]
        return _params(found[0], bound=True) if len(found) == 1 else None  # a bound method looked up by name
    cls = classes.get(owner)
    if cls is None:
        return None
    methods = _methods(cls)
    if method is None and kind == "class":  # building an object
        if "__init__" in methods:
            return _params(methods["__init__"], bound=True)
        fields = [
            n.target.id
            for n in cls.body
            if isinstance(n, ast.AnnAssign)
            and isinstance(n.target, ast.Name)
            and "ClassVar" not in ast.unparse(n.annotation)
        ]
        return Params(tuple(fields)) if fields else None
    if method in methods:
        return _params(methods[method], bound=True)
    return None


# ------------------------------------------------------------------ calls


def call_text(call: Call) -> str:
    """One call as one line: kata.function(name=value, ...). Past MAX_CHARS,
    the longest arrays shown whole are summarised first, then the line is cut."""
    p = params(call.kata, call.owner, call.kind, call.method)
    names = [p.positional[i] if p is not None and i < len(p.positional) else None for i in range(len(call.args))]
    values = [*call.args, *call.kwargs.values()]
    names += list(call.kwargs)
    texts = [_value_within(v, VALUE_CHARS) for v in values]
    if call.method is None:
        head = f"{call.kata}.{call.owner}" if call.kind in ("function", "class") else f"<{call.owner}>"
    elif call.kind == "object":
        head = f"<{call.owner}>.{call.method}"
    else:
        head = f"{call.kata}.{call.owner}.{call.method}"
    tail = f"  (the last of {call.batch} calls made in one batch)" if call.batch > 1 else ""

    def line() -> str:
        parts = [t if n is None else f"{n}={t}" for n, t in zip(names, texts)]
        return f"{head}({', '.join(parts)}){tail}"

    whole = sorted((i for i, v in enumerate(values) if isinstance(v, np.ndarray)), key=lambda i: -len(texts[i]))
    while len(line()) > MAX_CHARS and whole:
        i = whole.pop(0)
        texts[i] = _array_summary(values[i])
    return _clip(line(), MAX_CHARS)


def calls_text(calls: list[Call], total: int) -> str:
    """The last SHOWN calls, one a line, oldest first, within MAX_CHARS; says how many came before."""
    runs: list[list] = []  # [text, calls it stands for, times it was made]: repeats of one call are one line
    for c in calls:
        text = call_text(c)
        if runs and runs[-1][0] == text:
            runs[-1][1] += c.batch
            runs[-1][2] += 1
        else:
            runs.append([text, c.batch, 1])
    runs = runs[-SHOWN:]
    while len(runs) > 1 and sum(len(t) + 1 for t, _, _ in runs) > MAX_CHARS:
        runs.pop(0)
    lines = [t if times == 1 else f"{t}  ({times} times)" for t, _, times in runs]
    earlier = total - sum(n for _, n, _ in runs)
    if earlier > 0:
        lines.insert(0, f"(after {earlier} earlier call{'s' if earlier != 1 else ''})")
    return "\n".join(lines)


# ------------------------------------------------------------------ Hypothesis's own words

_HEADER = re.compile(r"^(?P<head>(?:Falsifying|Failing)[^:]*: )(?P<name>[\w.\[\]-]+)\($")


def _compact(lines: list[str]) -> str:
    text = " ".join(s.strip() for s in lines)
    text = re.sub(r"([\[(]) ", r"\1", text)
    text = re.sub(r" ([\])])", r"\1", text)
    return text


def hypothesis_text(note: str) -> str:
    """Hypothesis's example note, each argument on one compact line and the
    kata module's argument (a fixture, not a draw) left out."""
    out: list[str] = []
    lines = note.splitlines()
    i = 0
    while i < len(lines):
        m = _HEADER.match(lines[i])
        if not m:
            out.append(_clip(lines[i].rstrip(), MAX_CHARS))
            i += 1
            continue
        args: list[list[str]] = []
        i += 1
        while i < len(lines) and lines[i].rstrip() != ")":
            line = lines[i]
            if line.startswith("    ") and not line.startswith("     ") or not args:
                args.append([line])
            else:
                args[-1].append(line)
            i += 1
        i += 1  # the closing parenthesis
        kept = []
        for arg in args:
            text = _compact(arg).rstrip(",")
            text = re.sub(r",?\s+# or any other generated value$", "", text)
            if re.match(r"^\w+=<kata module \w+>$", text):
                continue
            kept.append("    " + _clip(text, VALUE_CHARS) + ",")
        out.append(f"{m['head']}{m['name']}(")
        out.extend(kept)
        out.append(")")
    text = "\n".join(out)
    return _clip(text, MAX_CHARS)
