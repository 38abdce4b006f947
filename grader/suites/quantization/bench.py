"""Quantization throughput, and what bits cost the teacher in size and accuracy.

    python -m grader.suites.quantization.bench [--target reference] [--repeats 5]

Table 1: quantize and dequantize throughput in GB/s of float32 data (4M
values, 16 MiB) for symmetric per-tensor int8, grouped int4 (G = 32), Q8_0
and Q4_0, against a plain float32 copy as the ceiling.

Table 2: the throughput of Q8_0, Q4_0 and grouped int4 (G = 32) beside
gguf.quants.quantize's Q8_0 and Q4_0 (llama.cpp's own NumPy reference, the
optional `gguf` package of the dev extra) on the same data: the 4M values of
table 1, and the teacher's linear weights. The two are timed in turns, call
by call, so that a busy machine slows both alike; the ratio (gguf's time over
yours, > 1 when yours is faster) is the median, with its quartiles, over at
least MIN_PAIRS pairs or --repeats, whichever is more (grader.measure.timing.interleave
adds pairs while they disagree). One line says so when gguf is not installed.

Table 3: the teacher (the shipped weights if reference/weights/teacher.npz
loads, else a random model of the same shape) with its linear weights
quantized at 8, 6, 4 and 3 bits in groups of 32, and in llama.cpp's Q8_0 and
Q4_0: bytes of all weights (scales included; norms and embedding in
float32), and mean KL(float || quantized) and top-1 agreement of the
next-token distributions over 256 tokens of held-out text.

Table 4, a roofline of decoding: the bytes one cached decode step of the
teacher reads, counted by the model's work counter (`Work.weight_bytes_at`
and `Work.cache_bytes`), at position CONTEXT - 1 of held-out text: its weight
matrices at 32, 8.5 (Q8_0) and 4.5 (Q4_0) bits per weight, of the MoE
blocks only the router and the experts the token runs; the embedding row,
the norm gains and the keys and values of the CONTEXT tokens in float32.
Beside them the tokens per second those bytes allow at the memory bandwidth
of table 1's float32 copy, timed again (bytes read plus bytes written, over
its median time), and the measured tokens per second of the float32
teacher: the median of consecutive decode steps through
reference.lm.CachedLM, which uses no kata code. A copy and STEPS_PER_ROUND
steps take turns in interleaved rounds (grader.measure.timing.interleave), so that a
busy machine slows both alike. NumPy runs quantized weights dequantized, in
float32, so only the float32 row is measured.

Table 5, the art of it: where the bits go. The sensitivity of every linear
weight of the teacher (layer_sensitivity at 2, 3, 4 and 8 bits, on the
first CALIB_TOKENS tokens of reference/data/train.txt), the
mixed-precision plan (mixed_precision_plan, quantize_model_mixed) at the
bytes of uniform 3-bit and 4-bit weights against uniform 3 and 4 bits, and
activation-aware quantization (quantize_model_awq, calibrated on the same
tokens) against plain grouped quantization at 2, 3 and 4 bits; every mean
KL on table 3's held-out tokens, each ratio beside its bar where the kata
sets one. Then the same AWQ comparison on a random model of the teacher's
shape with OUTLIERS outlier channels in every RMSNorm (gain x OUTLIER_GAIN,
the rows of the weights that read them divided by as much: the same
function, large activations meeting small weights, as in large LLMs), and
how salient the channels are in each (the largest channel's mean |x| over
the median's, at the input of every RMSNorm'd group of matrices); and the
matrices the 3-bit plan gives more or fewer than 3 bits, with their
sensitivities.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from grader.measure import timing  # noqa: E402
from grader.measure.bench import Panel, bench_parser, load_kata, median_seconds, plot, run_main, shipped_or_random  # noqa: E402
from reference import tokenizer  # noqa: E402
from reference.lm import CachedLM  # noqa: E402
from reference.model import Model, Work, rms_norm  # noqa: E402
from reference.sampling import probs_from_logits  # noqa: E402

N_VALUES = 4 * 1024 * 1024
GROUP = 32
LINEAR = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router", "out")
MIN_PAIRS = 15  # interleaved pairs behind a ratio at the least: a ratio of two noisy times needs more than a time
CONTEXT = 128  # keys and values per layer the roofline's decode step attends over, its own included
ROUNDS = 30  # interleaved rounds of a float32 copy and decode steps behind the roofline, at the least
STEPS_PER_ROUND = 5  # consecutive decode steps timed per round, after one that refills the caches
ROOFLINE = (("float32", 32.0), ("Q8_0 (llama.cpp)", 8.5), ("Q4_0 (llama.cpp)", 4.5))  # (weights, bits per weight)
CALIB_TOKENS = 256  # tokens of the training text that sensitivities and AWQ are measured on
PLAN_CHOICES = (2, 3, 4, 8)  # the widths the mixed-precision plan chooses from
BARS = {"mixed3": 0.7, "mixed4": 1.0, "awq3": 0.8}  # the kata's bars: KL over the uniform / plain baseline's
OUTLIERS = 4  # outlier channels per RMSNorm of table 5's random model
OUTLIER_GAIN = 20.0  # their gain, and the factor the rows that read them are divided by


def throughput_rows(qz, repeats: int) -> list[tuple[str, float, float]]:
    x = np.random.default_rng(0).standard_normal(N_VALUES).astype(np.float32)
    gb = x.nbytes / 1e9
    rows = []
    copy = median_seconds(lambda: x.copy(), repeats)[0]
    rows.append(("float32 copy (ceiling)", gb / copy, gb / copy))
    q, s = qz.quantize_symmetric(x, 8)
    rows.append(
        (
            "symmetric int8, per tensor",
            gb / median_seconds(lambda: qz.quantize_symmetric(x, 8), repeats)[0],
            gb / median_seconds(lambda: qz.dequantize_symmetric(q, s), repeats)[0],
        )
    )
    rows_x = x.reshape(-1, 1024)
    q, s = qz.quantize_grouped(rows_x, 4, GROUP)
    rows.append(
        (
            f"grouped int4, G={GROUP}",
            gb / median_seconds(lambda: qz.quantize_grouped(rows_x, 4, GROUP), repeats)[0],
            gb / median_seconds(lambda: qz.dequantize_grouped(q, s, GROUP), repeats)[0],
        )
    )
    for name, quant, dequant in (
        ("Q8_0", qz.quantize_q8_0, qz.dequantize_q8_0),
        ("Q4_0", qz.quantize_q4_0, qz.dequantize_q4_0),
    ):
        data = quant(x)
        rows.append(
            (
                name,
                gb / median_seconds(lambda: quant(x), repeats)[0],
                gb / median_seconds(lambda: dequant(data, x.size), repeats)[0],
            )
        )
    return rows


def linear_values(model: Model) -> np.ndarray:
    """Every linear weight of model with its input axis last (as its Q8_0/Q4_0
    blocks run), flattened and concatenated: float32 (N,)."""
    rows = [np.swapaxes(w, -1, -2).ravel() for name, w in model.weights.items() if name.split(".")[-1] in LINEAR]
    return np.concatenate(rows).astype(np.float32)


def gguf_rows(qz, model: Model, repeats: int) -> list[tuple] | None:
    """Per data set and format: (data, format, your GB/s, gguf's GB/s, median
    ratio, its quartiles (low, high), whether the bytes equal gguf's or None),
    timed as interleaved pairs; None when gguf is not installed."""
    try:
        from gguf import GGMLQuantizationType, quants
    except ImportError:
        return None
    pairs = max(repeats, MIN_PAIRS)
    x = np.random.default_rng(0).standard_normal(N_VALUES).astype(np.float32)  # table 1's data
    teacher = linear_values(model)
    rows = []
    for data, values in (
        (f"random normal, {x.size / 2**20:.0f}M", x),
        (f"teacher linear, {teacher.size / 1e6:.1f}M", teacher),
    ):
        grouped = values.reshape(-1, GROUP)  # the same groups of 32 consecutive values as the blocks
        cases = (
            ("Q8_0", lambda: qz.quantize_q8_0(values), GGMLQuantizationType.Q8_0, True),
            ("Q4_0", lambda: qz.quantize_q4_0(values), GGMLQuantizationType.Q4_0, True),
            (
                f"grouped int4, G={GROUP} vs Q4_0",
                lambda: qz.quantize_grouped(grouped, 4, GROUP),
                GGMLQuantizationType.Q4_0,
                False,
            ),
        )
        for name, mine, kind, same_format in cases:

            def theirs():
                return quants.quantize(values, kind)

            rounds = timing.interleave(
                [timing.ignoring_round(mine), timing.ignoring_round(theirs)], rounds=pairs, spread=0.05
            )
            same = bytes(mine()) == np.asarray(theirs()).tobytes() if same_format else None
            speeds = (values.nbytes / 1e9 / rounds.median(i) for i in (0, 1))
            rows.append((data, name, *speeds, rounds.ratio(1, 0), rounds.quartiles(1, 0), same))
    return rows


def print_gguf_rows(qz, model: Model, repeats: int) -> None:
    """Table 2: yours beside gguf.quants.quantize, or one line saying why not."""
    print()
    rows = gguf_rows(qz, model, repeats)
    if rows is None:
        print("gguf is not installed (pip install -e '.[dev]'): no comparison with llama.cpp's own NumPy reference")
        return
    print("Against gguf.quants.quantize (llama.cpp's own NumPy reference) on the same data, GB/s of float32 data;")
    print(
        f"ratio = gguf's time / yours (> 1: yours is faster), median and quartiles of at least "
        f"{max(repeats, MIN_PAIRS)} interleaved pairs (grader.measure.timing.interleave)"
    )
    print(f"{'data':<22} {'format':<30} {'yours':>7} {'gguf':>7} {'ratio':>6} {'quartiles':>11} {'bytes = gguf':>13}")
    for data, name, mine, theirs, ratio, (low, high), same in rows:
        same = "-" if same is None else "yes" if same else "NO"
        print(
            f"{data:<22} {name:<30} {mine:>7.2f} {theirs:>7.2f} {ratio:>6.2f} {f'{low:.2f}-{high:.2f}':>11} {same:>13}"
        )


def llama_model(qz, model: Model, kind: str) -> tuple[Model, int]:
    """model with its linear weights stored as Q8_0 or Q4_0 blocks along the
    input axis, and the bytes of all weights."""
    quant, dequant = (
        (qz.quantize_q8_0, qz.dequantize_q8_0) if kind == "Q8_0" else (qz.quantize_q4_0, qz.dequantize_q4_0)
    )
    out = model.copy()
    nbytes = 0
    for name, w in out.weights.items():
        if name.split(".")[-1] not in LINEAR:
            nbytes += w.nbytes
            continue
        rows = np.ascontiguousarray(np.swapaxes(w, -1, -2))  # (..., out, in): blocks run along the input axis
        data = quant(rows.ravel())
        nbytes += len(data)
        out.weights[name] = np.swapaxes(dequant(data, rows.size).reshape(rows.shape), -1, -2).copy()
    return out, nbytes


def grouped_bytes(qz, model: Model, bits: int) -> int:
    total = 0.0
    for name, w in model.weights.items():
        linear = name.split(".")[-1] in LINEAR
        total += w.size * (qz.bits_per_weight(bits, GROUP) / 8 if linear else 4)
    return int(total)


def compare(float_model: Model, model: Model, tokens: np.ndarray) -> tuple[float, float]:
    p = probs_from_logits(float_model.forward(tokens), 1.0)
    q = probs_from_logits(model.forward(tokens), 1.0)
    kl = np.sum(p * (np.log(p) - np.log(np.maximum(q, 1e-30))), axis=-1)
    return float(np.mean(kl)), float(np.mean(p.argmax(-1) == q.argmax(-1)))


def decode_step(model: Model, tokens: np.ndarray) -> tuple[Work, Callable[[], None]]:
    """The work of one cached decode step of model at position CONTEXT - 1,
    after tokens[:CONTEXT - 1], and a function that runs such a step: a
    CachedLM scoring the context with its last token switching between
    tokens[CONTEXT - 1] and another token, so that each call recomputes that
    one position over CONTEXT keys and values per layer."""
    last = int(tokens[CONTEXT - 1])
    contexts = itertools.cycle(
        [tokens[:CONTEXT], np.append(tokens[: CONTEXT - 1], (last + 1) % model.config.vocab_size)]
    )
    lm = CachedLM(model)
    lm.logits(next(contexts))  # the prefill

    def step() -> None:
        lm.logits(next(contexts))

    with model.count_work() as work:
        step()
    assert work.positions == dict.fromkeys(range(model.config.n_layers), 1), "a step must compute one position"
    return work, step


def print_roofline(model: Model, tokens: np.ndarray) -> tuple[list[float], list[float], float]:
    """Table 4; returns the bits per weight of its rows, the tokens per second
    their bytes allow, and the measured tokens per second of the float32 row."""
    work, step = decode_step(model, tokens)
    x = np.random.default_rng(0).standard_normal(N_VALUES).astype(np.float32)  # table 1's data

    def steps(_round: int) -> float:
        """Seconds per decode step of STEPS_PER_ROUND consecutive steps."""
        step()  # untimed: the copy before it has pushed the weights out of the caches, this brings them back
        start = time.perf_counter()
        for _ in range(STEPS_PER_ROUND):
            step()
        return (time.perf_counter() - start) / STEPS_PER_ROUND

    rounds = timing.interleave([timing.ignoring_round(x.copy), steps], rounds=ROUNDS)
    bandwidth = 2 * x.nbytes / rounds.median(0)  # bytes per second, read plus written
    measured = 1 / rounds.median(1)
    print()
    print(
        f"Roofline of a decode step: the teacher at position {CONTEXT - 1}, attending over {CONTEXT} keys and "
        f"values per layer; memory bandwidth {bandwidth / 1e9:.2f} GB/s"
    )
    print(
        f"(bandwidth: table 1's float32 copy of {x.nbytes / 2**20:.0f} MiB timed again, bytes read + bytes written "
        f"over its median time;\n {rounds.count} interleaved rounds of one copy and {STEPS_PER_ROUND} decode steps, "
        "so that a busy machine slows both alike)"
    )
    print(
        f"{'weights':<18} {'bits/weight':>11} {'weight bytes':>13} {'cache bytes':>12} {'bytes/token':>12} "
        f"{'allowed tok/s':>14} {'measured tok/s':>15}"
    )
    bits, allowed = [], []
    for name, bpw in ROOFLINE:
        per_token = work.weight_bytes_at(bpw) + work.cache_bytes
        bits.append(bpw)
        allowed.append(bandwidth / per_token)
        seen = f"{measured:,.0f}" if bpw == 32 else "-"
        print(
            f"{name:<18} {bpw:>11.2f} {work.weight_bytes_at(bpw):>13,.0f} {work.cache_bytes:>12,} "
            f"{per_token:>12,.0f} {allowed[-1]:>14,.0f} {seen:>15}"
        )
    c = model.config
    print(
        "(bytes: from the model's work counter; the weight matrices a step reads at bits/weight, scales included,\n"
        f" of each MoE block the router and the {c.top_k} of {c.n_experts} experts the token runs; the embedding "
        "row, the norm gains\n and the keys and values in float32)"
    )
    print(
        "(measured: the float32 teacher's decode steps through reference.lm.CachedLM, the median of the rounds, "
        f"{measured / allowed[0]:.0%}\n of what its bytes allow. NumPy runs quantized weights dequantized, in "
        "float32, so only the float32 row\n is measured: the others are what their bytes would allow.)"
    )
    return bits, allowed, measured


def outlier_model(model: Model, seed: int = 0) -> Model:
    """A random model of model's shape, with OUTLIERS channels of every RMSNorm gain OUTLIER_GAIN times
    larger and the rows that read them in the weights after it as many times smaller."""
    c = model.config
    w = dict(Model.random(c, seed=seed).weights)
    gen = np.random.default_rng(seed + 100)
    after = {"attn_norm": ("wq", "wk", "wv"), "mlp_norm": ("router", "w_gate", "w_up")}
    groups = [
        (f"layers.{i}.{n}", [f"layers.{i}.{r}" for r in rs]) for i in range(c.n_layers) for n, rs in after.items()
    ]
    for norm, readers in [*groups, ("norm", ["out"])]:
        channels = gen.choice(c.d_model, OUTLIERS, replace=False)
        w[norm] = w[norm].copy()
        w[norm][channels] *= OUTLIER_GAIN
        for name in (r for r in readers if r in w):
            w[name] = w[name].copy()
            w[name][..., channels, :] /= OUTLIER_GAIN
    return Model(c, w)


def salience_spread(model: Model, tokens: np.ndarray) -> list[float]:
    """For the input of every RMSNorm'd matrix group (each layer's q|k|v and MLP, and out): the largest
    channel's mean |activation| over the median channel's, from the model's own pieces."""
    c, w = model.config, model.weights
    x = model.embed(tokens)
    pos = np.arange(len(tokens))
    inputs = []
    for layer in range(c.n_layers):
        p = f"layers.{layer}."
        inputs.append(rms_norm(x, w[p + "attn_norm"], c.norm_eps))
        x = x + model.attend(layer, *model.qkv(layer, x, pos), pos, pos)
        inputs.append(rms_norm(x, w[p + "mlp_norm"], c.norm_eps))
        x = x + model.mlp(layer, x)
    inputs.append(rms_norm(x, w["norm"], c.norm_eps))
    means = [np.mean(np.abs(h), axis=0) for h in inputs]
    return [float(m.max() / np.median(m)) for m in means]


