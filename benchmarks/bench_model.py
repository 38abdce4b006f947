"""Time the reference model's full-recompute paths and count their work.

    python benchmarks/bench_model.py [--repeats 3]

Reports the median wall time of `forward` on 256 tokens and of
`generate_naive` for 128 new tokens, with the multiply-accumulates the work
counter saw for one run of each. Uses a random-weight model of the teacher's
shape (4 layers, d_model 128, 4 heads, 2 kv heads, 4 experts, top-2).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from shared import TEACHER, add_repeats_option, median_seconds  # noqa: E402

from reference.model import Model  # noqa: E402
from reference.sampling import generate_naive  # noqa: E402

CONFIG = TEACHER  # the teacher's shape, with random weights
FORWARD_TOKENS = 256
PROMPT_TOKENS = 8
NEW_TOKENS = 128


def timed(model: Model, run, repeats: int) -> tuple[float, int]:
    """Median seconds of run() over repeats, and the macs of one run."""
    with model.count_work() as work:
        run()  # warm-up, counted once
    seconds, _ = median_seconds(run, repeats, warmup=False)
    return seconds, work.macs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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


if __name__ == "__main__":
    main()
