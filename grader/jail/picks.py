"""Reading a result that stays in the jail: the judge draws positions once
the call has answered, the jail answers the values there, and the judge
compares them with what it expects (grader.grading.jail_client.timed_picks).

Runs on both sides, so it imports only the standard library and NumPy.
"""

from __future__ import annotations

import contextlib

import numpy as np

PROBES = 48  # values the judge picks from each array of a result kept in the jail


def arrays_in(value) -> list:
    """The arrays of a result, in order: value itself, or the items of nested
    lists and tuples (what a pick addresses)."""
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in arrays_in(v)]
    return [value]


def draw_picks(want, rng: np.random.Generator) -> list[np.ndarray]:
    """Where the judge reads a kept result that should equal `want` (arrays,
    or nested lists and tuples of them): PROBES positions (PROBES, ndim) in
    each array, drawn from rng after the result came back, so the jail
    cannot know them while it answers the call."""
    return [
        rng.integers(0, np.shape(a), size=(PROBES, np.ndim(a))) if np.size(a) else np.zeros((0, np.ndim(a)), np.int64)
        for a in arrays_in(want)
    ]


def picked(value, where: list) -> list:
    """In the jail: the values of a kept result at the judge's positions, with
    each array's shape, [{"shape": [...], "values": array}, ...]; an array
    the positions do not fit (a wrong shape), or not of real numbers, answers its shape alone."""
    arrays = arrays_in(value)
    if type(where) is not list or len(where) != len(arrays):
        return []
    out = []
    for a, at in zip(arrays, where):
        a = np.asarray(a)
        entry = {"shape": list(a.shape)}
        if isinstance(at, np.ndarray) and at.ndim == 2 and at.shape[1] == a.ndim and a.dtype.kind in "biuf":
            with contextlib.suppress(IndexError):
                entry["values"] = a[tuple(at.T)] if a.ndim else np.repeat(a, len(at))
        out.append(entry)
    return out


def picks_agree(got, want, where: list, rtol: float = 1e-4) -> bool:
    """Whether what picked() answered is `want` at those positions: every
    array of the right shape, each value within rtol (relative, at least
    absolute rtol), non-finite values where want has them."""
    wants = arrays_in(want)
    if type(got) is not list or len(got) != len(wants):
        return False
    for entry, w, at in zip(got, wants, where):
        w = np.asarray(w)
        if type(entry) is not dict or entry.get("shape") != list(w.shape):
            return False
        values = entry.get("values")
        if not isinstance(values, np.ndarray) or values.shape != (len(at),) or values.dtype.kind not in "biuf":
            return False
        expected = (w[tuple(at.T)] if w.ndim else np.repeat(w, len(at))).astype(np.float64)
        values = values.astype(np.float64)
        if not np.array_equal(np.isfinite(values), np.isfinite(expected)):
            return False
        finite = np.isfinite(expected)
        close = np.abs(values[finite] - expected[finite]) <= rtol * np.maximum(np.abs(expected[finite]), 1.0)
        if not (close.all() and np.array_equal(values[~finite], expected[~finite], equal_nan=True)):
            return False
    return True
