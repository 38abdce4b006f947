"""The model's one-token and few-token fast paths equal the plain paths beside
them (benchmarks/bench_fast_paths.py measures what they save), in values up to
float32 rounding and in the work they count, exactly."""

from __future__ import annotations

import numpy as np
import pytest

import reference.model
from reference.lm import CachedLM, shipped_model
from reference.model import FEW_TOKENS, Config, Model, _rms_norm_one_row, rms_norm

from helpers import DENSE, GQA, MOE

# One row through a fused product, a dot product or Python floats against the
# plain operations: the same sums in another order, on activations of order 1.
FAST_ATOL = 1e-5
FAST_RTOL = 1e-5

TOP_ALL = Config(
    vocab_size=32, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=8, max_seq_len=16, n_experts=3, top_k=3
)


def models() -> list[tuple[str, Model]]:
    """Random models of every kind, and the shipped ones where their weights are present."""
    out = [
        (name, Model.random(c, seed=i))
        for i, (name, c) in enumerate([("dense", DENSE), ("gqa", GQA), ("moe", MOE), ("moe-top-all", TOP_ALL)])
    ]
    for name in ("teacher", "draft"):
        model = shipped_model(name)
        if model is not None:
            out.append((name, model))
    return out


MODELS = models()
EACH_MODEL = pytest.mark.parametrize("model", [m for _, m in MODELS], ids=[n for n, _ in MODELS])
MOE_MODELS = [(n, m) for n, m in MODELS if m.config.is_moe]  # a dense MLP has no few-token path: it does not pay
EACH_MOE_MODEL = pytest.mark.parametrize("model", [m for _, m in MOE_MODELS], ids=[n for n, _ in MOE_MODELS])


def one_row(model: Model, seed: int) -> np.ndarray:
    """A random row (1, D) of the residual stream's scale."""
    return few_rows(model, seed, 1)


def few_rows(model: Model, seed: int, T: int) -> np.ndarray:
    """T random rows (T, D) of the residual stream's scale."""
    return np.random.default_rng(seed).standard_normal((T, model.config.d_model)).astype(np.float32)


def counted(model: Model, fn):
    """fn()'s result and the Work the model counted while it ran."""
    with model.count_work() as work:
        out = fn()
    return out, work


def assert_same(model: Model, fast, plain) -> None:
    """The fast path fast() gives the plain path plain()'s arrays (one, or a tuple), shapes and values within
    float32's error, and the model counts the same Work for both."""
    (got, fast_work), (expected, plain_work) = counted(model, fast), counted(model, plain)
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for a, b in pairs:
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=FAST_RTOL, atol=FAST_ATOL)
    assert fast_work == plain_work


@EACH_MODEL
@pytest.mark.parametrize("seed", range(3))
def test_one_row_rms_norm_equals_rms_norm(model, seed):
    x, gain = 3 * one_row(model, seed), one_row(model, seed + 100)
    eps = model.config.norm_eps
    np.testing.assert_allclose(_rms_norm_one_row(x, gain, eps), rms_norm(x, gain, eps), rtol=FAST_RTOL, atol=FAST_ATOL)


@EACH_MODEL
@pytest.mark.parametrize("seed", range(3))
def test_one_token_qkv_equals_the_plain_qkv_and_counts_the_same_work(model, seed):
    c, layer = model.config, seed % model.config.n_layers
    p, h = f"layers.{layer}.", one_row(model, seed)
    position = int(np.random.default_rng(seed).integers(0, c.max_seq_len))
    wqkv = model._joined_weights(p + "wq", p + "wk", p + "wv")
    assert_same(
        model, lambda: model._qkv_one_token(h, wqkv, position), lambda: model._qkv_rows(layer, h, np.array([position]))
    )


@EACH_MODEL
@pytest.mark.parametrize("seed", range(3))
def test_one_token_mlp_equals_the_plain_mlp_and_counts_the_same_work(model, seed):
    layer, h = seed % model.config.n_layers, one_row(model, seed)
    gate_up = model._joined_weights(f"layers.{layer}.w_gate", f"layers.{layer}.w_up")
    assert_same(model, lambda: model._mlp_one_token(layer, h, gate_up), lambda: model._mlp_rows(layer, h))


def test_an_moe_token_tied_between_experts_goes_to_the_lower_index_on_both_paths():
    model = Model.random(MOE, seed=7)
    model.weights["layers.0.router"][:] = 0  # every logit equal: experts 0 and 1
    h = one_row(model, 8)
    gate_up = model._joined_weights("layers.0.w_gate", "layers.0.w_up")
    assert_same(model, lambda: model._mlp_one_token(0, h, gate_up), lambda: model._mlp_rows(0, h))


