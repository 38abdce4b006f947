"""pytest configuration of the grading suites: which implementation they test
(--target), the Hypothesis profile, the `task`, `speed`, `needs` and `public` markers, and where
a check's figures go (its user_properties)."""

from __future__ import annotations

import importlib.util
import os

import pytest
from hypothesis import settings

from grader.jailer import jail_client
from grader.jailer import zygote as forks
from grader.kata import target as _target
from grader.kata.text import printable
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
    config.addinivalue_line("markers", "task(name): the task of the registry this check grades")
    config.addinivalue_line("markers", "speed: a speed check (a failure grades the task 'slow', not 'fail')")
    config.addinivalue_line("markers", "needs(module): a check that exists only where the optional module is installed")
    config.addinivalue_line(
        "markers",
        "public: a check the student edition ships although it uses an oracle or the baseline, which computes no "
        "answer a student could paste (grader.instructor.held_back.hidden_checks)",
    )
    target = config.getoption("target")
    _target.resolve(target)  # a bad --target stops here with a clear message
    jail_client.SETTINGS.target = target
    common.SEED = config.getoption("seed")
    common.draw_from_the_suites_alone()
    settings.load_profile("grade" if config.getoption("seed") == 0 else "grade-seeded")
    if forks.VAR not in os.environ:  # plain pytest (kata test), where no runner started a jail zygote
        os.environ[forks.VAR] = forks.own()  # this process's own, stopped when it ends; "off" where none can be


def pytest_report_header(config):
    target = config.getoption("target")
    return [f"kata target: {_target.describe(target)}", f"kata seed: {config.getoption('seed')}"]


def pytest_collection_modifyitems(config, items):
    """Leave out the checks whose optional module is not installed: they are
    not graded at all, where a skipped check would grade its task 'error'."""
    missing = [i for i in items if (m := i.get_closest_marker("needs")) and importlib.util.find_spec(m.args[0]) is None]
    if missing:
        items[:] = [i for i in items if i not in missing]
        config.hook.pytest_deselected(items=missing)


@pytest.fixture(autouse=True)
def record_figures(request):
    """What the check measures (common.figure) goes to its user_properties, as pytest's record_property
    appends there (that fixture is the junitxml plugin's, which the judge leaves out): the judge reports
    the figures with the check's result."""
    with common.recording(request.node.user_properties):
        yield


# Under plain pytest (kata test) what the learner's code prints during a check shows as pytest shows any captured
# output: a section of the failing check's report. (The judge takes it itself, for its own report.)
PRINTED_SECTION = "what the kata module printed"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not jail_client.SETTINGS.judged:
        jail_client.printed()  # what came before this check is not its own


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if jail_client.SETTINGS.judged or call.when == "setup":
        return
    # The end of it: Hypothesis replays the failing example last, so its prints close what was printed.
    text = jail_client.printed(last=True)
    if report.failed and text:
        lines = printable(text).rstrip("\n").split("\n")
        report.sections.append((f"{PRINTED_SECTION} ({call.when})", "".join(f"| {ln}\n" for ln in lines)))
