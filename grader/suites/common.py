"""What every grading suite shares: the module under test (a proxy to its
jail), the Hypothesis profiles, shared strategies, the one timing helper
for speed checks and the digests it compares timed results by, and the
figures a check reports (through its user_properties, to the judge).

Suites never call learner code to judge learner code: expected values come
from the suite, independent formulas or the reference model, all here in
the judge, where the learner's code never runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
import time
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.jailer import jail_client
from grader.measure import timing
from reference.model import Config

# Set by conftest.pytest_configure from --seed (the target goes to jail_client.SETTINGS).
SEED = 0  # 0 is the standard grading draw; suites mix it into their own numpy seeds

# Hypothesis examples per test in grading. Fixed, so the same code and seed
# give the same verdict; small, so a kata grades in a few seconds.
GRADE_EXAMPLES = 20

# How far a timed result's float sums may stray from the baseline's (summation order, float32).
DIGEST_RTOL = 1e-3

# Speed checks time in interleaved rounds until their ratios agree within this spread
# (interquartile range over median), or until this many seconds of rounds have passed.
SPEED_SPREAD = 0.15
SPEED_BUDGET_SECONDS = 2.0

_COMMON = dict(
    database=None,
    deadline=None,
    max_examples=GRADE_EXAMPLES,
    print_blob=True,  # the @reproduce_failure line of `kata test` and the JSON's `pytest` (-vv shows a command)
    # No explain phase: it is slow on every failure, and the minimal example is what a learner needs.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("grade", derandomize=True, **_COMMON)
# With --seed N the draws come from --hypothesis-seed=N instead of the test's name.
settings.register_profile("grade-seeded", derandomize=False, **_COMMON)


def draw_from_the_suites_alone() -> None:
    """Keep Hypothesis from mixing constants of "local" modules into its draws.

    Recent Hypothesis versions (6.155 here) collect the literal constants of
    every imported module they count as local (outside site-packages and the standard
    library) and now and then draw one of them. For a grading that means the
    grader's and the model's own source: counted when the project is an
    editable install, not when it is installed as a package, so the same
    suite and seed would draw other examples in each, and any edit of a
    constant anywhere in grader/ or reference/ would change every suite's
    draws. Scanning them also cost each judge a parse of every such module. With this, the
    suites' own strategies and explicit examples decide every draw.
    (`_get_local_constants` is Hypothesis's internal hook for this; on a
    version without it there is nothing to turn off.)"""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a Hypothesis that predates local constants
        return
    if hasattr(providers, "_get_local_constants") and hasattr(providers, "Constants"):
        none = providers.Constants()
        providers._get_local_constants = lambda: none


def load_kata(name: str):
    """The kata module under test (from --target), as a proxy to the jail that holds it."""
    return jail_client.kata_module(name)


def rng(salt: int) -> np.random.Generator:
    """A numpy Generator for a suite's own random data: fixed for a given
    salt and --seed, so grading stays deterministic."""
    return np.random.default_rng([salt, SEED])


# Drawn once per judge process, that is per grading: the fresh inputs of timed calls come from it, never from the
# grading seed (which Gradescope's output shows), so no module can replay them at import and have the answers ready.
_TIMED_ENTROPY = 0


def draw_timed_entropy() -> None:
    """Draw this judge's entropy for timed inputs: at import, and again by each judge the judge server
    forks (grader.judge.judge.main), which would otherwise share the server's."""
    global _TIMED_ENTROPY
    _TIMED_ENTROPY = secrets.randbits(64)


draw_timed_entropy()


def timed_salt(salt: int) -> int:
    """A salt for rng() whose draws no one can know before the grading: for the inputs of timed calls (whose
    answers are checked against the baseline's or the suite's on the same inputs, so any draw grades alike)."""
    return salt * 2**64 + _TIMED_ENTROPY


def timed_rng(salt: int) -> np.random.Generator:
    """rng(timed_salt(salt)): a Generator for the fresh inputs of timed calls."""
    return rng(timed_salt(salt))


def secret_model(config: Config) -> jail_client.SecretModel:
    """A random model of config, new at every call, whose weights no one knows before the grading (drawn from fresh
    entropy, never from the seed) and no jail ever gets (a SecretModel crosses as a handle: its pieces run here).
    The model a check counts the work of: what the learner's code returns can then come only from the rows it
    pushed through the pieces the judge counted, never from a copy of the model recomputed in the jail. (A
    correct implementation grades alike on any weights: its answers are checked against this same model's.)"""
    return jail_client.SecretModel.random(config, seed=secrets.randbits(128))


