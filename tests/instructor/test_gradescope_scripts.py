"""The Gradescope kit's two scripts run as Gradescope runs them (apt-get stubbed; the rest real: a
virtual environment, the pinned dependencies from the configured package index, the grading
edition's grader and its jail), beside the files a student plants to run their own code in them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.instructor import gradescope_kit as gradescope
from grader.kata.registry import load_registry
from grader.kata.stubs import stub_for

from helpers import plant, planted_ran


def fake_image(tmp_path: Path) -> dict[str, str]:
    """The environment of Gradescope's image builder, but for apt-get (it logs what it would install):
    python3 is the Python these tests run on (its base installation, not their virtual environment)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "apt.log"}\n')
    (bin_dir / "apt-get").chmod(0o755)
    (bin_dir / "python3").symlink_to(getattr(sys, "_base_executable", sys.executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KATA_", "PYTHON", "VIRTUAL_ENV"))}
    return dict(env, PATH=f"{bin_dir}:{env['PATH']}")


@pytest.mark.slow  # a virtual environment with the pinned dependencies, and a grading of every kata
def test_the_scripts_run_no_python_of_the_submission_and_untouched_stubs_score_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY", raising=False)  # the real katas: the real grading edition
    katas = load_registry()
    gradescope.build(tmp_path / "autograder.zip")
    root = tmp_path / "autograder"
    with zipfile.ZipFile(tmp_path / "autograder.zip") as zf:
        zf.extractall(root / "source")
    marks = tmp_path / "marks"
    start = tmp_path / "start"  # where setup.sh is started: it holds a student's plants too
    start.mkdir()
    plant(start, marks)
    env = dict(fake_image(tmp_path), KATA_AUTOGRADER_ROOT=str(root))
    setup = subprocess.run(
        ["bash", str(root / "source" / "setup.sh")], cwd=start, env=env, capture_output=True, text=True, timeout=900
    )
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-3000:]
    assert (
        "install -y --no-install-recommends python3 python3-pip python3-venv bubblewrap"
        in (tmp_path / "apt.log").read_text()
    )
    numpy = subprocess.run(
        [str(root / "venv" / "bin" / "python"), "-I", "-c", "import numpy; print(numpy.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert numpy.stdout.startswith(str(root / "venv")), numpy.stderr  # the real pip installed the dependencies

    # A student's repository as submitted: the untouched stubs in katas/, the plants at its top (its grader/ too).
    submission = root / "submission"
    (submission / "katas").mkdir(parents=True)
    for k in katas:
        (submission / "katas" / f"{k.name}.py").write_text(stub_for(k.name))
    plant(submission, marks)
    (root / "submission_metadata.json").write_text(json.dumps({"id": 1, "users": []}))
    run = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")],
        cwd=submission,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert planted_ran(marks) == [], "a kit script ran a file the student planted"
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    assert "Graded the kata modules in `katas/` of your submission." in results["output"], results["output"]
    assert len(results["tests"]) == sum(len(k.tasks) for k in katas)
    assert results["score"] == 0 and {t["score"] for t in results["tests"]} == {0}
    assert sum(t["max_score"] for t in results["tests"]) == sum(k.max_score for k in katas)
    shutil.rmtree(root / "venv")  # hundreds of MiB
