"""What a mixture of experts buys: time and multiply-accumulates of the MoE
layer against two dense layers, and the tokens it drops at a capacity.

    python -m grader.suites.moe.bench [--repeats 5] [--target katas]

Uses the shipped teacher (4 experts, top-2) if reference/weights/teacher.npz
exists, else a random model of the same shape, and says which.

1. One MoE layer (moe_forward from --target: the reference solutions where
   this copy ships them, else your katas/; no capacity) against
   a dense SwiGLU with the same total parameters (width E*F: every expert's
   weights fired for every token) and one with the same active parameters
   (width K*F: what a token actually pays for), at T = 256, 1024 and 4096.
2. The share of assignments dropped at capacity factors 1.0, 1.25 and 2.0,
   per layer, on the teacher's own activations for validation text, one
   sequence of max_seq_len tokens per batch.
3. One token, as in a decode step: the reference model's MoE block
   (Model.mlp of layer 0: RMSNorm, router, its K experts) against the block of
   a dense model with the same active parameters (Model.mlp, width K*F), and
   the ratio of their times.
4. Experts at scale: one layer of E = 4, 8, 16, 32 and 64 experts, top-2,
   each expert of the teacher's width (random weights): its parameters, the
   multiply-accumulates per token (flat: K experts run whatever E is) and the
   time per token, so "2 of 64 experts" is a row.

Times are medians of interleaved rounds (grader.measure.timing.interleave).
"""

from __future__ import annotations

import dataclasses
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from grader.measure import timing  # noqa: E402
from grader.measure.bench import (  # noqa: E402
    Panel,
    bench_parser,
    load_kata,
    plot,
    run_main,
    shipped_or_random,
    whole,
)
from reference import tokenizer  # noqa: E402
from reference.model import Model, rms_norm, silu  # noqa: E402

TOKENS = (256, 1024, 4096)
FACTORS = (1.0, 1.25, 2.0)
PLOT_FACTORS = [0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]  # the capacity factors --plot draws
SEQUENCES = 8  # validation sequences whose activations feed the capacity table
ONE_TOKEN_CALLS = 200  # Model.mlp calls per timed run of the one-token comparison


def median_times(runs: list, repeats: int) -> list[float]:
    """Median seconds of each run over at least `repeats` interleaved rounds
    (grader.measure.timing.interleave: more rounds while they disagree), so that a
    busy machine slows the runs of a round alike."""
    rounds = timing.interleave([timing.ignoring_round(run) for run in runs], rounds=repeats, spread=0.05)
    return [rounds.median(i) for i in range(len(runs))]


def one_token_blocks(model: Model, x: np.ndarray, repeats: int, seed: int) -> tuple[float, float]:
    """Median seconds per call of model.mlp(0, x) on one token x (1, D) and of
    the same call on a dense model of the same shape whose MLP is K*F wide
    (random weights: its time does not depend on their values)."""
    c = model.config
    dense = Model.random(dataclasses.replace(c, n_experts=0, top_k=0, d_ff=c.top_k * c.d_ff), seed=seed)
    moe_s, dense_s = median_times(
        [
            lambda: [model.mlp(0, x) for _ in range(ONE_TOKEN_CALLS)],
            lambda: [dense.mlp(0, x) for _ in range(ONE_TOKEN_CALLS)],
        ],
        repeats,
    )
    return moe_s / ONE_TOKEN_CALLS, dense_s / ONE_TOKEN_CALLS


SWEEP_EXPERTS = (4, 8, 16, 32, 64)  # section 4: "2 of 64 experts" is its last row
SWEEP_TOKENS = 512