def load_baseline(kata_or_path):
    """The trusted baselines a speed check times the learner against
    (grader/suites/KATA/baseline.py, or a file), in a jail of their own, so
    both sides cross the same channel."""
    path = Path(kata_or_path)
    return jail_client.baseline_module(path if path.suffix == ".py" else baseline_path(kata_or_path))


# A suite's baseline that only hidden checks load (its code would answer a task): never in a student edition.
HIDDEN_BASELINE = "baseline_hidden.py"


def baseline_path(kata: str) -> Path:
    """Where kata's speed-check baselines live (the file may not exist)."""
    return Path(__file__).parent / kata / "baseline.py"


FIGURE = "figure"  # the name a figure goes by among the running check's user properties, where the judge reads it
_PROPERTIES: contextvars.ContextVar[list | None] = contextvars.ContextVar("check_properties", default=None)


@contextlib.contextmanager
def recording(properties: list):
    """Within the with, figure() appends to `properties`: the running check's user_properties, which
    the suites' conftest hands here around every check (as pytest's record_property appends to them),
    and which the judge reports with the check's result."""
    token = _PROPERTIES.set(properties)
    try:
        yield
    finally:
        _PROPERTIES.reset(token)


def figure(
    name: str, value: float, bar: float | None = None, *, unit: str = "x", better: str = "higher", key: str = ""
) -> float:
    """Record a figure the running check measured, against its bar if it has
    one (say "speed-up over generate_naive", 9.6, bar 5): the grade shows it
    next to the task, Gradescope's leaderboard ranks by it, and the kata's
    recap (the registry's `recap`) quotes it by `key`. Measured here, in the
    judge, so learner code cannot set it; outside a check it goes nowhere. Returns value."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    properties = _PROPERTIES.get()
    if properties is None:
        return value
    properties.append(
        (
            FIGURE,
            {
                "name": name,
                "value": float(value),
                "bar": None if bar is None else float(bar),
                "unit": unit,
                "better": better,
                "key": key,
            },
        )
    )
    return value


class WrongWhileTimed(AssertionError):
    """A speed check's timed (or counted) call gave a wrong answer: graded fail, not slow."""


def _timed_all(fns, args) -> tuple[float, list]:
    """Total time of calling each of fns (of one jail) with args, one after
    another, and the digests the judge makes of the results they returned."""
    total, digests = 0.0, []
    for fn in fns:
        seconds, result = jail_client.timed(fn, args)
        total += seconds
        digests.append(digest(result))
    return total, digests


def time_ratio(
    mine, baseline, inputs, *, repeats: int = 5, what: str = "the timed call", expect=None, baseline_args=None, bar=None
) -> float:
    """Median over rounds of time(mine) / time(baseline), each timed here
    in the judge around its round trip (jail_client.timed), in rounds that
    grader.measure.timing.interleave runs: at least `repeats`, more (up to three
    times as many, within SPEED_BUDGET_SECONDS) while the rounds' ratios
    still spread by more than SPEED_SPREAD. mine and baseline are kata
    proxies (the learner's function and a trusted baseline's), or tuples of
    them called one after another with the same arguments.

    inputs(i) makes the arguments of round i (and of one warm-up, i = -1):
    fresh data every round, so remembering an earlier answer gains nothing.
    baseline_args(args) gives the baseline other arguments (a share of the
    tokens, say). The sides take turns, and which goes first alternates too,
    so a machine busy with something else slows both alike; while one side
    is timed, the other's jail is stopped (jail_client.timed).

    Every timed answer of mine is checked: against expect(*args) (a tuple
    the suite computes, one answer per function of mine) when given, else
    against the baseline's answers on the same arguments. A fast wrong answer fails the check (not 'slow').

    bar: the largest ratio the check passes, when it has one. Rounds then
    stop as soon as the verdict is plain (see settled): the extra rounds are
    bought only where the ratio lies near the bar."""
    mine = mine if isinstance(mine, tuple) else (mine,)
    baseline = baseline if isinstance(baseline, tuple) else (baseline,)
    other = baseline_args or (lambda args: args)
    made: dict[int, tuple] = {}
    digests: dict[tuple[str, int], list] = {}

    def args_of(r: int):
        if r not in made:
            made.clear()  # one round's arguments at a time: the two sides of round r share them
            made[r] = inputs(r)
        return made[r]

    def side(name: str, fns, transform):
        def run(r: int) -> float:
            seconds, digests[(name, r)] = _timed_all(fns, transform(args_of(r)))
            if r >= 0 and ("mine", r) in digests and ("base", r) in digests:
                want = [digest(v) for v in expect(*args_of(r))] if expect else digests[("base", r)]
                _right_while_timed(what, digests[("mine", r)], want)
            return seconds

        return run

    rounds = timing.interleave(
        [side("mine", mine, lambda args: args), side("base", baseline, other)],
        rounds=repeats,
        spread=SPEED_SPREAD,
        budget_seconds=extra_rounds_budget(),
        settled=None if bar is None else settles_against(bar, repeats),
    )
    return rounds.ratio(0, 1)


