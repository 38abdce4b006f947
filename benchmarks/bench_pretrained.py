"""Measure the shipped models in their domain and out of it.

    python benchmarks/bench_pretrained.py

Reports, all with the NumPy reference model:
- how long loading the teacher and the draft takes;
- on the validation text (reference/data/val.txt, held-out docstrings of the
  kind the models were trained on): bits per character of the teacher, the
  distilled draft, the hard-label draft (reference/weights/draft_hard.npz,
  shipped for this comparison) and a bigram model counted on train.txt, and
  the share of positions where a draft's greedy (argmax) next character
  equals the teacher's;
- the same on text of another kind (reference/data/code.txt: standard-library
  source code with its docstrings removed, see reference/data/PROVENANCE.md),
  with each figure's gap from validation;
- the distilled draft against the hard-label draft on each text, with the
  standard error of their per-window difference (adjacent windows are not
  independent, so take it as a rough guide);
- a 200-character greedy sample from the teacher and the distilled draft
  after a short prompt taken from the validation text.

Both texts are scored the way tools/train.py scores validation:
non-overlapping windows of 256 predicted characters, every full window.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from grader.measure import bench  # noqa: E402  (NumPy on one BLAS thread, as for every benchmark)
from reference.model import WEIGHTS_DIR, Model  # noqa: E402
from reference.sampling import generate_naive  # noqa: E402
from reference.tokenizer import VOCAB_SIZE, decode, encode  # noqa: E402

DATA_DIR = WEIGHTS_DIR.parent / "data"
SEQ_LEN = 256  # predicted characters per validation window
BIGRAM_SMOOTHING = 0.1  # added to every bigram count, as in tools/train.py
BIGRAM = "bigram (train.txt counts)"
TEACHER, DISTILLED, HARD = "teacher (MoE)", "draft, distilled (shipped)", "draft, hard labels only"
SAMPLE_CHARS = 200
PROMPT_CHARS = 48  # at most this much of val.txt's first line is the sample prompt


@dataclass(frozen=True)
class Scores:
    """One model on one text of n windows."""

    window_bits: np.ndarray  # (n,) bits per character of each window
    agreement: float | None  # share of positions where its argmax is the teacher's; None for the teacher and bigram

    @property
    def bits_per_char(self) -> float:
        return float(self.window_bits.mean())  # every window has SEQ_LEN predicted characters


def read_tokens(name: str) -> np.ndarray:
    return np.array(encode((DATA_DIR / name).read_text(encoding="ascii")), dtype=np.int64)


def val_windows(tokens: np.ndarray) -> np.ndarray:
    """Every full non-overlapping window of SEQ_LEN + 1 tokens: (n, SEQ_LEN + 1)."""
    n = (tokens.size - 1) // SEQ_LEN
    return tokens[np.arange(n)[:, None] * SEQ_LEN + np.arange(SEQ_LEN + 1)[None, :]]


def scored(model: Model, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bits/char of model on each of the n windows (n,), and its argmax at every
    predicted position (n, SEQ_LEN)."""
    bits, argmaxes = [], []
    for window in windows:
        logits = model.forward(window[:-1]).astype(np.float64)  # (SEQ_LEN, V)
        z = logits - logits.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        bits.append(-logp[np.arange(SEQ_LEN), window[1:]].mean() / np.log(2))
        argmaxes.append(logits.argmax(axis=-1))
    return np.array(bits), np.array(argmaxes)


