"""The distillation suite catches each listed mistake, and gives full marks to
a correct implementation written differently from the reference."""

from mutation import Mutant, alternative_test, mutant_test

KATA = "distillation"

MUTANTS = [
    Mutant(
        name="loss forgets T squared",
        task="loss",
        old="return float(alpha * T**2 * soft + (1 - alpha) * hard)",
        new="return float(alpha * soft + (1 - alpha) * hard)",
    ),
    Mutant(
        name="gradient forgets T squared",
        task="grad",
        old="soft = T * (softmax(s[rows], T) - softmax(t[rows], T))",
        new="soft = (softmax(s[rows], T) - softmax(t[rows], T)) / T",
    ),
    Mutant(
        name="loss computes the hard cross-entropy at temperature T",
        task="loss",
        old="log_q1 = log_softmax(s[keep])",
        new="log_q1 = log_softmax(s[keep], T)",
    ),
    Mutant(
        name="gradient computes the hard term at temperature T",
        task="grad",
        old="hard = softmax(s[rows])",
        new="hard = softmax(s[rows], T)",
    ),
    Mutant(
        name="softmax without the max-subtraction overflows",
        task="softmax",
        old="    z -= np.max(z, axis=axis, keepdims=True)\n",
        new="",
    ),
    Mutant(
        name="loss counts ignored rows in the denominator",
        task="loss",
        old="n_kept = int(np.count_nonzero(keep))",
        new="n_kept = keep.size",
    ),
    Mutant(
        name="gradient counts ignored rows in the denominator",
        task="grad",
        old="grad[rows] = (alpha * soft + (1 - alpha) * hard) / rows.size",
        new="grad[rows] = (alpha * soft + (1 - alpha) * hard) / y.size",
    ),
    Mutant(
        name="gradient misses its 1/N",
        task="grad",
        old="grad[rows] = (alpha * soft + (1 - alpha) * hard) / rows.size",
        new="grad[rows] = alpha * soft + (1 - alpha) * hard",
    ),
    Mutant(
        name="gradient misses its factor T",
        task="grad",
        old="soft = T * (softmax(s[rows], T) - softmax(t[rows], T))",
        new="soft = softmax(s[rows], T) - softmax(t[rows], T)",
    ),
    Mutant(
        name="KL taken the wrong way round, student first",
        task="kl",
        old="return np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)",
        new="return np.sum(np.exp(log_q) * (log_q - log_p), axis=-1)",
    ),
    Mutant(
        name="log_softmax takes the log of a softmax that underflowed",
        task="softmax",
        old="    z -= np.log(np.sum(np.exp(z), axis=axis, keepdims=True))\n    return z",
        new="    return np.log(softmax(logits, temperature, axis))",
    ),
    Mutant(
        name="bigram student climbs the gradient",
        task="distill",
        old="table -= lr * (scatter @ grad)",
        new="table += lr * (scatter @ grad)",
    ),
    Mutant(
        name="bigram student never trains",
        task="distill",
        old="table -= lr * (scatter @ grad)",
        new="table -= 0 * (scatter @ grad)",
    ),
    Mutant(
        name="gradient computed row by row in Python",
        task="speed",
        old="    rows = np.flatnonzero(y != ignore_index)  # the kept rows\n",
        new=(
            "    rows = np.flatnonzero(y != ignore_index)  # the kept rows\n"
            "    if rows.size > 1:\n"
            "        for i in rows:\n"
            "            one = distillation_grad(s[i:i + 1], t[i:i + 1], y[i:i + 1], T, alpha, ignore_index)\n"
            "            grad[i] = one[0] / rows.size\n"
            "        return grad\n"
        ),
        expect=("slow",),
    ),
]

test_grader_does_not_pass_the_mutant = mutant_test(KATA, MUTANTS)
test_a_differently_written_correct_kata_gets_full_marks = alternative_test(KATA)