# A verdict no more rounds can change: every round this far from the bar, either way.
CLEAR_OF_BAR = 1.5
# Code this far past its bar is slow however long it is timed: two rounds of it are enough.
FAR_PAST_BAR = 3.0


def settles_against(bar: float, repeats: int):
    """What timing.interleave asks after each round of a speed check against `bar`: settled() of its ratios."""
    return lambda measured: settled(measured.ratios(0, 1), bar, repeats)


def settled(ratios: list[float], bar: float, repeats: int) -> bool:
    """Whether a speed check's rounds (per-round ratios of mine over the
    baseline, lower is faster) decide it against `bar` already: from the
    second round, when every round is more than FAR_PAST_BAR times the bar
    (a slow verdict needs no more precision, and no learner gains from one);
    after `repeats` rounds, when every round lies CLEAR_OF_BAR beyond the bar
    on the same side. A pass is never decided on fewer rounds than `repeats`."""
    if len(ratios) >= 2 and min(ratios) > bar * FAR_PAST_BAR:
        return True
    return len(ratios) >= repeats and (max(ratios) * CLEAR_OF_BAR < bar or min(ratios) > bar * CLEAR_OF_BAR)


# The weights of each digest's secret projections: drawn in the judge from fresh entropy, never from the seed,
# and never sent to a jail, so that no result can be made to match a right one's projections without being it.
PROJECTIONS, PROJECTION_WIDTH = 4, 1 << 14
PROJECTION_SLACK = 8.0  # how many typical values' worth of error (a rounding that went the other way) they allow
_projection_weights: np.ndarray | None = None


def _projections(flat: np.ndarray) -> list[float]:
    """For each of PROJECTIONS secret rows w of standard normal weights, sum_i flat[i] * w[i mod
    PROJECTION_WIDTH], flat (n,) float64: unlike a plain sum, each moves with every value that is wrong,
    whatever the others do, so a result whose errors cancel in the sums is told apart."""
    global _projection_weights
    if _projection_weights is None:
        gen = np.random.default_rng(secrets.randbits(128))
        _projection_weights = gen.standard_normal((PROJECTIONS, PROJECTION_WIDTH))
    w, whole = _projection_weights, flat.size - flat.size % PROJECTION_WIDTH
    total = flat[:whole].reshape(-1, PROJECTION_WIDTH).dot(w.T).sum(axis=0) if whole else np.zeros(PROJECTIONS)
    return (total + w[:, : flat.size - whole].dot(flat[whole:])).tolist()


