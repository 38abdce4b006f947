"""Whether a weight's address pays: products with 64-byte aligned weights against weights 16 and 32 bytes off.

    python benchmarks/bench_alignment.py [--repeats 7] [--native-blas]

NumPy aligns the arrays it makes to 16 bytes; the model copies each weight
to a 64-byte boundary (reference/aligned.py). This prints, one BLAS thread,
each run taking turns with the others in every round (the median round):

- a product of ROWS rows (1: a decode step; 6: a verify step at k = 5) with
  each weight shape of the shipped teacher, the weight on a 64-byte boundary
  and 16 and 32 bytes past one (microseconds a product);
- the teacher's own calls through CachedLM (one new token, and six, after
  PREFIX cached), its weights aligned (as the model keeps them) against the
  same model with every weight and joined weight moved 16 bytes off.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import reference.model  # noqa: E402
from grader.measure import timing  # noqa: E402
from grader.measure.bench import Parser, add_repeats_option, shipped_or_random  # noqa: E402
from reference.aligned import aligned  # noqa: E402
from reference.lm import CachedLM  # noqa: E402
from reference.model import Model  # noqa: E402

OFFSETS = (0, 16, 32)  # bytes past a 64-byte boundary
ROWS = (1, 6)
PRODUCTS = 2000  # products a run
PREFIX = 96  # tokens cached before a timed call
CALLS = 200  # calls a run


def product_runs(shape: tuple[int, int], rows: int) -> list:
    """One run per offset: PRODUCTS products of `rows` rows with a weight of `shape` at that offset."""
    gen = np.random.default_rng(0)
    weight = gen.standard_normal(shape).astype(np.float32)
    x = gen.standard_normal((rows, shape[0])).astype(np.float32)

    def run_at(w: np.ndarray):
        def run() -> None:
            for _ in range(PRODUCTS):
                x.dot(w)

        return timing.ignoring_round(run)

    return [run_at(aligned(weight, offset)) for offset in OFFSETS]


def shifted(model: Model, offset: int) -> Model:
    """A copy of model whose weights, and the arrays its fast paths join them into, lie `offset` bytes past a
    64-byte boundary: built while the model module's copies are made at that offset."""
    keep = reference.model.aligned
    reference.model.aligned = lambda x: keep(x, offset)
    try:
        return Model(model.config, model.weights)
    finally:
        reference.model.aligned = keep


def call_run(model: Model, new: int):
    """CALLS calls of model through CachedLM, each computing `new` tokens after PREFIX cached ones."""
    seq = np.random.default_rng(1).integers(0, model.config.vocab_size, PREFIX + new).tolist()
    other = seq[:PREFIX] + [(t + 1) % model.config.vocab_size for t in seq[PREFIX:]]
    lm = CachedLM(model)
    lm.logits(seq[:PREFIX])

    def run() -> None:
        for i in range(CALLS):
            lm.logits(seq if i % 2 else other)  # the new positions differ each call: each is computed

    return timing.ignoring_round(run)


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])
    add_repeats_option(parser, 7, "rounds; the median is reported")
    args = parser.parse_args()
    teacher, shipped = shipped_or_random("teacher")
    c = teacher.config
    shapes = sorted({w.shape[-2:] for w in teacher.weights.values() if w.ndim >= 2} | {(c.d_model, 2 * c.d_ff)})
    print(f"\na product of R rows with a weight of the {'shipped' if shipped else 'random'} teacher's shapes, us:")
    print(f"{'weight':>12}{'R':>3}" + "".join(f"{f'+{o} B':>9}" for o in OFFSETS) + f"{'+16 / +0':>10}")
    for shape in shapes:
        for rows in ROWS:
            t = timing.interleave(product_runs(shape, rows), rounds=args.repeats, spread=0.05)
            times = [t.median(i) / PRODUCTS * 1e6 for i in range(len(OFFSETS))]
            print(f"{str(shape):>12}{rows:>3}" + "".join(f"{x:>9.2f}" for x in times) + f"{t.ratio(1, 0):>9.2f}x")
    print(f"\nthe teacher through CachedLM after {PREFIX} cached tokens, us a call:")
    models = {"aligned (kept)": teacher, "16 bytes off": shifted(teacher, 16)}
    for new in ROWS:
        t = timing.interleave([call_run(m, new) for m in models.values()], rounds=args.repeats, spread=0.05)
        cells = "   ".join(f"{name} {t.median(i) / CALLS * 1e6:.0f}" for i, name in enumerate(models))
        print(f"  {new} new token{'s' if new > 1 else ' '}: {cells}   off / aligned {t.ratio(1, 0):.2f}x")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - t0:.0f} s)")
