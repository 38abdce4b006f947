"""What the quantization checks draw and build: bits, tensors of any shape and float dtype, a
tensor with one bad value, the small models (and their sizes) of the model, sensitivity
and AWQ checks, and the AWQ checks' models with outlier channels.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference.model import Config, Model

BITS = st.integers(2, 8)
# Zero, or a magnitude in [1e-3, 100]: no subnormals, whose scales lose precision.
VALUE = st.one_of(st.just(0.0), st.floats(1e-3, 100.0), st.floats(-100.0, -1e-3))
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=7)  # "any shape": 0-d too
FLOATS = st.sampled_from([np.float16, np.float32, np.float64])  # "a float array": float16 too


@st.composite
def tensors(draw, shape=SHAPES, dtypes=FLOATS):
    dtype = draw(dtypes)
    return draw(hnp.arrays(dtype, shape, elements=VALUE))


def _one_bad(value: float) -> np.ndarray:
    x = np.ones(8, dtype=np.float32)
    x[3] = value
    return x


MODEL_CONFIG = Config(
    vocab_size=48, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=64, n_experts=4, top_k=2
)
LINEAR = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router", "out")
# Groups of 16: two per input column of the small models' width 32.
MIXED_GROUP = 16
# The calibration and held-out tokens of the small models.
MIXED_TOKENS = 64


def _linear_names(model: Model) -> list[str]:
    return [name for name in model.weights if name.split(".")[-1] in LINEAR]


def _with(model: Model, replaced: dict[str, np.ndarray]) -> Model:
    """A fresh reference Model: model's weights with some replaced."""
    return Model(model.config, {**model.weights, **{n: np.asarray(w) for n, w in replaced.items()}})


OUTLIERS = 4  # outlier channels per RMSNorm of the suite's outlier models
OUTLIER_GAIN = 20.0  # their gain; the rows of the weights that read them are divided by as much


def _outlier_model(config: Config, seed: int) -> Model:
    """A random model computing what Model.random(config, seed) computes, but OUTLIERS channels of every
    RMSNorm gain are OUTLIER_GAIN times larger and the rows of the weights after it that read them as many
    times smaller: large activations meeting small weights, which plain grouped quantization rounds away."""
    w = dict(Model.random(config, seed=seed).weights)
    gen = np.random.default_rng(seed + 100)
    readers = {"attn_norm": ("wq", "wk", "wv"), "mlp_norm": ("router", "w_gate", "w_up")}
    groups = [
        (f"layers.{i}.{norm}", [f"layers.{i}.{n}" for n in names])
        for i in range(config.n_layers)
        for norm, names in readers.items()
    ]
    for norm, names in [*groups, ("norm", ["out"])]:
        channels = gen.choice(config.d_model, OUTLIERS, replace=False)
        w[norm] = w[norm].copy()
        w[norm][channels] *= OUTLIER_GAIN
        for name in names:
            if name in w:  # a dense model has no router
                w[name] = w[name].copy()
                w[name][..., channels, :] /= OUTLIER_GAIN
    return Model(config, w)
