"""Checks of the generate task: cached generation equals generate_naive, greedy and
sampled, at the documented work.
"""

from __future__ import annotations

import numpy as np
import pytest

from grader.suites import common
from grader.suites.kv_cache.checks import _refused
from grader.suites.kv_cache.strategies import MAX_SEQ, MODELS, V
from reference.sampling import generate_naive

TIE_TOLERANCE = 1e-4  # logits closer than this to the maximum count as a greedy tie


@pytest.mark.task("generate")
@pytest.mark.parametrize(
    "name,p,n",
    [("dense", 5, 12), ("gqa", 1, 10), ("moe", 9, 15), ("dense", 1, MAX_SEQ - 1), ("gqa", 3, 0)],
    ids=["dense", "gqa 1-token prompt", "moe", "dense fills max_seq_len", "no new tokens"],
)
def test_greedy_generate_matches_generate_naive(kata, name, p, n):
    model = MODELS[name]
    prompt = common.rng(11).integers(0, V, size=p).tolist()
    want = generate_naive(model, prompt, n)
    got = [int(t) for t in kata.generate(model, prompt, n)]
    assert got == want, f"{name} model, greedy, {p}-token prompt: generate gave {got}, generate_naive gave {want}"


@pytest.mark.task("generate")
# a temperature is a number: an int one (2) samples as 2.0 does
@pytest.mark.parametrize("name,temperature", [("dense", 1.0), ("gqa", 0.7), ("moe", 1.5), ("dense", 2)])
def test_sampled_generate_matches_generate_naive_with_the_same_seed(kata, name, temperature):
    model = MODELS[name]
    prompt = common.rng(12).integers(0, V, size=4).tolist()
    seed = int(common.rng(13).integers(2**31))
    want = generate_naive(model, prompt, 16, temperature=temperature, rng=np.random.default_rng(seed))
    got = [int(t) for t in kata.generate(model, prompt, 16, temperature=temperature, rng=np.random.default_rng(seed))]
    assert got == want, (
        f"{name} model at temperature {temperature}: generate gave {got}, generate_naive with the same seed gave "
        f"{want}; call sample_token once per new token on the last position's logits"
    )


@pytest.mark.task("generate")
@pytest.mark.parametrize("p,n", [(1, 10), (6, 9)])
def test_generate_pushes_prompt_plus_n_minus_one_positions_through_each_layer(kata, p, n):
    # Counted on a model the jail can neither read nor rebuild, whose text is checked: the rows pushed through
    # its pieces must be the rows that chose the tokens.
    model = common.secret_model(MODELS["moe"].config)
    prompt = common.rng(14).integers(0, V, size=p).tolist()
    with model.count_work() as work:
        got = [int(t) for t in kata.generate(model, prompt, n)]
    want = {layer: p + n - 1 for layer in range(model.config.n_layers)}
    naive = n * p + n * (n - 1) // 2
    assert work.positions == want, (
        f"generating {n} tokens after a {p}-token prompt pushed {work.positions} token positions through the "
        f"layers, expected {p + n - 1} per layer (the prompt once, then each new token but the last once); "
        f"the naive path pushes {naive}"
    )
    _assert_greedy_text(model, prompt, got, n)


def _assert_greedy_text(model, prompt: list[int], got: list[int], n: int) -> None:
    """got must be model's greedy continuation of prompt: generate_naive's n tokens, except that a near-tie
    (within TIE_TOLERANCE) may go either way, since the model is new at every grading."""
    naive = generate_naive(model, prompt, n)
    if got == naive:
        return
    what = f"greedy, {len(prompt)}-token prompt: generate gave {got}, generate_naive gave {naive}"
    assert len(got) == n and all(0 <= t < V for t in got), what
    rows = model.forward(prompt + got)[len(prompt) - 1 : len(prompt) - 1 + n].astype(np.float64)  # (n, V)
    gaps = rows.max(axis=1) - rows[np.arange(n), got]
    assert np.all(gaps <= TIE_TOLERANCE), (
        f"{what}: the tokens must come from the logits of the rows pushed through the model's pieces"
    )


@pytest.mark.task("generate")
@pytest.mark.parametrize(
    "prompt,n,temperature",
    [
        ([1, 2], -1, 0.0),
        ([1, 2], MAX_SEQ - 1, 0.0),
        ([1, 2], 3, -1.0),
        ([1, 2], 3, 1.0),
        ([1, 2], 0, -1.0),
        ([1] * (MAX_SEQ + 1), 0, 0.0),
    ],
    ids=[
        "negative n_new",
        "past max_seq_len",
        "negative temperature",
        "temperature 1 without an rng",
        "negative temperature, no new tokens",
        "a prompt past max_seq_len, no new tokens",
    ],
)
def test_generate_rejects_bad_arguments(kata, prompt, n, temperature):
    _refused(
        ValueError,
        lambda: kata.generate(MODELS["dense"], prompt, n, temperature=temperature),
        f"generate(model, {prompt}, {n}, temperature={temperature}) with max_seq_len={MAX_SEQ}",
    )
