"""The training script's PyTorch model computes what the NumPy reference computes.

tools/train.py trains `TorchModel` and exports its weights for
reference.model.Model; the shipped weights only mean what they were trained
to mean if both give the same logits for the same weights. Skipped where
torch is not installed (it is only in the optional `train` extra).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from reference.model import Config, Model
from reference.tokenizer import encode

torch = pytest.importorskip("torch")

TRAIN_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "train.py"
# float32 against float32 with different summation orders, on logits of order 1-10.
LOGITS_ATOL = 1e-4
LOGITS_RTOL = 1e-4

DENSE = Config(vocab_size=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=24)
MOE = Config(
    vocab_size=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=1, d_ff=24, max_seq_len=24, n_experts=4, top_k=2
)


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("train", TRAIN_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_logits(train, model: Model, tokens: np.ndarray) -> np.ndarray:
    torch_model = train.TorchModel.from_reference(model)
    with torch.no_grad():
        return torch_model(torch.from_numpy(tokens)[None])[0].numpy()


@pytest.mark.parametrize("config", [DENSE, MOE], ids=["dense", "moe"])
def test_random_model_gives_the_same_logits_in_torch_and_numpy(train, config):
    model = Model.random(config, seed=3)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, size=config.max_seq_len)
    np.testing.assert_allclose(
        torch_logits(train, model, tokens), model.forward(tokens), rtol=LOGITS_RTOL, atol=LOGITS_ATOL
    )


@pytest.mark.parametrize("name", ["teacher", "draft"])
def test_shipped_model_gives_the_same_logits_in_torch_and_numpy(train, name):
    model = Model.pretrained(name)
    text = (Path(__file__).resolve().parents[2] / "reference" / "data" / "val.txt").read_text(encoding="ascii")
    tokens = np.array(encode(text[: model.config.max_seq_len]))
    np.testing.assert_allclose(
        torch_logits(train, model, tokens), model.forward(tokens), rtol=LOGITS_RTOL, atol=LOGITS_ATOL
    )


def test_batched_rows_match_single_sequences(train):
    model = Model.random(MOE, seed=4)
    tokens = np.random.default_rng(1).integers(0, MOE.vocab_size, size=(3, MOE.max_seq_len))
    torch_model = train.TorchModel.from_reference(model)
    with torch.no_grad():
        batched = torch_model(torch.from_numpy(tokens)).numpy()
    for row, logits in zip(tokens, batched):
        np.testing.assert_allclose(logits, model.forward(row), rtol=LOGITS_RTOL, atol=LOGITS_ATOL)


def test_exported_model_round_trips_through_the_reference_format(train, tmp_path):
    torch_model = train.init_model(MOE, seed=5)
    path = tmp_path / "m.npz"
    torch_model.to_reference().save(path)
    loaded = Model.load(path)
    for name, weight in loaded.weights.items():
        np.testing.assert_array_equal(weight, torch_model.w(name).detach().numpy())
