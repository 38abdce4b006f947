"""Measure the shipped teacher and draft on the validation text.

    python benchmarks/bench_pretrained.py

Reports, all with the NumPy reference model on reference/data/val.txt:
- how long loading both shipped models takes;
- validation bits per character of the teacher, the distilled draft, the
  hard-label draft (if tools/train.py left it in build/train/) and a bigram
  model counted on train.txt;
- the share of validation positions where a draft's greedy (argmax) next
  character equals the teacher's;
- a 200-character greedy sample from each shipped model after a short prompt
  taken from the validation text.

Validation is scored the way tools/train.py scores it: non-overlapping
windows of 256 predicted characters, every full window of val.txt.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing

import shared  # noqa: E402, F401  (NumPy on one BLAS thread, as for every benchmark)

from reference.model import WEIGHTS_DIR, Model  # noqa: E402
from reference.sampling import generate_naive  # noqa: E402
from reference.tokenizer import VOCAB_SIZE, decode, encode  # noqa: E402

DATA_DIR = WEIGHTS_DIR.parent / "data"
SEQ_LEN = 256  # predicted characters per validation window
BIGRAM_SMOOTHING = 0.1  # added to every bigram count, as in tools/train.py
SAMPLE_CHARS = 200
PROMPT_CHARS = 48  # at most this much of val.txt's first line is the sample prompt


def read_tokens(name: str) -> np.ndarray:
    return np.array(encode((DATA_DIR / name).read_text(encoding="ascii")), dtype=np.int64)


def val_windows(tokens: np.ndarray) -> np.ndarray:
    """Every full non-overlapping window of SEQ_LEN + 1 tokens: (n, SEQ_LEN + 1)."""
    n = (tokens.size - 1) // SEQ_LEN
    return tokens[np.arange(n)[:, None] * SEQ_LEN + np.arange(SEQ_LEN + 1)[None, :]]


def scored(model: Model, windows: np.ndarray) -> tuple[float, np.ndarray]:
    """Bits/char of model over windows, and its argmax at every predicted position (n, SEQ_LEN)."""
    total, argmaxes = 0.0, []
    for window in windows:
        logits = model.forward(window[:-1]).astype(np.float64)  # (SEQ_LEN, V)
        z = logits - logits.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        total -= logp[np.arange(SEQ_LEN), window[1:]].sum()
        argmaxes.append(logits.argmax(axis=-1))
    return total / (len(windows) * SEQ_LEN) / np.log(2), np.array(argmaxes)


def bigram_bits_per_char(train: np.ndarray, windows: np.ndarray) -> float:
    counts = np.bincount(train[:-1] * VOCAB_SIZE + train[1:], minlength=VOCAB_SIZE**2)
    counts = counts.reshape(VOCAB_SIZE, VOCAB_SIZE) + BIGRAM_SMOOTHING
    logp = np.log2(counts / counts.sum(axis=1, keepdims=True))
    return float(-logp[windows[:, :-1], windows[:, 1:]].mean())


def prompt_text() -> str:
    first_line = (DATA_DIR / "val.txt").read_text(encoding="ascii").split("\n", 1)[0]
    return first_line[:PROMPT_CHARS] + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--hard-draft",
        type=Path,
        default=REPO / "build" / "train" / "draft_hard.npz",
        help="the hard-label draft tools/train.py kept out of the package",
    )
    args = parser.parse_args()

    start = time.perf_counter()
    teacher, draft = Model.pretrained("teacher"), Model.pretrained("draft")
    load_s = time.perf_counter() - start
    print(f"loading teacher + draft: {load_s * 1000:.0f} ms")

    windows = val_windows(read_tokens("val.txt"))
    print(f"validation: {windows.shape[0]} windows x {SEQ_LEN} characters\n")
    rows = [("bigram (train.txt counts)", bigram_bits_per_char(read_tokens("train.txt"), windows), None)]
    teacher_bpc, teacher_top = scored(teacher, windows)
    rows.append(("teacher (MoE)", teacher_bpc, None))
    draft_bpc, draft_top = scored(draft, windows)
    rows.append(("draft, distilled (shipped)", draft_bpc, float(np.mean(draft_top == teacher_top))))
    if args.hard_draft.is_file():
        hard_bpc, hard_top = scored(Model.load(args.hard_draft), windows)
        rows.append(("draft, hard labels only", hard_bpc, float(np.mean(hard_top == teacher_top))))
    print(f"{'model':<28} {'val bits/char':>13} {'greedy agreement with teacher':>30}")
    for name, bpc, agreement in rows:
        print(f"{name:<28} {bpc:>13.3f} {'' if agreement is None else f'{agreement:.2%}':>30}")
    if not args.hard_draft.is_file():
        print(
            f"(hard-label draft absent at {args.hard_draft}: run tools/train.py to rebuild it;"
            " its numbers from the shipped run are in reference/data/TRAINING.md)"
        )

    prompt = prompt_text()
    for name, model in (("teacher", teacher), ("draft", draft)):
        sample = decode(generate_naive(model, encode(prompt), SAMPLE_CHARS, temperature=0.0))
        print(f"\n--- {name}, greedy, {SAMPLE_CHARS} characters after {prompt!r} ---\n{sample}")


if __name__ == "__main__":
    main()
