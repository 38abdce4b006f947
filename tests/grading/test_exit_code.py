"""What `kata grade`'s exit code 0 says (GradeResult.passed) in a student edition: every task graded there
is done, and a check of each graded kata ran. A task the edition holds no check of (every one hidden) is
on submission beside a task of its kata whose checks ran and pass, and no pass alone: a per-task command,
which is what GitHub Classroom scores by, exits 1 for it."""

from __future__ import annotations

from pathlib import Path

from grader.judge.events import Status
from grader.kata.registry import Kata, Task
from grader.output import report
from grader.run.results import Check, GradeResult, kata_result

OPEN = Task(name="open", title="a task with a public check", points=2, hints=("a?", "b?"), hidden=("test_secret",))
SPEED = Task(
    name="speed", title="a speed task, every check hidden", points=1, hints=("c?", "d?"), hidden=("test_fast",)
)
KATA = Kata(name="toy", title="Toy", trade="nothing", order=1, tasks=(OPEN, SPEED), suite=Path("toy"))


def graded(tasks: list[Task], outcome: Status | None) -> GradeResult:
    """A grading of tasks of KATA, OPEN's public check ending with outcome (None: OPEN not graded)."""
    checks = (
        {} if outcome is None else {"c": Check(id="x.py::test_open", name="test_open", task="open", outcome=outcome)}
    )
    kata = kata_result(KATA, tasks, checks, "", [], 1.0)
    return GradeResult("katas", 0, 0, kata.max_score, 1.0, [kata])


def test_a_task_the_edition_holds_no_check_of_is_no_pass_graded_alone():
    alone = graded([SPEED], None)
    (speed,) = alone.katas[0].tasks
    assert speed.status is Status.SUBMIT and speed.score == 0 and speed.checks_total == 0
    assert not alone.passed
    assert "it is no pass" in speed.message
    assert report.next_step(alone, [KATA]).startswith("next: nothing here checks toy / speed")


def test_beside_a_task_of_its_kata_whose_checks_pass_it_waits_on_submission_and_the_grade_passes():
    both = graded([OPEN, SPEED], Status.PASS)
    assert [t.status for t in both.katas[0].tasks] == [Status.SUBMIT, Status.SUBMIT]
    assert both.passed and sum(t.score for t in both.katas[0].tasks) == 0
    assert "no pass" not in both.katas[0].tasks[1].message


def test_beside_a_task_that_fails_it_is_todo_and_the_grade_does_not_pass():
    failing = graded([OPEN, SPEED], Status.FAIL)
    assert [t.status for t in failing.katas[0].tasks] == [Status.FAIL, Status.TODO]
    assert not failing.passed


def test_a_task_whose_public_checks_pass_passes_a_per_task_command():
    assert graded([OPEN], Status.PASS).passed
    assert not graded([OPEN], Status.TODO).passed
