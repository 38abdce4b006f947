"""What several speculative modules share: the chi-square goodness-of-fit test (Wilson-Hilferty
quantiles, pooled cells), a call that must not crash on valid input, and the check that a greedy
output is the target's own generation.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from reference.model import Model
from reference.sampling import generate_naive

SIGNIFICANCE = 1e-7  # per chi-square or z test: the chance a correct implementation fails it
MIN_EXPECTED = 10.0  # chi-square cells expecting fewer draws are pooled
TIE_TOLERANCE = 1e-4  # logits closer than this to the maximum count as a greedy tie


def chi_square_quantile(df: int, significance: float = SIGNIFICANCE) -> float:
    """The upper `significance` quantile of chi-square with df degrees of freedom (Wilson-Hilferty)."""
    z = NormalDist().inv_cdf(1.0 - significance)
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int, str]:
    """Pearson's statistic of integer counts against probabilities (same shape,
    flattened), its degrees of freedom after pooling, and a note naming any
    cell drawn although its probability is 0 ("" when none)."""
    counts = np.asarray(counts, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    impossible = np.flatnonzero((probs == 0) & (counts > 0))
    if impossible.size:
        return (
            math.inf,
            1,
            f"outcome {int(impossible[0])} has probability 0 but was drawn {int(counts[impossible[0]])} times",
        )
    n = counts.sum()
    expected = probs * n
    order = np.argsort(expected, kind="stable")
    groups, current, mass = [], [], 0.0
    for j in order:
        if expected[j] == 0:
            continue
        current.append(j)
        mass += expected[j]
        if mass >= MIN_EXPECTED:
            groups.append(current)
            current, mass = [], 0.0
    if current:
        if groups:
            groups[-1] = groups[-1] + current
        else:
            groups.append(current)
    obs = np.array([counts[g].sum() for g in groups])
    exp = np.array([expected[g].sum() for g in groups])
    return float(np.sum((obs - exp) ** 2 / exp)), len(groups) - 1, ""


def fit_message(what: str, stat: float, df: int, note: str, counts, probs) -> str:
    if note:
        return f"{what}: {note}"
    n = int(np.sum(counts))
    return (
        f"{what}: chi-square {stat:.1f} > {chi_square_quantile(df):.1f} (df {df}, significance {SIGNIFICANCE:g}) "
        f"over {n} draws; counts {np.asarray(counts).astype(int).tolist()}, expected "
        f"{np.round(np.asarray(probs) * n, 1).tolist()}"
    )


def fits(stat: float, df: int) -> bool:
    return df == 0 or stat <= chi_square_quantile(df)


def _without_crashing(call, what: str):
    """call()'s result; a failed check, not a crash, if it raised (a stub's NotImplementedError passes through)."""
    try:
        return call()
    except NotImplementedError:
        raise
    except Exception as exc:  # valid input: any error is a wrong answer
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}") from None


def assert_is_greedy_generation(model: Model, prompt: list[int], got, n_new: int, who: str) -> None:
    """got must be the target's greedy generation: generate_naive's tokens,
    except that a near-tie (within TIE_TOLERANCE) may go either way."""
    got = [int(t) for t in got]
    assert len(got) == n_new, f"speculative_generate returned {len(got)} tokens, asked for n_new = {n_new}"
    if got == generate_naive(model, prompt, n_new):
        return
    rows = model.forward(prompt + got)[len(prompt) - 1 : len(prompt) - 1 + n_new].astype(np.float64)  # (n_new, V)
    gaps = rows.max(axis=1) - rows[np.arange(n_new), got]
    i = int(np.argmax(gaps > TIE_TOLERANCE)) if np.any(gaps > TIE_TOLERANCE) else -1
    assert i < 0, (
        f"at temperature 0 with {who}, new token {i} is {got[i]}, but the target's greedy choice there is "
        f"{int(rows[i].argmax())} (its logit is higher by {gaps[i]:.3g}); the output must be the target's own "
        f"greedy generation"
    )
