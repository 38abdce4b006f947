"""The floor under a decode step: the cached decode step of the teacher and of
the draft written as bare NumPy, beside the kata's forward_cached.

    python benchmarks/bench_floor.py [--repeats 5] [--target reference]

The bare step is one function with nothing but the math: no argument
checks, no work counters, no calls of the model's pieces. Each RMSNorm gain
is folded into the weights after it, the keys and values go into one
preallocated array, q|k|v and each expert's gate|up are one matmul each, and
the router runs in Python. It is checked against forward_cached (the same
logits up to float32 rounding). The two take turns (grader.grading.timing.interleave),
in rounds of STEPS decode steps at position PREFIX; the figure is the
median round. Printed: microseconds per step of each for both models, and
the draft's step as a fraction of the teacher's.

What no rewrite of the model's pieces can beat on this machine: the bare
step is the floor that issue 19's bars (a 250-us teacher step, a draft at
0.15 of it) are measured against.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from benchmarks.shared import bench_parser, load_kata, run_main, shipped_or_random  # noqa: E402
from grader.grading import timing  # noqa: E402
from reference.model import Model, rope_cache  # noqa: E402

PREFIX = 128  # tokens in the cache before each timed step
STEPS = 200  # decode steps per round
TOKEN = 5


class BareStep:
    """model's cached decode step as bare NumPy: step(token, position) -> logits (V,)."""

    def __init__(self, model: Model):
        c, w = model.config, model.weights
        self.c = c
        self.cos2, self.sin2 = rope_cache(c.max_seq_len, c.head_dim, c.rope_theta)
        folded = lambda gain, *ws: (gain[:, None] * np.concatenate(ws, axis=-1)).astype(np.float32)  # noqa: E731
        self.layers = []
        for i in range(c.n_layers):
            p = f"layers.{i}."
            mlp_norm = w[p + "mlp_norm"]
            layer = {
                "qkv": folded(w[p + "attn_norm"], w[p + "wq"], w[p + "wk"], w[p + "wv"]),
                "wo": w[p + "wo"],
            }
            if c.is_moe:
                layer["router"] = folded(mlp_norm, w[p + "router"])
                layer["gate_up"] = [folded(mlp_norm, w[p + "w_gate"][e], w[p + "w_up"][e]) for e in range(c.n_experts)]
                layer["down"] = [w[p + "w_down"][e] for e in range(c.n_experts)]
            else:
                layer["gate_up"] = folded(mlp_norm, w[p + "w_gate"], w[p + "w_up"])
                layer["down"] = w[p + "w_down"]
            self.layers.append(layer)
        self.out = folded(w["norm"], w["out"])
        self.emb = w["tok_emb"]
        shape = (c.n_layers, c.n_kv_heads, c.max_seq_len, c.head_dim)
        self.keys, self.values = np.zeros(shape, np.float32), np.zeros(shape, np.float32)

    def _unit_rms(self, x: np.ndarray) -> np.ndarray:
        return x * (1.0 / math.sqrt(float(x.dot(x)) / x.size + self.c.norm_eps))

    def step(self, token: int, pos: int) -> np.ndarray:
        c = self.c
        H, Hkv, Dh, F = c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff
        k_end, half, scale = (H + Hkv) * Dh, Dh // 2, np.float32(1.0 / math.sqrt(Dh))
        x = self.emb[token]
        for i, layer in enumerate(self.layers):
            y = self._unit_rms(x).dot(layer["qkv"])
            qk = y[:k_end].reshape(-1, 2, half)
            qk = (qk * self.cos2[pos] + qk[:, ::-1] * self.sin2[pos]).reshape(-1, Dh)
            keys, values = self.keys[i], self.values[i]
            keys[:, pos], values[:, pos] = qk[H:], y[k_end:].reshape(Hkv, Dh)
            s = np.matmul(qk[:H].reshape(Hkv, H // Hkv, Dh), keys[:, : pos + 1].transpose(0, 2, 1))
            s *= scale
            s -= s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            x = x + np.matmul(s, values[:, : pos + 1]).reshape(H * Dh).dot(layer["wo"])
            h = self._unit_rms(x)
            if c.is_moe:
                logits = h.dot(layer["router"]).tolist()
                chosen = sorted(range(c.n_experts), key=logits.__getitem__, reverse=True)[: c.top_k]
                gates = [math.exp(logits[e] - logits[chosen[0]]) for e in chosen]
                total = sum(gates)
                for e, g in zip(chosen, gates):
                    u = h.dot(layer["gate_up"][e])
                    a = u[:F]
                    x = x + ((a / (1.0 + np.exp(-a))) * u[F:]).dot(layer["down"][e]) * (g / total)
            else:
                u = h.dot(layer["gate_up"])
                a = u[:F]
                x = x + ((a / (1.0 + np.exp(-a))) * u[F:]).dot(layer["down"])
        return self._unit_rms(x).dot(self.out)


def measure(kv, model: Model, prompt: list[int], repeats: int) -> tuple[float, float]:
    """(bare, forward_cached) median seconds of one decode step at position len(prompt)."""
    bare = BareStep(model)
    for pos, token in enumerate(prompt):
        bare.step(token, pos)
    cache = kv.KVCache.for_model(model)
    expected = kv.forward_cached(model, prompt, cache)[-1]
    got = bare.step(TOKEN, len(prompt))
    want = kv.forward_cached(model, [TOKEN], cache)[-1]
    cache.crop(len(prompt))
    for a, b, what in ((bare.step(prompt[-1], len(prompt) - 1), expected, "prefill"), (got, want, "step")):
        if not np.allclose(a, b, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"the bare {what} parts from forward_cached by {np.abs(a - b).max():.3g}")

    def bare_steps() -> None:
        for _ in range(STEPS):
            bare.step(TOKEN, PREFIX)

    def kata_steps() -> None:
        for _ in range(STEPS):
            kv.forward_cached(model, [TOKEN], cache)
            cache.crop(PREFIX)

    runs = [timing.ignoring_round(bare_steps), timing.ignoring_round(kata_steps)]
    rounds = timing.interleave(runs, rounds=repeats, spread=0.05)
    return rounds.median(0) / STEPS, rounds.median(1) / STEPS


def main() -> None:
    parser = bench_parser(__doc__, "kv_cache", repeats=5, what=f"interleaved rounds of {STEPS} steps each")
    args = parser.parse_args()
    kv = load_kata(args.target, "kv_cache")
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, 96, size=PREFIX)]
    figures = {}
    print(f"one cached decode step at position {PREFIX}, 1 BLAS thread, median of interleaved rounds\n")
    print(f"{'model':<10}{'bare NumPy us':>15}{'forward_cached us':>19}{'ratio':>8}")
    for name in ("teacher", "draft"):
        model, shipped = shipped_or_random(name)
        bare, kata = measure(kv, model, prompt, args.repeats)
        figures[name] = bare, kata
        label = name if shipped else f"{name}*"
        print(f"{label:<10}{bare * 1e6:>15.0f}{kata * 1e6:>19.0f}{kata / bare:>7.2f}x")
    (tb, tk), (db, dk) = figures["teacher"], figures["draft"]
    print(f"\ndraft step / teacher step: {db / tb:.2f} bare, {dk / tk:.2f} through forward_cached")
    if not all(shipped_or_random(n)[1] for n in figures):
        print("* random weights of the shipped shape (the weights file is missing)")


if __name__ == "__main__":
    run_main(main)
