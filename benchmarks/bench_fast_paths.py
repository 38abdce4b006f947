"""The reference model's one-token and few-token fast paths against the plain paths beside them.

    python benchmarks/bench_fast_paths.py [--repeats 9]

reference/model.py writes each piece once, as the formulas read, and keeps a
second path only where it pays: at one token (a decode step) and at a few
(2 to FEW_TOKENS, a speculative decoder's verify step), whose time is set more
by the count of NumPy operations than by the arithmetic. This
prints, for the shipped teacher (MoE) and draft (dense), or random models of
their shapes when the weights are missing, the microseconds per call of each
fast path and of its plain path on the same one-token input (CALLS calls a
round, the two taking turns), the median of the per-round ratios of plain
over fast (> 1: the fast path pays), and what the fast paths save a decode
step: each saving times its calls per step (an RMSNorm 2 n_layers + 1 times,
qkv and mlp once a layer), beside a whole step (reference.lm.CachedLM
recomputing one token after PREFIX). Then the same for the few-token paths
at each T of VERIFY_TOKENS (T rows at positions PREFIX ..), and a whole verify
step of T tokens with them and without them (FEW_TOKENS set to 1 for its rounds).

- rmsnorm: `_rms_norm_one_row` (a dot product and a Python float) against `rms_norm`;
- qkv: `Model._qkv_one_token` (one matmul of the joined wq | wk | wv, q and k
  rotated together) against `Model._qkv_rows`;
- mlp: `Model._mlp_one_token` (one matmul of the joined w_gate | w_up; an MoE
  token routed in Python) against `Model._mlp_rows`;
- qkv xT: `Model._qkv_few_tokens` (the joined wq | wk | wv, q and k rotated
  together) against `Model._qkv_rows`, on T rows;
- mlp xT: `Model._mlp_few_tokens` (an MoE block's tokens routed in Python,
  its experts' rows grouped, each expert's w_gate | w_up joined) against
  `Model._mlp_rows`; the teacher's only (a dense MLP keeps its plain path).

tests/reference/test_fast_paths.py holds each pair equal.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import reference.model  # noqa: E402
from grader.measure import timing  # noqa: E402
from grader.measure.bench import Parser, add_repeats_option, shipped_or_random  # noqa: E402
from reference.lm import CachedLM  # noqa: E402
from reference.model import Model, _rms_norm_one_row, rms_norm  # noqa: E402

CALLS = 500  # calls of one path per round
PREFIX = 128  # the position of the one token, and the tokens cached before the timed decode step
LAYER = 0
VERIFY_TOKENS = (2, 5, 9)  # the few-token rows: new tokens of a verify step


def pairs(model: Model) -> dict[str, tuple]:
    """Per fast path: (its call, the plain path's call, its calls per decode step), on one token."""
    c, w, p = model.config, model.weights, f"layers.{LAYER}."
    x = model.embed([5])  # (1, D)
    h = rms_norm(x, w[p + "attn_norm"], c.norm_eps)  # (1, D)
    wqkv = model._joined_weights(p + "wq", p + "wk", p + "wv")
    gate_up = model._joined_weights(p + "w_gate", p + "w_up")
    positions = np.array([PREFIX])
    return {
        "rmsnorm": (
            lambda: _rms_norm_one_row(x, w["norm"], c.norm_eps),
            lambda: rms_norm(x, w["norm"], c.norm_eps),
            2 * c.n_layers + 1,
        ),
        "qkv": (
            lambda: model._qkv_one_token(h, wqkv, PREFIX),
            lambda: model._qkv_rows(LAYER, h, positions),
            c.n_layers,
        ),
        "mlp": (lambda: model._mlp_one_token(LAYER, h, gate_up), lambda: model._mlp_rows(LAYER, h), c.n_layers),
    }


def few_pairs(model: Model, T: int) -> dict[str, tuple]:
    """Per few-token fast path: (its call, the plain path's call, its calls per verify step), on T rows."""
    c, w, p = model.config, model.weights, f"layers.{LAYER}."
    h = rms_norm(model.embed(5 + np.arange(T)), w[p + "attn_norm"], c.norm_eps)  # (T, D)
    wqkv = model._joined_weights(p + "wq", p + "wk", p + "wv")
    gate_up = model._joined_weights(p + "w_gate", p + "w_up")
    positions = PREFIX + np.arange(T)
    out = {
        f"qkv x{T}": (
            lambda: model._qkv_few_tokens(h, wqkv, positions),
            lambda: model._qkv_rows(LAYER, h, positions),
            c.n_layers,
        ),
    }
    if c.is_moe:  # a dense MLP has none: its joined w_gate | w_up ran 0.55x as fast as the plain two at 8 rows
        out[f"mlp x{T}"] = (
            lambda: model._mlp_few_tokens(LAYER, h, gate_up),
            lambda: model._mlp_rows(LAYER, h),
            c.n_layers,
        )
    return out


def per_call(fn) -> timing.Run:
    def run(_round: int) -> None:
        for _ in range(CALLS):
            fn()

    return run


def decode_step_us(model: Model, repeats: int) -> float:
    """Median microseconds of one decode step at position PREFIX: reference.lm.CachedLM
    scoring a cached prefix with its last token changed, which recomputes that one token."""
    lm, prefix = CachedLM(model), (np.arange(PREFIX) % model.config.vocab_size).tolist()
    lm.logits(prefix + [5])
    steps = CALLS // 10

    def step(_round: int) -> None:
        for i in range(steps):
            lm.logits(prefix + [6 + i % 2])

    return timing.interleave([step], rounds=repeats, spread=0.05).median(0) / steps * 1e6


def verify_step_rounds(model: Model, T: int, repeats: int) -> timing.Rounds:
    """Interleaved rounds of a verify step: reference.lm.CachedLM scoring T
    new tokens after a cached PREFIX, its first new token changed at each call
    so that all T are recomputed; run 0 with the few-token fast paths, run 1
    without them (reference.model.FEW_TOKENS set to 1 for its rounds)."""
    lm, prefix = CachedLM(model), (np.arange(PREFIX) % model.config.vocab_size).tolist()
    rest = list(range(10, 9 + T))  # the new tokens after the first
    lm.logits(prefix + [5] + rest)
    steps, few = CALLS // 20, reference.model.FEW_TOKENS

    def step(few_tokens: int) -> timing.Run:
        def run(_round: int) -> None:
            reference.model.FEW_TOKENS = few_tokens
            try:
                for i in range(steps):
                    lm.logits(prefix + [6 + i % 2] + rest)
            finally:
                reference.model.FEW_TOKENS = few

        return run

    rounds = timing.interleave([step(few), step(1)], rounds=repeats, spread=0.05)
    rounds.seconds = [[s / steps for s in run] for run in rounds.seconds]  # per step
    return rounds


def path_rows(pairs: dict[str, tuple], repeats: int) -> float:
    """Print a row per fast path of pairs (see `pairs`); return the microseconds they save a step."""
    saved = 0.0
    for path, (fast, plain, per_step) in pairs.items():
        rounds = timing.interleave([per_call(fast), per_call(plain)], rounds=repeats, spread=0.05)
        us = [rounds.median(i) / CALLS * 1e6 for i in (0, 1)]
        saved += (us[1] - us[0]) * per_step
        print(
            f"{path:<8}  {us[0]:>8.1f}  {us[1]:>8.1f}  {rounds.ratio(1, 0):>9.2f}x  {per_step:>10}"
            f"  {(us[1] - us[0]) * per_step:>13.1f}"
        )
    return saved


def table(name: str, repeats: int) -> None:
    model, shipped = shipped_or_random(name)
    c = model.config
    kind = "shipped" if shipped else "random weights"
    print(f"{name} ({kind}): {c.n_layers} layers, d_model {c.d_model}, {c.n_experts or 'no'} experts")
    heads = f"{'path':<8}  {'fast us':>8}  {'plain us':>8}  {'plain/fast':>10}  {'calls/step':>10}"
    print(f"{heads}  {'saved us/step':>13}")
    saved = path_rows(pairs(model), repeats)
    step = decode_step_us(model, repeats)
    print(f"a decode step (CachedLM, 1 token after {PREFIX}): {step:.0f} us; the fast paths save {saved:.0f} us")
    print(f"of it: without them a step would take about {(step + saved) / step:.2f}x as long")
    for T in VERIFY_TOKENS:
        saved = path_rows(few_pairs(model, T), repeats)
        rounds = verify_step_rounds(model, T, repeats)
        fast, plain = (rounds.median(i) * 1e6 for i in (0, 1))
        print(
            f"a verify step of {T} tokens after {PREFIX} (CachedLM): {fast:.0f} us, {plain:.0f} us without the"
            f" few-token paths: {rounds.ratio(1, 0):.2f}x as long (their rows above save {saved:.0f} us)"
        )
    print()


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])
    add_repeats_option(parser, 9, "rounds per pair; the median is reported")
    args = parser.parse_args()
    print(f"numpy {np.__version__}, Python {platform.python_version()}, {CALLS} calls a round")
    print()
    for name in ("teacher", "draft"):
        table(name, args.repeats)


if __name__ == "__main__":
    main()
