"""Distil the shipped n-gram draft (reference/weights/ngram.npz) from the shipped teacher, with NumPy alone.

    python tools/ngram_table.py          # or: python tools/train.py --ngram-only

reference.ngram.distil does the work, with the distillation kata's reference
`distill_ngram` (order 5, temperature 1):
1. The teacher (reference/weights/teacher.npz, the NumPy reference model) reads
   train.txt in windows of 256 characters that overlap by 32, so every
   position past the first window is scored with 32 characters of context
   at least (reference.ngram.teacher_logits).
2. Each chunk of 100,000 positions goes through `distill_ngram`: every
   context of up to 4 characters gets the teacher's next-character
   distribution averaged over the positions where it occurs. The chunks'
   tables are merged by count-weighted means (merge_tables); a context that
   straddles two chunks is counted in neither, a few dozen positions in all.
3. The table is pruned to MAX_ROWS rows (prune_table: the contexts seen twice
   or more that add most over backing off) and saved with -log p in uint8
   steps.

Then it prints the section of reference/data/TRAINING.md that records the
run: the table's size, and its greedy agreement with the teacher on val.txt
(in domain) and code.txt (out of domain) beside the shipped neural draft's.
Deterministic: the same weights and corpus give the same table.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from reference.model import Model  # noqa: E402
from reference.ngram import MAX_ROWS, NGRAM_PATH, ORDER, WINDOW, NGramLM, distil, teacher_logits  # noqa: E402
from reference.solutions.distillation import distill_ngram  # noqa: E402
from reference.tokenizer import encode  # noqa: E402

DATA = REPO / "reference" / "data"
AGREEMENT_CHARS = 60_000  # characters of val.txt and code.txt the agreement is measured on


def read(name: str) -> np.ndarray:
    return np.array(encode((DATA / name).read_text(encoding="ascii")), dtype=np.int64)


def agreement(lm, teacher_best: np.ndarray, ids: np.ndarray) -> float:
    """Share of positions where lm's argmax is the teacher's, scored window by window."""
    hits = 0
    for s in range(0, ids.size, WINDOW):
        lm.reset()
        hits += int(np.sum(np.asarray(lm.logits(ids[s : s + WINDOW])).argmax(axis=1) == teacher_best[s : s + WINDOW]))
    return hits / ids.size


def progress(done: int, total: int) -> None:
    print(f"  {done:,} of {total:,} positions", flush=True)


def report(teacher: Model, lm: NGramLM, minutes: float) -> str:
    from reference.lm import CachedLM

    draft = Model.pretrained("draft")
    lines = [
        "## The n-gram draft (ngram.npz)",
        "",
        "Written by `python tools/ngram_table.py` (or `tools/train.py --ngram-only`); the numbers are that run's.",
        "",
        f"Order {ORDER}, distilled from teacher.npz on all of train.txt, pruned to the rows that add most:",
        f"{len(lm.contexts):,} rows of at most {MAX_ROWS:,} ({NGRAM_PATH.stat().st_size / 1e6:.2f} MB),",
        f"in {minutes:.1f} minutes with NumPy.",
        "",
        f"Greedy agreement with the teacher, teacher-forced, on the first {AGREEMENT_CHARS:,} characters of each text:",
        "",
        "| text | n-gram table | neural draft (draft.npz) |",
        "|---|---|---|",
    ]
    for name, label in (("val.txt", "val.txt (in domain)"), ("code.txt", "code.txt (out of domain)")):
        ids = read(name)[:AGREEMENT_CHARS]
        best = teacher_logits(teacher, ids).argmax(axis=1)
        table, neural = agreement(lm, best, ids), agreement(CachedLM(draft), best, ids)
        lines.append(f"| {label} | {table:.2%} | {neural:.2%} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    teacher = Model.pretrained("teacher")
    with threadpool_limits(1):
        print(f"distilling an order-{ORDER} table from the teacher on train.txt...", flush=True)
        lm = distil(distill_ngram, teacher, read("train.txt"), progress=progress)
        lm.save(NGRAM_PATH)
        minutes = (time.perf_counter() - t0) / 60
        print(f"wrote {NGRAM_PATH.relative_to(REPO)}; measuring agreement...", flush=True)
        print(report(teacher, NGramLM.pretrained(), minutes))


if __name__ == "__main__":
    main()
