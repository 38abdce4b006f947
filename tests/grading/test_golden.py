"""Golden tests: the grader's JSON for each toy fixture submission, as
committed in tests/golden/, apart from what a run cannot repeat (times,
measured figures, the target's path). A change to what a learner reads shows
up here as a diff to review, then to commit with

    KATA_UPDATE_GOLDEN=1 python -m pytest tests/grading/test_golden.py
"""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path

import pytest

from grader.kata.registry import load_registry
from grader.output import report
from grader.run.runner import grade

from helpers import FAST, SUBS, TOY_KATAS

GOLDEN = Path(__file__).parent.parent / "golden"
# The fixtures whose grade does not hang on timing: every status but timeout and slow.
SUBMISSIONS = [
    "correct",
    "stub",
    "syntax",
    "nan",
    "wrong_shape",
    "no_raise",
    "exit_at_import",
    "uses_solution",
    "segfault",
    "os_exit",
]


def stable(data: dict, target: Path) -> dict:
    """The JSON without what changes between runs of the same code and seed."""
    text = json.dumps(data).replace(str(target), "<target>")
    # pytest's words for a failure carry Hypothesis's version and the encoding of its failing case.
    text = re.sub(r"@reproduce_failure\((.*?)\)", "@reproduce_failure(<version>, <blob>)", text)
    data = json.loads(text)
    data.pop("duration")
    data.pop("versions")  # this machine's Python and packages: test_the_json_records_the_versions_it_graded_with
    for kata in data["katas"]:
        kata.pop("duration")
        for task in kata["tasks"]:
            for figure in task["figures"]:
                figure.pop("value")
    return data


@pytest.mark.parametrize("sub", SUBMISSIONS)
def test_the_json_of_each_fixture_submission_is_the_committed_one(sub):
    toy = load_registry(TOY_KATAS)
    got = stable(report.as_json(grade(list(toy), str(SUBS / sub), limits=FAST)), SUBS / sub)
    path = GOLDEN / f"{sub}.json"
    if os.environ.get("KATA_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert path.is_file(), f"no golden file {path}: run with KATA_UPDATE_GOLDEN=1 to write it"
    assert got == json.loads(path.read_text()), f"the JSON for {sub} differs from {path}"


def test_the_json_says_its_version():
    assert report.JSON_VERSION >= 2
    for path in GOLDEN.glob("*.json"):
        assert json.loads(path.read_text())["version"] == report.JSON_VERSION


def test_the_json_records_the_versions_it_graded_with():
    import hypothesis
    import numpy

    toy = load_registry(TOY_KATAS)
    data = report.as_json(grade(list(toy), str(SUBS / "stub"), limits=FAST))
    assert data["versions"] == {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "pytest": pytest.__version__,
        "hypothesis": hypothesis.__version__,
    }
