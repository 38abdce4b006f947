"""Checks of the loop task: speculative_generate is the target's generation, greedy or sampled,
and its stats count the run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader.jailer import jail_client
from grader.suites import common
from grader.suites.speculative.checks import (
    _without_crashing,
    assert_is_greedy_generation,
    chi_square,
    fit_message,
    fits,
)
from grader.suites.speculative.oracles import greedy_target_calls
from grader.suites.speculative.strategies import PROMPT, TINY, tiny
from reference.lm import BigramLM, CachedLM
from reference.model import Model

LOOP_RUNS = 1000  # speculative_generate runs for the loop's distribution check
STATS_TOLERANCE = 1e-9  # for the derived SpecStats properties
# The suite works out the greedy rounds from the draft's logits over the whole text; a loop reads them a call at a
# time, and a near-tie read differently may cost it a call.
NEAR_TIE_CALLS = 1

_isclose = math.isclose


def _refuses(call, what: str) -> None:
    """call() must raise ValueError; another exception or none is a failed check (NotImplementedError passes)."""
    try:
        call()
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as exc:  # the promised refusal is a ValueError
        raise AssertionError(f"{what} raised {type(exc).__name__} ({exc}); it must raise ValueError") from None
    raise AssertionError(f"{what} returned instead of raising ValueError")


class CountedLM:
    """A language model the learner's loop calls back in the judge, which counts the calls."""

    __jail_api__ = ("logits",)

    def __init__(self, lm):
        self.lm, self.calls = lm, 0

    def logits(self, tokens) -> np.ndarray:
        self.calls += 1
        return self.lm.logits(tokens)


class ReversedLM:
    """A deliberately bad draft: it proposes the token the target likes least."""

    __jail_api__ = ("logits",)  # the learner's loop calls this back in the judge

    def __init__(self, target: Model):
        self.lm = CachedLM(target)

    def logits(self, tokens) -> np.ndarray:
        return -self.lm.logits(tokens)


@pytest.mark.task("loop")
@pytest.mark.parametrize("k,temperature", [(1, 0.0), (4, 0.0), (4, 0)])  # an int 0 is greedy as 0.0 is
def test_greedy_output_is_the_target_generation_with_a_random_draft(kata, k, temperature):
    target = tiny(1)
    got, _ = kata.speculative_generate(CachedLM(target), CachedLM(tiny(2)), PROMPT, 20, k=k, temperature=temperature)
    assert_is_greedy_generation(target, PROMPT, got, 20, "a random draft")


@pytest.mark.task("loop")
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_is_the_target_generation_when_the_draft_is_the_target(kata, k):
    target = tiny(3)
    got, _ = kata.speculative_generate(CachedLM(target), CachedLM(target), PROMPT, 20, k=k, temperature=0.0)
    assert_is_greedy_generation(target, PROMPT, got, 20, "the target as its own draft")


@pytest.mark.task("loop")
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_is_the_target_generation_with_a_bad_draft(kata, k):
    target = tiny(4)
    got, _ = kata.speculative_generate(CachedLM(target), ReversedLM(target), PROMPT, 20, k=k, temperature=0.0)
    assert_is_greedy_generation(target, PROMPT, got, 20, "a draft that always proposes the target's least likely token")


@pytest.mark.task("loop")
@pytest.mark.parametrize(
    "n_new,k,temperature", [(0, 4, 1.0), (1, 4, 1.0), (7, 0, 1.0), (9, 3, 0.7), (10, 12, 0.0), (13, 4, 0.0)]
)
def test_generates_exactly_n_new_tokens(kata, n_new, k, temperature):
    got, _ = kata.speculative_generate(
        CachedLM(tiny(5)),
        CachedLM(tiny(6)),
        PROMPT,
        n_new,
        k=k,
        temperature=temperature,
        rng=np.random.default_rng(common.rng(21).integers(2**63)),
    )
    got = [int(t) for t in got]
    assert len(got) == n_new, f"asked for n_new = {n_new} (k = {k}), got {len(got)} tokens"
    assert all(0 <= t < TINY.vocab_size for t in got), f"generated tokens {got} fall outside [0, V={TINY.vocab_size})"