def test_a_weight_replaced_by_another_dtype_runs_the_plain_path_and_one_of_its_shape_rejoins():
    model = Model.random(DENSE, seed=9)
    model.weights["layers.0.wq"] = model.weights["layers.0.wq"].astype(np.float16)
    assert model._joined_weights("layers.0.wq", "layers.0.wk", "layers.0.wv") is None
    model.weights["layers.0.wq"] = model.weights["layers.0.wq"].astype(np.float32)
    joined = model._joined_weights("layers.0.wq", "layers.0.wk", "layers.0.wv")
    assert joined is not None and np.shares_memory(model.weights["layers.0.wq"], joined)


FEW = pytest.mark.parametrize("T", range(2, FEW_TOKENS + 1))


@EACH_MODEL
@FEW
def test_few_token_qkv_equals_the_plain_qkv_and_counts_the_same_work(model, T):
    c, layer = model.config, T % model.config.n_layers
    p, h = f"layers.{layer}.", few_rows(model, T, T)
    positions = np.random.default_rng(T).choice(c.max_seq_len, size=T, replace=False)
    wqkv = model._joined_weights(p + "wq", p + "wk", p + "wv")
    assert_same(model, lambda: model._qkv_few_tokens(h, wqkv, positions), lambda: model._qkv_rows(layer, h, positions))


@EACH_MOE_MODEL
@FEW
def test_few_token_mlp_equals_the_plain_mlp_and_counts_the_same_work(model, T):
    layer, h = T % model.config.n_layers, few_rows(model, T, T)
    gate_up = model._joined_weights(f"layers.{layer}.w_gate", f"layers.{layer}.w_up")
    assert_same(model, lambda: model._mlp_few_tokens(layer, h, gate_up), lambda: model._mlp_rows(layer, h))


def test_few_moe_tokens_tied_between_experts_go_to_the_lower_indices_on_both_paths():
    model = Model.random(MOE, seed=7)
    model.weights["layers.0.router"][:] = 0  # every logit equal: every token to experts 0 and 1
    h = few_rows(model, 8, 5)
    gate_up = model._joined_weights("layers.0.w_gate", "layers.0.w_up")
    assert_same(model, lambda: model._mlp_few_tokens(0, h, gate_up), lambda: model._mlp_rows(0, h))


@EACH_MODEL
def test_a_forward_pass_of_a_few_tokens_takes_the_fast_paths_and_equals_the_plain_one(model, monkeypatch):
    tokens = np.random.default_rng(3).integers(0, model.config.vocab_size, FEW_TOKENS)
    calls, few = [], Model._mlp_few_tokens
    monkeypatch.setattr(Model, "_mlp_few_tokens", lambda self, *args: calls.append(args[0]) or few(self, *args))
    fast, fast_work = counted(model, lambda: model.forward(tokens))
    assert len(calls) == (model.config.n_layers if model.config.is_moe else 0)
    monkeypatch.setattr(reference.model, "FEW_TOKENS", 1)  # the plain paths, from 2 tokens on
    plain, plain_work = counted(model, lambda: model.forward(tokens))
    assert len(calls) == (model.config.n_layers if model.config.is_moe else 0)
    np.testing.assert_allclose(fast, plain, rtol=1e-4, atol=1e-4)
    assert fast_work == plain_work


@pytest.mark.skipif(shipped_model("teacher") is None, reason="the shipped teacher's weights are missing")
def test_the_teachers_verify_steps_pick_the_same_greedy_tokens_with_and_without_the_few_token_paths(monkeypatch):
    teacher = shipped_model("teacher")
    tokens = generate_greedy(teacher, list(range(10, 30)), 40)
    monkeypatch.setattr(reference.model, "FEW_TOKENS", 1)
    assert generate_greedy(teacher, list(range(10, 30)), 40) == tokens


def generate_greedy(model: Model, prompt: list[int], n_new: int) -> list[int]:
    """prompt continued greedily by n_new tokens, scored as a speculative decoder's verify
    steps do: the continuation so far plus 2 .. FEW_TOKENS guessed tokens at a call."""
    lm, tokens, size = CachedLM(model), list(prompt), 2
    while len(tokens) < len(prompt) + n_new:
        guesses = [(tokens[-1] + i) % model.config.vocab_size for i in range(size)]  # a draft's guesses
        argmax = lm.logits(tokens + guesses)[len(tokens) - 1 :].argmax(axis=-1).tolist()  # (size + 1,)
        accepted = next((i for i, g in enumerate(guesses) if argmax[i] != g), size)
        tokens += guesses[:accepted] + [argmax[accepted]]
        size = 2 + (size - 1) % (FEW_TOKENS - 1)  # 2, 3, .., FEW_TOKENS, 2, ..
    return tokens
