"""Installed like a Python tool: the project's wheel, built and installed into a fresh virtual
environment, works in a folder `kata init` made, with no KATA_WORKDIR, and keeps its state there:
never in site-packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.kata.registry import load_registry
from grader.kata.stubs import stub_for
from grader.kata.target import ROOT

pytestmark = pytest.mark.slow

# What the wheel is built from: the packaging and the packages (a copy, so the build leaves nothing in the checkout).
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "CHECKLIST.md")
PACKAGES = ("katas", "reference", "grader", "benchmarks")
JUNK = shutil.ignore_patterns("__pycache__", ".kata", ".hypothesis", "stub_files")


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> Path:
    """The bin/ folder of a fresh venv that has the project's wheel installed, dependencies and all."""
    tmp = tmp_path_factory.mktemp("tool")
    source = tmp / "source"
    for name in SOURCES:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    for name in PACKAGES:
        shutil.copytree(ROOT / name, source / name, ignore=JUNK)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp), str(source)], check=True)
    (wheel,) = tmp.glob("*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)]
    subprocess.run(pip, check=True, env=clean_env(), timeout=600)  # pip's cache makes the dependencies quick
    return venv / "bin"


def clean_env() -> dict[str, str]:
    """This process's environment without any setting of ours: no KATA_ variable, PYTHONPATH or venv."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("KATA_", "PYTHONPATH", "VIRTUAL_ENV"))}


def kata(tool: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    run = [str(tool / "kata"), *args]
    return subprocess.run(run, capture_output=True, text=True, env=clean_env(), cwd=cwd, timeout=300)


def site_packages(tool: Path) -> Path:
    where = [str(tool / "python"), "-c", "import grader, pathlib; print(pathlib.Path(grader.__file__).parents[1])"]
    done = subprocess.run(where, capture_output=True, text=True, env=clean_env(), cwd=tool, check=True)
    return Path(done.stdout.strip())


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_an_installed_wheel_inits_grades_hints_resets_benches_and_plays_in_the_folder_it_made(tool, tmp_path):
    site = site_packages(tool)
    assert site.parents[2] == tool.parent and ROOT not in site.parents  # the venv's copy, not this checkout
    before = snapshot(site)
    outside = kata(tool, tmp_path, "list")
    assert outside.returncode == 2 and "no kata folder here" in outside.stderr and "kata init DIR" in outside.stderr

    made = kata(tool, tmp_path, "init", "mine")
    work = tmp_path / "mine"
    assert made.returncode == 0 and f"copied 5 kata stubs and CHECKLIST.md to {work}" in made.stdout, made.stderr
    assert (work / "CHECKLIST.md").read_text() == (ROOT / "CHECKLIST.md").read_text()
    (work / "notes").mkdir()
    here = work / "notes"  # a folder below the one init made

    graded = kata(tool, here, "grade", "--no-live")
    assert graded.returncode == 1, graded.stderr[-2000:]
    assert f"grading the learner's katas ({work})" in graded.stdout
    katas = load_registry()
    rows = [line.split() for line in graded.stdout.splitlines() if line.split()[:1] in ([k.name] for k in katas)]
    assert len(rows) == sum(len(k.tasks) for k in katas) and {row[2] for row in rows} == {"todo"}

    hint = kata(tool, here, "hint", "moe")
    assert hint.returncode == 0 and hint.stdout.startswith("moe / router, hint 1/"), hint.stderr
    (work / "moe.py").write_text("my work")
    reset = kata(tool, here, "reset", "moe", "--yes")
    assert reset.returncode == 0 and (work / "moe.py").read_text() == stub_for("moe")

    unfinished = kata(tool, here, "bench", "moe")
    assert unfinished.returncode == 1 and "not written yet" in unfinished.stderr, unfinished.stderr
    assert "Traceback" not in unfinished.stderr
    benched = kata(tool, here, "bench", "moe", "--target", "reference", "--repeats", "1")
    assert benched.returncode == 0 and "1. one layer: MoE against dense layers" in benched.stdout, benched.stderr

    played = kata(tool, here, "play", "cache", "def ", "-n", "8")
    assert played.returncode == 0 and "the model's own, since your kv_cache tasks" in played.stdout, played.stderr

    state = work / ".kata"
    grades = json.loads((state / "last_grade.json").read_text())
    assert grades["kv_cache"]["cache"] == "todo" and "moe" not in grades  # reset forgot moe's grade and hints
    assert json.loads((state / "hints.json").read_text()) == {}
    assert [p.read_text() for p in (state / "backups").iterdir()] == ["my work"]
    assert not (here / ".kata").exists()
    assert snapshot(site) == before  # nothing written to site-packages
