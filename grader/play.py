"""`kata play`'s demos: a trick working on the shipped teacher, on the learner's
own code once it passes, and on the model package's own code before that.

The library runs a demo and returns plain data (the steps of a generation,
the experts of each character); grader/cli.py renders it. Work is counted by
the reference model's work counter, never by the code the demo runs, so
the figures are what the code did.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from fractions import Fraction
from types import ModuleType
from typing import Iterator

import numpy as np

from grader import state
from grader import target as _target
from grader.registry import find_kata
from reference.lm import CachedLM
from reference.model import Model, rms_norm, softmax, top_k_route
from reference.sampling import sample_token


@dataclass(frozen=True)
class Source:
    """Whose code a demo runs: a kata module (None for the model package's own
    code) and a sentence that says which, and why."""

    module: ModuleType | None
    says: str


def kata_source(kata: str, tasks: tuple[str, ...], target: str = "katas") -> Source:
    """The kata module of target to run, when it is meant to run: always for
    'reference' or a folder (the caller asked for it), and for 'katas' (the
    learner's) once every task in `tasks` passed its last grade. Otherwise
    Source(None, why), and the demo runs the model package's own code."""
    names = " and ".join(tasks)
    if target == "katas":
        last = state.read(state.LAST_GRADE).get(kata, {})
        if not all(last.get(t) == "pass" for t in tasks):
            return Source(None, f"the model's own, since your {kata} tasks {names} do not pass yet (kata grade {kata})")
    find_kata(kata)  # a ValueError naming the katas there are, for a typo
    path = _target.kata_path(target, kata)
    if not path.is_file():
        raise ValueError(f"no {path.name} in {path.parent}")
    spec = importlib.util.spec_from_file_location(f"_play_{kata}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    whose = {"katas": "yours", "reference": "the reference solution's"}.get(target, "the one in that folder")
    return Source(module, f"{whose}, {path}")


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
