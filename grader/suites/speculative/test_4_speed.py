"""Checks of the speed task: exact counts of target calls, each of a run whose output is checked too
(a loop that returns anything with few calls gains nothing)."""

from __future__ import annotations

import math
import secrets

import numpy as np
import pytest

from grader.jailer import jail_client
from grader.suites import common
from grader.suites.speculative.checks import assert_is_greedy_generation
from grader.suites.speculative.oracles import greedy_target_calls
from grader.suites.speculative.strategies import PROMPT, TINY, tiny
from reference.lm import CachedLM, generate, shipped_model, verify_work
from reference.model import WEIGHTS_DIR, Model

# The shipped pair's check counts target calls against what the greedy rule
# needs, simulated by the suite from the teacher's own greedy text and the
# draft's argmax along it; a near-tie read differently may cost a call.
EXTRA_CALLS = 1  # per prompt
# The shipped pair's target is the teacher with every weight matrix perturbed by this share of its spread,
# drawn afresh each grading: the jail can read the shipped teacher, so a copy of it could write the target's
# greedy text without calling the target; the perturbed teacher's text differs from the teacher's (it did in
# every draw tried at 0.05), while the shipped draft still writes 2.8-3.2 tokens per call of it (2.91 of the
# teacher's own).
SECRET_NOISE = 0.1


def greedy_or_wrong(model: Model, prompt: list[int], got, n_new: int, who: str) -> None:
    """assert_is_greedy_generation, failing as a wrong answer (graded fail), not as a slow one: a count of
    calls says nothing of a run whose output is not the target's."""
    try:
        assert_is_greedy_generation(model, prompt, got, n_new, who)
    except AssertionError as exc:
        raise common.WrongWhileTimed(str(exc)) from None


@pytest.mark.task("speed")
@pytest.mark.speed
@pytest.mark.parametrize("n_new,k", [(12, 1), (20, 4), (23, 4), (9, 8), (0, 4)])
def test_draft_equal_to_target_needs_one_target_call_per_k_plus_one_tokens(kata, n_new, k):
    model = tiny(11)
    target, draft = CachedLM(model), CachedLM(model)
    got, _ = kata.speculative_generate(target, draft, PROMPT, n_new, k=k, temperature=0.0)
    greedy_or_wrong(model, PROMPT, got, n_new, "the target as its own draft")
    expected = math.ceil(n_new / (k + 1))
    assert target.calls == expected, (
        f"with the target as its own draft every draft is accepted, so {n_new} tokens at k = {k} take "
        f"ceil(n_new / (k + 1)) = {expected} target calls; yours made {target.calls}"
    )


def shipped_or_stand_in() -> tuple[Model, Model, list[list[int]]]:
    """The shipped teacher and draft with two validation prompts, or, before
    the weights ship, a random tiny target and a lightly perturbed copy of it."""
    teacher, draft = shipped_model("teacher"), shipped_model("draft")
    if teacher is not None and draft is not None:
        from reference.tokenizer import encode

        text = (WEIGHTS_DIR.parent / "data" / "val.txt").read_text(encoding="ascii")
        prompts = [encode(text[s : s + 32]) for s in (0, 20000)]
        return teacher, draft, prompts
    target = tiny(12)
    gen = common.rng(24)
    noisy = {n: w + 0.15 * w.std() * gen.standard_normal(w.shape).astype(np.float32) for n, w in target.weights.items()}
    return target, Model(TINY, noisy), [PROMPT, [7, 7, 2], [0, 11, 5, 9]]


def secretly_perturbed(model: Model, scale: float = SECRET_NOISE) -> jail_client.SecretModel:
    """model with every weight but the norm gains moved by normal noise of `scale` times its own spread, drawn
    from fresh entropy: a model no jail can rebuild (a SecretModel never crosses), close enough to the original
    that a draft of it still drafts well for this one."""
    gen = np.random.default_rng(secrets.randbits(128))
    weights = {
        name: w if name.endswith("norm") else w + np.float32(scale * w.std()) * gen.standard_normal(w.shape, np.float32)
        for name, w in model.weights.items()
    }
    return jail_client.SecretModel(model.config, weights)


@pytest.mark.task("speed")
@pytest.mark.speed
def test_shipped_draft_saves_the_teacher_calls_the_greedy_rule_allows(kata):
    teacher, draft_model, prompts = shipped_or_stand_in()
    target_model = secretly_perturbed(teacher)
    n_new, k, calls, needed = 32, 4, 0, 0
    for prompt in prompts:
        target = CachedLM(target_model)
        got, _ = kata.speculative_generate(target, CachedLM(draft_model), prompt, n_new, k=k, temperature=0.0)
        greedy_or_wrong(target_model, prompt, got, n_new, "the shipped draft")
        calls += target.calls
        needed += greedy_target_calls(target_model, draft_model, prompt, n_new, k)
    made = n_new * len(prompts)
    common.figure(
        "tokens per call of a secretly perturbed teacher, shipped draft at k = 4",
        made / max(calls, 1),
        made / (needed + EXTRA_CALLS * len(prompts)),
        unit="tokens/call",
        key="tokens_per_call",
    )
    # What a round's verifying call costs the target: k + 1 of its own greedy tokens scored at once.
    ratio, experts = verify_work(teacher, prompts[0], generate(CachedLM(teacher), prompts[0], k + 1))
    common.figure("weights a verifying call reads / a one-token call's", ratio, unit="x", key="verify_bytes")
    common.figure("experts a verifying call runs per layer", experts, unit="experts", key="verify_experts")
    assert calls <= needed + EXTRA_CALLS * len(prompts), (
        f"greedy at k = {k} the draft's correct guesses let the teacher write {made} tokens in {needed} target calls "
        f"({made / needed:.2f} tokens per call); yours made {calls} calls ({made / calls:.2f} tokens per call)"
    )
