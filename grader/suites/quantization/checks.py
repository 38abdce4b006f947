"""Assertions several quantization modules share: codes of x's shape in an integer dtype, a
round trip within half a quantization step, and a model a call was given read back unchanged.
"""

from __future__ import annotations

import numpy as np

from grader.jailer import jail_client
from reference.model import Model

# Float rounding allowed on top of half a step, relative to the slice's max |x|.
REL_TOL = 1e-5


def _codes(q, shape, what: str = "codes") -> np.ndarray:
    q = np.asarray(q)
    assert q.shape == tuple(shape), f"{what} have shape {q.shape}, expected {tuple(shape)} (the shape of x)"
    assert np.issubdtype(q.dtype, np.integer), f"{what} must be a numpy integer array, got dtype {q.dtype}"
    return q


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _rel_tol(x: np.ndarray) -> float:
    """REL_TOL, or for float16 x two units of its last place: its scales and q * scale round to 11 bits."""
    return max(REL_TOL, 2 * float(np.finfo(x.dtype).eps))


def _assert_within_half_a_step(x: np.ndarray, x_hat: np.ndarray, amax: np.ndarray, bits: int, of: str = "") -> None:
    """Every element of x_hat within half a quantization step (amax / qmax, amax per element) of x."""
    step = amax / (2 ** (bits - 1) - 1)
    err = np.abs(x_hat - x)
    bad = err > step / 2 + _rel_tol(x) * amax
    assert not bad.any(), (
        f"element {_first(bad)} comes back {err[bad][0]:.4g} off; half a step{of} is {step[bad][0] / 2:.4g}"
    )


def _held(fn, model: Model):
    """model kept in the jail of fn (jail_client.put): a call given the returned proxy gets that very Model,
    as a caller's own, and _assert_untouched reads its weights back after the call."""
    return jail_client.put(fn, model)


def _assert_untouched(held, model: Model, what: str) -> None:
    """The weights of the Model `held` keeps in the jail are still model's, exactly."""
    after = held.weights
    changed = [
        name
        for name, w in model.weights.items()
        if not (isinstance(after, dict) and isinstance(after.get(name), np.ndarray) and np.array_equal(after[name], w))
    ]
    assert not changed, f"{what} changed the model it was given: {changed[:3]} no longer hold the weights they held"
