"""Sampling helpers shared by every kata, and the naive generator.

`sample_token` is the one place a token is drawn from logits, and
`draw_index` the one inverse-CDF draw from probabilities. A generator
that calls it once per new token, on the logits of the last position, with
the same `numpy.random.Generator`, reproduces `generate_naive` exactly.
"""

from __future__ import annotations

import math

import numpy as np

from reference.checks import as_float, is_int
from reference.model import Model


def check_temperature(temperature) -> float:
    """temperature as a float, after checking that it is a finite number >= 0."""
    t = as_float(temperature)
    if not math.isfinite(t) or t < 0:  # as_float gives a Python float (NaN for what is not a number)
        raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r:.60}")
    return t


def check_rng(rng) -> np.random.Generator:
    """rng, after checking that it is a numpy Generator."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    return rng


def check_n_new(n_new) -> int:
    """n_new as an int, after checking that it is an int >= 0."""
    if not is_int(n_new) or n_new < 0:
        raise ValueError(f"n_new must be an int >= 0, got {n_new!r}")
    return int(n_new)


def check_sampling(temperature, rng) -> float:
    """The temperature as a float, after checking that a sampled run has an rng."""
    t = check_temperature(temperature)
    if t > 0 and not isinstance(rng, np.random.Generator):
        raise ValueError(f"sampling at temperature > 0 needs rng=np.random.default_rng(seed), got {rng!r:.60}")
    return t


def probs_from_logits(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / temperature) over the last axis, in float64; temperature > 0."""
    t = check_temperature(temperature)
    if not t:
        raise ValueError("a distribution needs a temperature > 0 (temperature 0 is greedy: take the argmax)")
    return _probs(logits, t)


def _probs(logits, t: float) -> np.ndarray:
    """probs_from_logits for a temperature t > 0 already checked."""
    z = np.asarray(logits, dtype=np.float64)
    with np.errstate(over="ignore"):  # shifted first, then divided: a tiny temperature gives -inf (a 0), not NaN
        z = (z - np.max(z, axis=-1, keepdims=True)) / t
    e = np.exp(z)
    return e / np.sum(e, axis=-1, keepdims=True)


def sample_token(logits: np.ndarray, temperature: float = 0.0, rng: np.random.Generator | None = None) -> int:
    """One token id from logits (V,): the argmax when temperature is 0 (lowest
    id on ties), otherwise a draw from softmax(logits / temperature) using
    exactly one `rng.random()` call."""
    logits = np.asarray(logits)
    if logits.ndim != 1 or logits.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D array (V,), got shape {logits.shape}")
    if logits.dtype.kind not in "iuf":
        raise ValueError(f"logits must be numbers, got dtype {logits.dtype}")
    if not np.isfinite(logits).all():
        raise ValueError("logits hold NaN or inf")
    t = check_sampling(temperature, rng)
    if t == 0:
        return int(logits.argmax())  # the method: np.argmax's wrapper costs 1 us a token, 5x the argmax
    probs = _probs(logits, t)  # finite weights summing to 1, as draw_index checks its own: drawn without that check
    return _draw(probs, np.cumsum(probs), rng.random(), rescale=True)


def draw_index(probs: np.ndarray, rng: np.random.Generator, *, rescale: bool = True) -> int:
    """One index drawn from the weights probs (V,), >= 0 and not all 0, by
    inverse CDF with exactly one `rng.random()` call u: the first index whose
    cumulative weight exceeds u times the total weight, or u itself when
    rescale is False (for rows already summing to 1). An index of weight 0 is
    never drawn. A ValueError for weights that are not that, or an rng that is
    not a numpy Generator."""
    probs = np.asarray(probs)
    if probs.ndim != 1 or probs.size == 0 or probs.dtype.kind not in "iuf":
        raise ValueError(f"probs must be a non-empty 1-D array of numbers, got shape {probs.shape} {probs.dtype}")
    cdf = np.cumsum(probs)
    if not 0 < cdf[-1] < np.inf or probs.min() < 0:
        raise ValueError("probs must be finite weights >= 0, not all 0")
    return _draw(probs, cdf, check_rng(rng).random(), rescale)


def _draw(probs: np.ndarray, cdf: np.ndarray, u: float, rescale: bool) -> int:
    """draw_index's draw, given weights it checked, their cumulative sums and the one random number u."""
    i = int(np.searchsorted(cdf, u * cdf[-1] if rescale else u, side="right"))
    return min(i, int(np.flatnonzero(probs > 0)[-1]))


def check_generation(model: Model, prompt, n_new) -> np.ndarray:
    """The prompt as an int array, after checking that prompt + n_new fits the model."""
    prompt = model.check_tokens(prompt)
    check_n_new(n_new)
    if prompt.size + n_new > model.config.max_seq_len:
        raise ValueError(
            f"prompt ({prompt.size}) + n_new ({n_new}) tokens exceed max_seq_len={model.config.max_seq_len}"
        )
    return prompt


def generate_naive(model: Model, prompt, n_new: int, *, temperature: float = 0.0, rng=None) -> list[int]:
    """The n_new tokens that follow prompt, re-running `model.forward` over the
    whole sequence for every new token (no cache). Returns only the new tokens."""
    tokens = list(check_generation(model, prompt, n_new))
    check_sampling(temperature, rng)
    return decode(lambda seq: model.forward(seq)[-1], tokens, n_new, temperature, rng)


def decode(next_logits, prompt, n_new: int, temperature: float, rng) -> list[int]:
    """The n_new tokens that follow prompt, one `sample_token` call each on
    next_logits(sequence so far), the logits (V,) of the next token.
    The caller checks its arguments."""
    tokens = [int(t) for t in prompt]
    new = []
    for _ in range(n_new):
        tok = sample_token(next_logits(tokens), temperature, rng)
        tokens.append(tok)
        new.append(tok)
    return new
