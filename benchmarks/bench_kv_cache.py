"""What a KV cache buys: naive vs cached generation, in time and in work.

    python benchmarks/bench_kv_cache.py [--repeats 3] [--target reference]

For sequences of 64, 128 and 256 tokens (an 8-token prompt plus the rest
generated greedily) it reports tokens generated per second by
`generate_naive` (re-runs the whole sequence for every token) and by the
kata's cached `generate`, the speed-up, and the exact work of one run of each:
token positions pushed through each layer and multiply-accumulates. Then the
memory the cache pays: bytes per cached token.

Uses the shipped teacher model when reference/weights/teacher.npz exists,
otherwise a random model of the teacher's size.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from shared import bench_parser, load_kata, median_seconds, run_main, shipped_or_random  # noqa: E402

from grader import target as _target  # noqa: E402
from reference.model import Model  # noqa: E402
from reference.sampling import generate_naive  # noqa: E402
from reference.tokenizer import encode  # noqa: E402

PROMPT = "def main"
LENGTHS = (64, 128, 256)


def run(model: Model, generate, prompt: list[int], n_new: int, repeats: int) -> tuple[float, int, int, list[int]]:
    """Median seconds over repeats, positions per layer and macs of one run, and its tokens."""
    with model.count_work() as work:
        tokens = generate(model, prompt, n_new)  # the warm-up, counted once
    seconds, _ = median_seconds(lambda: generate(model, prompt, n_new), repeats, warmup=False)
    return seconds, work.positions[0], work.macs, tokens


def main() -> None:
    args = bench_parser(__doc__, "kv_cache", 3, "timed runs of cached generation; the median is reported").parse_args()

    kv = load_kata(args.target, "kv_cache")
    model, shipped = shipped_or_random("teacher")
    which = "the shipped teacher" if shipped else "a random model of the teacher's size (no shipped weights)"
    c = model.config
    prompt = encode(PROMPT)

    print(
        f"model: {which}: {c.n_layers} layers, d_model {c.d_model}, {c.n_heads} heads, {c.n_kv_heads} kv heads, "
        f"{c.n_experts} experts top-{c.top_k}, d_ff {c.d_ff}, {c.n_params():,} params"
    )
    print(
        f"numpy {np.__version__}, Python {platform.python_version()}; generate from {_target.describe(args.target)}; "
        f"greedy, {len(prompt)}-token prompt; naive timed once, cached median of {args.repeats}"
    )
    print()
    header = (
        f"{'tokens':>6}  {'naive tok/s':>11}  {'cached tok/s':>12}  {'speed-up':>8}  "
        f"{'naive pos/layer':>15}  {'cached pos/layer':>16}  {'naive macs':>14}  {'cached macs':>13}  {'same':>4}"
    )
    print(header)
    for length in LENGTHS:
        n_new = length - len(prompt)
        t_naive, pos_naive, macs_naive, out_naive = run(model, generate_naive, prompt, n_new, 1)
        t_cached, pos_cached, macs_cached, out_cached = run(model, kv.generate, prompt, n_new, args.repeats)
        print(
            f"{length:>6}  {n_new / t_naive:>11.0f}  {n_new / t_cached:>12.0f}  {t_naive / t_cached:>7.1f}x  "
            f"{pos_naive:>15,}  {pos_cached:>16,}  {macs_naive:>14,}  {macs_cached:>13,}  "
            f"{'yes' if out_naive == out_cached else 'NO':>4}"
        )
    per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim * np.dtype(np.float32).itemsize
    print()
    print(
        f"cache bytes per token: 2 x {c.n_layers} layers x {c.n_kv_heads} kv heads x {c.head_dim} wide x 4 bytes "
        f"= {per_token:,} B; a full {c.max_seq_len}-token cache holds {per_token * c.max_seq_len / 1024:.0f} KiB"
    )


if __name__ == "__main__":
    run_main(main)
