"""Public checks of the sensitive task: mixed-precision plans worked out by hand for two or three
weights, the sensitivity of a model whose weights all lie on the 4-bit grid but one (quantizing
the others changes nothing, so only that one moves the predictions, by a KL the check measures on
the two models it built), and quantize_model_mixed's widths and input read off the values it
returns. They need no oracle, so the student edition ships them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.suites.common import rng
from grader.suites.quantization.strategies import MIXED_GROUP, MODEL_CONFIG, _linear_names, _with
from reference.model import Model

# The sensitivity of the weight off its grid may differ from the KL the check measures by this share (the
# learner's grid values may differ from the check's in the last place of float32); the others may be this far
# from 0 nats.
GRID_RTOL = 1e-4
GRID_ATOL = 1e-9
OFF_GRID = 0.45  # the weight off the grid sits up to this many steps from its grid value (less than half)

# Plans worked out by hand, groups of 32 (a weight of n values at b bits costs n * b / 8 bytes plus 2 per group).
# Two weights: wq of 64 values (least 16 + 4 = 20 bytes at 2 bits) and out of 32 (8 + 2 = 10), 30 bytes at
# least. Upgrades cost wq 16 bytes (2 -> 4) and 32 (4 -> 8), out 8 and 16.
TWO = {"wq": 64, "out": 32}
TWO_SENSITIVITY = {2: {"wq": 0.9, "out": 0.6}, 4: {"wq": 0.3, "out": 0.2}, 8: {"wq": 0.0, "out": 0.1}}
# Drops per extra byte: out 2 -> 4 0.4 / 8 = 0.05, wq 2 -> 4 0.6 / 16 = 0.0375, wq 4 -> 8 0.3 / 32 = 0.0094,
# out 4 -> 8 0.1 / 16 = 0.0063: the order of the upgrades, each made while it fits: out (38 bytes spent),
# wq (54), wq (86), out (102).
PLANS = {
    # out -> 4 (38); wq -> 4 would spend 54 and out -> 8 54: neither fits in 46, nor in 52
    "budget 46": (TWO, TWO_SENSITIVITY, 46, (2, 4, 8), {"wq": 2, "out": 4}),
    "budget 52": (TWO, TWO_SENSITIVITY, 52, (2, 4, 8), {"wq": 2, "out": 4}),
    # out -> 4 (38), wq -> 4 (54); wq -> 8 (86) and out -> 8 (70) do not fit: each moves one choice up
    "budget 60": (TWO, TWO_SENSITIVITY, 60, (2, 4, 8), {"wq": 4, "out": 4}),
    "budget 1000": (TWO, TWO_SENSITIVITY, 1000, (2, 4, 8), {"wq": 8, "out": 8}),
    # equal drops per byte: the name that sorts first, a, takes the one upgrade 28 bytes allow (20 + 8)
    "a tie": ({"b": 32, "a": 32}, {2: {"b": 0.5, "a": 0.5}, 4: {"b": 0.1, "a": 0.1}}, 28, (2, 4), {"b": 2, "a": 4}),
    # least 40 + 10 = 50: big's upgrade (+32) does not fit in 60, small's (+8) does
    "the first name's upgrade does not fit": (
        {"big": 128, "small": 32},
        {2: {"big": 1.0, "small": 0.5}, 4: {"big": 0.0, "small": 0.0}},
        60,
        (2, 4),
        {"big": 2, "small": 4},
    ),
}


@pytest.mark.task("sensitive")
@pytest.mark.parametrize("case", list(PLANS), ids=str)
def test_mixed_plan_gives_the_plans_worked_out_by_hand(planner, case):
    sizes, sensitivity, budget, choices, want = PLANS[case]
    got = planner.mixed_precision_plan(sensitivity, sizes, budget, choices=choices)
    assert isinstance(got, dict) and list(got.items()) == list(want.items()), (
        f"mixed_precision_plan with sizes {sizes}, budget {budget} bytes and choices {choices} gave {got!r}; "
        f"worked out by hand ({case}): {want}, in the order of sizes"
    )


def _on_grid(seed: int) -> tuple[Model, str, Model]:
    """(a model whose every linear weight lies on the grid of 4-bit groups of MIXED_GROUP along its input axis
    but the first, which lies up to OFF_GRID steps off it; that first weight's name; the model with it on the
    grid too). Each group's values are whole multiples of a step drawn for it, one of them 7 steps from 0."""
    gen = np.random.default_rng(seed)
    model = Model.random(MODEL_CONFIG, seed=seed)
    names = _linear_names(model)
    grid, off = {}, {}
    for name in names:
        shape = model.weights[name].shape  # (..., in, out)
        groups = (*shape[:-2], shape[-2] // MIXED_GROUP, MIXED_GROUP, shape[-1])
        codes = gen.integers(-6, 7, groups)
        codes[..., 0, :] = 7 * gen.choice([-1, 1], codes[..., 0, :].shape)
        step = gen.uniform(0.5, 1.5, (*groups[:-2], 1, shape[-1])) / (3 * math.sqrt(shape[-2]))
        grid[name] = (codes * step).reshape(shape).astype(np.float32)
        off[name] = ((codes + gen.uniform(-OFF_GRID, OFF_GRID, groups) * (abs(codes) < 7)) * step).reshape(shape)
    first = names[0]
    return _with(model, {**grid, first: off[first].astype(np.float32)}), first, _with(model, grid)


def _mean_kl(p_model: Model, q_model: Model, tokens) -> float:
    """Mean over the positions of KL(p || q) of the two models' next-token distributions, float64."""
    logs = []
    for m in (p_model, q_model):
        z = m.forward(tokens).astype(np.float64)
        z -= z.max(axis=-1, keepdims=True)
        logs.append(z - np.log(np.exp(z).sum(axis=-1, keepdims=True)))
    return float(np.mean(np.sum(np.exp(logs[0]) * (logs[0] - logs[1]), axis=-1)))


@pytest.mark.task("sensitive")
def test_layer_sensitivity_of_a_model_on_the_grid_but_one_weight_is_that_weights_kl(kata):
    # Before: a 2-bit call on the same model, which must leave it as it was (the jail keeps its copy for every
    # later call given it: a call that quantized it would leave every weight on the 4-bit grid).
    model, first, on_grid = _on_grid(seed=11)
    tokens = rng(64).integers(0, MODEL_CONFIG.vocab_size, 24)
    kata.layer_sensitivity(model, tokens, 2, group_size=MIXED_GROUP)
    got = kata.layer_sensitivity(model, tokens, 4, group_size=MIXED_GROUP)
    want = _mean_kl(model, on_grid, tokens)
    assert isinstance(got, dict) and list(got) == _linear_names(model), (
        f"layer_sensitivity must give one KL per linear weight, in the order of model.weights: {list(got)[:4]}..."
    )
    assert math.isclose(float(got[first]), want, rel_tol=GRID_RTOL), (
        f"{first!r}, the one weight off its 4-bit grid, has sensitivity {float(got[first]):.6g} nats; quantizing "
        f"it alone moves the predictions {want:.6g} nats (mean over the positions of KL(float || quantized))"
    )
    moved = {n: float(kl) for n, kl in got.items() if n != first and abs(float(kl)) > GRID_ATOL}
    assert not moved, (
        f"every weight but {first!r} lies on the 4-bit grid, so quantizing it alone changes nothing; yet "
        f"{list(moved)[:3]} have sensitivities {list(moved.values())[:3]} (is each weight quantized alone, the "
        "others left as they were, and the model given left untouched?)"
    )


def _levels_ok(w: np.ndarray, got: np.ndarray, bits: int) -> bool:
    """Whether got lies within half a step of w in every group of MIXED_GROUP along the input axis, and takes
    only the values 0 and +-max|group| at 2 bits."""
    shape = (*w.shape[:-2], w.shape[-2] // MIXED_GROUP, MIXED_GROUP, w.shape[-1])
    w, got = w.astype(np.float64).reshape(shape), np.asarray(got, dtype=np.float64).reshape(shape)
    top = np.abs(w).max(axis=-2, keepdims=True)
    close = np.all(np.abs(got - w) <= top / (2 ** (bits - 1) - 1) / 2 * (1 + 1e-4))
    if bits > 2:
        return bool(close)
    two = np.isclose(np.abs(got), 0, atol=1e-7 * top) | np.isclose(np.abs(got), top, rtol=1e-5)
    return bool(close and two.all())


@pytest.mark.task("sensitive")
def test_quantize_model_mixed_gives_each_weight_the_levels_of_its_planned_bits(kata):
    model = Model.random(MODEL_CONFIG, seed=12)
    names = _linear_names(model)
    plan = {name: 8 if i == 0 else 2 for i, name in enumerate(names)}
    out = kata.quantize_model_mixed(model, plan, group_size=MIXED_GROUP)
    wrong = [n for n in names if not _levels_ok(model.weights[n], out.weights[n], plan[n])]
    assert not wrong, (
        f"{wrong[:3]} are not their planned widths' quantization in groups of {MIXED_GROUP} along the input axis "
        f"(the plan gives {names[0]!r} 8 bits and the others 2: at 2 bits each group holds only 0 and +-max|group|)"
    )


@pytest.mark.task("sensitive")
def test_quantize_model_mixed_leaves_the_model_it_is_given_as_it_was(kata):
    # The jail keeps its copy of the model for every later call given it: a 2-bit call that changed it would
    # leave a later 8-bit call on the 2-bit values.
    model = Model.random(MODEL_CONFIG, seed=13)
    names = _linear_names(model)
    kata.quantize_model_mixed(model, dict.fromkeys(names, 2), group_size=MIXED_GROUP)
    out = kata.quantize_model_mixed(model, dict.fromkeys(names, 8), group_size=MIXED_GROUP)
    wrong = [n for n in names if not _levels_ok(model.weights[n], out.weights[n], 8)]
    assert not wrong, (
        f"after a 2-bit call, quantize_model_mixed at 8 bits gives {wrong[:3]} further than half a step from the "
        "float weights of the model it was given: the first call changed that model"
    )
