"""The grader started inside a folder a student controls (docs/cli.md): the `kata` console script and
`python -I -m grader` import nothing from it; `python -m grader` runs a grader/ package there, as
Python's -m rule says, and nothing else of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import SUBS, TOY_KATAS, plant, planted_ran

KATA = Path(sys.executable).parent / "kata"  # the console script pip wrote beside this Python


def submission(tmp_path: Path) -> tuple[Path, Path]:
    """A student's repository: the toy kata solved in katas/, and at its top every file of
    helpers.PLANTED (a grader/ package among them). Returns (the repository, its plants' marks)."""
    repo = tmp_path / "alice"
    (repo / "katas").mkdir(parents=True)
    shutil.copy(SUBS / "correct" / "toy.py", repo / "katas" / "toy.py")
    plant(repo, tmp_path / "marks")
    return repo, tmp_path / "marks"


def run(cmd: list[str], cwd: Path, state: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KATA_"))}
    env.update(KATA_REGISTRY=str(TOY_KATAS), KATA_STATE_DIR=str(state))
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "entry", [[str(KATA)], [sys.executable, "-I", "-m", "grader"]], ids=["kata", "python -I -m grader"]
)
def test_the_safe_entry_points_grade_inside_a_submission_folder_running_nothing_of_it(tmp_path, entry):
    if not KATA.exists():
        pytest.skip(f"no kata console script beside {sys.executable} (the grader is not pip-installed here)")
    repo, marks = submission(tmp_path)
    done = run([*entry, "grade", "toy:mean", "--target", "./katas", "--no-live"], repo, tmp_path)
    assert planted_ran(marks) == [], "the grader ran files of the folder it was started in"
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pass" in done.stdout and "every graded task passes" in done.stdout


def test_python_m_grader_inside_a_folder_holding_a_grader_package_runs_that_package(tmp_path):
    """Why docs/cli.md names the entry points above: -m finds grader/ in the start folder first."""
    repo, marks = submission(tmp_path)
    run([sys.executable, "-m", "grader", "--version"], repo, tmp_path)
    assert "grader.__init__.py" in planted_ran(marks)


def test_python_m_grader_in_a_folder_without_a_grader_package_imports_nothing_from_it(tmp_path):
    repo, marks = submission(tmp_path)
    shutil.rmtree(repo / "grader")
    done = run(
        [sys.executable, "-m", "grader", "grade", "toy:mean", "--target", "./katas", "--no-live"], repo, tmp_path
    )
    assert planted_ran(marks) == [], "the grader imported the folder's own modules"
    assert done.returncode == 0, done.stdout + done.stderr
