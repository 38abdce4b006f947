"""`kata new`: a scaffolded kata is graded, listed and passes the project's
tests straight away (on a copy of the checkout), in well under five minutes;
and a bad name or an existing file is refused with nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.dev import scaffold
from grader.kata.registry import load_presets, load_registry
from grader.kata.target import ROOT

FLOW_SECONDS = 150  # the bar is five minutes, from `kata new` to a graded toy kata; this is half of it
NEW_FILES = [
    "reference/solutions/toykata.py",
    "katas/toykata.py",
    "grader/suites/toykata/__init__.py",
    "grader/suites/toykata/test_toykata.py",
    "grader/suites/toykata/kata.toml",
    "grader/suites/toykata/checklist.md",
    "grader/suites/toykata/bench.py",
]
EDITED_FILES = ["grader/suites/presets.toml", "CHECKLIST.md", "README.md"]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root (its path relative to root) with the sha256 of its bytes, but the
    bytecode Python caches in __pycache__ as it runs (which .gitignore leaves out too)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.relative_to(root).parts
    }


def _small_checkout(root: Path) -> Path:
    """The parts of a checkout `kata new` reads and edits, and the folders it writes into, copied to root."""
    shutil.copytree(
        ROOT / "grader" / "suites", root / "grader" / "suites", ignore=shutil.ignore_patterns("__pycache__")
    )
    for rel in ("CHECKLIST.md", "README.md"):
        shutil.copy(ROOT / rel, root / rel)
    for folder in ("reference/solutions", "katas"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture
def small_root(tmp_path) -> Path:
    """A small checkout of the test's own, for a test that writes into it."""
    return _small_checkout(tmp_path / "checkout")


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory) -> Path:
    """One small checkout for the tests whose `kata new` must write nothing: each compares the whole tree before
    and after its own call, so a write fails the test that made it (100 files copied once, not for each)."""
    return _small_checkout(tmp_path_factory.mktemp("shared") / "checkout")


# ------------------------------------------------------------------ refusals (fast)


@pytest.mark.parametrize(
    "name,why",
    [
        ("Toy", "not a valid kata name"),
        ("1toy", "not a valid kata name"),
        ("toy-kata", "not a valid kata name"),
        ("_toy", "not a valid kata name"),
        ("", "not a valid kata name"),
        ("class", "keyword"),
        ("kv_cache", "already a kata named 'kv_cache'"),
        ("moe", "already a kata named 'moe'"),
        ("json", "existing Python module"),
        ("numpy", "existing Python module"),
        ("grader", "already the name of"),
    ],
)
def test_a_bad_name_is_refused_and_nothing_is_written(shared_root, name, why):
    before = snapshot(shared_root)
    with pytest.raises(scaffold.ScaffoldError, match=why):
        scaffold.new_kata(name, title="Toy", trade="nothing for a test", root=shared_root)
    assert snapshot(shared_root) == before


@pytest.mark.parametrize("existing", NEW_FILES)
def test_an_existing_target_file_is_refused_and_nothing_is_written(small_root, existing):
    (small_root / existing).parent.mkdir(parents=True, exist_ok=True)
    (small_root / existing).write_text("# somebody's work\n", encoding="utf-8")
    before = snapshot(small_root)
    with pytest.raises(scaffold.ScaffoldError, match=re.escape(existing)):
        scaffold.new_kata("toykata", title="Toy", trade="nothing for a test", root=small_root)
    assert snapshot(small_root) == before


def test_an_existing_suite_folder_is_refused_and_nothing_is_written(small_root):
    (small_root / "grader" / "suites" / "toykata").mkdir()
    before = snapshot(small_root)
    with pytest.raises(scaffold.ScaffoldError, match="would overwrite grader/suites/toykata"):
        scaffold.new_kata("toykata", title="Toy", trade="nothing for a test", root=small_root)
    assert snapshot(small_root) == before and not any((small_root / "grader" / "suites" / "toykata").iterdir())


@pytest.mark.parametrize("field", ["title", "trade"])
def test_an_empty_or_multi_line_title_or_trade_is_refused(shared_root, field):
    before = snapshot(shared_root)
    for bad in ("", "   ", "two\nlines"):
        texts = {"title": "Toy", "trade": "nothing for a test", field: bad}
        with pytest.raises(scaffold.ScaffoldError, match=field):
            scaffold.new_kata("toykata", root=shared_root, **texts)
    assert snapshot(shared_root) == before


def test_the_command_refuses_an_existing_kata_in_one_line():
    result = CliRunner().invoke(main, ["new", "kv_cache", "--trade", "memory for time"])
    assert result.exit_code == 1
    assert "Error: there is already a kata named 'kv_cache'" in result.output and "Traceback" not in result.output