def expert_sweep(moe_forward, D: int, F: int, K: int, repeats: int, seed: int) -> list[tuple[int, int, int, float]]:
    """(E, parameters of the layer, multiply-accumulates per token, median seconds for SWEEP_TOKENS tokens)
    for each E of SWEEP_EXPERTS: random weights, the same tokens, top-K routing, no capacity limit."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((SWEEP_TOKENS, D)).astype(np.float32)
    rows = []
    for E in SWEEP_EXPERTS:
        router = (rng.standard_normal((D, E)) / np.sqrt(D)).astype(np.float32)
        gate, up = ((rng.standard_normal((E, D, F)) / np.sqrt(D)).astype(np.float32) for _ in range(2))
        down = (rng.standard_normal((E, F, D)) / np.sqrt(F)).astype(np.float32)
        (seconds,) = median_times([lambda: moe_forward(x, router, gate, up, down, K)], repeats)
        params = router.size + gate.size + up.size + down.size
        rows.append((E, params, D * E + K * 3 * D * F, seconds))
    return rows


def dense_swiglu(h: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    return (silu(h @ w_gate) * (h @ w_up)) @ w_down


def mlp_inputs(model: Model, text: str, n_seq: int) -> list[list[np.ndarray]]:
    """Per layer, the MoE block inputs (RMSNorm of the residual stream) of n_seq sequences of max_seq_len tokens."""
    c = model.config
    ids = np.array(tokenizer.encode(text), dtype=np.int64)
    L = c.max_seq_len
    per_layer: list[list[np.ndarray]] = [[] for _ in range(c.n_layers)]
    positions = np.arange(L)
    for s in range(n_seq):
        x = model.embed(ids[s * L : (s + 1) * L])
        for layer in range(c.n_layers):
            q, k, v = model.qkv(layer, x, positions)
            x = x + model.attend(layer, q, k, v, positions, positions)
            per_layer[layer].append(rms_norm(x, model.weights[f"layers.{layer}.mlp_norm"], c.norm_eps))
            x = x + model.mlp(layer, x)
    return per_layer


def main() -> None:
    parser = bench_parser(
        __doc__, "moe", 5, "timed rounds at least (more while they disagree); each row reports the median"
    )
    parser.add_argument(
        "--seed", type=whole(0), default=0, help="seed of random weights (when no teacher) and shuffles (default 0)"
    )
    args = parser.parse_args()
    moe_forward = load_kata(args.target, "moe").moe_forward

    model, shipped = shipped_or_random("teacher", seed=args.seed)
    which = "the shipped teacher" if shipped else "a random model of the teacher's shape (no teacher.npz)"
    c = model.config
    text = (ROOT / "reference" / "data" / "val.txt").read_text(encoding="utf-8")
    n_seq = min(SEQUENCES, len(text) // c.max_seq_len)
    acts = mlp_inputs(model, text, n_seq)
    pool = np.concatenate(acts[0])  # layer-0 inputs of the teacher, reused to reach 4096 tokens

    print(f"model: {which}; layer 0: D={c.d_model}, F={c.d_ff}, E={c.n_experts} experts, top-{c.top_k}")
    print(
        f"numpy {np.__version__}, Python {platform.python_version()}, "
        f"median of at least {args.repeats} interleaved rounds"
    )
    print()
    layer_table(moe_forward, model, pool, np.random.default_rng(args.seed), args.repeats)
    print()
    dropped = capacity_table(moe_forward, model, acts, bool(args.plot))
    print()
    one_token_table(model, pool[:1], args.repeats, args.seed)
    print()
    grow = sweep_table(moe_forward, model, args.repeats, args.seed)
    plot(args.plot, f"Mixture of experts ({which})", [dropped, grow])


def print_head(head: str) -> None:
    """Print a table's column heads and a rule as wide."""
    print(head)
    print("-" * len(head))


def layer_table(moe_forward, model: Model, pool: np.ndarray, rng: np.random.Generator, repeats: int) -> None:
    """Section 1: print layer 0 as an MoE against a dense SwiGLU of its total and one of its active
    parameters, on T tokens drawn from pool for each T of TOKENS, in time and in multiply-accumulates."""
    c = model.config
    D, F, E, K = c.d_model, c.d_ff, c.n_experts, c.top_k
    router, w_gate, w_up, w_down = (model.weights[f"layers.0.{n}"] for n in ("router", "w_gate", "w_up", "w_down"))
    total = (
        w_gate.transpose(1, 0, 2).reshape(D, E * F),
        w_up.transpose(1, 0, 2).reshape(D, E * F),
        w_down.reshape(E * F, D),
    )  # every expert side by side: one dense SwiGLU of width E*F
    active = tuple(
        (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32) for a, b in ((D, K * F), (D, K * F), (K * F, D))
    )
    print("1. one layer: MoE against dense layers (multiply-accumulates counted, router included)")
    print_head(f"{'T':>5}  {'layer':<38}  {'ms':>7}  {'MACs':>13}  {'MACs vs MoE':>11}")
    for T in TOKENS:
        h = pool[rng.integers(0, pool.shape[0], size=T)]
        _, aux = moe_forward(h, router, w_gate, w_up, w_down, K)
        moe_macs = T * D * E + int(aux.tokens_per_expert.sum()) * 3 * D * F
        seconds = median_times(
            [
                lambda: moe_forward(h, router, w_gate, w_up, w_down, K),
                lambda: dense_swiglu(h, *total),
                lambda: dense_swiglu(h, *active),
            ],
            repeats,
        )
        rows = [
            (f"MoE, {E} experts top-{K}", moe_macs),
            (f"dense, same total params (F={E * F})", T * 3 * D * E * F),
            (f"dense, same active params (F={K * F})", T * 3 * D * K * F),
        ]
        for (name, macs), seconds in zip(rows, seconds):
            print(f"{T:>5}  {name:<38}  {seconds * 1e3:>7.2f}  {macs:>13,}  {macs / moe_macs:>10.2f}x")