@pytest.mark.task("loop")
@pytest.mark.parametrize("temperature", [0.6, 2])  # a temperature is a number: an int one samples as that float
def test_sampled_first_two_tokens_are_distributed_as_the_target_own_sampling(kata, temperature):
    V = 5
    gen = common.rng(22)
    target, draft = BigramLM(gen.normal(0, 1.5, (V, V))), BigramLM(gen.normal(0, 1.5, (V, V)))
    prompt = [2, 0, 3]

    def probs(logits):
        z = np.asarray(logits, dtype=np.float64) / temperature
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    first = probs(target.table[prompt[-1]])  # (V,)
    joint = first[:, None] * probs(target.table)  # (V, V): P(t1, t2) of the target sampling alone
    counts = np.zeros((V, V), dtype=np.int64)
    learner_rng = np.random.default_rng(gen.integers(2**63))
    runs = jail_client.call_many(
        kata.speculative_generate,
        [(target, draft, prompt, 3)] * LOOP_RUNS,
        k=2,
        temperature=temperature,
        rng=learner_rng,
    )
    for tokens, _ in runs:
        counts[int(tokens[0]), int(tokens[1])] += 1
    stat, df, note = chi_square(counts, joint)
    assert fits(stat, df) and not note, fit_message(
        f"at temperature {temperature} the first two tokens (t1, t2) are not distributed as the target's own sampling "
        f"(counts over t1 * V + t2)",
        stat,
        df,
        note,
        counts,
        joint,
    )


@pytest.mark.task("loop")
@pytest.mark.parametrize("temperature,same", [(0.0, False), (1.0, False), (0.0, True)])
def test_stats_count_the_calls_and_drafts_of_the_run(kata, temperature, same):
    target = CachedLM(tiny(7))
    draft = CachedLM(target.model) if same else CachedLM(tiny(8))
    n_new, k = 17, 3
    _, stats = kata.speculative_generate(
        target,
        draft,
        PROMPT,
        n_new,
        k=k,
        temperature=temperature,
        rng=np.random.default_rng(common.rng(23).integers(2**63)),
    )
    calls = (int(stats.target_calls), int(stats.draft_calls))
    assert calls == (target.calls, draft.calls), (
        f"stats count (target_calls, draft_calls) = {calls}, but the models were called "
        f"{(target.calls, draft.calls)} times"
    )
    drafted, accepted = int(stats.drafted), int(stats.accepted)
    assert 0 <= accepted <= drafted <= k * target.calls, (
        f"stats say {accepted} of {drafted} drafts accepted in {target.calls} rounds of k = {k}; "
        f"need 0 <= accepted <= drafted <= k * target_calls"
    )
    assert accepted + target.calls == n_new, (
        f"each target call yields its accepted drafts plus one token of its own, so {accepted} accepted drafts in "
        f"{target.calls} target calls make {accepted + target.calls} tokens, not the {n_new} asked for"
    )
    assert draft.calls == drafted, (
        f"each drafted token takes one draft call, but {drafted} drafts took {draft.calls} draft calls"
    )
    if same:
        assert accepted == drafted, (
            f"with the target as its own draft at temperature 0 every draft is accepted, but stats say {accepted} "
            f"of {drafted}"
        )
        rounds = math.ceil(n_new / (k + 1))  # each round keeps its k drafts and adds the target's own token
        assert target.calls == rounds, (
            f"with the target as its own draft at temperature 0 every draft is kept, so {n_new} tokens at k = {k} "
            f"take {rounds} target calls (k + 1 tokens each, the last round fewer); the target was called "
            f"{target.calls} times: each round drafts k tokens, one draft call each, before its one target call"
        )
    elif k:
        assert draft.calls > 0, f"k = {k}, yet the draft was never called: each round drafts k tokens"


@pytest.mark.task("loop")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_k_zero_samples_from_the_target_alone_without_calling_the_draft(kata, temperature):
    target, draft = CachedLM(tiny(13)), CachedLM(tiny(14))
    n_new = 6
    _, stats = kata.speculative_generate(
        target,
        draft,
        PROMPT,
        n_new,
        k=0,
        temperature=temperature,
        rng=np.random.default_rng(common.rng(25).integers(2**63)),
    )
    assert (draft.calls, target.calls) == (0, n_new), (
        f"with k = 0 (plain sampling from the target) at temperature {temperature}, {n_new} tokens should take "
        f"{n_new} target calls and no draft call; the draft was called {draft.calls} times and the target "
        f"{target.calls}"
    )
    assert (int(stats.draft_calls), int(stats.drafted)) == (0, 0), (
        f"with k = 0 nothing is drafted, but stats say draft_calls = {stats.draft_calls}, drafted = {stats.drafted}"
    )


LARGE_LOGIT = 1000.0  # far past where exp overflows in float64 (about 709)