def bigram_window_bits(train: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """Bits/char on each window (n,) of a bigram model counted on train."""
    counts = np.bincount(train[:-1] * VOCAB_SIZE + train[1:], minlength=VOCAB_SIZE**2)
    counts = counts.reshape(VOCAB_SIZE, VOCAB_SIZE) + BIGRAM_SMOOTHING
    logp = np.log2(counts / counts.sum(axis=1, keepdims=True))
    return -logp[windows[:, :-1], windows[:, 1:]].mean(axis=1)


def score_all(models: dict[str, Model], train: np.ndarray, windows: np.ndarray) -> dict[str, Scores]:
    """Every model (the teacher first) and the bigram baseline on windows, by row name."""
    out = {BIGRAM: Scores(bigram_window_bits(train, windows), None)}
    teacher_top = None
    for name, model in models.items():
        bits, top = scored(model, windows)
        if teacher_top is None:
            teacher_top = top
            out[name] = Scores(bits, None)
        else:
            out[name] = Scores(bits, float(np.mean(top == teacher_top)))
    return out


def prompt_text() -> str:
    first_line = (DATA_DIR / "val.txt").read_text(encoding="ascii").split("\n", 1)[0]
    return first_line[:PROMPT_CHARS] + "\n"


def main() -> None:
    parser = bench.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--hard-draft",
        type=Path,
        default=WEIGHTS_DIR / "draft_hard.npz",
        help="the hard-label draft (tools/train.py --hard-draft-only rebuilds it)",
    )
    args = parser.parse_args()

    start = time.perf_counter()
    teacher, draft = Model.pretrained("teacher"), Model.pretrained("draft")
    load_s = time.perf_counter() - start
    print(f"loading teacher + draft: {load_s * 1000:.0f} ms")
    models = {TEACHER: teacher, DISTILLED: draft}
    if args.hard_draft.is_file():
        models[HARD] = Model.load(args.hard_draft)

    train = read_tokens("train.txt")
    windows = val_windows(read_tokens("val.txt"))
    print(f"validation: {windows.shape[0]} windows x {SEQ_LEN} characters\n")
    val = score_all(models, train, windows)
    print(f"{'model':<28} {'val bits/char':>13} {'greedy agreement with teacher':>30}")
    for name, row in val.items():
        agreement = "" if row.agreement is None else f"{row.agreement:.2%}"
        print(f"{name:<28} {row.bits_per_char:>13.3f} {agreement:>30}")
    if not args.hard_draft.is_file():
        print(
            f"(hard-label draft absent at {args.hard_draft}: rebuild it with tools/train.py --hard-draft-only;"
            " its numbers from the shipped run are in reference/data/TRAINING.md)"
        )

    code_windows = val_windows(read_tokens("code.txt"))
    print(
        f"\nout of domain: code.txt, {code_windows.shape[0]} windows x {SEQ_LEN} characters"
        " (standard-library source code, docstrings removed)\n"
    )
    code = score_all(models, train, code_windows)
    print_code_table(val, code)
    if HARD in models:
        print_draft_difference(val, code)
    print_samples(teacher, draft)


def print_code_table(val: dict[str, Scores], code: dict[str, Scores]) -> None:
    """Print each model's scores on code.txt, and how far they moved from its scores on val.txt."""
    print(f"{'model':<28} {'code bits/char':>14} {'gap':>7} {'agreement':>10} {'gap':>11}")
    for name, row in code.items():
        v = val[name]
        line = f"{name:<28} {row.bits_per_char:>14.3f} {row.bits_per_char - v.bits_per_char:>+7.3f}"
        if row.agreement is not None:
            line += f" {row.agreement:>10.2%} {(row.agreement - v.agreement) * 100:>+7.2f} pts"
        print(line)
    print("(gap: code minus validation)")


def print_draft_difference(val: dict[str, Scores], code: dict[str, Scores]) -> None:
    """Print the distilled draft minus the hard-label draft on each text, window by window."""
    print("\ndistilled draft minus hard-label draft (bits/char +- standard error over windows):")
    for text, rows in (("validation", val), ("code", code)):
        d, h = rows[DISTILLED], rows[HARD]
        diff = d.window_bits - h.window_bits  # (n,) paired: the same windows
        se = diff.std(ddof=1) / np.sqrt(diff.size)
        print(
            f"{text:<11} {diff.mean():>+7.3f} +- {se:.3f} bits/char"
            f" {(d.agreement - h.agreement) * 100:>+7.2f} pts agreement"
        )


def print_samples(teacher: Model, draft: Model) -> None:
    """Print SAMPLE_CHARS greedy characters of the teacher and of the draft after the sample prompt."""
    prompt = prompt_text()
    for name, model in (("teacher", teacher), ("draft", draft)):
        sample = decode(generate_naive(model, encode(prompt), SAMPLE_CHARS, temperature=0.0))
        print(f"\n--- {name}, greedy, {SAMPLE_CHARS} characters after {prompt!r} ---\n{sample}")


if __name__ == "__main__":
    main()
