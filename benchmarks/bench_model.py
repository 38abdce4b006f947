"""Time the reference model's full-recompute paths and count their work.

    python benchmarks/bench_model.py [--repeats 3]

Reports the median wall time of `forward` on 256 tokens and of
`generate_naive` for 128 new tokens, with the multiply-accumulates the work
counter saw for one run of each. Uses a random-weight model of the teacher's
shape (4 layers, d_model 128, 4 heads, 2 kv heads, 4 experts, top-2).

Then a few rows (a verify step of speculative decoding, an expert's share
of a short batch): M rows (M, 128) times a weight (128, N), as one matmul
`a @ b` (what `Model._mm` does) and as a stack of single rows
`(a[:, None, :] @ b)[:, 0]`, which OpenBLAS runs as matrix-vector products.
The two take turns; the ratio is the median of the per-round ratios, > 1
where the stack is faster. On a CPU's own kernel one matmul wins from two
rows on; under a forced older kernel (see the header) the stack can win,
which is why the figures should come from --native-blas runs.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from grader.measure import timing  # noqa: E402
from grader.measure.bench import TEACHER, Parser, add_repeats_option, median_seconds  # noqa: E402
from reference.model import Model  # noqa: E402
from reference.sampling import generate_naive  # noqa: E402

CONFIG = TEACHER  # the teacher's shape, with random weights
FORWARD_TOKENS = 256
PROMPT_TOKENS = 8
NEW_TOKENS = 128
FEW_ROWS = (1, 2, 3, 4, 5, 8, 16)  # M
WEIGHT_WIDTHS = (256, 512)  # N: the teacher's fused q|k|v, and an expert's fused gate|up
CALLS_PER_ROUND = 200


def timed(model: Model, run, repeats: int) -> tuple[float, int]:
    """Median seconds of run() over repeats, and the macs of one run."""
    with model.count_work() as work:
        run()  # warm-up, counted once
    seconds, _ = median_seconds(run, repeats, warmup=False)
    return seconds, work.macs


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])
    add_repeats_option(parser, 3, "timed runs per row; the median is reported")  # no --target: it runs no kata
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and tokens (default 0)")
    args = parser.parse_args()

    model = Model.random(CONFIG, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    tokens = rng.integers(0, CONFIG.vocab_size, size=FORWARD_TOKENS)
    prompt = rng.integers(0, CONFIG.vocab_size, size=PROMPT_TOKENS)

    rows = [
        (f"forward, {FORWARD_TOKENS} tokens", *timed(model, lambda: model.forward(tokens), args.repeats)),
        (
            f"generate_naive, {PROMPT_TOKENS}-token prompt + {NEW_TOKENS} new",
            *timed(model, lambda: generate_naive(model, prompt, NEW_TOKENS), args.repeats),
        ),
    ]

    print(
        f"model: {CONFIG.n_layers} layers, d_model {CONFIG.d_model}, {CONFIG.n_heads} heads, "
        f"{CONFIG.n_kv_heads} kv heads, {CONFIG.n_experts} experts top-{CONFIG.top_k}, d_ff {CONFIG.d_ff}, "
        f"{CONFIG.n_params():,} params (random weights)"
    )
    print(f"numpy {np.__version__}, Python {platform.python_version()}, median of {args.repeats} runs")
    print()
    width = max(len(name) for name, _, _ in rows)
    print(f"{'run':<{width}}  {'median ms':>10}  {'macs':>15}")
    for name, seconds, macs in rows:
        print(f"{name:<{width}}  {seconds * 1e3:>10.1f}  {macs:>15,}")
    print()
    few_rows_table(rng, args.repeats)


def few_rows_table(rng: np.random.Generator, repeats: int) -> None:
    """a @ b against a stack of single rows, for M in FEW_ROWS and N in WEIGHT_WIDTHS."""
    print(
        f"a few rows (M, {CONFIG.d_model}) times a weight ({CONFIG.d_model}, N): one matmul against a stack of single "
        f"rows; us per call, {CALLS_PER_ROUND} calls a round, the two taking turns"
    )
    print(f"{'N':>5}  {'M':>3}  {'a @ b':>8}  {'stacked':>8}  {'a @ b / stacked':>15}")
    for n in WEIGHT_WIDTHS:
        b = rng.standard_normal((CONFIG.d_model, n)).astype(np.float32)
        for m in FEW_ROWS:
            a = rng.standard_normal((m, CONFIG.d_model)).astype(np.float32)

            def matmul(_round, a=a, b=b) -> None:
                for _ in range(CALLS_PER_ROUND):
                    a @ b

            def stacked(_round, a=a, b=b) -> None:
                for _ in range(CALLS_PER_ROUND):
                    (a[:, None, :] @ b)[:, 0]

            rounds = timing.interleave([matmul, stacked], rounds=max(repeats, 5), spread=0.05)
            per_call = [rounds.median(i) / CALLS_PER_ROUND * 1e6 for i in (0, 1)]
            print(f"{n:>5}  {m:>3}  {per_call[0]:>8.1f}  {per_call[1]:>8.1f}  {rounds.ratio(0, 1):>14.2f}x")


if __name__ == "__main__":
    main()