def plan_bytes(model: Model, plan: dict[str, int]) -> int:
    """Bytes of model with each linear weight at its planned bits (an fp16 scale per GROUP), the rest float32."""
    total = sum(w.nbytes for name, w in model.weights.items() if name not in plan)
    return total + sum(model.weights[n].size * (b * GROUP + 16) // (8 * GROUP) for n, b in plan.items())


def art_rows(qz, model: Model, calib: np.ndarray, tokens: np.ndarray):
    """Table 5's rows (what, bytes, KL, against, its KL, bar key or None) and the sensitivities and 3-bit plan."""
    sensitivity = {b: qz.layer_sensitivity(model, calib, b, group_size=GROUP) for b in PLAN_CHOICES}
    sizes = {name: int(model.weights[name].size) for name in sensitivity[PLAN_CHOICES[0]]}
    rows, plans = [], {}
    for bits in (3, 4):
        budget = sum(n * (bits * GROUP + 16) / (8 * GROUP) for n in sizes.values())
        plans[bits] = qz.mixed_precision_plan(sensitivity, sizes, budget, group_size=GROUP)
        mixed = qz.quantize_model_mixed(model, plans[bits], group_size=GROUP)
        uniform = compare(model, qz.quantize_model(model, bits, GROUP), tokens)[0]
        what = f"mixed plan, uniform {bits}-bit bytes"
        rows.append(
            (
                what,
                plan_bytes(model, plans[bits]),
                compare(model, mixed, tokens)[0],
                f"uniform {bits}-bit",
                uniform,
                f"mixed{bits}",
            )
        )
    for source, m in (("teacher", model), ("outliers", outlier_model(model))):
        for bits in (3, 4) if source == "outliers" else (2, 3, 4):
            awq = compare(m, qz.quantize_model_awq(m, calib, bits, group_size=GROUP), tokens)[0]
            plain = compare(m, qz.quantize_model(m, bits, GROUP), tokens)[0]
            key = "awq3" if (source, bits) == ("teacher", 3) else None
            rows.append(
                (f"{source}: AWQ {bits}-bit", grouped_bytes(qz, m, bits), awq, f"grouped {bits}-bit", plain, key)
            )
    return rows, sensitivity, plans[3]


def print_art(qz, model: Model, source: str, tokens: np.ndarray) -> None:
    """Table 5."""
    text = (ROOT / "reference" / "data" / "train.txt").read_text(encoding="utf-8")
    calib = np.array(tokenizer.encode("".join(c for c in text if c in tokenizer.VOCAB))[:CALIB_TOKENS])
    rows, sensitivity, plan = art_rows(qz, model, calib, tokens)
    spreads = {name: salience_spread(m, calib) for name, m in (("teacher", model), ("outliers", outlier_model(model)))}
    print()
    print(
        f"Where the bits go: {source}; sensitivities and AWQ calibrated on {calib.size} tokens of training text, "
        f"KL on the {tokens.size} held-out tokens of table 3\n(outliers: a random model of its shape, {OUTLIERS} "
        f"channels of every RMSNorm gain x{OUTLIER_GAIN:g}, the rows that read them /{OUTLIER_GAIN:g})"
    )
    print(
        f"{'model: weights':<34} {'bytes':>10} {'mean KL':>9}  {'against':<16} {'its KL':>9} {'ratio':>7} "
        f"{'bar':>6} {'met':>4}"
    )
    for what, nbytes, kl, against, base, key in rows:
        bar = BARS.get(key)
        met = "-" if bar is None else "yes" if kl / base <= bar else "NO"
        shown = "-" if bar is None else f"{bar:.2f}x"
        print(f"{what:<34} {nbytes:>10,} {kl:>9.4f}  {against:<16} {base:>9.4f} {kl / base:>6.2f}x {shown:>6} {met:>4}")
    print(
        "(salience: the largest channel's mean |x| over the median channel's, at the input of each RMSNorm'd "
        "matrix group, on the calibration tokens:\n "
        + "; ".join(f"{n} {min(v):.1f}-{max(v):.1f}x, median {np.median(v):.1f}x" for n, v in spreads.items())
        + ")"
    )
    print("\nThe 3-bit plan (the bytes of uniform 3-bit weights): the matrices it gives other than 3 bits,")
    print("by sensitivity at 3 bits (mean KL, nats, of quantizing that matrix alone)")
    widths = "".join(f"{f'at {b} bits':>11}" for b in PLAN_CHOICES)
    print(f"{'matrix':<20} {'bits':>4}{widths}")
    moved = sorted((n for n, b in plan.items() if b != 3), key=lambda n: -sensitivity[3][n])
    for name in moved:
        print(f"{name:<20} {plan[name]:>4}" + "".join(f"{sensitivity[b][name]:>11.5f}" for b in PLAN_CHOICES))
    print(f"({sum(b == 3 for b in plan.values())} of {len(plan)} matrices stay at 3 bits)")


def main() -> None:
    args = bench_parser(__doc__, "quantization", 5, "timed runs per cell; the median is reported").parse_args()
    qz = load_kata(args.target, "quantization")

    print(f"Throughput over {N_VALUES:,} float32 values ({N_VALUES * 4 / 2**20:.0f} MiB), GB/s of float32 data")
    print(f"{'method':<28} {'quantize':>9} {'dequantize':>11}")
    for name, qs, ds in throughput_rows(qz, args.repeats):
        print(f"{name:<28} {qs:>9.2f} {ds:>11.2f}")

    model, shipped = shipped_or_random("teacher")
    print_gguf_rows(qz, model, args.repeats)
    source = "shipped teacher weights" if shipped else "a random model of the teacher's shape (no shipped weights)"
    text = (ROOT / "reference" / "data" / "val.txt").read_text(encoding="utf-8")
    ids = [i for i in tokenizer.encode("".join(c for c in text if c in tokenizer.VOCAB))]
    tokens = np.array(ids[: model.config.max_seq_len])
    fp32 = sum(w.nbytes for w in model.weights.values())
    print()
    print(f"Model: {source}, {model.config.n_params():,} weights; KL over {tokens.size} tokens of held-out text")
    print(
        f"{'weights':<22} {'bits/weight':>11} {'bytes':>10} {'vs fp32':>8} {'mean KL (nats)':>15} {'top-1 agree':>12}"
    )
    print(f"{'float32':<22} {32:>11.2f} {fp32:>10,} {1:>8.2f}x {0:>15.2e} {1:>12.1%}")
    drawn = []  # (bits per weight, bytes, KL) of each grouped width
    for bits in (8, 6, 4, 3):
        quantized = qz.quantize_model(model, bits, GROUP)
        nbytes = grouped_bytes(qz, model, bits)
        kl, agree = compare(model, quantized, tokens)
        drawn.append((qz.bits_per_weight(bits, GROUP), nbytes, kl))
        print(
            f"{f'grouped int{bits}, G={GROUP}':<22} {qz.bits_per_weight(bits, GROUP):>11.2f} {nbytes:>10,} "
            f"{fp32 / nbytes:>8.2f}x {kl:>15.2e} {agree:>12.1%}"
        )
    for kind, bpw in (("Q8_0", 8.5), ("Q4_0", 4.5)):
        quantized, nbytes = llama_model(qz, model, kind)
        kl, agree = compare(model, quantized, tokens)
        print(
            f"{kind + ' (llama.cpp)':<22} {bpw:>11.2f} {nbytes:>10,} {fp32 / nbytes:>8.2f}x {kl:>15.2e} {agree:>12.1%}"
        )
    print("(bytes: linear weights at bits/weight, scales included; norms and the embedding table in float32)")
    roof_bits, roof_allowed, measured = print_roofline(model, tokens)
    print_art(qz, model, source, tokens)
    bpw, nbytes, kls = (list(col) for col in zip(*drawn))
    error = Panel("what is lost", "bits per weight", "mean KL to float32 (nats)", log_y=True)
    error.lines = [(f"grouped, G={GROUP}", bpw, kls)]
    size = Panel("what is saved", "bits per weight", "bytes of the teacher")
    size.lines = [(f"grouped, G={GROUP}", bpw, nbytes), ("float32", [bpw[-1], bpw[0]], [fp32, fp32])]
    size.dashed = ("float32",)
    speed = Panel("what the bytes allow", "bits per weight", "decode tokens/s")
    speed.lines = [("allowed by memory bandwidth", roof_bits, roof_allowed), ("measured, float32", [32], [measured])]
    plot(args.plot, f"Quantizing the {source}", [error, size, speed])


if __name__ == "__main__":
    run_main(main)
