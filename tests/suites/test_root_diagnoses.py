"""Real mistakes graded end to end, each told at its root: the task whose code is wrong gets the
diagnosis of its own mistake, the tasks that call it say they fail because of it with no hint or
diagnosis of their own, a check's hint is about that check's function, and a file that does not load
shows its error with no hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.kata.registry import find_kata
from grader.kata.target import SOLUTIONS_DIR
from grader.output import report
from grader.run.results import GradeResult, KataResult, TaskResult
from grader.run.runner import grade_kata

from mutation import MUTANT_LIMITS, load_mutants


def mutant(kata: str, name: str):
    return next(m for m in load_mutants(kata)[0] if m.name == name)


def graded(
    kata: str, source: str, folder: Path, tasks: list[str], checks: list[str] = (), progress=None
) -> dict[str, TaskResult]:
    (folder / f"{kata}.py").write_text(source, encoding="utf-8")
    result = grade_kata(
        find_kata(kata), str(folder), tasks=tasks, checks=list(checks), limits=MUTANT_LIMITS, progress=progress
    )
    return {t.name: t for t in result.tasks}


@pytest.mark.slow
def test_greedy_reading_the_next_row_is_diagnosed_in_greedy_and_the_loop_and_speed_fail_because_of_it(tmp_path):
    wrong = mutant("speculative", "greedy_accept takes the correction from row i + 1")
    tasks = graded("speculative", wrong.source("speculative"), tmp_path, ["greedy", "loop", "speed"])
    assert tasks["greedy"].diagnosis == wrong.looks_like, tasks["greedy"].looks_like
    assert "ties" not in tasks["greedy"].looks_like
    for name in ("loop", "speed"):
        assert tasks[name].status.failed and tasks[name].because_of == "speculative:greedy"
        assert (tasks[name].hint, tasks[name].diagnosis) == ("", ""), name


@pytest.mark.parametrize(
    "name", ["load_balancing_loss divided by T", "load_balancing_loss_f_over_tokens_not_assignments"]
)
def test_a_load_balancing_loss_over_tokens_is_diagnosed_in_losses_and_the_layer_fails_because_of_it(tmp_path, name):
    wrong = mutant("moe", name)
    layer_checks = ["test_moe_forward_reports_the_losses_of_its_routing"]
    losses_checks = list(find_kata("moe").task("losses").tests)
    told = []  # the rows `kata grade` prints as tasks finish: the layer's waits for the losses it needs
    tasks = graded(
        "moe",
        wrong.source("moe"),
        tmp_path,
        ["layer", "losses"],
        layer_checks + losses_checks,
        progress=lambda kata, task: told.append((task.name, task.because_of)),
    )
    assert tasks["losses"].diagnosis == wrong.looks_like, tasks["losses"].looks_like
    assert tasks["layer"].because_of == "moe:losses"
    assert (tasks["layer"].hint, tasks["layer"].diagnosis) == ("", "")
    assert sorted(told) == [("layer", "moe:losses"), ("losses", "")]


def test_a_z_loss_that_takes_integer_logits_gets_a_hint_about_the_z_loss(tmp_path):
    wrong = mutant("moe", "router_z_loss_accepts_integers")
    tasks = graded("moe", wrong.source("moe"), tmp_path, ["losses"], [wrong.check])
    losses = find_kata("moe").task("losses")
    assert tasks["losses"].hint == losses.hint_for(tasks["losses"].failures[0]["test"])
    assert "router_z_loss" in tasks["losses"].hint and "f_i" not in tasks["losses"].hint


def test_a_syntax_error_shows_the_error_and_its_line_with_no_hint_or_diagnosis(tmp_path):
    source = (
        (SOLUTIONS_DIR / "speculative.py")
        .read_text(encoding="utf-8")
        .replace("def greedy_accept(draft_tokens, target_logits)", "def greedy_accept(draft_tokens, target_logits")
    )
    line = source[: source.index("def greedy_accept(")].count("\n") + 1
    checks = list(find_kata("speculative").task("accept_reject").tests[:2])
    task = graded("speculative", source, tmp_path, ["accept_reject"], checks)["accept_reject"]
    assert task.load_failed and f"syntax error at line {line}" in task.message
    assert (task.hint, task.diagnosis, task.because_of) == ("", "", "")
    kata = KataResult("speculative", "Speculative decoding", 0, task.max_score, 1.0, [task])
    text = report.details(GradeResult(str(tmp_path), 0, 0, task.max_score, 1.0, [kata]))
    assert f"syntax error at line {line}" in text and "hint:" not in text and "looks like" not in text