@pytest.mark.task("loop")
def test_sampling_survives_logits_whose_exp_overflows(kata):
    V, n_new = 6, 8
    gen = common.rng(26)
    successor = gen.permutation(V)  # the target's near-certain next token after each token
    table = gen.uniform(0.0, LARGE_LOGIT / 2, (V, V))
    table[np.arange(V), successor] = LARGE_LOGIT  # every other token is at least e^-500 less likely
    target, draft = BigramLM(table), BigramLM(LARGE_LOGIT * (1.0 + gen.random((V, V))))  # every exp overflows
    prompt = [int(gen.integers(V))]
    want = []
    for _ in range(n_new):
        want.append(int(successor[(prompt + want)[-1]]))
    learner_rng = np.random.default_rng(gen.integers(2**63))
    got, _ = _without_crashing(
        lambda: kata.speculative_generate(target, draft, prompt, n_new, k=3, temperature=1.0, rng=learner_rng),
        f"speculative_generate with logits near {LARGE_LOGIT:g} (beyond the range of exp)",
    )
    got = [int(t) for t in got]
    assert got == want, (
        f"with logits near {LARGE_LOGIT:g} (exp overflows) at temperature 1 the target puts all but e^-500 of "
        f"its mass on one token per position, so the output must be {want}; got {got}"
    )


@pytest.mark.task("loop")
def test_speculative_generate_rejects_a_negative_temperature(kata):
    # Asking for no token samples nothing, so only the loop's own check can refuse it there (with tokens to draw,
    # the shared sampling helpers refuse a negative temperature at the first draw).
    for n_new in (5, 0):
        with pytest.raises(ValueError):
            kata.speculative_generate(
                CachedLM(tiny(9)),
                CachedLM(tiny(10)),
                PROMPT,
                n_new,
                k=2,
                temperature=-1.0,
                rng=np.random.default_rng(0),
            )


@pytest.mark.task("loop")
@pytest.mark.parametrize(
    "fields,rate,per_call",
    [((4, 12, 12, 6), 0.5, 2.5), ((4, 10, 8, 6), 0.75, 2.5), ((3, 0, 0, 0), 0.0, 1.0), ((0, 0, 0, 0), 0.0, 0.0)],
)
def test_stats_derive_acceptance_rate_and_tokens_per_target_call(kata, fields, rate, per_call):
    stats = kata.SpecStats(*fields)
    got = (float(stats.acceptance_rate), float(stats.tokens_per_target_call))
    assert _isclose(got[0], rate, abs_tol=STATS_TOLERANCE) and _isclose(got[1], per_call, abs_tol=STATS_TOLERANCE), (
        f"SpecStats(target_calls, draft_calls, drafted, accepted) = {fields} should give acceptance_rate = "
        f"accepted / drafted = {rate} and tokens_per_target_call = (accepted + target_calls) / target_calls = "
        f"{per_call} (0.0 when the divisor is 0), got {got}"
    )


@pytest.mark.task("loop")
@pytest.mark.parametrize("what", ["k = -1", "n_new = -1"])
def test_speculative_generate_rejects_bad_input_with_value_error(kata, what):
    k, n_new = (-1, 5) if what == "k = -1" else (4, -1)
    with pytest.raises(ValueError):
        kata.speculative_generate(CachedLM(tiny(9)), CachedLM(tiny(10)), PROMPT, n_new, k=k, temperature=0.0)


class ForwardOnly:
    """Not a language model here: it has `forward` but no `logits`."""

    __jail_api__ = ("forward",)

    def forward(self, tokens) -> np.ndarray:
        return np.zeros((len(tokens), TINY.vocab_size))


# what -> (the bad argument's name, its value, n_new): each refused before any model call
BAD_GENERATE = {
    "a missing rng at temperature 1": ("rng", None, 5),
    "an empty prompt (with n_new = 0)": ("prompt", [], 0),
    "a target without logits": ("target", ForwardOnly(), 5),
    "a draft without logits": ("draft", ForwardOnly(), 5),
    "a logits table instead of a target": ("target", np.zeros((TINY.vocab_size, TINY.vocab_size)), 5),
}


@pytest.mark.task("loop")
@pytest.mark.parametrize("what", list(BAD_GENERATE))
def test_speculative_generate_refuses_a_missing_rng_an_empty_prompt_or_a_model_without_logits(kata, what):
    name, bad, n_new = BAD_GENERATE[what]
    target, draft = CachedLM(tiny(9)), CachedLM(tiny(10))
    args = {"target": target, "draft": draft, "prompt": PROMPT, "rng": np.random.default_rng(0), name: bad}
    _refuses(
        lambda: kata.speculative_generate(
            args["target"], args["draft"], args["prompt"], n_new, k=2, temperature=1.0, rng=args["rng"]
        ),
        f"speculative_generate with {what}",
    )
    assert (target.calls, draft.calls) == (0, 0), (
        f"speculative_generate refused {what}, but only after calling the target {target.calls} and the draft "
        f"{draft.calls} times: a bad argument must be refused before any model is called"
    )


