"""Which folder the learner's commands work on: $KATA_WORKDIR (a folder that exists), else the nearest
folder at or above the current one that `kata init` marked, else katas/ of a checkout; nowhere else a
usage error that says to run `kata init`, with no folder made behind the learner's back."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.kata import target
from grader.kata.target import MARKER, ROOT, NoKataFolder, workdir

from helpers import SUBS, TOY_KATAS


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """The current folder is a fresh one, no folder above it is marked, and no variable names a work folder."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for name in ("KATA_WORKDIR", "KATA_STATE_DIR", "KATA_REGISTRY"):
        monkeypatch.delenv(name, raising=False)
    assert not any((folder / MARKER).exists() for folder in (here, *here.parents))
    return here


def marked(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text("# a kata folder\n")
    return folder


def test_kata_workdir_names_the_work_folder_wherever_the_command_runs(nowhere, tmp_path, monkeypatch):
    marked(nowhere)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("KATA_WORKDIR", str(elsewhere))
    assert workdir() == elsewhere.resolve()


def test_a_kata_workdir_that_is_not_a_folder_is_refused_by_name_and_never_made(nowhere, tmp_path, monkeypatch):
    missing = tmp_path / "missing"
    monkeypatch.setenv("KATA_WORKDIR", str(missing))
    with pytest.raises(NoKataFolder, match=rf"KATA_WORKDIR is {missing}, which is not a folder: run `kata init"):
        workdir()
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path / "a file"))
    with pytest.raises(NoKataFolder, match="which is not a folder"):
        workdir()
    assert not missing.exists()


def test_the_nearest_marked_folder_at_or_above_the_current_one_is_the_work_folder(nowhere, monkeypatch):
    outer = marked(nowhere / "outer")
    inner = marked(outer / "inner")
    monkeypatch.chdir(outer)
    assert workdir() == outer.resolve()
    (inner / "deep" / "er").mkdir(parents=True)
    monkeypatch.chdir(inner / "deep" / "er")
    assert workdir() == inner.resolve()
    (outer / "beside").mkdir()
    monkeypatch.chdir(outer / "beside")
    assert workdir() == outer.resolve()


def test_outside_a_marked_folder_a_checkout_works_on_its_own_katas(nowhere):
    assert workdir() == ROOT / "katas"


def test_an_installed_copy_outside_a_marked_folder_has_no_work_folder(nowhere, tmp_path):
    site = tmp_path / "site-packages"  # what an installed wheel's root looks like: katas/ but no pyproject.toml
    (site / "katas").mkdir(parents=True)
    with pytest.raises(NoKataFolder, match=r"no kata folder here .*: run `kata init DIR`"):
        workdir(site)
    (site / "pyproject.toml").write_text("")
    assert workdir(site) == site / "katas"  # a checkout's
    shutil.rmtree(site / "katas")
    with pytest.raises(NoKataFolder, match="no kata folder here"):
        workdir(site)


LEARNER_COMMANDS = (
    ["grade"],
    ["grade", "moe:router"],
    ["watch", "moe"],
    ["list"],
    ["hint", "moe"],
    ["reset", "moe", "--yes"],
    ["bench", "moe"],
    ["play", "cache"],
)


@pytest.mark.parametrize("args", LEARNER_COMMANDS, ids=" ".join)
def test_every_learner_command_without_a_work_folder_is_a_usage_error_saying_to_run_kata_init(
    nowhere, tmp_path, monkeypatch, args
):
    missing = tmp_path / "missing"
    monkeypatch.setenv("KATA_WORKDIR", str(missing))
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert f"KATA_WORKDIR is {missing}, which is not a folder: run `kata init {missing}`" in result.output
    assert "Traceback" not in result.output and not missing.exists()
    assert list(nowhere.iterdir()) == []  # no .kata/ made here either


def test_kata_grade_inside_a_marked_folder_grades_the_files_there_without_kata_workdir(nowhere, monkeypatch):
    """Its judges run in folders of their own: they are handed the work folder, not left to find it."""
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    work = marked(nowhere / "work")
    shutil.copy(SUBS / "correct" / "toy.py", work / "toy.py")
    (work / "notes").mkdir()
    monkeypatch.chdir(work / "notes")
    result = CliRunner().invoke(main, ["grade", "toy:mean", "--no-live"])
    assert result.exit_code == 0, result.output
    assert f"grading the learner's katas ({work.resolve()})" in result.output
    assert (work / ".kata" / "last_grade.json").is_file() and not (work / "notes" / ".kata").exists()


def test_the_checklist_a_checkout_has_is_the_one_at_its_top():
    assert target.checklist() == ROOT / "CHECKLIST.md"
