"""What the distillation checks draw and build: batches of logits and labels, temperatures
and alphas, the batches loss and gradient must refuse, rows labelled ignore_index, and the
teacher whose text the student is distilled from.
"""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.suites.common import float_arrays
from reference.model import Config
from reference.sampling import generate_naive

IGNORE = -100


@st.composite
def batches(draw, max_rows=5, max_vocab=6, bound=5.0, ignore=True):
    """(student (N, V), teacher (N, V), labels (N,)) in float64; some labels ignored."""
    n = draw(st.integers(1, max_rows))
    v = draw(st.integers(2, max_vocab))
    student = draw(float_arrays((n, v), -bound, bound, dtype=np.float64))
    teacher = draw(float_arrays((n, v), -bound, bound, dtype=np.float64))
    labels = draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, v - 1)))
    if ignore:
        dropped = draw(hnp.arrays(np.bool_, (n,)))
        labels = np.where(dropped, IGNORE, labels)
    return student, teacher, labels


# Numbers, as the docstrings take them: ints too (a temperature of 2, an alpha of 0 or 1).
temperatures = st.one_of(st.floats(0.5, 8.0), st.integers(1, 8))
alphas = st.one_of(st.floats(0.0, 1.0), st.sampled_from([0, 1]))


def _bad_batch(case):
    """(student, teacher, labels, temperature, alpha) with one thing wrong; "... at alpha A": at that alpha,
    an edge where one of the two terms weighs nothing and the input it alone reads must still be checked."""
    case, _, edge = case.partition(" at alpha ")
    s, t, y, T, a = np.zeros((3, 4)), np.zeros((3, 4)), np.array([0, 1, 2]), 2.0, float(edge or 0.5)
    if case == "mismatched logits":
        t = np.zeros((3, 5))
    elif case == "teacher logits of one row":  # broadcasts against the student's (3, 4)
        t = np.zeros((1, 4))
    elif case == "labels of the wrong length":
        y = np.array([0, 1])
    elif case == "a label >= V":
        y = np.array([0, 4, 2])
    elif case == "a negative label other than ignore_index":
        y = np.array([0, -1, 2])
    elif case == "NaN student logits":
        s[2, 3] = np.nan
    elif case == "inf teacher logits":
        t[0, 1] = -np.inf
    elif case == "temperature 0":
        T = 0.0
    elif case == "negative temperature":
        T = -1.0
    elif case == "alpha below 0":
        a = -0.1
    elif case == "alpha above 1":
        a = 1.5
    return s, t, y, T, a


BAD_BATCHES = [
    "mismatched logits",
    "teacher logits of one row",
    "labels of the wrong length",
    "a label >= V",
    "a negative label other than ignore_index",
    "NaN student logits",
    "inf teacher logits",
    "temperature 0",
    "negative temperature",
    "alpha below 0",
    "alpha above 1",
]
# Every refusal holds at the edges of alpha too: at 1 the labels weigh nothing, at 0 the teacher and temperature.
BAD_BATCHES += [f"{case} at alpha {edge}" for edge in (0, 1) for case in BAD_BATCHES if "alpha" not in case]


# Two more rows of student and teacher logits, to append with label ignore_index (rows cut to the batch's V).
IGNORED_ROWS = float_arrays((2, 2, 6), -5, 5, dtype=np.float64)


def _with_ignored_rows(batch, extra: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch (student, teacher, labels) with extra's two rows appended, both labelled ignore_index."""
    student, teacher, labels = batch
    v = student.shape[1]
    more_s, more_t = np.concatenate([student, extra[0, :, :v]]), np.concatenate([teacher, extra[1, :, :v]])
    return more_s, more_t, np.concatenate([labels, [IGNORE, IGNORE]])


# Values of ignore_index other than the default: negative, a label in [0, V), one above every V.
IGNORE_INDICES = st.sampled_from([-1, 0, 1, 99])


# Student and teacher logits of a small batch (2 rows, V = 3) that the explicit examples below label.
TWO_ROWS = (np.array([[1.0, -1.0, 0.5], [0.0, 2.0, -2.0]]), np.array([[0.5, 0.0, -0.5], [3.0, 0.0, 1.0]]))
# A batch with one ignored row, for the checks that mark it with ignore_index=-1 instead of IGNORE (_relabelled).
IGNORED_BY_MINUS_ONE = dict(
    batch=(*TWO_ROWS, np.array([2, IGNORE])),
    temperature=2.0,
    alpha=0.5,
    ignore_index=-1,
)


def _relabelled(labels: np.ndarray, ignore_index: int) -> tuple[np.ndarray, np.ndarray]:
    """labels with their ignored rows marked by ignore_index instead of IGNORE, and the same rows (those and any
    other label equal to ignore_index) marked by IGNORE again, for the float64 formulas."""
    custom = np.where(labels == IGNORE, ignore_index, labels)
    return custom, np.where(custom == ignore_index, IGNORE, custom)


TEACHER_CONFIG = Config(vocab_size=32, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=64)
SEQUENCES, SEQUENCE_LENGTH = 4, 48  # per split: 4 x 48 = 192 positions for train, as many held out


def _teacher_positions(model, gen, sequences):
    """Teacher logits (N, V), previous tokens (N,) and next tokens (N,) over text
    the teacher samples itself at temperature 1 (the labels are its own draws)."""
    logits, prev, nxt = [], [], []
    for _ in range(sequences):
        start = int(gen.integers(model.config.vocab_size))
        seq = [start] + generate_naive(model, [start], SEQUENCE_LENGTH, temperature=1.0, rng=gen)
        logits.append(model.forward(seq[:-1]).astype(np.float64))
        prev += seq[:-1]
        nxt += seq[1:]
    return np.concatenate(logits), np.array(prev), np.array(nxt)