@pytest.mark.task("loop")
def test_a_draft_equal_to_the_target_is_always_accepted_when_sampling(kata):
    V, temperature, n_new, k, runs = 6, 0.5, 24, 3, 8
    gen = common.rng(31)
    lm = BigramLM(gen.normal(0, 1.5, (V, V)))
    target, draft = CountedLM(lm), CountedLM(lm)  # called back here, so the judge counts the calls
    learner_rng = np.random.default_rng(gen.integers(2**63))
    outs = jail_client.call_many(
        kata.speculative_generate,
        [(target, draft, [int(gen.integers(V))], n_new) for _ in range(runs)],
        k=k,
        temperature=temperature,
        rng=learner_rng,
    )
    rounds = math.ceil(n_new / (k + 1))
    drafts = n_new - rounds  # all kept: each of the rounds adds one target token
    assert (target.calls, draft.calls) == (runs * rounds, runs * drafts), (
        f"with the draft equal to the target at temperature {temperature}, every draft is accepted, so each run of "
        f"{n_new} tokens at k = {k} takes {rounds} target calls and {drafts} draft calls; {runs} runs called the "
        f"target {target.calls} times and the draft {draft.calls} times"
    )
    stats = [(int(s.accepted), int(s.drafted)) for _, s in outs]
    assert stats == [(drafts, drafts)] * runs, (
        f"with the draft equal to the target at temperature {temperature}, q = p at every drafted position, so "
        f"every draft is accepted: {n_new} tokens at k = {k} make {drafts} drafts, all accepted, in every run; "
        f"(accepted, drafted) over {runs} runs: {stats}"
    )


@pytest.mark.task("loop")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_callers_prompt_is_left_unchanged(kata, temperature):
    """The prompt is kept in the jail and passed as that very list: after the call it must hold what it held,
    for the caller that generates from it again (a loop that appends to it writes into the caller's list)."""
    prompt = jail_client.put(kata.speculative_generate, list(PROMPT))
    kata.speculative_generate(
        CachedLM(tiny(9)),
        CachedLM(tiny(10)),
        prompt,
        8,
        k=3,
        temperature=temperature,
        rng=np.random.default_rng(common.rng(29).integers(2**63)),
    )
    after = [int(t) for t in prompt.copy()]
    assert after == PROMPT, (
        f"speculative_generate changed the caller's prompt: {PROMPT} is now {after}; copy it before adding tokens"
    )


@pytest.mark.task("loop")
def test_the_loop_given_one_seed_twice_writes_the_same_tokens(kata):
    """rng is the run's only source of randomness: two runs given generators of one seed write the same
    tokens (a draft sampled from a generator of its own would not)."""
    seed = int(common.rng(33).integers(2**63))
    runs = [
        kata.speculative_generate(
            CachedLM(tiny(11)), CachedLM(tiny(12)), PROMPT, 24, k=3, temperature=1.0, rng=np.random.default_rng(seed)
        )[0]
        for _ in range(2)
    ]
    first, second = ([int(t) for t in run] for run in runs)
    assert first == second, (
        f"two runs with np.random.default_rng({seed}) at temperature 1 wrote different tokens:\n  {first}\n  {second}\n"
        "every random draw (the drafts' too) must come from rng"
    )


@pytest.mark.task("loop")
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_rounds_with_a_draft_near_the_target_take_the_target_calls_the_greedy_rule_makes(kata, k):
    """A draft that is the target with its weights nudged agrees with it mostly, not always: at temperature 0
    each round keeps the drafts while they equal the target's greedy tokens, then adds the target's own. The
    judge counts the target's calls and works out how many the rule makes; a loop that tells a draft equal to
    the target from one that is not, and drafts only for the first, makes more."""
    target_model = tiny(15)
    nudge = np.random.default_rng([35, 3])  # the same under every seed: 12 calls at k = 2, 9 at k = 5
    draft_model = Model(
        TINY, {name: w + nudge.normal(0, 0.2 * w.std() + 1e-3, w.shape) for name, w in target_model.weights.items()}
    )
    n_new = 24
    target = CachedLM(target_model)
    got, stats = kata.speculative_generate(target, CachedLM(draft_model), PROMPT, n_new, k=k, temperature=0.0)
    assert_is_greedy_generation(target_model, PROMPT, got, n_new, "a draft near the target")
    needed = greedy_target_calls(target_model, draft_model, PROMPT, n_new, k)
    assert target.calls <= needed + NEAR_TIE_CALLS, (
        f"greedy at k = {k}, a draft that agrees with the target at most positions lets it write {n_new} tokens in "
        f"{needed} target calls (each round keeps the drafts that equal its greedy tokens, then adds its own); the "
        f"target was called {target.calls} times"
    )
    assert int(stats.accepted) == n_new - target.calls, (
        f"stats say {stats.accepted} drafts were accepted; the {target.calls} rounds kept {n_new - target.calls}"
    )
