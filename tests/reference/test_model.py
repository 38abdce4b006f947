"""Properties of the reference transformer (reference/model.py).

Most checks compare the float32 model against float64 code written here, one
vector at a time, so that a shared mistake would have to be made twice in two
different ways.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.aligned import ALIGN, aligned
from reference.model import Config, Model, Work, apply_rope, rope_cache, rope_tables, rotate_halves, top_k_route
from reference.solutions import quantization
from reference.solutions.kv_cache import KVCache, forward_cached

from helpers import DENSE, GQA, MOE

# float32 model against float64 code, on logits and activations of order 1.
INDEPENDENT_ATOL = 1e-4
# A cached decode (one token at a time through the pieces) against forward.
CACHED_ATOL = 1e-4
# Rows that should not change may still be computed in a different BLAS
# blocking when other rows change (an MoE expert sees more or fewer rows).
CAUSAL_ATOL = 1e-5
# Attention scores at shifted positions: float32 cos/sin tables differ slightly.
ROPE_ATOL = 1e-4
# One token through the MoE block alone against its row of a batch: the same
# experts and gates, but each expert's matmul has one row instead of several.
ONE_ROW_ATOL = 1e-6

CONFIGS = pytest.mark.parametrize("config", [DENSE, GQA, MOE], ids=["dense", "gqa", "moe"])


def random_tokens(config: Config, T: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, config.vocab_size, size=T)


def random_stream(config: Config, T: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((T, config.d_model)).astype(np.float32)


# ------------------------------------------------- float64 code, one vector at a time


def as_float64(model: Model) -> dict[str, np.ndarray]:
    return {name: w.astype(np.float64) for name, w in model.weights.items()}


def rms_norm_vector(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """One vector (D,) scaled to unit root-mean-square, times weight (D,)."""
    return x / math.sqrt(float(np.mean(x * x)) + eps) * weight


def swiglu_vector(h: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    gate = h @ w_gate
    return (gate / (1.0 + np.exp(-gate)) * (h @ w_up)) @ w_down


def feed_forward_vector(config: Config, w: dict, prefix: str, h: np.ndarray) -> np.ndarray:
    """The dense SwiGLU, or the top-k mixture of SwiGLU experts, for one normed vector h (D,)."""
    if not config.is_moe:
        return swiglu_vector(h, w[prefix + "w_gate"], w[prefix + "w_up"], w[prefix + "w_down"])
    router = h @ w[prefix + "router"]
    probs = np.exp(router - router.max())
    probs = probs / probs.sum()
    chosen = sorted(range(config.n_experts), key=lambda e: -probs[e])[: config.top_k]
    total = sum(probs[e] for e in chosen)
    return sum(
        probs[e] / total * swiglu_vector(h, w[prefix + "w_gate"][e], w[prefix + "w_up"][e], w[prefix + "w_down"][e])
        for e in chosen
    )


def rotate(vec: np.ndarray, position: int, theta: float) -> np.ndarray:
    """Rotary embedding of one head vector (Dh,): dimension i turns with i + Dh/2."""
    half = vec.size // 2
    out = vec.copy()
    for i in range(half):
        angle = position * theta ** (-2.0 * i / vec.size)
        a, b = vec[i], vec[i + half]
        out[i] = a * math.cos(angle) - b * math.sin(angle)
        out[i + half] = a * math.sin(angle) + b * math.cos(angle)
    return out


def loop_forward(model: Model, tokens) -> np.ndarray:
    """Logits (T, V) in float64 with explicit loops over positions and heads."""
    c, w = model.config, as_float64(model)
    Dh, group = c.head_dim, c.n_heads // c.n_kv_heads
    xs = [w["tok_emb"][t].copy() for t in tokens]
    for layer in range(c.n_layers):
        p = f"layers.{layer}."
        qs, ks, vs = [], [], []  # [position][head] -> (Dh,)
        for pos, x in enumerate(xs):
            h = rms_norm_vector(x, w[p + "attn_norm"], c.norm_eps)
            q, k, v = h @ w[p + "wq"], h @ w[p + "wk"], h @ w[p + "wv"]
            qs.append([rotate(q[i * Dh : (i + 1) * Dh], pos, c.rope_theta) for i in range(c.n_heads)])
            ks.append([rotate(k[j * Dh : (j + 1) * Dh], pos, c.rope_theta) for j in range(c.n_kv_heads)])
            vs.append([v[j * Dh : (j + 1) * Dh] for j in range(c.n_kv_heads)])
        new_xs = []
        for pos, x in enumerate(xs):
            heads = []
            for i in range(c.n_heads):
                j = i // group
                scores = [float(qs[pos][i] @ ks[s][j]) / math.sqrt(Dh) for s in range(pos + 1)]
                top = max(scores)
                e = [math.exp(score - top) for score in scores]
                heads.append(sum(e[s] / sum(e) * vs[s][j] for s in range(pos + 1)))
            x = x + np.concatenate(heads) @ w[p + "wo"]
            x = x + feed_forward_vector(c, w, p, rms_norm_vector(x, w[p + "mlp_norm"], c.norm_eps))
            new_xs.append(x)
        xs = new_xs
    return np.array([rms_norm_vector(x, w["norm"], c.norm_eps) @ w["out"] for x in xs])


def softmax_rows(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ------------------------------------------------------------------ forward


@CONFIGS
def test_one_token_forward_equals_its_pieces_applied_by_hand(config):
    # With one token, attention has one key: each head returns its value vector.
    model = Model.random(config, seed=1)
    c, w = config, as_float64(model)
    token = 5
    x = w["tok_emb"][token]
    for layer in range(c.n_layers):
        p = f"layers.{layer}."
        v = rms_norm_vector(x, w[p + "attn_norm"], c.norm_eps) @ w[p + "wv"]
        heads = v.reshape(c.n_kv_heads, c.head_dim)[np.arange(c.n_heads) // (c.n_heads // c.n_kv_heads)]
        x = x + heads.reshape(-1) @ w[p + "wo"]
        x = x + feed_forward_vector(c, w, p, rms_norm_vector(x, w[p + "mlp_norm"], c.norm_eps))
    expected = rms_norm_vector(x, w["norm"], c.norm_eps) @ w["out"]
    np.testing.assert_allclose(model.forward([token])[0], expected, atol=INDEPENDENT_ATOL)


@CONFIGS
@pytest.mark.parametrize("T", [2, 5, 8, 10], ids=["two-rows", "five-rows", "eight-rows", "ten-rows"])
def test_forward_agrees_with_per_head_per_position_loops_in_float64(config, T):
    model = Model.random(config, seed=2)
    tokens = random_tokens(config, T, seed=3)
    np.testing.assert_allclose(model.forward(tokens), loop_forward(model, tokens), atol=INDEPENDENT_ATOL)


@CONFIGS
def test_decoding_one_token_at_a_time_through_the_pieces_reproduces_forward(config):
    model = Model.random(config, seed=4)
    tokens = random_tokens(config, 9, seed=5)
    ks = [np.zeros((config.n_kv_heads, 0, config.head_dim), np.float32) for _ in range(config.n_layers)]
    vs = [k.copy() for k in ks]
    rows = []
    for t, token in enumerate(tokens):
        x = model.embed([token])  # (1, D)
        for layer in range(config.n_layers):
            q, k, v = model.qkv(layer, x, [t])
            ks[layer] = np.concatenate([ks[layer], k], axis=1)
            vs[layer] = np.concatenate([vs[layer], v], axis=1)
            x = x + model.attend(layer, q, ks[layer], vs[layer], [t], np.arange(t + 1))
            x = x + model.mlp(layer, x)
        rows.append(model.logits(x)[0])
    np.testing.assert_allclose(np.array(rows), model.forward(tokens), atol=CACHED_ATOL)


@st.composite
def small_configs(draw) -> Config:
    n_kv_heads = draw(st.integers(1, 2))
    n_heads = n_kv_heads * draw(st.integers(1, 2))
    n_experts = draw(st.sampled_from([0, 2, 3]))
    return Config(
        vocab_size=draw(st.integers(2, 32)),
        d_model=n_heads * draw(st.sampled_from([2, 4, 8])),
        n_layers=draw(st.integers(1, 2)),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=draw(st.sampled_from([4, 8, 16])),
        max_seq_len=12,
        n_experts=n_experts,
        top_k=draw(st.integers(1, n_experts)) if n_experts else 0,
    )


@st.composite
def edited_sequences(draw):
    """A config, a sequence, a position t >= 1 and the sequence with token t replaced."""
    config = draw(small_configs())
    V = config.vocab_size
    tokens = draw(st.lists(st.integers(0, V - 1), min_size=2, max_size=config.max_seq_len))
    t = draw(st.integers(1, len(tokens) - 1))
    edited = list(tokens)
    edited[t] = (tokens[t] + draw(st.integers(1, V - 1))) % V
    return config, tokens, t, edited


@given(edited_sequences(), st.integers(0, 2**16))
def test_changing_token_t_never_changes_logits_before_t(case, seed):
    config, tokens, t, edited = case
    model = Model.random(config, seed)
    np.testing.assert_allclose(model.forward(edited)[:t], model.forward(tokens)[:t], rtol=0, atol=CAUSAL_ATOL)


# ---------------------------------------------------------------- attention

ROPE_MODEL = Model.random(
    Config(vocab_size=16, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=8, max_seq_len=256), seed=6
)


def attention_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Unscaled scores (H, Tq, Tk): query head h against key head h // (H // Hkv)."""
    group = q.shape[0] // k.shape[0]
    return np.stack([q[h] @ k[h // group].T for h in range(q.shape[0])])


@given(st.integers(1, 16), st.integers(1, 240), st.integers(0, 2**16))
def test_shifting_all_positions_by_a_constant_leaves_attention_scores_unchanged(T, shift, seed):
    x = random_stream(ROPE_MODEL.config, T, seed)
    positions = np.arange(T)
    q, k, _ = ROPE_MODEL.qkv(0, x, positions)
    q_shifted, k_shifted, _ = ROPE_MODEL.qkv(0, x, positions + shift)
    np.testing.assert_allclose(attention_scores(q_shifted, k_shifted), attention_scores(q, k), rtol=0, atol=ROPE_ATOL)


@pytest.mark.parametrize("head_dim, theta, max_seq_len", [(2, 10000.0, 16), (8, 500.0, 64), (32, 10000.0, 256)])
def test_the_cached_rotary_tables_are_rope_tables_bit_for_bit_at_any_positions(head_dim, theta, max_seq_len):
    cos2, sin2 = rope_cache(max_seq_len, head_dim, theta)
    rng = np.random.default_rng(head_dim)
    for positions in (np.arange(max_seq_len), np.array([max_seq_len - 1]), rng.integers(0, max_seq_len, 7)):
        cos, sin = rope_tables(positions, head_dim, theta)
        assert np.array_equal(cos2[positions], np.stack([cos, cos], axis=1))
        assert np.array_equal(sin2[positions], np.stack([-sin, sin], axis=1))


def test_the_cached_rotary_tables_are_read_only():
    cos2, sin2 = rope_cache(16, 8, 10000.0)
    assert not cos2.flags.writeable and not sin2.flags.writeable


@given(st.integers(1, 4), st.integers(0, 9), st.sampled_from([2, 8, 32]), st.integers(0, 2**16))
def test_rotating_halves_with_the_cached_tables_is_apply_rope_bit_for_bit(heads, T, head_dim, seed):
    rng = np.random.default_rng(seed)
    x = (10 * rng.standard_normal((T, heads, head_dim))).astype(np.float32).transpose(1, 0, 2)  # as qkv makes it
    positions = rng.integers(0, 64, T)
    cos2, sin2 = rope_cache(64, head_dim, 10000.0)
    expected = apply_rope(x, *rope_tables(positions, head_dim, 10000.0))
    assert np.array_equal(rotate_halves(x, cos2[positions], sin2[positions]), expected)


def test_with_as_many_kv_heads_as_heads_attention_is_plain_multi_head_attention():
    config = Config(vocab_size=16, d_model=16, n_layers=1, n_heads=4, n_kv_heads=4, d_ff=8, max_seq_len=16)
    model = Model.random(config, seed=7)
    T, Dh = 7, config.head_dim
    positions = np.arange(T)
    q, k, v = model.qkv(0, random_stream(config, T, seed=8), positions)
    q64, k64, v64 = q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    heads = []
    for h in range(config.n_heads):  # each head with its own keys and values
        scores = np.where(future, -np.inf, q64[h] @ k64[h].T / math.sqrt(Dh))
        heads.append(softmax_rows(scores) @ v64[h])  # (T, Dh)
    expected = np.concatenate(heads, axis=1) @ model.weights["layers.0.wo"].astype(np.float64)
    np.testing.assert_allclose(model.attend(0, q, k, v, positions, positions), expected, atol=INDEPENDENT_ATOL)


def test_moe_routing_to_every_expert_equals_the_full_softmax_mixture_of_experts():
    config = Config(
        vocab_size=16, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=12, max_seq_len=16, n_experts=3, top_k=3
    )
    model = Model.random(config, seed=9)
    w, p = as_float64(model), "layers.0."
    x = random_stream(config, 6, seed=10)
    expected = []
    for row in x.astype(np.float64):
        h = rms_norm_vector(row, w[p + "mlp_norm"], config.norm_eps)
        probs = softmax_rows(h @ w[p + "router"])
        expected.append(
            sum(
                probs[e] * swiglu_vector(h, w[p + "w_gate"][e], w[p + "w_up"][e], w[p + "w_down"][e])
                for e in range(config.n_experts)
            )
        )
    np.testing.assert_allclose(model.mlp(0, x), np.array(expected), atol=INDEPENDENT_ATOL)


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_moe_block_on_one_token_equals_its_row_of_a_batch(top_k):
    config = dataclasses.replace(MOE, top_k=top_k)
    model = Model.random(config, seed=19)
    x = random_stream(config, 12, seed=20)
    batch = model.mlp(1, x)
    rows = np.concatenate([model.mlp(1, x[t : t + 1]) for t in range(12)])
    np.testing.assert_allclose(rows, batch, rtol=0, atol=ONE_ROW_ATOL)


def test_a_few_tokens_count_the_macs_of_their_routed_rows_only():
    model = Model.random(MOE, seed=21)
    with model.count_work() as work:
        model.mlp(0, random_stream(MOE, 3, seed=22))
    D, F, E, K = MOE.d_model, MOE.d_ff, MOE.n_experts, MOE.top_k
    assert dict(work.by_piece) == {"router": 3 * D * E, "experts": 3 * K * 3 * D * F}


def test_a_few_tokens_read_only_the_experts_they_were_routed_to():
    model = Model.random(MOE, seed=21)
    x = np.repeat(random_stream(MOE, 1, seed=22), 3, axis=0)  # three copies of one token: its K experts only
    with model.count_work() as work:
        out = model.mlp(0, x)
    D, F, K = MOE.d_model, MOE.d_ff, MOE.top_k
    assert work.bytes_by_piece["experts"] == K * 3 * D * F * 4
    np.testing.assert_allclose(out, np.repeat(model.mlp(0, x[:1]), 3, axis=0), rtol=0, atol=ONE_ROW_ATOL)


def test_moe_block_on_one_token_counts_the_work_of_its_k_experts():
    model = Model.random(MOE, seed=23)
    with model.count_work() as work:
        model.mlp(0, random_stream(MOE, 1, seed=24))
    D, F, E, K = MOE.d_model, MOE.d_ff, MOE.n_experts, MOE.top_k
    assert dict(work.by_piece) == {"router": D * E, "experts": K * 3 * D * F}


def _double(model: Model, name: str, in_place: bool) -> None:
    if in_place:
        model.weights[name] *= 2
    else:
        model.weights[name] = 2 * model.weights[name]  # as quantize_model does to a copy


@pytest.mark.parametrize("T", [1, 5], ids=["one-token", "five-tokens"])
@pytest.mark.parametrize(
    "name, in_place",
    [(n, False) for n in ("layers.0.wv", "layers.1.w_up", "out")]
    + [(n, True) for n in ("layers.0.wo", "layers.1.w_gate", "layers.0.mlp_norm")],
    ids=lambda v: v if isinstance(v, str) else ("edited in place" if v else "replaced"),
)
def test_a_weight_replaced_or_edited_in_place_after_construction_is_the_weight_used(name, in_place, T):
    model = Model.random(MOE, seed=25)
    tokens = random_tokens(MOE, T, seed=26)
    before = model.forward(tokens)
    _double(model, name, in_place)
    expected = Model(MOE, model.weights).forward(tokens)
    assert not np.allclose(before, expected, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(model.forward(tokens), expected, rtol=0, atol=0)


# --------------------------------------------------------------- save / load


def test_save_then_load_round_trips_config_and_weights_exactly(tmp_path):
    model = Model.random(MOE, seed=11)
    model.save(tmp_path / "m.npz")
    loaded = Model.load(tmp_path / "m.npz")
    assert loaded.config == model.config
    assert loaded.weights.keys() == model.weights.keys()
    for name, w in model.weights.items():
        assert loaded.weights[name].dtype == np.float32
        assert np.array_equal(loaded.weights[name], w), name


def test_a_float16_save_loads_as_float32_holding_the_rounded_weights(tmp_path):
    model = Model.random(GQA, seed=12)
    model.save(tmp_path / "m16.npz", dtype=np.float16)
    loaded = Model.load(tmp_path / "m16.npz")
    for name, w in model.weights.items():
        assert loaded.weights[name].dtype == np.float32
        assert np.array_equal(loaded.weights[name], w.astype(np.float16).astype(np.float32)), name


# -------------------------------------------------------------- work counter


def closed_form_macs(config: Config, T: int) -> dict[str, int]:
    """Multiply-accumulates of forward on T tokens, by piece. Attention counts
    every (query, key) pair of the T x T score matrix, masked ones included."""
    D, H, Hkv, Dh, F = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim, config.d_ff
    per_layer = {
        "qkv": T * D * (H + 2 * Hkv) * Dh,
        "attention": 2 * H * T * T * Dh,  # scores, then the weighted sum of values
        "wo": T * H * Dh * D,
    }
    if config.is_moe:
        per_layer["router"] = T * D * config.n_experts
        per_layer["experts"] = T * config.top_k * 3 * D * F  # every routed row runs gate, up and down
    else:
        per_layer["mlp"] = 3 * T * D * F
    macs = {piece: config.n_layers * n for piece, n in per_layer.items()}
    macs["logits"] = T * D * config.vocab_size
    return macs


WORK_CASES = pytest.mark.parametrize(
    "config, T",
    [(DENSE, 1), (DENSE, 16), (GQA, 7), (MOE, 1), (MOE, 11)],
    ids=["dense1", "dense16", "gqa7", "moe1", "moe11"],
)


@WORK_CASES
def test_macs_by_piece_equal_the_closed_form_count(config, T):
    model = Model.random(config, seed=13)
    with model.count_work() as work:
        model.forward(random_tokens(config, T, seed=14))
    assert dict(work.by_piece) == closed_form_macs(config, T)


@WORK_CASES
def test_total_macs_equal_the_sum_of_the_closed_form_count(config, T):
    model = Model.random(config, seed=13)
    with model.count_work() as work:
        model.forward(random_tokens(config, T, seed=14))
    assert work.macs == sum(closed_form_macs(config, T).values())


@WORK_CASES
def test_every_layer_counts_each_token_position_once(config, T):
    model = Model.random(config, seed=13)
    with model.count_work() as work:
        model.forward(random_tokens(config, T, seed=14))
    assert work.positions == {layer: T for layer in range(config.n_layers)}


def test_a_models_work_counter_never_counts_another_models_work():
    a, b = Model.random(DENSE, seed=15), Model.random(DENSE, seed=15)
    tokens = random_tokens(DENSE, 5)
    with a.count_work() as work_a, b.count_work() as work_b:
        b.forward(tokens)
        b.forward(tokens)
        a.forward(tokens)
    assert work_a.macs == sum(closed_form_macs(DENSE, 5).values())
    assert work_b.macs == 2 * work_a.macs


def test_nested_work_counters_each_count_exactly_the_work_inside_them():
    model = Model.random(DENSE, seed=16)
    tokens = random_tokens(DENSE, 5)
    one_forward = sum(closed_form_macs(DENSE, 5).values())
    with model.count_work() as outer:
        with model.count_work() as inner:
            model.forward(tokens)
        model.forward(tokens)
    model.forward(tokens)
    assert (outer.macs, inner.macs) == (2 * one_forward, one_forward)


# ---------------------------------------------------------- bytes read


FLOAT32 = 4  # bytes a value


def closed_form_bytes(config: Config, T: int, Tk: int, distinct_tokens: int, experts_run: int) -> dict[str, int]:
    """Bytes of float32 weights, keys and values a forward on T new tokens
    reads, by piece, attending over Tk keys in every layer, looking up
    distinct_tokens embedding rows and running experts_run experts per MoE
    block. Every weight matrix is read once, whatever T."""
    D, H, Hkv, Dh, F = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim, config.d_ff
    per_layer = {
        "norm": 2 * D,  # attn_norm and mlp_norm
        "qkv": D * (H + 2 * Hkv) * Dh,
        "attention": 2 * Hkv * Tk * Dh,  # keys and values
        "wo": H * Dh * D,
    }
    if config.is_moe:
        per_layer["router"] = D * config.n_experts
        per_layer["experts"] = experts_run * 3 * D * F
    else:
        per_layer["mlp"] = 3 * D * F
    values = {piece: config.n_layers * n for piece, n in per_layer.items()}
    values["norm"] += D  # the final norm
    values["embed"] = distinct_tokens * D
    values["logits"] = D * config.vocab_size
    return {piece: FLOAT32 * n for piece, n in values.items()}


def routed_to_the_first_experts(config: Config, seed: int) -> Model:
    """A random model whose routers are zero: every expert ties, so every
    token runs experts 0 .. K-1 (ties go to the lower index)."""
    model = Model.random(config, seed=seed)
    for layer in range(config.n_layers):
        model.weights[f"layers.{layer}.router"][:] = 0
    return model


PROMPT_LEN = 7
PHASES = pytest.mark.parametrize("phase", ["forward", "prefill", "decode"])


def counted_phase(model: Model, phase: str):
    """(work, T, Tk, distinct tokens) of a forward on PROMPT_LEN tokens, a
    forward_cached prefill of them into an empty cache, or the decode step
    that follows that prefill."""
    tokens = random_tokens(model.config, PROMPT_LEN, seed=27)
    cache = KVCache.for_model(model)
    if phase == "decode":
        forward_cached(model, tokens, cache)
        tokens = tokens[:1]
    with model.count_work() as work:
        if phase == "forward":
            model.forward(tokens)
        else:
            forward_cached(model, tokens, cache)
    Tk = PROMPT_LEN + (phase == "decode")
    return work, tokens.size, Tk, len(set(tokens.tolist()))


@CONFIGS
@PHASES
def test_bytes_by_piece_equal_the_closed_form_count(config, phase):
    model = routed_to_the_first_experts(config, seed=28) if config.is_moe else Model.random(config, seed=28)
    work, T, Tk, distinct = counted_phase(model, phase)
    assert dict(work.bytes_by_piece) == closed_form_bytes(config, T, Tk, distinct, config.top_k)


@CONFIGS
@PHASES
def test_cache_bytes_are_the_keys_and_values_and_weight_bytes_every_other_piece(config, phase):
    model = routed_to_the_first_experts(config, seed=28) if config.is_moe else Model.random(config, seed=28)
    work, T, Tk, distinct = counted_phase(model, phase)
    expected = closed_form_bytes(config, T, Tk, distinct, config.top_k)
    assert work.cache_bytes == expected.pop("attention")
    assert work.weight_bytes == sum(expected.values())


def test_a_decode_step_reads_the_weights_of_only_the_k_experts_its_token_is_routed_to():
    model = Model.random(MOE, seed=29)
    work, _, _, _ = counted_phase(model, "decode")
    D, F, K = MOE.d_model, MOE.d_ff, MOE.top_k
    assert work.bytes_by_piece["experts"] == MOE.n_layers * K * 3 * D * F * FLOAT32


def test_tokens_routed_to_the_same_experts_read_their_weights_once():
    model = routed_to_the_first_experts(MOE, seed=30)
    with model.count_work() as work:
        model.mlp(0, random_stream(MOE, 6, seed=31))
    D, F, E, K = MOE.d_model, MOE.d_ff, MOE.n_experts, MOE.top_k
    assert dict(work.bytes_by_piece) == {
        "norm": D * FLOAT32,
        "router": D * E * FLOAT32,
        "experts": K * 3 * D * F * FLOAT32,
    }


def test_the_embedding_reads_the_row_of_each_distinct_token_once():
    model = Model.random(DENSE, seed=32)
    with model.count_work() as work:
        model.embed([4, 9, 4, 4, 1, 9])
    assert dict(work.bytes_by_piece) == {"embed": 3 * DENSE.d_model * FLOAT32}


def test_a_float16_weight_counts_two_bytes_a_value():
    model = Model.random(DENSE, seed=33)
    for name in ("layers.0.wq", "layers.1.mlp_norm", "out"):
        model.weights[name] = model.weights[name].astype(np.float16)
    tokens = random_tokens(DENSE, 5, seed=34)
    with model.count_work() as work:
        model.forward(tokens)
    D, HDh, V = DENSE.d_model, DENSE.n_heads * DENSE.head_dim, DENSE.vocab_size
    expected = closed_form_bytes(DENSE, 5, 5, len(set(tokens.tolist())), 0)
    expected["qkv"] -= D * HDh * 2  # wq (D, H * Dh) at 2 bytes a value instead of 4
    expected["norm"] -= D * 2
    expected["logits"] = D * V * 2
    assert dict(work.bytes_by_piece) == expected


def test_a_float16_weight_counts_as_many_matmul_weights_as_a_float32_one():
    model = Model.random(DENSE, seed=33)
    tokens = random_tokens(DENSE, 5, seed=34)
    with model.count_work() as before:
        model.forward(tokens)
    model.weights["out"] = model.weights["out"].astype(np.float16)
    with model.count_work() as after:
        model.forward(tokens)
    assert after.matmul_weights == before.matmul_weights


# Input widths (D, F) that are multiples of the 32-value blocks of Q8_0 and Q4_0.
BLOCKED = Config(vocab_size=32, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_seq_len=16)


def test_weight_bytes_at_32_bits_are_the_float32_weight_bytes():
    model = Model.random(BLOCKED, seed=35)
    with model.count_work() as work:
        model.forward(random_tokens(BLOCKED, 5, seed=36))
    assert work.weight_bytes_at(32) == work.weight_bytes


@pytest.mark.parametrize("bits", [0, -4, math.nan, math.inf, "8", None, True])
def test_weight_bytes_at_refuses_a_width_that_is_not_a_finite_number_above_zero(bits):
    with pytest.raises(ValueError, match="bits_per_weight must be a finite number > 0"):  # -4 gave -4.0 bytes
        Work().weight_bytes_at(bits)


@pytest.mark.parametrize(
    "bits_per_weight, quantize",
    [(8.5, quantization.quantize_q8_0), (4.5, quantization.quantize_q4_0)],
    ids=["Q8_0", "Q4_0"],
)
def test_weight_bytes_at_8_5_and_4_5_bits_equal_the_bytes_of_q8_0_and_q4_0_blocks(bits_per_weight, quantize):
    model = Model.random(BLOCKED, seed=35)
    tokens = random_tokens(BLOCKED, 5, seed=36)
    with model.count_work() as work:
        model.forward(tokens)
    blocks = sum(
        len(quantize(np.swapaxes(w, -1, -2).ravel()))  # blocks along the input axis, as llama.cpp's rows
        for name, w in model.weights.items()
        if name.split(".")[-1] in quantization.LINEAR_WEIGHTS
    )
    float32 = closed_form_bytes(BLOCKED, 5, 5, len(set(tokens.tolist())), 0)
    unquantized = float32["embed"] + float32["norm"]  # the embedding rows and norm gains stay float32
    assert work.weight_bytes_at(bits_per_weight) == unquantized + blocks


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "tokens, words",
    [
        ([0, 32], ["token id 32", "index 1", "[0, 32)"]),
        ([-1, 3], ["token id -1", "index 0", "[0, 32)"]),
        ([1.0, 2.0], ["integers", "float64"]),
        (["a", "b"], ["integers"]),
        ([True, False], ["integers", "bool"]),
        ([], ["empty"]),
        ([[1, 2]], ["1-D"]),
        ([1] * 17, ["17 tokens", "max_seq_len=16"]),
    ],
    ids=["too-big", "negative", "floats", "strings", "bools", "empty", "2-d", "too-long"],
)
def test_bad_tokens_raise_a_value_error_that_says_what_is_wrong(tokens, words):
    model = Model.random(DENSE, seed=17)
    with pytest.raises(ValueError) as info:
        model.forward(tokens)
    for word in words:
        assert word in str(info.value)


def test_ids_and_positions_in_the_other_byte_order_are_read_by_value():
    """The range checks view an array as unsigned only in the machine's byte order; another is read by value."""
    model = Model.random(GQA, seed=17)
    other = ">i8" if np.dtype("i8").byteorder in "=<" else "<i8"
    tokens, pos = np.array([3, 1, 4, 1, 5], dtype=other), np.arange(5).astype(other)
    np.testing.assert_array_equal(model.forward(tokens), model.forward([3, 1, 4, 1, 5]))
    x = random_stream(GQA, 5)
    q, k, v = model.qkv(0, x, pos)
    np.testing.assert_array_equal(
        model.attend(0, q, k, v, pos, pos), model.attend(0, q, k, v, np.arange(5), np.arange(5))
    )
    with pytest.raises(ValueError, match="token id 32 at index 1"):
        model.forward(np.array([0, 32, 1], dtype=other))
    with pytest.raises(ValueError, match=r"k_positions .*-1\.\.3"):
        model.attend(0, q, k, v, pos, (pos - 1).astype(other))


def _bad_piece_calls():
    """(id, call(model, x, q, k, v, positions), words the error must contain), for GQA and T = 5."""
    pos = np.arange(5)
    return [
        ("qkv-layer", lambda m, x, q, k, v: m.qkv(2, x, pos), ["layer", "[0, 2)", "got 2"]),
        ("qkv-float-layer", lambda m, x, q, k, v: m.qkv(1.0, x, pos), ["layer", "got 1.0"]),
        ("qkv-bool-layer", lambda m, x, q, k, v: m.qkv(True, x, pos), ["layer", "got True"]),  # it was layer 1
        ("qkv-stream", lambda m, x, q, k, v: m.qkv(0, x[:, :4], pos), ["x must have shape", "D=32", "(5, 4)"]),
        ("qkv-positions", lambda m, x, q, k, v: m.qkv(0, x, pos[:3]), ["positions", "5 integers", "(3,)"]),
        ("qkv-float-positions", lambda m, x, q, k, v: m.qkv(0, x, pos * 1.0), ["positions", "float64"]),
        ("qkv-far-positions", lambda m, x, q, k, v: m.qkv(0, x, pos + 12), ["max_seq_len=16", "12..16"]),
        ("mlp-layer", lambda m, x, q, k, v: m.mlp(-1, x), ["layer", "got -1"]),
        ("mlp-stream", lambda m, x, q, k, v: m.mlp(0, x[0]), ["x must have shape", "(32,)"]),
        ("logits-stream", lambda m, x, q, k, v: m.logits(x[None]), ["x must have shape", "(1, 5, 32)"]),
        # int8 squares overflow in the norm (logits of 4e4), float16's past 256 (all zeros); objects are no numbers
        ("logits-int8", lambda m, x, q, k, v: m.logits(x.astype(np.int8)), ["float32 or float64", "int8"]),
        ("mlp-float16", lambda m, x, q, k, v: m.mlp(0, x.astype(np.float16)), ["float32 or float64", "float16"]),
        ("qkv-objects", lambda m, x, q, k, v: m.qkv(0, x.astype(object), pos), ["float32 or float64", "object"]),
        ("attend-strings", lambda m, x, q, k, v: m.attend(0, q.astype(str), k, v, pos, pos), ["floating", "<U"]),
        ("attend-layer", lambda m, x, q, k, v: m.attend(2, q, k, v, pos, pos), ["layer", "got 2"]),
        ("attend-q", lambda m, x, q, k, v: m.attend(0, k, k, v, pos, pos), ["q must have shape", "H=4"]),
        ("attend-k", lambda m, x, q, k, v: m.attend(0, q, q, q, pos, pos), ["k must have shape", "Hkv=2"]),
        ("attend-v", lambda m, x, q, k, v: m.attend(0, q, k, v[:, :3], pos, pos), ["v must have the shape of k"]),
        ("attend-q-positions", lambda m, x, q, k, v: m.attend(0, q, k, v, pos[:4], pos), ["q_positions", "5 integers"]),
        ("attend-k-positions", lambda m, x, q, k, v: m.attend(0, q, k, v, pos, pos - 1), ["k_positions", "-1..3"]),
        (
            "attend-k-past-max",
            lambda m, x, q, k, v: m.attend(0, q, k, v, pos, np.array([0, 1, 2, 3, 16])),
            ["k_positions", "max_seq_len=16", "0..16"],
        ),
        (
            "attend-no-key",
            lambda m, x, q, k, v: m.attend(0, q[:, :2], k[:, 3:], v[:, 3:], pos[:2], pos[3:]),
            ["position 0 sees no key", "earliest key is at 3"],
        ),
        (
            "attend-zero-keys",
            lambda m, x, q, k, v: m.attend(0, q, k[:, :0], v[:, :0], pos, pos[:0]),
            ["position 0 sees no key", "k holds no keys"],
        ),
    ]


@pytest.mark.parametrize(
    "order", [[0, 4, 3, 2, 1], [4, 3, 2, 1, 0], [1, 0, 2, 4, 3]], ids=["first-0", "reversed", "swaps"]
)
def test_attention_over_keys_in_any_order_is_the_attention_over_them_in_order(order):
    model = Model.random(GQA, seed=17)
    x, pos = random_stream(GQA, 5), np.arange(5)
    q, k, v = model.qkv(0, x, pos)
    shuffled = model.attend(0, q, k[:, order], v[:, order], pos, pos[order])  # the causal mask goes with the keys
    np.testing.assert_allclose(shuffled, model.attend(0, q, k, v, pos, pos), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call, words", [c[1:] for c in _bad_piece_calls()], ids=[c[0] for c in _bad_piece_calls()])
def test_bad_piece_inputs_raise_a_value_error_that_says_what_is_wrong_and_count_no_work(call, words):
    model = Model.random(GQA, seed=17)
    x = random_stream(GQA, 5)
    q, k, v = model.qkv(0, x, np.arange(5))
    with model.count_work() as work, pytest.raises(ValueError) as info:
        call(model, x, q, k, v)
    for word in words:
        assert word in str(info.value)
    assert work.macs == 0 and work.positions == {} and work.bytes_by_piece == {}


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(d_model=16, n_heads=4, n_kv_heads=3), ["n_kv_heads (3)", "divide n_heads (4)"]),
        (dict(d_model=18, n_heads=4, n_kv_heads=2), ["d_model (18)", "divisible by n_heads (4)"]),
        (dict(n_experts=2, top_k=3), ["top_k", "n_experts=2", "got 3"]),
        (dict(n_experts=0, top_k=1), ["top_k", "dense"]),
        (dict(vocab_size=0), ["vocab_size", "positive integer"]),
        (dict(norm_eps=math.inf), ["norm_eps", "finite positive", "inf"]),  # it made every logit 0
        (dict(rope_theta=None), ["rope_theta", "finite positive", "None"]),
        (dict(rope_theta="x"), ["rope_theta", "'x'"]),
        (dict(norm_eps=True), ["norm_eps", "True"]),
    ],
    ids=["kv-heads", "d-model", "top-k-above-experts", "top-k-dense", "vocab", "inf-eps", "none-theta", "str", "bool"],
)
def test_an_inconsistent_config_raises_a_value_error_naming_the_field(fields, words):
    with pytest.raises(ValueError) as info:
        Config(**fields)
    for word in words:
        assert word in str(info.value)


def rewrite_weights_file(path, change) -> None:
    """Apply change(arrays) to the arrays of a saved model and write them back."""
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    change(arrays)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def test_loading_an_array_of_the_wrong_shape_names_the_array_and_both_shapes(tmp_path):
    path = tmp_path / "m.npz"
    Model.random(DENSE, seed=18).save(path)
    rewrite_weights_file(path, lambda a: a.update({"layers.1.wq": np.zeros((16, 8), np.float32)}))
    with pytest.raises(ValueError, match=r"'layers\.1\.wq' has shape \(16, 8\), the config needs \(16, 16\)"):
        Model.load(path)


def test_loading_a_file_missing_an_array_names_the_missing_array(tmp_path):
    path = tmp_path / "m.npz"
    Model.random(DENSE, seed=18).save(path)
    rewrite_weights_file(path, lambda a: a.pop("out"))
    with pytest.raises(ValueError, match=r"missing \['out'\]"):
        Model.load(path)


def test_loading_a_truncated_file_says_it_is_not_a_readable_weights_file(tmp_path):
    path = tmp_path / "m.npz"
    Model.random(DENSE, seed=18).save(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="not a readable weights file"):
        Model.load(path)


def test_loading_a_garbage_file_says_it_is_not_a_readable_weights_file(tmp_path):
    path = tmp_path / "garbage.npz"
    path.write_bytes(b"these are not the weights you are looking for" * 10)
    with pytest.raises(ValueError, match="not a readable weights file"):
        Model.load(path)


def test_loading_a_missing_file_raises_file_not_found_naming_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.npz"):
        Model.load(tmp_path / "nowhere.npz")


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: Model(None, {}), ["config must be a reference.model.Config", "NoneType"]),
        (lambda: Model(GQA, None), ["weights must be a dict", "NoneType"]),
        (lambda: Model.random(GQA, seed="a"), ["seed must be an int >= 0", "'a'"]),
        (lambda: Model.random(GQA, seed=1.5), ["seed", "1.5"]),
        (lambda: Model.random(GQA).save("/nowhere.npz", dtype="foo"), ["float32 or float16", "got 'foo'"]),
        (lambda: Model.load(None), ["path must be a str or a path", "NoneType"]),
        (lambda: Model.pretrained("draft", None), ["weights_dir must be a str or a path"]),
    ],
    ids=["no-config", "no-weights", "str-seed", "float-seed", "save-dtype", "load-none", "pretrained-none"],
)
def test_bad_arguments_of_making_loading_and_saving_a_model_raise_a_value_error_naming_them(call, words):
    with pytest.raises(ValueError) as info:
        call()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("k", [0, -1, 5, 2.0, True], ids=["zero", "negative", "above-E", "float", "bool"])