def digest(value):
    """A small summary of a result, made by the judge from the data a timed
    call returned: for every number or array in it, its shape, kind, float64
    sums, its root sum of squares and its projections on weights secret to
    the judge; None for other objects. Sums read every value, so a result
    wrong anywhere is told apart, and the projections tell apart one whose
    errors cancel in the sums (see digests_agree)."""
    if type(value) in (bool, int, float) or isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, (list, tuple)):
        if value and all(type(v) in (int, bool, float) or isinstance(v, np.generic) for v in value):
            return digest(np.asarray(value))
        return [digest(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
        out = {"shape": list(value.shape), "kind": value.dtype.kind}
        total = float(value.real.sum(dtype=np.float64))
        size = float(np.abs(value, dtype=np.float64).sum()) if value.dtype.kind != "c" else float(np.abs(value).sum())
        nonfinite, clean = 0, value.real
        if not (np.isfinite(total) and np.isfinite(size)):  # only then pay for a pass that finds them
            finite = np.isfinite(value)
            nonfinite = int(value.size - np.count_nonzero(finite))
            clean = np.where(finite, value, 0).real
            total, size = float(clean.sum(dtype=np.float64)), float(np.abs(clean).sum(dtype=np.float64))
        flat = clean.astype(np.float64).ravel()  # the finite values, for the norm and the projections
        out.update({"sum": total, "abs": size, "nonfinite": nonfinite})
        norm = float(np.sqrt(flat.dot(flat)))
        out.update({"norm": norm, "rms": norm / max(flat.size, 1) ** 0.5, "projections": _projections(flat)})
        return out
    return None


def digests_agree(a, b, rtol: float = 1e-4) -> bool:
    """Whether two digests describe the same result, up to float summation order."""
    return not digest_difference(a, b, rtol)


def digest_difference(got, want, rtol: float = 1e-4) -> str:
    """What differs between the digest of a result (got) and of the expected one (want), in a few words
    naming the first difference found; "" when they describe the same result, up to float summation order."""
    if isinstance(got, dict) and isinstance(want, dict):
        return _array_difference(got, want, rtol)
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return f"{len(got)} results where {len(want)} were expected"
        return next((d for d in (digest_difference(x, y, rtol) for x, y in zip(got, want)) if d), "")
    return "" if want is None or got == want else "a result of another kind than the expected one"


def _array_difference(a: dict, b: dict, rtol: float) -> str:
    """digest_difference of two arrays' digests."""
    if a.get("shape") != b.get("shape"):
        return f"an array of shape {a.get('shape')} where shape {b.get('shape')} was expected"
    if a.get("nonfinite") != b.get("nonfinite"):
        n, values = a.get("nonfinite"), "value" if a.get("nonfinite") == 1 else "values"
        return f"{n} NaN or infinite {values} where the expected result has {b.get('nonfinite')}"
    if (str(a.get("kind")) in "biu") != (str(b.get("kind")) in "biu"):
        return f"an array of dtype kind {a.get('kind')!r} where kind {b.get('kind')!r} was expected"
    if not all(type(x.get(k)) is float for x in (a, b) for k in ("sum", "abs", "norm", "rms")):
        return "a result that could not be summed"
    scale = max(float(b.get("abs", 0)), 1.0)
    if abs(a["sum"] - b["sum"]) > rtol * scale or abs(a["abs"] - b["abs"]) > rtol * scale:
        return "values whose sums differ from the expected result's"
    allowed = rtol * max(b["norm"], 1.0) + PROJECTION_SLACK * b["rms"]
    if not _projections_agree(a.get("projections"), b["projections"], allowed):
        return "values whose sums match the expected result's but which differ from it"
    return ""


def _projections_agree(got, want: list[float], allowed: float) -> bool:
    """Each projection moves by about the root sum of squares of the values' errors; it may stray by
    `allowed`: float rounding's share of the norm, and PROJECTION_SLACK typical values (a few values
    rounded the other way)."""
    if type(got) is not list or len(got) != len(want):
        return False
    return all(abs(g - w) <= allowed for g, w in zip(got, want))


def _right_while_timed(what: str, got: list, want: list) -> None:
    difference = digest_difference(got, want, DIGEST_RTOL)
    if difference:
        raise WrongWhileTimed(
            f"{what} returned a wrong result while being timed: {difference}, on the same input "
            "(a fast wrong answer is not fast)"
        )


def extra_rounds_budget() -> float:
    """Seconds a speed check may spend on rounds past its first ones: at most
    SPEED_BUDGET_SECONDS, and at most a third of what is left of the check's
    time limit (jail_client.SETTINGS.deadline), so that extra rounds never make a
    check time out; none when nothing is left."""
    deadline = jail_client.SETTINGS.deadline
    if deadline is None:
        return SPEED_BUDGET_SECONDS
    return max(0.0, min(SPEED_BUDGET_SECONDS, (deadline - time.monotonic()) / 3))


def float_arrays(shape, lo: float = -100.0, hi: float = 100.0, dtype=np.float32):
    """Arrays of finite floats in [lo, hi] of the given shape (a shape strategy works too)."""
    return hnp.arrays(dtype, shape, elements=st.floats(lo, hi, width=np.dtype(dtype).itemsize * 8))
