"""What every grading suite shares: loading the module under test, the
Hypothesis profiles, shared strategies and the timing helper for speed checks.

Suites import their comparison functions at module level, before any learner
code is imported, and never call learner code to judge learner code.
"""

from __future__ import annotations

import time

import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader import target as _target

# Set by conftest.pytest_configure from --target and --seed.
TARGET = "katas"
SEED = 0  # 0 is the standard grading draw; suites mix it into their own numpy seeds

# Hypothesis examples per test in grading. Fixed, so the same code and seed
# give the same verdict; small, so a kata grades in a few seconds.
GRADE_EXAMPLES = 20

_COMMON = dict(
    database=None,
    deadline=None,
    max_examples=GRADE_EXAMPLES,
    print_blob=False,
    # No explain phase: it is slow on every failure, and the minimal example is what a learner needs.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile("grade", derandomize=True, **_COMMON)
# With --seed N the draws come from --hypothesis-seed=N instead of the test's name.
settings.register_profile("grade-seeded", derandomize=False, **_COMMON)


def load_kata(name: str):
    """The kata module under test (from --target), imported once per process."""
    return _target.load(TARGET, name)


def rng(salt: int) -> np.random.Generator:
    """A numpy Generator for a suite's own random data: fixed for a given
    salt and --seed, so grading stays deterministic."""
    return np.random.default_rng([salt, SEED])


def median_time(fn, repeats: int = 5) -> float:
    """Median wall time of fn() over `repeats` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def time_ratio(mine, baseline, repeats: int = 5) -> float:
    """Median time of mine() over median time of baseline(), after one warm-up
    call of each. The calls alternate, so a machine busy with something else
    slows both sides alike and the ratio stays honest."""
    mine()
    baseline()
    a, b = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        mine()
        t1 = time.perf_counter()
        baseline()
        a.append(t1 - t0)
        b.append(time.perf_counter() - t1)
    return float(np.median(a) / np.median(b))


def float_arrays(shape, lo: float = -100.0, hi: float = 100.0, dtype=np.float32):
    """Arrays of finite floats in [lo, hi] of the given shape (a shape strategy works too)."""
    return hnp.arrays(dtype, shape, elements=st.floats(lo, hi, width=np.dtype(dtype).itemsize * 8))