def capacity_table(moe_forward, model: Model, acts: list[list[np.ndarray]], finer: bool) -> Panel:
    """Section 2: print each layer's load balance and the share of assignments dropped at each of FACTORS
    on acts (per layer, its MoE inputs of one batch a sequence); the panel of the drops at PLOT_FACTORS
    too when finer, else an empty one."""
    c = model.config
    n_seq = len(acts[0])
    print(
        f"2. assignments dropped at a capacity, on the teacher's activations "
        f"({n_seq} validation sequences of {c.max_seq_len} tokens, one per batch)"
    )
    print_head(f"{'layer':>5}  {'load balance':>12}  " + "  ".join(f"{'cf ' + format(f, 'g'):>8}" for f in FACTORS))
    dropped = Panel("tokens dropped", "capacity factor", "share of assignments dropped")

    def dropped_share(layer: int, weights: tuple, factor: float) -> float:
        n = sum(moe_forward(h, *weights, c.top_k, capacity_factor=factor)[1].dropped for h in acts[layer])
        return n / (n_seq * c.max_seq_len * c.top_k)

    for layer in range(c.n_layers):
        p = f"layers.{layer}."
        weights = tuple(model.weights[p + n] for n in ("router", "w_gate", "w_up", "w_down"))
        lb = statistics.mean(moe_forward(h, *weights, c.top_k)[1].load_balancing_loss for h in acts[layer])
        shares = [dropped_share(layer, weights, f) for f in FACTORS]
        print(f"{layer:>5}  {lb:>12.3f}  " + "  ".join(f"{s:>8.1%}" for s in shares))
        if finer:  # a finer sweep for the picture
            dropped.lines.append(
                (f"layer {layer}", PLOT_FACTORS, [dropped_share(layer, weights, f) for f in PLOT_FACTORS])
            )
    return dropped


def one_token_table(model: Model, x: np.ndarray, repeats: int, seed: int) -> None:
    """Section 3: print the model's MoE block on one token x (1, D) against a dense block of its active parameters."""
    c = model.config
    print("3. one token (a decode step): the model's MoE block against a dense block of the same active parameters")
    moe_s, dense_s = one_token_blocks(model, x, repeats, seed)
    print_head(f"{'block (Model.mlp, layer 0)':<38}  {'us':>7}  {'vs dense':>8}")
    name = f"MoE, {c.n_experts} experts top-{c.top_k} (F={c.d_ff} each)"
    print(f"{name:<38}  {moe_s * 1e6:>7.1f}  {moe_s / dense_s:>7.2f}x")
    print(f"{f'dense, same active params (F={c.top_k * c.d_ff})':<38}  {dense_s * 1e6:>7.1f}  {1:>7.2f}x")


def sweep_table(moe_forward, model: Model, repeats: int, seed: int) -> Panel:
    """Section 4: print a layer of each E of SWEEP_EXPERTS experts of the model's width, top-K: its parameters,
    its multiply-accumulates and its time per token; return the panel of the three relative to the first row."""
    c = model.config
    D, F, K = c.d_model, c.d_ff, c.top_k
    print(f"4. more experts, the same work: top-{K} of E experts of width F={F} (D={D}), on {SWEEP_TOKENS} tokens")
    print_head(f"{'E':>4}  {'parameters':>12}  {'MACs per token':>15}  {'us per token':>12}  {'params vs E=4':>13}")
    sweep = expert_sweep(moe_forward, D, F, K, repeats, seed)
    for E, params, macs, seconds in sweep:
        per_token = seconds / SWEEP_TOKENS * 1e6
        print(f"{E:>4}  {params:>12,}  {macs:>15,}  {per_token:>12.2f}  {params / sweep[0][1]:>12.1f}x")
    grow = Panel("what grows, and what does not", "experts E (top-2)", "relative to E = 4", log_y=True)
    grow.lines = [
        ("parameters", [r[0] for r in sweep], [r[1] / sweep[0][1] for r in sweep]),
        ("MACs per token", [r[0] for r in sweep], [r[2] / sweep[0][2] for r in sweep]),
        ("time per token", [r[0] for r in sweep], [r[3] / sweep[0][3] for r in sweep]),
    ]
    return grow


if __name__ == "__main__":
    run_main(main)
