"""A task that fails while a task it needs (the registry's `depends`) fails too says so, and nothing of
its own: `because_of` in the result and the JSON, a note in the table, one line under it and in -v,
the root in `next:` and on `kata watch`'s screen. A task whose kata did not load shows the error and
no hint. Built from checks' outcomes here; tests/suites/test_root_diagnoses.py grades real mistakes."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from grader.judge.events import Status
from grader.kata.registry import load_registry
from grader.learn.watch import screen
from grader.output import gradescope_results, report
from grader.run.results import Check, GradeResult, KataResult, kata_result

from helpers import TOY_KATAS


@pytest.fixture(scope="module")
def speculative():
    return next(k for k in load_registry() if k.name == "speculative")


def graded(kata, outcomes: dict[str, Status], load: bool = False) -> KataResult:
    """The kata's grade from one check per task with the given outcome (a pass for a task not named)."""
    checks = {}
    for task in kata.tasks:
        outcome = outcomes.get(task.name, Status.PASS)
        message = "" if outcome is Status.PASS else f"{task.name} went wrong"
        name = task.tests[-1]
        node = f"{name}[{task.name}]"  # one check may grade several tasks, case by case
        checks[node] = Check(node, name, task.name, outcome, message, load=load and outcome is not Status.PASS)
    return kata_result(kata, list(kata.tasks), checks, "", [], 1.0)


def whole(kata: KataResult) -> GradeResult:
    return GradeResult("katas", 0, kata.score, kata.max_score, 1.0, [kata])


def by_name(result: KataResult) -> dict:
    return {t.name: t for t in result.tasks}


def test_a_failing_task_whose_needed_task_fails_is_because_of_it_with_no_hint_or_diagnosis(speculative):
    tasks = by_name(graded(speculative, {"greedy": Status.FAIL, "loop": Status.FAIL, "speed": Status.ERROR}))
    assert tasks["loop"].because_of == tasks["speed"].because_of == "speculative:greedy"
    assert tasks["loop"].because == "fails because greedy fails: fix greedy first"
    assert (tasks["loop"].hint, tasks["loop"].diagnosis, tasks["speed"].hint) == ("", "", "")
    assert tasks["greedy"].because_of == "" and tasks["greedy"].hint  # the root keeps its own hint
    assert tasks["loop"].status is Status.FAIL and tasks["loop"].score == 0  # the verdict stands


def test_the_root_is_found_through_a_passing_task_and_is_the_first_failing_one_needing_none(speculative):
    through = by_name(graded(speculative, {"greedy": Status.FAIL, "speed": Status.FAIL}))  # loop passes
    assert through["speed"].because_of == "speculative:greedy"
    both = by_name(graded(speculative, {"accept_reject": Status.TODO, "greedy": Status.FAIL, "loop": Status.FAIL}))
    assert both["loop"].because_of == "speculative:accept_reject"  # a todo task it needs blocks it too


@pytest.mark.parametrize("needed", [Status.PASS, Status.SLOW, Status.INTERRUPTED])
def test_a_needed_task_that_passes_is_slow_or_was_interrupted_blames_nothing(speculative, needed):
    tasks = by_name(graded(speculative, {"greedy": needed, "loop": Status.FAIL}))
    assert tasks["loop"].because_of == "" and tasks["loop"].hint


def test_a_task_that_is_todo_itself_is_not_started_rather_than_because_of_another(speculative):
    tasks = by_name(graded(speculative, {"greedy": Status.FAIL, "loop": Status.TODO}))
    assert tasks["loop"].because_of == "" and tasks["loop"].status is Status.TODO


def test_a_needed_task_not_graded_blames_nothing(speculative):
    checks = {"test_x": Check("test_x", "test_x", "loop", Status.FAIL, "wrong")}
    result = kata_result(speculative, [speculative.task("loop")], checks, "", [], 1.0)
    assert result.tasks[0].because_of == "" and result.tasks[0].hint


def test_a_kata_that_does_not_load_shows_the_error_with_no_hint_and_blames_no_task(speculative):
    tasks = by_name(graded(speculative, {t.name: Status.ERROR for t in speculative.tasks}, load=True))
    assert all(t.load_failed and t.hint == "" and t.because_of == "" and t.diagnosis == "" for t in tasks.values())
    loop = graded(speculative, {"loop": Status.ERROR}, load=True)
    text = report.details(whole(loop))
    assert "loop went wrong" in text and "hint:" not in text


