"""pytest configuration of the grading suites: which implementation they test
(--target), the Hypothesis profile, and the `speed` marker."""

from __future__ import annotations

from hypothesis import settings

from grader import judge
from grader import target as _target
from grader.suites import common


def pytest_addoption(parser):
    group = parser.getgroup("kata", "LLM speed katas")
    group.addoption(
        "--target",
        default="katas",
        help="implementation under test: 'katas' (the learner's stubs, default), "
        "'reference' (the reference solutions) or a directory of kata modules",
    )
    group.addoption(
        "--seed",
        type=int,
        default=0,
        help="0 (default) draws the fixed grading examples; any other N draws a different, "
        "equally deterministic set (pass --hypothesis-seed=N too)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "speed: a speed check (a failure grades the task 'slow', not 'fail')")
    target = config.getoption("target")
    _target.resolve(target)  # a bad --target stops here with a clear message
    judge.SETTINGS.target = target
    common.SEED = config.getoption("seed")
    settings.load_profile("grade" if config.getoption("seed") == 0 else "grade-seeded")


def pytest_report_header(config):
    target = config.getoption("target")
    return [f"kata target: {_target.describe(target)}", f"kata seed: {config.getoption('seed')}"]
