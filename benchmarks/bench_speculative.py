"""Speculative decoding of the shipped teacher with the shipped draft, k = 1..8.

    python benchmarks/bench_speculative.py [--n-new 128] [--repeats 3] [--target reference]

For each k, greedy and at temperature 1, with the reference solution (or
the `--target` implementation: katas, or a directory) and both models behind
`CachedLM`:
- acceptance rate: accepted / drafted drafts (SpecStats.acceptance_rate);
- alpha: the per-token acceptance probability Leviathan et al. call alpha,
  measured on the generated text: the mean over its positions of
  sum_x min(p(x), q(x)) (at temperature 0, the share of positions where the
  draft's argmax equals the teacher's);
- tokens per target call, measured, next to Leviathan's expected
  (1 - alpha^(k+1)) / (1 - alpha) at the measured alpha;
- wall-clock speedup over plain cached decoding of the teacher (one cached
  teacher call per token): the two take turns (grader.grading.timing.interleave),
  and the speedup is the median of their rounds' ratios (at least --repeats
  rounds), next to
  Leviathan's expected speedup (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)),
  where c is the measured time of one cached draft call over one cached
  teacher call (plain decoding of the draft and of the teacher, taking
  turns). With NumPy at this size a call's cost is mostly Python overhead
  per layer, not reading weights, so c is far from the ~0.05 of a real
  deployment and the speedup is small or below 1. Beside c: a draft call
  inside that plain decoding (CachedLM, generate, sample_token) over a step
  of a bare loop of the kata's forward_cached, what the wrapping costs;
- v_k, the measured cost of the round's verifying teacher call (k + 1 new
  positions) over a one-token call, beside its floor: the ratio of the
  weights the two calls read (Work.weight_bytes), and the experts per layer
  the verifying call runs. Leviathan's formula counts a verify call as 1,
  the cost of a call bound by reading the weights of a dense model; on this
  MoE teacher k + 1 tokens route to more experts than one token does, so
  even a call bound by reading weights costs more. The last column puts v_k
  in the formula;
- the best k at each temperature.

Then the same figures for the same draft with the dense target
(reference/weights/dense.npz, trained by tools/train.py
--dense-target-only): the teacher's shape with one SwiGLU as wide as its
top_k experts, a target whose verify call reads no more weights than a
one-token call, so the two tables tell what the mixture of experts costs
speculative decoding from what the machine does.

Without reference/weights/{teacher,draft}.npz, random models of the same
configs stand in (their acceptance is near zero) and the table says so.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from benchmarks.shared import (  # noqa: E402
    DRAFT,
    TEACHER,
    Panel,
    bench_parser,
    load_kata,
    plot,
    run_main,
    shipped_or_random,
)
from grader.grading import timing  # noqa: E402
from grader.kata import target as _target  # noqa: E402
from reference.lm import CachedLM, generate, shipped_model, verify_work  # noqa: E402
from reference.model import WEIGHTS_DIR, Model  # noqa: E402
from reference.sampling import probs_from_logits  # noqa: E402
from reference.tokenizer import encode  # noqa: E402

PROMPT_CHARS = 32
SEED = 0
VERIFY_CALLS = 20  # teacher calls per timed run of verify_costs


def prompt() -> list[int]:
    path = WEIGHTS_DIR.parent / "data" / "val.txt"
    text = path.read_text(encoding="ascii") if path.is_file() else "def main():\n    return 0\n" * 2
    return encode(text[:PROMPT_CHARS])


def measured_alpha(teacher: Model, draft: Model, tokens: list[int], n_prompt: int, temperature: float) -> float:
    """Mean acceptance probability of a draft token over the generated positions, teacher-forced."""
    rows = slice(n_prompt - 1, len(tokens) - 1)
    zt, zd = teacher.forward(tokens)[rows], draft.forward(tokens)[rows]  # (n_new, V) each
    if temperature == 0:
        return float(np.mean(zt.argmax(axis=1) == zd.argmax(axis=1)))
    p, q = probs_from_logits(zt, temperature), probs_from_logits(zd, temperature)
    return float(np.mean(np.minimum(p, q).sum(axis=1)))


@dataclass(frozen=True)
class Verify:
    """What a teacher call that scores k + 1 new tokens costs, against one that scores 1."""

    v: float  # time ratio, median of interleaved rounds
    floor: float  # weight bytes read (Work.weight_bytes) ratio: what a call bound by reading weights would cost
    experts: float  # experts the call runs, per layer, on average (of E)


def verify_costs(teacher: Model, start: list[int], repeats: int) -> dict[int, Verify]:
    """For k = 1..8: the time of a CachedLM teacher call that computes k + 1
    new positions after a cached prefix (a round's verifying call) over the
    time of one that computes one (a plain decoding step), the two taking
    turns; beside it the ratio of their weight bytes, and the experts the
    longer call runs."""
    lm = CachedLM(teacher)
    extra = list(range(10, 19))  # any 9 token ids after the prompt

    def extend(m: int):
        def run() -> None:
            for _ in range(VERIFY_CALLS):
                lm.logits(start + extra[:m])  # computes the m positions after the cached prompt
                lm.logits(start)  # back to the prompt alone: nothing computed

        return timing.ignoring_round(run)

    lm.logits(start)
    costs = {}
    for k in range(1, 9):
        rounds = timing.interleave([extend(k + 1), extend(1)], rounds=max(repeats, 5), spread=0.05)
        floor, experts = verify_work(teacher, start, extra[: k + 1])
        costs[k] = Verify(rounds.ratio(0, 1), floor, experts)
    return costs


def draft_call_costs(kv, draft: Model, start: list[int], n: int, repeats: int) -> tuple[float, float] | None:
    """(seconds per draft call inside plain greedy generation through CachedLM,
    seconds per step of a bare loop of kv.forward_cached steps writing the same
    tokens), taking turns; None when the kata's forward_cached is not written."""

    def inside_generation() -> None:
        generate(CachedLM(draft), start, n, temperature=0.0)

    def own_steps() -> None:
        cache = kv.KVCache.for_model(draft)
        row = kv.forward_cached(draft, start, cache)[-1]
        for _ in range(n):
            row = kv.forward_cached(draft, [int(np.argmax(row))], cache)[-1]

    try:
        own_steps()
    except NotImplementedError:
        return None
    rounds = timing.interleave(
        [timing.ignoring_round(inside_generation), timing.ignoring_round(own_steps)],
        rounds=max(repeats, 5),
        spread=0.05,
    )
    return rounds.median(0) / n, rounds.median(1) / n


def verify_table(verify: dict[int, Verify], n_experts: int) -> None:
    print("the verifying call, k + 1 new tokens, against a one-token call (median of interleaved rounds):")
    print(f"{'k':>3} {'experts/layer':>14} {'bytes x':>8} {'v_k':>6} {'v_k / bytes x':>14}")
    for k, cost in verify.items():
        experts = f"{cost.experts:.2f} of {n_experts}" if n_experts else "dense"
        print(f"{k:>3} {experts:>14} {cost.floor:>8.2f} {cost.v:>6.2f} {cost.v / cost.floor:>14.2f}")
    print(
        "bytes x = the call's weight bytes over a one-token call's (Work.weight_bytes): its cost were it bound by\n"
        "reading weights, the floor v_k is measured against; a one-token call routes to top_k experts a layer.\n"
    )


def expected_tokens_per_call(alpha: float, k: int) -> float:
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


HEADER = (
    "k",
    "temp",
    "accept rate",
    "alpha",
    "tokens/call",
    "Leviathan",
    "target calls",
    "draft calls",
    "ms",
    "speedup",
    "Leviathan x",
    "with v_k",
)


def plain(model: Model, start: list[int], n: int, temperature: float):
    """A timed run of plain cached decoding of model at temperature: one call per token."""
    return timing.ignoring_round(
        lambda: generate(CachedLM(model), start, n, temperature=temperature, rng=np.random.default_rng(SEED))
    )


def plain_costs(label: str, target: Model, draft: Model, start: list[int], n: int, repeats: int):
    """The target's plain decoding runs at temperatures 0 and 1, and c (a draft call over a target call,
    in turns), printed; returns (runs by temperature, c)."""
    base = {temperature: plain(target, start, n, temperature) for temperature in (0.0, 1.0)}
    calls = timing.interleave(
        [plain(draft, start, n, 0.0), base[0.0], base[1.0]], rounds=repeats, spread=0.05, warmup=False
    )  # the rounds go on while draft / target (runs 0 and 1) disagree
    for i, temperature in ((1, 0.0), (2, 1.0)):
        secs = calls.median(i)
        print(
            f"plain cached decoding of the {label}, temperature {temperature:g}: {secs * 1e3:.0f} ms "
            f"({n / secs:.0f} tokens/s)"
        )
    c = calls.ratio(0, 1)
    print(
        f"plain cached decoding of the draft, temperature 0: {calls.median(0) * 1e3:.0f} ms; "
        f"cost of a draft call / a {label} call c = {c:.2f} (median of interleaved rounds)"
    )
    return base, c


def k_rows(target: Model, draft: Model, start: list[int], n: int, repeats: int, speculative_generate, base, c, verify):
    """One row of the k table per temperature and k = 1..8, each speculative run taking turns with plain decoding."""
    rows = []
    for temperature in (0.0, 1.0):
        for k in range(1, 9):

            def run():
                return speculative_generate(
                    CachedLM(target),
                    CachedLM(draft),
                    start,
                    n,
                    k=k,
                    temperature=temperature,
                    rng=np.random.default_rng(SEED),
                )

            tokens, stats = run()
            # Speculative and plain decoding take turns, so a busy spell slows both alike.
            rounds = timing.interleave(
                [timing.ignoring_round(run), base[temperature]], rounds=repeats, spread=0.05, warmup=False
            )
            secs = rounds.median(0)
            alpha = measured_alpha(target, draft, start + tokens, len(start), temperature)
            rows.append(
                (
                    str(k),
                    f"{temperature:g}",
                    f"{stats.acceptance_rate:.3f}",
                    f"{alpha:.3f}",
                    f"{stats.tokens_per_target_call:.2f}",
                    f"{expected_tokens_per_call(alpha, k):.2f}",
                    str(stats.target_calls),
                    str(stats.draft_calls),
                    f"{secs * 1e3:.0f}",
                    f"{rounds.ratio(1, 0):.2f}x",
                    f"{expected_tokens_per_call(alpha, k) / (k * c + 1):.2f}x",
                    f"{expected_tokens_per_call(alpha, k) / (k * c + verify[k].v):.2f}x",
                )
            )
    return rows


def print_k_table(rows: list[tuple[str, ...]], label: str) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADER)]
    print(" | ".join(h.rjust(w) for h, w in zip(HEADER, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(cell.rjust(w) for cell, w in zip(r, widths)))
    print(
        "\naccept rate = accepted / drafted; alpha = mean sum min(p, q) over the generated positions "
        "(argmax agreement at temperature 0);\nLeviathan = (1 - alpha^(k+1)) / (1 - alpha); "
        "speedup = plain cached decoding time / speculative time, same temperature;\n"
        "Leviathan x = expected speedup (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)) at the measured alpha and c;\n"
        "with v_k = the same with the verifying call's measured cost: (1 - alpha^(k+1)) / ((1 - alpha)(k c + v_k))."
    )
    for temperature in ("0", "1"):
        best = max((r for r in rows if r[1] == temperature), key=lambda r: float(r[9].rstrip("x")))
        print(f"best k at temperature {temperature}: k = {best[0]}, {best[9]} over plain cached decoding ({label})")


def pair_table(label: str, target: Model, draft: Model, start: list[int], n: int, repeats: int, speculative_generate):
    """The plain decoding figures, the verify table and the k table of one (target, draft) pair, printed;
    returns the k table's rows."""
    base, c = plain_costs(label, target, draft, start, n, repeats)
    verify = verify_costs(target, start, repeats)
    verify_table(verify, target.config.n_experts)
    rows = k_rows(target, draft, start, n, repeats, speculative_generate, base, c, verify)
    print_k_table(rows, label)
    return rows


def print_draft_call(kv, draft: Model, start: list[int], n: int, repeats: int) -> None:
    costs = draft_call_costs(kv, draft, start, n, repeats)
    if costs is None:
        print("a draft call inside generation against its own forward_cached step: skipped (forward_cached is a stub)")
    else:
        print(
            f"a draft call inside generation: {costs[0] * 1e6:.0f} us, its own forward_cached step "
            f"{costs[1] * 1e6:.0f} us: {costs[0] / costs[1]:.2f}x (median of interleaved rounds)"
        )


def dense_tables(teacher: Model, draft: Model, start: list[int], n: int, repeats: int, speculative_generate) -> None:
    """The same draft for the shipped dense target, its plain decoding timed in turns with the teacher's."""
    dense = shipped_model("dense")
    if dense is None:
        print("\nthe dense target: skipped (no reference/weights/dense.npz; python tools/train.py --dense-target-only)")
        return
    print(
        f"\nthe same draft for the dense target (reference/weights/dense.npz, {dense.config.n_params():,} "
        f"parameters: the teacher's shape, one SwiGLU as wide as its {teacher.config.top_k} active experts)"
    )
    both = timing.interleave([plain(m, start, n, 0.0) for m in (dense, teacher)], rounds=max(repeats, 5), spread=0.05)
    print(
        f"plain cached decoding, temperature 0, in turns: the dense target {both.median(0) * 1e3:.0f} ms, "
        f"the teacher {both.median(1) * 1e3:.0f} ms ({both.ratio(0, 1):.2f}x the teacher's time)"
    )
    pair_table("dense target", dense, draft, start, n, repeats, speculative_generate)


def plot_tokens_per_call(path, rows: list[tuple[str, ...]]) -> None:
    panels = []
    for temperature in ("0", "1"):
        mine = [r for r in rows if r[1] == temperature]
        ks = [int(r[0]) for r in mine]
        alpha = statistics.median(float(r[3]) for r in mine)
        panel = Panel(f"temperature {temperature}", "k, draft tokens per round", "tokens per target call")
        panel.lines = [
            ("measured", ks, [float(r[4]) for r in mine]),
            (f"Leviathan at alpha {alpha:.2f}", ks, [expected_tokens_per_call(alpha, k) for k in ks]),
        ]
        panel.dashed = (panel.lines[1][0],)
        panels.append(panel)
    plot(path, "Speculative decoding: tokens per call of the teacher", panels)


def main(argv: list[str]) -> int:
    parser = bench_parser(__doc__.splitlines()[0], "speculative", 3, "timed runs per cell; the median is shown")
    parser.add_argument("--n-new", type=int, default=128, help="tokens generated per run")
    args = parser.parse_args(argv)
    if not 1 <= args.n_new <= TEACHER.max_seq_len - PROMPT_CHARS:
        parser.error(f"need 1 <= --n-new <= {TEACHER.max_seq_len - PROMPT_CHARS}")
    speculative_generate = load_kata(args.target, "speculative").speculative_generate
    (teacher, shipped_teacher), (draft, shipped_draft) = shipped_or_random("teacher", 1), shipped_or_random("draft", 2)
    which = "shipped teacher and draft (reference/weights)"
    if not (shipped_teacher and shipped_draft):  # never mix a shipped model with a stand-in
        teacher, draft = Model.random(TEACHER, seed=1), Model.random(DRAFT, seed=2)
        which = "RANDOM stand-ins (no shipped weights found)"
    start = prompt()
    n = args.n_new
    print(f"models: {which}; speculative_generate from {_target.describe(args.target)}")
    print(
        f"teacher {teacher.config.n_params():,} parameters, draft {draft.config.n_params():,}; "
        f"prompt {len(start)} tokens, {n} new tokens per run, medians of at least {args.repeats} interleaved rounds\n"
    )
    print_draft_call(load_kata(args.target, "kv_cache"), draft, start, n, args.repeats)
    rows = pair_table("teacher", teacher, draft, start, n, args.repeats, speculative_generate)
    if shipped_teacher and shipped_draft:
        dense_tables(teacher, draft, start, n, args.repeats, speculative_generate)
    else:
        print("\nthe dense target: skipped (the teacher and draft above are random stand-ins)")
    plot_tokens_per_call(args.plot, rows)
    return 0


if __name__ == "__main__":
    run_main(lambda: sys.exit(main(sys.argv[1:])))
