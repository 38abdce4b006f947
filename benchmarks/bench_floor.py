"""The floor under a decode step: the cached decode step of the teacher and of
the draft written as bare NumPy, beside the kata's forward_cached.

    python benchmarks/bench_floor.py [--repeats 5] [--target reference]

The bare step is one function with nothing but the math: no argument
checks, no work counters, no calls of the model's pieces. Each RMSNorm gain
is folded into the weights after it, the keys and values go into one
preallocated array, q|k|v and each expert's gate|up are one matmul each, and
the router runs in Python; every weight lies on a 64-byte boundary, as the
model's do (reference/aligned.py). It is checked against forward_cached (the same
logits up to float32 rounding). The two take turns (grader.measure.timing.interleave),
in rounds of STEPS decode steps at position PREFIX; the figure is the
median round. Printed: microseconds per step of each for both models, and
the draft's step as a fraction of the teacher's.

Then the teacher's verify step, the call that scores VERIFY_TOKENS new
tokens at once, written as bare NumPy the same way (its router in Python
per row, each chosen expert's rows in one product) beside the kata's
forward_cached: for each token count, the weight bytes the call reads over
a one-token call's (its floor if reading weights were all it cost), the
bare step's time over a one-token bare step's, forward_cached's over a
one-token forward_cached call's, and each over the bytes ratio.

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

from grader.measure import timing  # noqa: E402
from grader.measure.bench import bench_parser, load_kata, run_main, shipped_or_random  # noqa: E402
from reference.aligned import aligned  # noqa: E402
from reference.lm import verify_work  # noqa: E402
from reference.model import Model, rope_cache  # noqa: E402

PREFIX = 128  # tokens in the cache before each timed step
STEPS = 200  # decode steps per round
TOKEN = 5
VERIFY_TOKENS = (1, 3, 5, 8)  # new tokens of the verify steps timed: k + 1 at k = 0, 2, 4, 7
VERIFY_NEW = [TOKEN, 17, 42, 8, 63, 30, 71, 12]  # the new tokens, any ids
VERIFY_CALLS = 50  # calls per timed run of a verify step


class BareStep:
    """model's cached decode step as bare NumPy: step(token, position) -> logits (V,)."""

    def __init__(self, model: Model):
        c, w = model.config, model.weights
        self.c = c
        self.cos2, self.sin2 = rope_cache(c.max_seq_len, c.head_dim, c.rope_theta)
        folded = lambda gain, *ws: aligned(gain[:, None] * np.concatenate(ws, axis=-1))  # noqa: E731
        self.layers = []
        for i in range(c.n_layers):
            p = f"layers.{i}."
            mlp_norm = w[p + "mlp_norm"]
            layer = {
                "qkv": folded(w[p + "attn_norm"], w[p + "wq"], w[p + "wk"], w[p + "wv"]),
                "wo": aligned(w[p + "wo"]),
            }
            if c.is_moe:
                layer["router"] = folded(mlp_norm, w[p + "router"])
                layer["gate_up"] = [folded(mlp_norm, w[p + "w_gate"][e], w[p + "w_up"][e]) for e in range(c.n_experts)]
                layer["down"] = [aligned(w[p + "w_down"][e]) for e in range(c.n_experts)]
            else:
                layer["gate_up"] = folded(mlp_norm, w[p + "w_gate"], w[p + "w_up"])
                layer["down"] = aligned(w[p + "w_down"])
            self.layers.append(layer)
        self.out = folded(w["norm"], w["out"])
        self.emb = aligned(w["tok_emb"])
        shape = (c.n_layers, c.n_kv_heads, c.max_seq_len, c.head_dim)
        self.keys, self.values = aligned(np.zeros(shape)), aligned(np.zeros(shape))

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

    def _unit_rms_rows(self, x: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).sum(-1, keepdims=True) / x.shape[1] + self.c.norm_eps)

    def _experts(self, layer: dict, h: np.ndarray) -> np.ndarray:
        """The MoE block of a few rows h (T, D): routed in Python, the routed rows
        sorted by expert, one product per chosen expert, the gated sum as one product."""
        c, F = self.c, self.c.d_ff
        pairs = []  # (expert, token, gate) of every routed row
        for t, row in enumerate(h.dot(layer["router"]).tolist()):
            chosen = sorted(range(c.n_experts), key=row.__getitem__, reverse=True)[: c.top_k]
            gates = [math.exp(row[e] - row[chosen[0]]) for e in chosen]
            pairs += [(e, t, g / sum(gates)) for e, g in zip(chosen, gates)]
        pairs.sort()
        R, tokens = len(pairs), [t for _, t, _ in pairs]
        rows, u, out = h[tokens], np.empty((R, 2 * F), np.float32), np.empty((R, c.d_model), np.float32)
        starts = [j for j in range(R) if j == 0 or pairs[j][0] != pairs[j - 1][0]] + [R]
        for a, b in zip(starts, starts[1:]):
            np.dot(rows[a:b], layer["gate_up"][pairs[a][0]], out=u[a:b])
        act = (u[:, :F] / (1.0 + np.exp(-u[:, :F]))) * u[:, F:]
        for a, b in zip(starts, starts[1:]):
            np.dot(act[a:b], layer["down"][pairs[a][0]], out=out[a:b])
        combine = np.zeros((h.shape[0], R), np.float32)
        combine[tokens, range(R)] = [g for _, _, g in pairs]
        return combine.dot(out)

    def block(self, tokens: list[int], pos: int) -> np.ndarray:
        """logits (T, V) of T new tokens at positions pos .. pos + T - 1 (a verify step; one token: step's)."""
        if len(tokens) == 1:
            return self.step(tokens[0], pos)[None]
        c = self.c
        H, Hkv, Dh, F, T = c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff, len(tokens)
        k_end, end, scale = (H + Hkv) * Dh, pos + T, np.float32(1.0 / math.sqrt(Dh))
        positions = np.arange(pos, end)
        bias = np.where(np.arange(end)[None, :] > positions[:, None], np.float32(-np.inf), np.float32(0))
        cos2, sin2 = self.cos2[positions][:, None], self.sin2[positions][:, None]
        x = self.emb[tokens]
        for i, layer in enumerate(self.layers):
            y = self._unit_rms_rows(x).dot(layer["qkv"])
            qk = y[:, :k_end].reshape(T, -1, 2, Dh // 2)
            qk = (qk * cos2 + qk[:, :, ::-1] * sin2).reshape(T, -1, Dh).transpose(1, 0, 2)
            keys, values = self.keys[i], self.values[i]
            keys[:, pos:end], values[:, pos:end] = qk[H:], y[:, k_end:].reshape(T, Hkv, Dh).transpose(1, 0, 2)
            s = np.matmul(qk[:H].reshape(Hkv, H // Hkv, T, Dh), keys[:, None, :end].transpose(0, 1, 3, 2))
            s *= scale
            s += bias
            s -= s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            o = np.matmul(s.reshape(Hkv, -1, end), values[:, :end]).reshape(H, T, Dh).transpose(1, 0, 2)
            x = x + o.reshape(T, H * Dh).dot(layer["wo"])
            h = self._unit_rms_rows(x)
            if c.is_moe:
                x = x + self._experts(layer, h)
            else:
                u = h.dot(layer["gate_up"])
                x = x + ((u[:, :F] / (1.0 + np.exp(-u[:, :F]))) * u[:, F:]).dot(layer["down"])
        return self._unit_rms_rows(x).dot(self.out)


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


def measure_verify(kv, model: Model, prompt: list[int], repeats: int) -> dict[int, tuple[float, float]]:
    """For T in VERIFY_TOKENS: (bare, forward_cached) median seconds of one call
    that computes T new tokens at position len(prompt), all taking turns."""
    bare, cache = BareStep(model), kv.KVCache.for_model(model)
    for pos, token in enumerate(prompt):
        bare.step(token, pos)
    kv.forward_cached(model, prompt, cache)
    runs = []
    for T in VERIFY_TOKENS:
        new = VERIFY_NEW[:T]
        want = kv.forward_cached(model, new, cache)
        cache.crop(PREFIX)
        got = bare.block(new, PREFIX)
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"the bare {T}-token step parts from forward_cached by {np.abs(got - want).max():.3g}")

        def bare_calls(new=new) -> None:
            for _ in range(VERIFY_CALLS):
                bare.block(new, PREFIX)

        def kata_calls(new=new) -> None:
            for _ in range(VERIFY_CALLS):
                kv.forward_cached(model, new, cache)
                cache.crop(PREFIX)

        runs += [timing.ignoring_round(bare_calls), timing.ignoring_round(kata_calls)]
    rounds = timing.interleave(runs, rounds=repeats, spread=0.05)
    return {
        T: (rounds.median(2 * i) / VERIFY_CALLS, rounds.median(2 * i + 1) / VERIFY_CALLS)
        for i, T in enumerate(VERIFY_TOKENS)
    }


def verify_table(kv, prompt: list[int], repeats: int) -> None:
    """The teacher's verify step beside its floors: bare NumPy, and the weight bytes it reads."""
    model, shipped = shipped_or_random("teacher")
    times = measure_verify(kv, model, prompt, repeats)
    (bare1, kata1) = times[1]
    print(
        f"\nthe {'teacher' if shipped else 'teacher*'}'s verify step: T new tokens at position {PREFIX}, "
        "against one new token"
    )
    print(
        f"{'T':>3}{'experts':>9}{'bytes x':>9}{'bare us':>9}{'bare x':>8}{'kata us':>9}{'kata x':>8}"
        f"{'bare/bytes':>12}{'kata/bytes':>12}"
    )
    for T, (bare, kata) in times.items():
        floor, experts = verify_work(model, prompt, VERIFY_NEW[:T])
        vb, vk = bare / bare1, kata / kata1
        print(
            f"{T:>3}{experts:>9.2f}{floor:>9.2f}{bare * 1e6:>9.0f}{vb:>8.2f}{kata * 1e6:>9.0f}{vk:>8.2f}"
            f"{vb / floor:>12.2f}{vk / floor:>12.2f}"
        )
    print(
        f"experts = run per layer, of {model.config.n_experts}; "
        "bytes x = weight bytes over a one-token step's (Work.weight_bytes),\n"
        "the floor of a step bound by reading weights; bare x, kata x = the step's time over the same code's\n"
        "one-token step (kata: forward_cached)"
    )


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
    verify_table(kv, prompt, args.repeats)
    if not all(shipped_or_random(n)[1] for n in figures):
        print("* random weights of the shipped shape (the weights file is missing)")


if __name__ == "__main__":
    run_main(main)