def test_top_k_route_refuses_a_k_outside_one_to_the_expert_count(k):
    probs = np.full((3, 4), 0.25)
    with pytest.raises(ValueError, match=r"k must be an int in \[1, 4\]"):
        top_k_route(probs, k)


@pytest.mark.parametrize("config", [GQA, MOE], ids=["dense", "moe"])
def test_no_rows_in_gives_no_rows_out_from_every_piece(config):
    model = Model.random(config, seed=3)
    x, none = np.zeros((0, config.d_model), np.float32), np.arange(0)
    q, k, v = model.qkv(0, x, none)
    # the MoE's few-token fast path routes 2..FEW_TOKENS rows; 0 rows failed in it ("not enough values to unpack")
    assert (q.shape, k.shape, v.shape) == (
        (config.n_heads, 0, config.head_dim),
        *[(config.n_kv_heads, 0, config.head_dim)] * 2,
    )
    assert model.mlp(0, x).shape == (0, config.d_model)
    assert model.logits(x).shape == (0, config.vocab_size)
    other = ">i8" if np.dtype("i8").byteorder in "=<" else "<i8"  # no positions, in the byte order read by value
    assert model.qkv(0, x, none.astype(other))[0].shape == q.shape  # it was NumPy's "zero-size array to reduction"


