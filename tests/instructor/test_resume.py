"""kata grade-all --resume: a kata graded earlier with the same code, seed and tasks is kept, the rest graded."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.instructor import resume
from grader.judge.events import INTERRUPTED_MESSAGE
from grader.kata.registry import load_registry

from helpers import SUBS, TOY_KATAS

MARK = 123.25  # a duration no grading measures: a kata that still has it was kept, not graded again


@pytest.fixture
def graded_class(tmp_path, monkeypatch):
    """alice (correct) and bob (the stub), graded once into book/."""
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    root, book = tmp_path / "class", tmp_path / "book"
    shutil.copytree(SUBS / "correct", root / "alice")
    shutil.copytree(SUBS / "stub", root / "bob")
    first = CliRunner().invoke(main, ["grade-all", str(root), "--out", str(book)])
    assert first.exit_code == 0, first.output
    return root, book


def marked(book, student: str, **task_changes) -> None:
    """Put MARK into the student's earlier JSON (and task_changes into each of its tasks)."""
    path = book / "students" / f"{student}.json"
    data = json.loads(path.read_text())
    data["katas"][0]["duration"] = MARK
    for task in data["katas"][0]["tasks"]:
        task.update(task_changes)
    path.write_text(json.dumps(data))


def regrade(root, book, *extra):
    result = CliRunner().invoke(main, ["grade-all", str(root), "--out", str(book), *extra])
    assert result.exit_code == 0, result.output
    rows = {r["student"]: r for r in csv.DictReader((book / "gradebook.csv").open())}
    durations = {s: json.loads((book / "students" / f"{s}.json").read_text())["katas"][0]["duration"] for s in rows}
    return result, rows, durations


def test_each_student_json_records_the_digest_of_what_graded_each_kata(graded_class):
    root, book = graded_class
    (toy,) = load_registry(TOY_KATAS)
    for student in ("alice", "bob"):
        data = json.loads((book / "students" / f"{student}.json").read_text())
        assert data["digests"] == {"toy": resume.digest(root / student, toy)}
    assert resume.digest(root / "alice", toy) != resume.digest(root / "bob", toy)


def test_resume_keeps_an_unchanged_student_and_grades_a_changed_one_again(graded_class):
    root, book = graded_class
    marked(book, "alice")
    marked(book, "bob")
    shutil.copy(SUBS / "correct" / "toy.py", root / "bob" / "toy.py")  # bob finished his work since
    result, rows, durations = regrade(root, book, "--resume")
    assert durations["alice"] == MARK and durations["bob"] != MARK
    assert (rows["alice"]["score"], rows["bob"]["score"]) == ("4", "4")  # every row kept, bob's new grade in it
    assert "resumed: kept 1 earlier grades" in result.output


def test_without_resume_every_student_is_graded_again(graded_class):
    root, book = graded_class
    marked(book, "alice")
    _, _, durations = regrade(root, book)
    assert durations["alice"] != MARK


@pytest.mark.parametrize(
    "change, extra",
    [
        (dict(message=INTERRUPTED_MESSAGE), []),  # Ctrl-C stopped it: the class resumes here
        (dict(message="the grader failed: out of file descriptors"), []),
        ({}, ["--seed", "5"]),
        ({}, ["--kata", "toy:mean"]),
    ],
)
def test_resume_grades_again_what_was_interrupted_or_graded_otherwise(graded_class, change, extra):
    root, book = graded_class
    marked(book, "alice", **change)
    _, _, durations = regrade(root, book, "--resume", *extra)
    assert durations["alice"] != MARK


def test_the_digest_changes_with_the_module_and_with_what_grades_it(tmp_path):
    (toy,) = load_registry(TOY_KATAS)
    shutil.copytree(SUBS / "stub", tmp_path / "sub")
    before = resume.digest(tmp_path / "sub", toy)
    assert resume.digest(tmp_path / "sub", toy) == before
    points = toy.model_copy(update={"tasks": (toy.tasks[0].model_copy(update={"points": 9}), *toy.tasks[1:])})
    assert resume.digest(tmp_path / "sub", points) != before
    (tmp_path / "sub" / "toy.py").write_text((tmp_path / "sub" / "toy.py").read_text() + "\n# edited\n")
    assert resume.digest(tmp_path / "sub", toy) != before
    assert resume.digest(tmp_path / "empty", toy) != before  # no module at all is a digest of its own
