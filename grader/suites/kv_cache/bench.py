"""What a KV cache buys: naive vs cached generation, in time and in work.

    python -m grader.suites.kv_cache.bench [--repeats 3] [--target reference]

For sequences of 64, 128 and 256 tokens (an 8-token prompt plus the rest
generated greedily) it reports tokens generated per second by
`generate_naive` (re-runs the whole sequence for every token) and by the
kata's cached `generate`, the speed-up, and the exact work of one run of each:
token positions pushed through each layer and multiply-accumulates. Naive and
cached runs take turns, so a machine busy for a while slows both alike; the
speed-up is the median of the per-turn ratios. Then one cached decode step
(the kata's forward_cached on one new token) in microseconds, and the memory
the cache pays: bytes per cached token.

Then the int8 cache (the kata's QuantizedKVCache): how often the model on it
picks the float32 model's top token along the float32 greedy text of
max_seq_len tokens (teacher-forced: each position given the same prefix), and
where free-running greedy generation on it first parts from the float32 text;
and a table answering "how many tokens, and sequences of SEQ_LEN tokens, fit
in M bytes" (the kata's tokens_that_fit) for float32 and int8 caches beside
float32 and 8.5-bit (Q8_0) weights, at budgets of 64 MiB and 1 GiB.

Uses the shipped teacher model when reference/weights/teacher.npz exists,
otherwise a random model of the teacher's size.
"""

from __future__ import annotations

import platform
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run from a checkout without installing

from grader.kata import target as _target  # noqa: E402
from grader.measure import timing  # noqa: E402
from grader.measure.bench import Panel, bench_parser, load_kata, median_seconds, plot, run_main, shipped_or_random  # noqa: E402
from reference.model import Model  # noqa: E402
from reference.sampling import generate_naive  # noqa: E402
from reference.tokenizer import encode  # noqa: E402

PROMPT = "def main"
LENGTHS = (64, 128, 256)
BUDGETS = ((64 * 2**20, "64 MiB"), (2**30, "1 GiB"))
WEIGHTS = ((32, "float32"), (8.5, "Q8_0 (8.5 bits)"))
SEQ_LEN = 256


def counted(model: Model, generate, prompt: list[int], n_new: int) -> tuple[int, int, list[int]]:
    """Positions per layer and macs of one run (also the warm-up), and its tokens."""
    with model.count_work() as work:
        tokens = generate(model, prompt, n_new)
    return work.positions[0], work.macs, tokens


def taking_turns(runs: list, repeats: int) -> list[list[float]]:
    """Seconds of each function in runs over at least `repeats` interleaved
    rounds (grader.measure.timing.interleave: which goes first alternates, and rounds
    are added while they disagree), so that a busy spell slows them alike."""
    rounds = timing.interleave([timing.ignoring_round(run) for run in runs], rounds=repeats, spread=0.05, warmup=False)
    return rounds.seconds


def decode_step_seconds(kv, model: Model, prompt: list[int], n_steps: int, repeats: int) -> tuple[float, int]:
    """Median seconds of one cached decode step (kv.forward_cached on one new
    token) over `repeats` greedy runs of n_steps steps after an untimed prefill
    of the prompt, and how many steps that median is over."""
    steps = []
    for _ in range(repeats):
        cache = kv.KVCache.for_model(model)
        logits = kv.forward_cached(model, prompt, cache)
        for _ in range(n_steps):
            token = [int(np.argmax(logits[-1]))]
            seconds, logits = median_seconds(lambda: kv.forward_cached(model, token, cache), 1, warmup=False)
            steps.append(seconds)
    return statistics.median(steps), len(steps)


def main() -> None:
    args = bench_parser(__doc__, "kv_cache", 3, "timed runs of naive and cached generation, in turns").parse_args()

    kv = load_kata(args.target, "kv_cache")
    model, shipped = shipped_or_random("teacher")
    which = "the shipped teacher" if shipped else "a random model of the teacher's size (no shipped weights)"
    prompt = encode(PROMPT)
    print_setup(model, which, args.target, len(prompt), args.repeats)
    print()
    measured = speed_table(kv, model, prompt, args.repeats)
    plot_speed(args.plot, which, measured)
    print()
    print_cache_costs(kv, model, prompt, args.repeats)
    print()
    capacity_table(kv, model)


def print_setup(model: Model, which: str, target: str, prompt_len: int, repeats: int) -> None:
    """Print the model measured, the versions and how generation is run and timed."""
    c = model.config
    print(
        f"model: {which}: {c.n_layers} layers, d_model {c.d_model}, {c.n_heads} heads, {c.n_kv_heads} kv heads, "
        f"{c.n_experts} experts top-{c.top_k}, d_ff {c.d_ff}, {c.n_params():,} params"
    )
    print(
        f"numpy {np.__version__}, Python {platform.python_version()}; generate from {_target.describe(target)}; "
        f"greedy, {prompt_len}-token prompt; naive and cached take turns, medians of at least {repeats} rounds"
    )


