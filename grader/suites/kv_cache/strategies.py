"""What the kv_cache checks draw and build: the small random models, the sizes of the raw
cache of the contents checks, random keys and values, orders of updates across layers, and the
updates a cache must refuse.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from grader.suites import common
from reference.model import Config, Model

MAX_SEQ = 24
V = 32


def _model(seed: int, **sizes) -> Model:
    """A random model of vocabulary V and context MAX_SEQ, the other sizes as given."""
    return Model.random(Config(vocab_size=V, n_layers=2, max_seq_len=MAX_SEQ, **sizes), seed=seed)


MODELS = {
    "dense": _model(1, d_model=16, n_heads=2, n_kv_heads=2, d_ff=32),
    "gqa": _model(2, d_model=32, n_heads=4, n_kv_heads=1, d_ff=32),
    "moe": _model(3, d_model=16, n_heads=2, n_kv_heads=1, d_ff=16, n_experts=4, top_k=2),
}
CONFIG_NAMES = list(MODELS)

# A small raw cache for the contents checks: (layers, Hkv, Dh, max_len).
LAYERS, HKV, DH, MAX_LEN = 2, 2, 4, 12
KV_DTYPES = (np.float32, np.float16, np.float64)  # keys and values update takes: any floating dtype


def _kv_pair(rng: np.random.Generator, t: int, hkv: int = HKV, dh: int = DH) -> tuple[np.ndarray, np.ndarray]:
    """Random keys and values (Hkv, t, Dh), float32."""
    return (rng.standard_normal((hkv, t, dh)).astype(np.float32), rng.standard_normal((hkv, t, dh)).astype(np.float32))


# Updates in any order of layers, a layer taking several before the next: (layer, t) each.
layer_orders = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), min_size=1, max_size=10)
ORDER_EXAMPLES = ([(2, 2), (1, 2), (0, 2), (1, 1)], [(0, 1), (0, 2), (1, 3), (2, 1), (2, 2)])


def _bad_updates():
    rng = common.rng(5)
    k, v = _kv_pair(rng, 2)
    return {
        "layer -1": (-1, k, v),
        "layer n_layers": (LAYERS, k, v),
        "too many heads": (0, np.zeros((HKV + 1, 2, DH), np.float32), np.zeros((HKV + 1, 2, DH), np.float32)),
        "wrong head width": (0, np.zeros((HKV, 2, DH + 2), np.float32), np.zeros((HKV, 2, DH + 2), np.float32)),
        "2-D keys": (0, k[0], v[0]),
        "values longer than keys": (0, k, np.zeros((HKV, 3, DH), np.float32)),
        "integer keys": (0, np.ones((HKV, 2, DH), np.int64), np.ones((HKV, 2, DH), np.int64)),
        "integer values": (0, k, np.ones((HKV, 2, DH), np.int64)),
        "one kv head too few": (0, np.zeros((HKV - 1, 2, DH), np.float32), np.zeros((HKV - 1, 2, DH), np.float32)),
        "values shorter than keys": (0, k, np.zeros((HKV, 1, DH), np.float32)),
    }


BAD_UPDATES = _bad_updates()