def test_new_writes_every_place_and_the_registry_loads(small_root):
    before = snapshot(small_root)
    written = scaffold.new_kata("toykata", title="Toy {kata} | here", trade="braces {x} for pipes |", root=small_root)
    assert [str(p.relative_to(small_root)) for p in written] == NEW_FILES + EDITED_FILES
    after = snapshot(small_root)
    assert sorted(set(after) - set(before)) == sorted(NEW_FILES)
    assert sorted(k for k in before if before[k] != after[k]) == sorted(EDITED_FILES)
    katas = load_registry(small_root / "grader" / "suites")
    new = katas[-1]
    assert (new.name, new.title, new.trade, new.order) == (
        "toykata",
        "Toy {kata} | here",
        "braces {x} for pipes |",
        max(k.order for k in katas[:-1]) + 1,
    )
    assert [f for t in new.tasks for f in t.functions] == [scaffold.CHECK, scaffold.FUNCTION]
    assert all(t.rubric and len(t.questions) == 2 for t in new.tasks), "each task needs a rubric and its questions"
    assert "toykata" in {p.kata for p in load_presets(small_root / "grader" / "suites")}
    stub = (small_root / "katas" / "toykata.py").read_text(encoding="utf-8")
    assert not (small_root / "grader" / "kata" / "stub_files").exists()  # the stub has one copy, made from the solution
    assert stub.count("raise NotImplementedError") == 2
    assert "`toykata`" in (small_root / "README.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------ the whole flow, on a copy (slow)


def _copy_checkout(dest: Path) -> None:
    """The git-tracked files of this checkout as they are in the working tree,
    plus grader/dev/scaffold.py (the module under test, maybe not committed yet)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: nothing to copy")
    for rel in set(listed.decode().split("\0")) - {""} | {"grader/dev/scaffold.py"}:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _run(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KATA_REGISTRY", "KATA_WORKDIR", "KATA_STATE_DIR")}
    env.update(PYTHONPATH=str(copy), NO_COLOR="1")
    return subprocess.run(
        [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _statuses(result: subprocess.CompletedProcess) -> dict[str, str]:
    data = json.loads(result.stdout)
    return {t["name"]: t["status"] for k in data["katas"] if k["name"] == "toykata" for t in k["tasks"]}


@pytest.mark.slow
def test_kata_new_scaffolds_a_kata_that_is_graded_and_passes_the_project_tests(tmp_path):
    start = time.monotonic()
    copy = tmp_path / "checkout"
    _copy_checkout(copy)
    before = snapshot(copy)

    new = _run(copy, "-m", "grader.cli", "new", "toykata", "--title", "Toy kata", "--trade", "nothing for a test")
    assert new.returncode == 0, new.stderr
    after = snapshot(copy)
    assert sorted(set(after) - set(before)) == sorted(NEW_FILES)
    assert sorted(k for k in before if before[k] != after[k]) == sorted(EDITED_FILES)
    assert all(f"wrote {rel}" in new.stdout for rel in NEW_FILES + EDITED_FILES)

    listed = _run(copy, "-m", "grader.cli", "list")
    assert listed.returncode == 0, listed.stderr
    row = r"^\d+\. toykata: Toy kata \(nothing for a test\), 0/\d+ pts$"
    assert re.search(row, listed.stdout, re.MULTILINE), listed.stdout

    stub = _run(copy, "-m", "grader.cli", "grade", "toykata", "--json")
    assert stub.returncode == 1, stub.stderr
    assert _statuses(stub) == {"finite": "todo", "double": "todo"}

    reference = _run(copy, "-m", "grader.cli", "grade", "toykata", "--target", "reference", "--json")
    assert reference.returncode == 0, reference.stderr
    assert _statuses(reference) == {"finite": "pass", "double": "pass"}

    stubs = _run(copy, "-m", "grader.kata.stubs", "--check", "toykata")  # the others are whatever katas/ holds
    assert stubs.returncode == 0, stubs.stdout + stubs.stderr

    bench = _run(copy, "-m", "grader.suites.toykata.bench", "--target", "reference", "--repeats", "1")
    assert bench.returncode == 0 and "1,000,000" in bench.stdout, bench.stdout + bench.stderr

    # The module's tests of the new kata and those of no kata; the other katas' are this checkout's own.
    others = " or ".join(k.name for k in load_registry())
    in_one = ("-m", "pytest", "-q", "-n", "0")  # one process: the copy's few tests need no workers
    select = ("tests/suites/test_katas.py", "-k", f"not ({others})")
    project = _run(copy, *in_one, *select)
    assert project.returncode == 0, project.stdout[-3000:] + project.stderr[-2000:]
    assert (
        re.search(r"\b\d+ passed", project.stdout)
        and "toykata" in _run(copy, *in_one, "--collect-only", *select).stdout
    )

    elapsed = time.monotonic() - start
    assert elapsed < FLOW_SECONDS, f"kata new to a graded kata and green project tests took {elapsed:.0f} s"
