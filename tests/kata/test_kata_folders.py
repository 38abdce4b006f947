"""One folder per kata: outside tests/ and docs/, no tracked file names a kata but its stub, its solution
and what sits in its folder grader/suites/KATA/, which holds everything the grader and its tools know."""

from __future__ import annotations

import subprocess

import pytest

from grader.kata.registry import SUITES_DIR, load_registry
from grader.kata.target import ROOT

KATAS = [k.name for k in load_registry()]
# What a path names a kata by: its name, or its first seven letters (quantize.js would name quantization).
STEM = 7
IN_ITS_FOLDER = ("kata.toml", "checklist.md", "baseline.py", "mistakes.toml", "mutants.toml", "bench.py")


def tracked_paths() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no tracked files to list")
    return [p for p in listed.decode().split("\0") if p]


def kata_named_by(path: str) -> str | None:
    """The kata whose name (or its stem) the path holds, if any."""
    return next((k for k in KATAS if k in path or k[:STEM] in path), None)


def test_no_path_outside_tests_and_docs_names_a_kata_but_its_stub_its_solution_and_its_folder():
    stray = []
    for path in tracked_paths():
        kata = kata_named_by(path)
        if kata is None or path.startswith(("tests/", "docs/")):
            continue
        if path not in (f"katas/{kata}.py", f"reference/solutions/{kata}.py") and not path.startswith(
            f"grader/suites/{kata}/"
        ):
            stray.append(path)
    assert not stray, f"paths naming a kata outside its folder grader/suites/KATA/: {stray}"


@pytest.mark.parametrize("kata", KATAS)
def test_each_kata_folder_holds_its_registry_part_checklist_mistakes_mutants_and_benchmark(kata):
    held = {p.name for p in (SUITES_DIR / kata).iterdir()}
    wanted = set(IN_ITS_FOLDER) - ({"baseline.py"} if kata == "speculative" else set())  # it times no baseline
    assert wanted <= held, f"grader/suites/{kata}/ lacks {sorted(wanted - held)}"
