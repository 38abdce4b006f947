"""The speculative decoding suite catches each listed mistake, and gives full
marks to a correct implementation written differently from the reference."""

from mutation import Mutant, alternative_test, mutant_test

KATA = "speculative"

MUTANTS = [
    Mutant(
        name="accepts with probability p(x) alone, ignoring q",
        task="accept_reject",
        old="rng.random() * q[i, x] < p[i, x]",
        new="rng.random() < p[i, x]",
    ),
    Mutant(
        name="replacement sampled from p instead of the residual",
        task="accept_reject",
        old="return out + [draw_index(residual, rng, rescale=False)]",
        new="return out + [draw_index(p[i], rng, rescale=False)]",
    ),
    Mutant(
        name="residual not normalized",
        task="accept_reject",
        old="        residual = residual / total\n",
        new="",
    ),
    Mutant(
        name="bonus token skipped when every draft is accepted",
        task="accept_reject",
        old="return out + [draw_index(p[len(tokens)], rng, rescale=False)]",
        new="return out",
    ),
    Mutant(
        name="replacement taken from row i + 1 instead of i",
        task="accept_reject",
        old="residual = np.maximum(p[i] - q[i], 0.0)",
        new="residual = np.maximum(p[i + 1] - q[i], 0.0)",
    ),
    Mutant(
        name="a draft with q = 0 is accepted when p > 0",
        task="accept_reject",
        old="if q[i, x] > 0 and rng.random() * q[i, x] < p[i, x]:",
        new="if rng.random() * q[i, x] < p[i, x]:",
    ),
    Mutant(
        name="greedy_accept drops the target's correction at the first mismatch",
        task="greedy",
        old="return [int(t) for t in tokens[:i]] + [int(best[i])]",
        new="return [int(t) for t in tokens[:i]]",
    ),
    Mutant(
        name="the target's probabilities ignore the temperature",
        task="loop",
        old="accept_reject(drafts, q_arr, probs_from_logits(scores, t), rng)",
        new="accept_reject(drafts, q_arr, probs_from_logits(scores, 1.0), rng)",
    ),
    Mutant(
        name="the last round drafts k even when fewer tokens are wanted",
        task="loop",
        old="k_round = min(k, n_new - len(new) - 1)",
        new="k_round = k",
    ),
    Mutant(
        name="stats count the target's own token as accepted",
        task="loop",
        old="stats.accepted += len(emitted) - 1",
        new="stats.accepted += len(emitted)",
    ),
    Mutant(
        name="only the first draft is ever checked",
        task="speed",
        old="k_round = min(k, n_new - len(new) - 1)",
        new="k_round = min(1, k, n_new - len(new) - 1)",
        expect=("slow",),
    ),
]

test_grader_does_not_pass_the_mutant = mutant_test(KATA, MUTANTS)
test_an_alternative_correct_implementation_gets_full_marks = alternative_test(KATA)
