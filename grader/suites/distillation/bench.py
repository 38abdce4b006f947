"""Distil a bigram student from the teacher, with soft targets and with hard labels.

    python -m grader.suites.distillation.bench [--steps 300] [--lr 20] [--seed 0] [--target katas]

The teacher runs over text (the shipped corpus when reference/data holds it,
else text the teacher writes itself); its logits at every position are the
soft targets and the next characters the hard labels. Two bigram students
(a 96 x 96 logit table, one row per previous character) train for the same
steps on the same positions: one on soft targets (T=2, alpha=0.9), one on
labels alone (alpha=0). Reported per training-set size: held-out mean
KL(teacher || student) and top-1 agreement with the teacher (how often the
student's most likely next character is the teacher's).

Trains with distill_bigram from --target (the reference solutions where
this copy ships them, else your katas/). Uses the shipped teacher when reference/weights/teacher.npz exists, else a
random model of the teacher's shape, and prints which.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from grader.measure.bench import (  # noqa: E402
    Panel,
    bench_parser,
    load_kata,
    plot,
    positive,
    run_main,
    shipped_or_random,
    whole,
)
from reference.model import Model  # noqa: E402
from reference.sampling import generate_naive  # noqa: E402
from reference.tokenizer import encode  # noqa: E402

WINDOW = 256  # tokens per teacher forward pass
TRAIN_SIZES = (256, 1024, 4096)  # training-set sizes, one row of the report each
HELD_OUT = 2048  # held-out positions
TEMPERATURE, SOFT_ALPHA = 2.0, 0.9


def text_tokens(model: Model, name: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """At least n + 1 token ids from reference/data/<name>.txt, else written by the model."""
    path = ROOT / "reference" / "data" / f"{name}.txt"
    if path.is_file():
        ids = np.array(encode(path.read_text(encoding="utf-8")), dtype=np.int64)
        if ids.size > n + 1:
            start = int(rng.integers(ids.size - n - 1))
            return ids[start : start + n + 1], f"corpus {path.relative_to(ROOT)}"
    out: list[int] = []
    while len(out) < n + 1:
        start = int(rng.integers(model.config.vocab_size))
        out += [start] + generate_naive(model, [start], WINDOW - 1, temperature=1.0, rng=rng)
    return np.array(out[: n + 1]), "text the teacher wrote (temperature 1)"


def positions(model: Model, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher logits (N, V), previous tokens (N,) and next tokens (N,), N = ids.size - 1,
    the teacher reading the text in windows of WINDOW tokens."""
    logits = [model.forward(ids[i : i + WINDOW]) for i in range(0, ids.size - 1, WINDOW)]
    n = ids.size - 1
    return np.concatenate(logits)[:n].astype(np.float64), ids[:-1], ids[1:]


def log_softmax(x: np.ndarray) -> np.ndarray:
    """The benchmark's own, so the scores never depend on the code under test."""
    z = x - np.max(x, axis=-1, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def scores(table: np.ndarray, held_out) -> tuple[float, float]:
    """Held-out mean KL(teacher || student) and top-1 agreement of a bigram table."""
    teacher, prev, _ = held_out
    student = table[prev]
    log_p, log_q = log_softmax(teacher), log_softmax(student)
    kl = float(np.mean(np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)))
    agree = float(np.mean(np.argmax(student, axis=-1) == np.argmax(teacher, axis=-1)))
    return kl, agree


def main() -> None:
    parser = bench_parser(__doc__, "distillation")
    parser.add_argument("--steps", type=whole(0), default=300, help="gradient steps per student (default 300)")
    parser.add_argument("--lr", type=positive, default=20.0, help="learning rate of both students (default 20)")
    parser.add_argument("--seed", type=whole(0), default=0, help="seed of the text windows and tables (default 0)")
    args = parser.parse_args()
    distill_bigram = load_kata(args.target, "distillation").distill_bigram

    started = time.perf_counter()
    model, shipped = shipped_or_random("teacher")
    which = (
        "shipped teacher (reference/weights/teacher.npz)"
        if shipped
        else "random model of the teacher's shape (no shipped weights)"
    )
    rng = np.random.default_rng(args.seed)
    train_ids, train_src = text_tokens(model, "train", max(TRAIN_SIZES), rng)
    held_ids, held_src = text_tokens(model, "val", HELD_OUT, rng)
    train, held_out = positions(model, train_ids), positions(model, held_ids)
    V = model.config.vocab_size

    print(f"teacher: {which}")
    print(f"training text: {train_src}; held-out text: {held_src} ({HELD_OUT} positions)")
    print(
        f"students: {V} x {V} bigram tables, {args.steps} full-batch steps at lr {args.lr:g}, "
        f"soft = T {TEMPERATURE:g} alpha {SOFT_ALPHA:g}, hard = alpha 0"
    )
    uniform_kl, _ = scores(np.zeros((V, V)), held_out)
    print(f"uniform table: held-out KL {uniform_kl:.3f}")
    print()
    print(f"{'train positions':>15} | {'KL soft':>8} | {'KL hard':>8} | {'top-1 soft':>10} | {'top-1 hard':>10}")
    print(f"{'-' * 15}-+-{'-' * 8}-+-{'-' * 8}-+-{'-' * 10}-+-{'-' * 10}")
    kls = {"soft targets": [], "hard labels": []}
    for n in TRAIN_SIZES:
        teacher, prev, labels = (a[:n] for a in train)
        row = []
        for alpha in (SOFT_ALPHA, 0.0):
            table = distill_bigram(
                teacher,
                prev,
                labels,
                temperature=TEMPERATURE,
                alpha=alpha,
                steps=args.steps,
                lr=args.lr,
                rng=np.random.default_rng(args.seed),
            )
            row.append(scores(table, held_out))
        (kl_soft, top_soft), (kl_hard, top_hard) = row
        print(f"{n:>15} | {kl_soft:>8.3f} | {kl_hard:>8.3f} | {top_soft:>10.1%} | {top_hard:>10.1%}")
        kls["soft targets"].append(kl_soft)
        kls["hard labels"].append(kl_hard)
    panel = Panel("held-out KL to the teacher", "training positions", "KL (nats)")
    panel.lines = [(name, list(TRAIN_SIZES), values) for name, values in kls.items()]
    panel.lines.append(("uniform table", [TRAIN_SIZES[0], TRAIN_SIZES[-1]], [uniform_kl, uniform_kl]))
    panel.dashed = ("uniform table",)
    plot(args.plot, "Bigram students distilled from the teacher", [panel])
    print()
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    run_main(main)