def speed_table(kv, model: Model, prompt: list[int], repeats: int) -> list[tuple[int, float, float, int, int]]:
    """Print naive against cached generation to each of LENGTHS, in time and in work, and return
    (length, naive seconds, cached seconds, naive macs, cached macs) of each row."""
    header = (
        f"{'tokens':>6}  {'naive tok/s':>11}  {'cached tok/s':>12}  {'speed-up':>8}  "
        f"{'naive pos/layer':>15}  {'cached pos/layer':>16}  {'naive macs':>14}  {'cached macs':>13}  {'same':>4}"
    )
    print(header)
    measured = []
    for length in LENGTHS:
        n_new = length - len(prompt)
        pos_naive, macs_naive, out_naive = counted(model, generate_naive, prompt, n_new)
        pos_cached, macs_cached, out_cached = counted(model, kv.generate, prompt, n_new)
        naive, cached = taking_turns(
            [lambda: generate_naive(model, prompt, n_new), lambda: kv.generate(model, prompt, n_new)], repeats
        )
        t_naive, t_cached = statistics.median(naive), statistics.median(cached)
        measured.append((length, t_naive, t_cached, macs_naive, macs_cached))
        speedup = statistics.median(a / b for a, b in zip(naive, cached))
        print(
            f"{length:>6}  {n_new / t_naive:>11.0f}  {n_new / t_cached:>12.0f}  {speedup:>7.1f}x  "
            f"{pos_naive:>15,}  {pos_cached:>16,}  {macs_naive:>14,}  {macs_cached:>13,}  "
            f"{'yes' if out_naive == out_cached else 'NO':>4}"
        )
    return measured


def plot_speed(path: str | None, which: str, measured: list[tuple[int, float, float, int, int]]) -> None:
    """Draw the work and the time of naive and cached generation to path (nothing when path is None)."""
    lengths, t_naive, t_cached, m_naive, m_cached = (list(col) for col in zip(*measured))
    work = Panel("work", "tokens generated to", "multiply-accumulates", log_y=True)
    work.lines = [("re-read everything", lengths, m_naive), ("KV cache", lengths, m_cached)]
    time = Panel("time", "tokens generated to", "seconds", log_y=True)
    time.lines = [("re-read everything", lengths, t_naive), ("KV cache", lengths, t_cached)]
    plot(path, f"KV cache on {which}", [work, time])


def print_cache_costs(kv, model: Model, prompt: list[int], repeats: int) -> None:
    """Print one cached decode step's time, the bytes a float32 and an int8 cache pay per token, and how
    closely the model on the int8 cache follows the float32 one."""
    c = model.config
    n_steps = c.max_seq_len - len(prompt)
    step, n_timed = decode_step_seconds(kv, model, prompt, n_steps, repeats)
    print(
        f"cached decode step (forward_cached on 1 token): {step * 1e6:.0f} us per token, the median of {n_timed:,} "
        f"steps ({repeats} greedy runs of {n_steps} tokens after the prompt)"
    )
    per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * np.dtype(np.float32).itemsize
    print(
        f"cache bytes per token: 2 x {c.n_layers} layers x {c.n_kv_heads} kv heads x {c.head_dim} wide x 4 bytes "
        f"= {per_token:,} B; a full {c.max_seq_len}-token cache holds {per_token * c.max_seq_len / 1024:.0f} KiB"
    )
    q = kv.QuantizedKVCache.for_model(model)
    print(
        f"int8 cache bytes per token: 2 x {c.n_layers} layers x {c.n_kv_heads} kv heads x ({c.head_dim} codes + "
        f"4 bytes of scale) = {q.bytes_per_token:,} B, {per_token / q.bytes_per_token:.2f}x fewer"
    )
    agreement, positions, parts = int8_agreement(kv, model, prompt)
    print(
        f"int8 cache against float32, greedy: the top token agrees at {agreement:.1%} of {positions} positions "
        f"(teacher-forced along the float32 text); free-running, the texts "
        + ("never part" if parts is None else f"first part at new token {parts + 1} of {positions - len(prompt)}")
    )


def int8_agreement(kv, model: Model, prompt: list[int]) -> tuple[float, int, int | None]:
    """Teacher-forced top-1 agreement of the model on a QuantizedKVCache with
    the float32 model along its float32 greedy text of max_seq_len tokens, the
    number of positions, and the first new token at which free-running greedy
    generation on the int8 cache parts from that text (None: never)."""
    length = model.config.max_seq_len
    text = prompt + kv.generate(model, prompt, length - len(prompt))
    want = np.argmax(model.forward(text), axis=-1)
    got = np.argmax(kv.forward_cached(model, text, kv.QuantizedKVCache.for_model(model)), axis=-1)
    cache = kv.QuantizedKVCache.for_model(model)
    logits, free = kv.forward_cached(model, prompt, cache)[-1], []
    while len(prompt) + len(free) < length:
        free.append(int(np.argmax(logits)))
        if len(prompt) + len(free) < length:
            logits = kv.forward_cached(model, free[-1:], cache)[-1]
    parts = next((i for i, (a, b) in enumerate(zip(free, text[len(prompt) :])) if a != b), None)
    return float(np.mean(got == want)), length, parts


def capacity_table(kv, model: Model) -> None:
    """Print how many cached tokens and sequences of SEQ_LEN fit in each budget, per weight and cache format."""
    n = model.config.n_params()
    print(
        f"what fits beside the weights ({n:,} params, every one at the weights' bits; "
        f"sequences of {SEQ_LEN} tokens; kv.tokens_that_fit):"
    )
    print(
        f"{'budget':>7}  {'weights':<16} {'weight MiB':>10}  {'cache':<7}  {'B/token':>7}  "
        f"{'tokens':>9}  {'sequences':>9}"
    )
    per_token = {
        "float32": kv.KVCache.for_model(model, max_len=1).nbytes,
        "int8": kv.QuantizedKVCache.for_model(model, max_len=1).bytes_per_token,
    }
    for budget, budget_name in BUDGETS:
        for bits, weights_name in WEIGHTS:
            for cache in ("float32", "int8"):
                tokens = kv.tokens_that_fit(model, budget, cache=cache, weight_bits=bits)
                print(
                    f"{budget_name:>7}  {weights_name:<16} {n * bits / 8 / 2**20:>10.2f}  {cache:<7}  "
                    f"{per_token[cache]:>7,}  {tokens:>9,}  {tokens // SEQ_LEN:>9,}"
                )


if __name__ == "__main__":
    run_main(main)
