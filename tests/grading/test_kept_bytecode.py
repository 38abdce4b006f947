"""The judges' bytecode, kept in the user's cache from one `kata` command to the next (grader.run.judges)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.kata.registry import load_registry
from grader.run.judges import KEPT_BYTECODE, Grader, kept_bytecode
from grader.run.runner import grade_kata

from helpers import FAST, SUBS, TOY_KATAS


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / KEPT_BYTECODE


def _graded_on_a_grader_of_its_own() -> set[str]:
    grader = Grader()
    try:
        result = grade_kata(load_registry(TOY_KATAS)[0], str(SUBS / "correct"), limits=FAST, grader=grader)
    finally:
        grader.close()
    return {task.status.value for task in result.tasks}


def test_a_second_grader_finds_the_suites_bytecode_the_first_kept_and_compiles_nothing_again(cache):
    assert _graded_on_a_grader_of_its_own() == {"pass"}
    assert cache.is_dir() and cache.stat().st_mode & 0o777 == 0o700
    kept = {path: path.stat().st_mtime_ns for path in cache.rglob("*.pyc")}
    assert any("pytest" in path.name and path.name.startswith("test_toy") for path in kept), (
        "the toy suite, its asserts rewritten by pytest, is not among the kept bytecode"
    )
    assert _graded_on_a_grader_of_its_own() == {"pass"}
    assert {path: path.stat().st_mtime_ns for path in cache.rglob("*.pyc")} == kept, "a second grading compiled again"


@pytest.mark.parametrize("how", ["group-writable", "a link", "a file"])
def test_a_kept_folder_others_could_write_is_not_used_and_the_judges_get_a_folder_of_their_own(cache, tmp_path, how):
    cache.parent.mkdir(parents=True)
    if how == "group-writable":
        cache.mkdir(mode=0o700)
        os.chmod(cache, 0o770)
    elif how == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        cache.symlink_to(tmp_path / "elsewhere")
    else:
        cache.write_text("")
    assert kept_bytecode() is None
    grader = Grader()
    own = Path(grader.pycache())
    assert own.is_dir() and own != cache and own.stat().st_mode & 0o777 == 0o700
    grader.close()
    assert not own.exists(), "close() left the folder of the process's own behind"


def test_without_a_home_the_judges_get_a_folder_of_their_own(monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", no_home)
    assert kept_bytecode() is None


def test_closing_a_grader_leaves_the_kept_folder_for_the_next(cache):
    grader = Grader()
    assert grader.pycache() == str(cache)
    grader.close()
    assert cache.is_dir()