def test_a_float16_width_counts_as_the_same_width_in_float64():
    model = Model.random(BLOCKED, seed=35)
    with model.count_work() as work:
        model.forward(random_tokens(BLOCKED, 5, seed=36))
    assert work.weight_bytes_at(np.float16(8.5)) == work.weight_bytes_at(8.5)  # the float16 product overflowed to inf


@pytest.mark.parametrize("config", [DENSE, MOE], ids=["dense", "moe"])
def test_every_weight_the_model_keeps_whole_and_every_array_it_joins_others_into_lies_on_a_64_byte_boundary(config):
    """A weight 16 bytes off a cache line makes BLAS's products slower (benchmarks/bench_alignment.py); the
    model keeps copies of its own, each aligned, whatever the caller's arrays were."""
    given = Model.random(config, seed=3).weights
    off = {name: aligned(w, 16) for name, w in given.items()}  # the caller's: 16 bytes off, as NumPy may place them
    model = Model(config, off)
    joined = {name: array for names, (array, _) in model._joined.items() for name in names}  # name -> its array
    assert all(w.ctypes.data % ALIGN == 0 for name, w in model.weights.items() if name not in joined)
    assert all(array.ctypes.data % ALIGN == 0 for array in joined.values()) and len(joined) == 5 * config.n_layers
    assert all(
        np.array_equal(model.weights[name], w) and not np.shares_memory(model.weights[name], w)
        for name, w in off.items()
    )


def test_aligned_copies_the_values_as_float32_the_given_bytes_past_a_boundary():
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    for offset in (0, 16, 32):
        y = aligned(x, offset)
        assert y.dtype == np.float32 and y.shape == x.shape and np.array_equal(y, x) and y.flags.c_contiguous
        assert y.ctypes.data % ALIGN == offset and not np.shares_memory(y, x)


@pytest.mark.parametrize("offset", [-4, 2, 64, 4.0, True])
def test_aligned_refuses_an_offset_that_is_not_a_whole_float32_inside_a_boundary(offset):
    with pytest.raises(ValueError, match=r"offset must be a multiple of 4 bytes in \[0, 64\)"):
        aligned(np.zeros(3), offset)