def test_the_table_summary_verbose_and_json_say_what_a_task_fails_because_of(speculative):
    result = whole(graded(speculative, {"greedy": Status.FAIL, "loop": Status.FAIL, "speed": Status.FAIL}))
    table = report.table(result).splitlines()
    assert next(ln for ln in table if " loop " in ln).rstrip().endswith("because greedy fails")
    assert not next(ln for ln in table if " greedy " in ln).rstrip().endswith("fails")
    summary = report.failing_summary(result).splitlines()
    assert summary == [
        "speculative / greedy: greedy went wrong",
        "speculative / loop: fails because greedy fails: fix greedy first",
        "speculative / speed: fails because greedy fails: fix greedy first",
    ]
    details = report.details(result)
    assert (
        "speculative / loop: fail, because greedy fails: fix greedy first "
        "(`kata grade -v speculative:loop` shows its own failing checks)" in details.splitlines()
    )
    assert details.count("hint: ") == 1 and "loop went wrong" not in details
    tasks = report.as_json(result)["katas"][0]["tasks"]
    assert [t["because_of"] for t in tasks] == ["", "", "speculative:greedy", "speculative:greedy"]
    assert [t["hint"] == "" for t in tasks][2:] == [True, True]


def test_next_points_at_the_root_even_when_the_dependent_task_comes_first():
    moe = next(k for k in load_registry() if k.name == "moe")  # layer (4th) needs losses (5th)
    result = whole(graded(moe, {"layer": Status.FAIL, "losses": Status.FAIL}))
    assert by_name(result.katas[0])["layer"].because_of == "moe:losses"
    assert report.next_step(result, [moe]).startswith("next: moe / losses (fail): write load_balancing_loss")


def test_the_watch_screen_shows_the_root_failure_and_notes_the_tasks_that_fail_because_of_it(speculative):
    result = graded(speculative, {"greedy": Status.FAIL, "loop": Status.FAIL})
    text = screen(
        speculative,
        result,
        None,
        file=Path("/w/speculative.py"),
        when=datetime(2026, 1, 2, 9, 0, 0),
        next_kata=None,
        watching_all=False,
    )
    assert "first failing check: greedy / " in text and "greedy went wrong" in text
    assert next(ln for ln in text.splitlines() if " loop " in ln).endswith("  because greedy fails")


def test_gradescope_says_what_a_task_fails_because_of_and_gives_no_empty_hint(speculative):
    result = whole(graded(speculative, {"greedy": Status.FAIL, "loop": Status.FAIL}))
    tests = {t["extra_data"]["task"]: t for t in gradescope_results.results(result, seed=0)["tests"]}
    assert tests["loop"]["output"].endswith("It fails because greedy fails: fix greedy first.")
    assert tests["loop"]["extra_data"]["because_of"] == "speculative:greedy"
    assert "**Hint:**" in tests["greedy"]["output"] and "**Hint:**" not in tests["loop"]["output"]


def test_the_toy_speed_task_fails_because_of_its_mean(tmp_path):
    toy = load_registry(TOY_KATAS)[0]
    tasks = by_name(graded(toy, {"mean": Status.FAIL, "fast": Status.SLOW}))
    assert tasks["fast"].because_of == "toy:mean" and tasks["scale"].because_of == ""


def test_kata_list_and_kata_hint_point_at_the_task_a_failing_one_fails_because_of(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from grader.cli.commands import main
    from grader.learn import progress

    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    moe = next(k for k in load_registry() if k.name == "moe")  # layer (4th) needs losses (5th)
    done = {"router": "pass", "top_k": "pass", "capacity": "pass", "speed": "pass"}
    assert progress.to_fix_first(moe, moe.task("layer"), {**done, "layer": "fail", "losses": "pass"}).name == "layer"
    assert progress.to_fix_first(moe, moe.task("layer"), {**done, "layer": "todo", "losses": "fail"}).name == "layer"
    progress.write(progress.LAST_GRADE, {"moe": {**done, "layer": "fail", "losses": "error"}})
    listing = progress.listing([moe])
    assert listing[1].startswith("next: moe / losses (error)")
    assert next(ln for ln in listing if ln.startswith(" > ")).startswith(" > losses")
    assert CliRunner().invoke(main, ["hint", "moe"]).output.startswith("moe / losses, hint 1/3")
