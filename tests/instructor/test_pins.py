"""Pinned grading: the constraints file the kits install with, and the one-line warning
when the grader runs on other versions of Python, numpy, pytest or Hypothesis."""

from __future__ import annotations

import re
import shutil
import sys

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.instructor import pins
from grader.kata.target import ROOT
from grader.output import versions

from helpers import SUBS, TOY_KATAS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


def test_the_constraints_pin_every_dependency_of_the_package_exactly_and_a_python():
    pinned = pins.pinned()
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    needed = {pins.canonical(re.match(r"[A-Za-z0-9._-]+", d).group()) for d in dependencies if ";" not in d}
    assert needed <= pinned.keys(), f"not pinned: {sorted(needed - pinned.keys())}"
    assert all(re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", v) for v in pinned.values()), pinned
    assert re.fullmatch(r"3\.\d+", pinned["python"])


def test_a_constraints_line_that_is_no_pin_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "constraints.txt"
    path.write_text("# a comment\n\nnumpy==2.0.0\nnumpy>=2\n")
    with pytest.raises(ValueError, match=r"constraints.txt:4: 'numpy>=2' is not a pin"):
        pins.pinned(path)


def test_drift_names_each_version_that_differs_and_python_by_its_minor_version():
    pinned = {"python": "3.11", "numpy": "2.4.6", "pytest": "9.2.0", "hypothesis": "6.170.17"}
    same = {"python": "3.11.7", "numpy": "2.4.6", "pytest": "9.2.0", "hypothesis": "6.170.17"}
    assert pins.drift(same, pinned) == ""
    warning = pins.drift(dict(same, python="3.12.1", numpy="2.3.0"), pinned)
    assert warning.startswith("warning: grading with python 3.12.1 (pinned: 3.11), numpy 2.3.0 (pinned: 2.4.6);")
    assert "\n" not in warning and "pytest" not in warning
    assert pins.drift(dict(same, python="3.110.0"), pinned) != ""


@pytest.fixture
def one_student(tmp_path, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    shutil.copytree(SUBS / "correct", tmp_path / "class" / "alice")
    return tmp_path / "class"


def constraints_with(tmp_path, **changed) -> str:
    here = dict(versions.installed(), **changed)
    lines = [f"# python: {'.'.join(here.pop('python').split('.')[:2])}"] + [f"{n}=={v}" for n, v in here.items()]
    path = tmp_path / "constraints.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_grade_all_warns_in_one_line_when_numpy_is_not_the_pinned_one(one_student, tmp_path, monkeypatch):
    monkeypatch.setattr(pins, "CONSTRAINTS", constraints_with(tmp_path, numpy="0.0.1"))
    result = CliRunner().invoke(main, ["grade-all", str(one_student), "--out", str(tmp_path / "book")])
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("warning:")]
    assert f"numpy {versions.installed()['numpy']} (pinned: 0.0.1)" in line


def test_grade_all_says_nothing_of_versions_when_they_are_the_pinned_ones(one_student, tmp_path, monkeypatch):
    monkeypatch.setattr(pins, "CONSTRAINTS", constraints_with(tmp_path))
    result = CliRunner().invoke(main, ["grade-all", str(one_student), "--out", str(tmp_path / "book")])
    assert result.exit_code == 0 and "warning:" not in result.output, result.output
