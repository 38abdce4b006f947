"""The model's one-token fast paths equal the plain paths beside them
(benchmarks/bench_fast_paths.py measures what they save), in values up to
float32 rounding and in the work they count, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from reference.lm import shipped_model
from reference.model import Config, Model, _rms_norm_one_row, rms_norm

# One row through a fused product, a dot product or Python floats against the
# plain operations: the same sums in another order, on activations of order 1.
FAST_ATOL = 1e-5
FAST_RTOL = 1e-5

DENSE = Config(vocab_size=32, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=24, max_seq_len=16)
GQA = Config(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24, max_seq_len=16)
MOE = Config(
    vocab_size=32, d_model=16, n_layers=2, n_heads=4, n_kv_heads=1, d_ff=16, max_seq_len=16, n_experts=4, top_k=2
)
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


def one_row(model: Model, seed: int) -> np.ndarray:
    """A random row (1, D) of the residual stream's scale."""
    return np.random.default_rng(seed).standard_normal((1, model.config.d_model)).astype(np.float32)


def counted(model: Model, fn):
    """fn()'s result and the Work the model counted while it ran."""
    with model.count_work() as work:
        out = fn()
    return out, work


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
    fast, fast_work = counted(model, lambda: model._qkv_one_token(h, wqkv, position))
    plain, plain_work = counted(model, lambda: model._qkv_rows(layer, h, np.array([position])))
    for got, expected in zip(fast, plain):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=FAST_RTOL, atol=FAST_ATOL)
    assert fast_work == plain_work


@EACH_MODEL
@pytest.mark.parametrize("seed", range(3))
def test_one_token_mlp_equals_the_plain_mlp_and_counts_the_same_work(model, seed):
    layer, h = seed % model.config.n_layers, one_row(model, seed)
    gate_up = model._joined_weights(f"layers.{layer}.w_gate", f"layers.{layer}.w_up")
    fast, fast_work = counted(model, lambda: model._mlp_one_token(layer, h, gate_up))
    plain, plain_work = counted(model, lambda: model._mlp_rows(layer, h))
    assert fast.shape == plain.shape
    np.testing.assert_allclose(fast, plain, rtol=FAST_RTOL, atol=FAST_ATOL)
    assert fast_work == plain_work


def test_an_moe_token_tied_between_experts_goes_to_the_lower_index_on_both_paths():
    model = Model.random(MOE, seed=7)
    model.weights["layers.0.router"][:] = 0  # every logit equal: experts 0 and 1
    h = one_row(model, 8)
    gate_up = model._joined_weights("layers.0.w_gate", "layers.0.w_up")
    fast, fast_work = counted(model, lambda: model._mlp_one_token(0, h, gate_up))
    plain, plain_work = counted(model, lambda: model._mlp_rows(0, h))
    np.testing.assert_allclose(fast, plain, rtol=FAST_RTOL, atol=FAST_ATOL)
    assert fast_work == plain_work


def test_a_weight_replaced_by_another_dtype_runs_the_plain_path_and_one_of_its_shape_rejoins():
    model = Model.random(DENSE, seed=9)
    model.weights["layers.0.wq"] = model.weights["layers.0.wq"].astype(np.float16)
    assert model._joined_weights("layers.0.wq", "layers.0.wk", "layers.0.wv") is None
    model.weights["layers.0.wq"] = model.weights["layers.0.wq"].astype(np.float32)
    joined = model._joined_weights("layers.0.wq", "layers.0.wk", "layers.0.wv")
    assert joined is not None and model.weights["layers.0.wq"].base is joined
