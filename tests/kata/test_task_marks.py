"""Tasks are marked on the suite's tests (`@pytest.mark.task`, or a `task`
parameter for one check that grades several tasks case by case): the
registry reads the marks from the source, the judge from each collected
check, and `--fail-fast` stops a task at its first check that does not pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.kata import registry
from grader.kata.registry import RegistryError, load_registry, suite_tasks
from grader.run.runner import grade_kata

from helpers import FAST, SUBS, TOY, TOY_KATAS

# One check for two tasks: its "mean" case passes on a correct toy, its "scale" case fails.
CASE_BY_CASE = """

@pytest.mark.parametrize("task", ["mean", "scale"])
def test_one_check_for_two_tasks(toy, task):
    assert task == "mean", "the scale case of the shared check fails"
"""

NO_TESTS_TASK = """
  [[kata.task]]
  name = "unchecked"
  title = "a task no test grades"
  points = 1
  hints = ["one?", "two?"]
"""


def toy_copy(tmp_path: Path, suite_extra: str = "", registry_edit=lambda text: text) -> Path:
    """A copy of the toy kata's folder in tmp_path/toy/ (the registry folder returned), the suite with
    suite_extra appended and its kata.toml text passed through registry_edit."""
    (tmp_path / "toy").mkdir()
    for name in ("conftest.py", "baseline_toy.py"):
        (tmp_path / "toy" / name).write_text((TOY / name).read_text())
    (tmp_path / "toy" / "test_toy.py").write_text((TOY / "test_toy.py").read_text() + suite_extra)
    (tmp_path / "toy" / "kata.toml").write_text(registry_edit((TOY / "kata.toml").read_text()))
    return tmp_path


def test_the_registry_reads_each_tasks_tests_from_the_suites_marks(tmp_path):
    kata = load_registry(toy_copy(tmp_path, CASE_BY_CASE))[0]
    tests = {t.name: t.tests for t in kata.tasks}
    assert tests == {
        "mean": (
            "test_mean_matches_a_float64_sum",
            "test_mean_of_empty_raises_value_error",
            "test_one_check_for_two_tasks",
        ),
        "scale": ("test_scale_multiplies_every_element", "test_one_check_for_two_tasks"),
        "fast": ("test_mean_is_as_fast_as_numpy",),
    }
    assert suite_tasks(tmp_path / "toy" / "test_toy.py")["test_one_check_for_two_tasks"] == ("mean", "scale")


def test_a_check_with_a_task_parameter_grades_each_task_with_its_own_case(tmp_path):
    kata = load_registry(toy_copy(tmp_path, CASE_BY_CASE))[0]
    result = {t.name: t for t in grade_kata(kata, str(SUBS / "correct"), limits=FAST).tasks}
    assert result["mean"].status == "pass" and result["mean"].checks_total == 3
    assert result["scale"].status == "fail" and result["scale"].checks_total == 2
    assert result["scale"].message == "the scale case of the shared check fails"
    only = grade_kata(kata, str(SUBS / "correct"), tasks=["scale"], limits=FAST).tasks
    assert [(t.name, t.status, t.checks_total) for t in only] == [("scale", "fail", 2)]


@pytest.mark.parametrize(
    "extra, edit, says",
    [
        ("\n\ndef test_unmarked(toy):\n    pass\n", None, "no @pytest.mark.task"),
        ('\n\n@pytest.mark.task("nope")\ndef test_stray(toy):\n    pass\n', None, "does not list: nope"),
        (
            '\n\n@pytest.mark.task("mean")\n@pytest.mark.task("scale")\ndef test_twice(toy):\n    pass\n',
            None,
            "marked with 2 tasks",
        ),
        (
            '\n\nTASKS = ["mean"]\n\n\n@pytest.mark.parametrize("task", TASKS)\ndef test_hidden(toy, task):\n'
            "    pass\n",
            None,
            "literally",
        ),
        (
            '\n\n@pytest.mark.task("mean")\n@pytest.mark.parametrize("task", ["scale"])\ndef test_both(toy, task):\n'
            "    pass\n",
            None,
            "one or the other",
        ),
        ("", lambda text: text + NO_TESTS_TASK, "no test in test_toy.py is marked"),
        ("", lambda text: text.replace("points = 1\n", 'points = 1\n  tests = ["test_x"]\n', 1), "is not read"),
    ],
    ids=[
        "unmarked",
        "unknown task",
        "two marks",
        "task parameter not literal",
        "mark and parameter",
        "no test",
        "tests",
    ],
)
def test_the_registry_refuses_marks_that_do_not_match_its_tasks(tmp_path, extra, edit, says):
    registry = toy_copy(tmp_path, extra, edit or (lambda text: text))
    with pytest.raises(RegistryError, match=says):
        load_registry(registry)


def test_fail_fast_stops_a_task_at_its_first_failing_check_and_keeps_its_status():
    kata = load_registry(TOY_KATAS)[0]
    full = grade_kata(kata, str(SUBS / "nan"), tasks=["mean"], limits=FAST).tasks[0]
    fast = grade_kata(kata, str(SUBS / "nan"), tasks=["mean"], limits=FAST, fail_fast=True).tasks[0]
    assert full.status == fast.status == "fail" and full.message == fast.message
    assert full.checks_passed == 1, "without --fail-fast the check after the failing one runs (and passes)"
    assert fast.checks_passed == 0 and fast.checks_total == 2
    assert fast.failures[1]["message"] == (
        "not run (--fail-fast): test_mean_matches_a_float64_sum of this task did not pass"
    )


def toy_folder(tmp_path: Path, second_extra: str = "") -> Path:
    """The toy kata with its suite as its folder, tmp_path/toy/ (tmp_path returned: the registry): the fixture
    in its conftest.py, the mean checks in test_1_mean.py and the others (with second_extra appended) in
    test_2_rest.py."""
    source = (TOY / "test_toy.py").read_text()
    fixture, mean, rest = (
        source.index(s) for s in ("@pytest.fixture", '@pytest.mark.task("mean")', '@pytest.mark.task("scale")')
    )
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "conftest.py").write_text((TOY / "conftest.py").read_text() + source[:mean])
    (folder / "test_1_mean.py").write_text(source[:fixture] + source[mean:rest])
    (folder / "test_2_rest.py").write_text(source[:fixture] + source[rest:] + second_extra)
    (folder / "baseline_toy.py").write_text((TOY / "baseline_toy.py").read_text())
    (folder / "kata.toml").write_text((TOY / "kata.toml").read_text().replace('suite = "test_toy.py"\n', ""))
    return tmp_path


def test_a_suite_folder_is_read_and_graded_as_the_one_file_holding_its_modules(tmp_path):
    folder = load_registry(toy_folder(tmp_path))[0]
    one_file = load_registry(TOY_KATAS)[0]
    assert folder.suite == tmp_path / "toy" and [t.tests for t in folder.tasks] == [t.tests for t in one_file.tasks]
    tasks = ["mean", "scale"]  # the speed check adds seconds and nothing the folder changes
    for sub in ("correct", "nan"):
        graded, want = (grade_kata(k, str(SUBS / sub), tasks=tasks, limits=FAST).tasks for k in (folder, one_file))
        assert [(t.name, t.status, t.checks_total, t.message) for t in graded] == [
            (t.name, t.status, t.checks_total, t.message) for t in want
        ]
    assert {t.name: t.status for t in graded} == {"mean": "fail", "scale": "pass"}  # nan: the check can fail


def test_a_check_name_defined_in_two_modules_of_a_suite_folder_is_refused(tmp_path):
    twice = '\n\n@pytest.mark.task("mean")\ndef test_mean_of_empty_raises_value_error(toy):\n    pass\n'
    with pytest.raises(RegistryError, match="test_mean_of_empty_raises_value_error is defined in test_1_mean.py too"):
        load_registry(toy_folder(tmp_path, twice))


def test_the_marks_of_a_source_are_kept_across_processes_and_an_edit_is_read_anew(tmp_path, monkeypatch):
    """What a new process finds: the in-process cache empty, the user's cache holding what an earlier one read."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    suite = tmp_path / "test_s.py"
    suite.write_text('import pytest\n\n\n@pytest.mark.task("a")\ndef test_one():\n    pass\n')
    monkeypatch.setattr(registry, "_MARKS", {})
    assert suite_tasks(suite) == {"test_one": ("a",)}
    assert len(list(registry.marks_cache().glob("*.json"))) == 1

    def unparsed(path, source):
        raise AssertionError(f"{path} was parsed again")

    with monkeypatch.context() as m:
        m.setattr(registry, "_MARKS", {})
        m.setattr(registry, "_parsed_marks", unparsed)
        assert suite_tasks(suite) == {"test_one": ("a",)}  # read from the user's cache
    suite.write_text(suite.read_text().replace('task("a")', 'task("b")'))
    monkeypatch.setattr(registry, "_MARKS", {})
    assert suite_tasks(suite) == {"test_one": ("b",)}
    assert len(list(registry.marks_cache().glob("*.json"))) == 2


@pytest.mark.parametrize("cache", ["a file, not a folder", "garbled", "no home"])
def test_a_cache_that_cannot_be_used_costs_the_parse_and_nothing_else(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    suite = tmp_path / "test_s.py"
    suite.write_text('import pytest\n\n\n@pytest.mark.task("a")\ndef test_one():\n    pass\n')
    monkeypatch.setattr(registry, "_MARKS", {})
    if cache == "no home":  # a uid the system does not know, without $HOME: Path.home() raises
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    elif cache == "garbled":
        suite_tasks(suite)
        (stored,) = registry.marks_cache().glob("*.json")
        stored.write_text('{"not": "marks"')
        monkeypatch.setattr(registry, "_MARKS", {})
    else:
        (tmp_path / "cache").write_text("")
    assert suite_tasks(suite) == {"test_one": ("a",)}
    with pytest.raises(RegistryError, match="does not parse"):
        suite.write_text("def test_broken(:\n")
        suite_tasks(suite)
