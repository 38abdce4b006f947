"""The diagnosis of a failing task from the catalogue of known mistakes
(grader.run.diagnosis): matching hand-made failures, the catalogue's file,
what a student edition keeps of it, and the result that carries the name."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from grader.judge.events import Status
from grader.kata.registry import Kata, Task
from grader.run import diagnosis
from grader.run.diagnosis import Mistake, Sign
from grader.run.results import Check, kata_result


def failed_always(*checks: tuple[str, str]) -> tuple[Sign, ...]:
    """A signature of checks (name, message shape) that fail in each of 3 gradings."""
    return tuple(Sign(check, (("fail", 3),), shape) for check, shape in checks)


T2 = Mistake(
    "loss",
    "the T^2 factor is missing",
    "the soft term's gradients shrink by 1/T^2",
    ("loss forgets T squared",),
    3,
    failed_always(
        ("test_alpha_one", "with alpha=# the loss is #, expected #"),
        ("test_formula", "the loss is #, expected #"),
        ("test_ignored", "with ignore_index=# the loss is #"),
    ),
)
HARD_AT_T = Mistake(
    "loss",
    "the hard cross-entropy is taken at temperature T",
    "the labels are matched at temperature 1",
    ("loss computes the hard cross-entropy at temperature T",),
    3,
    failed_always(
        ("test_alpha_zero", "with alpha=# the loss is #, expected plain cross-entropy #"),
        ("test_formula", "the loss is #, expected #"),
    ),
)
OVERFLOW = Mistake(
    "softmax",
    "softmax overflows",
    "exp of 1e4 is inf",
    ("softmax without the max-subtraction overflows",),
    3,
    failed_always(("test_huge", "softmax of logits up to # returned NaN or inf")),
)
CATALOGUE = (T2, HARD_AT_T, OVERFLOW)
# The T^2 mistake as its gradings failed it, in a kata whose knobs are T and alpha: always away from T=1.
T2_AT_T = dataclasses.replace(
    T2,
    signature=failed_always(
        ("test_alpha_one", "the loss is #, expected # (T=#)"), ("test_formula", "the loss is #, expected # (T=#)")
    ),
    knobs=("T", "alpha"),
)


def failure(test: str, message: str = "wrong", outcome: str = "fail") -> dict:
    return {"test": test, "outcome": outcome, "message": message, "example": ""}


def test_a_task_failing_as_a_mistake_does_is_named_after_it():
    found = diagnosis.diagnose(
        CATALOGUE,
        "loss",
        [
            failure("test_alpha_one", "with alpha=1 the loss is 0.3, expected 0.08"),
            failure("test_formula", "the loss is 0.03, expected 0.12"),
            failure("test_ignored", "with ignore_index=-1 the loss is 0.5"),
        ],
    )
    assert (found.name, found.why, found.score) == (T2.name, T2.why, 1.0)
    assert found.line == f"looks like: {T2.name} (why: {T2.why})"


def test_a_near_match_a_check_less_or_other_messages_is_still_named_but_scores_less():
    failures = [failure(s.check, s.message) for s in T2.signature]
    found = diagnosis.diagnose(CATALOGUE, "loss", failures[1:])
    assert found.name == T2.name and found.score < 1.0  # one of T2's three checks passed
    found = diagnosis.diagnose(CATALOGUE, "loss", [failure("test_alpha_one", "T² is off by 4.0"), *failures[1:]])
    assert found.name == T2.name and diagnosis.THRESHOLD <= found.score < 1.0  # one message of three differs


def test_the_mistake_whose_own_checks_failed_ranks_above_one_that_shares_a_check():
    failing = {"test_alpha_zero": ("fail", "x"), "test_formula": ("fail", "the loss is #, expected #")}
    ranked = diagnosis.ranked(CATALOGUE, "loss", failing)
    assert [m.name for _, m in ranked] == [HARD_AT_T.name, T2.name]
    assert ranked[0][0] > ranked[1][0]


def test_failures_of_checks_no_mistake_names_get_no_diagnosis():
    assert diagnosis.diagnose(CATALOGUE, "loss", [failure("test_rejects_bad_input"), failure("test_other")]) is None


def test_only_the_mistakes_of_the_failing_task_are_considered():
    assert (
        diagnosis.diagnose(CATALOGUE, "kl", [failure("test_huge", "softmax of logits up to 1e4 returned NaN")]) is None
    )


def test_a_passing_task_gets_no_diagnosis():
    assert diagnosis.diagnose(CATALOGUE, "loss", []) is None


def test_a_task_not_started_gets_no_diagnosis_even_when_its_failures_match():
    todo = [failure(s.check, "raise NotImplementedError", "todo") for s in T2.signature]
    assert diagnosis.diagnose(CATALOGUE, "loss", todo) is None


def test_a_task_whose_grading_was_interrupted_gets_no_diagnosis():
    matching = [failure(s.check, "the loss is 0.03, expected 0.12", "fail") for s in T2.signature]
    assert diagnosis.diagnose(CATALOGUE, "loss", matching) is not None  # the control: these alone match
    cut = matching + [failure("test_loss_is_vectorized", "not graded: the grading was interrupted", "interrupted")]
    assert diagnosis.diagnose(CATALOGUE, "loss", cut) is None


def test_two_mistakes_matched_equally_well_give_no_diagnosis():
    twin = Mistake("loss", "a twin", "why", (), 3, T2.signature)
    failures = [failure(s.check, s.message) for s in T2.signature]
    assert diagnosis.diagnose((T2, twin), "loss", failures) is None


def test_checks_a_fail_fast_grading_did_not_run_count_against_the_match():
    ran = [failure("test_alpha_one", "with alpha=# the loss is #, expected #")]
    stopped = [
        failure(s.check, "not run (--fail-fast): test_alpha_one of this task did not pass") for s in T2.signature
    ]
    full = diagnosis.diagnose(CATALOGUE, "loss", ran + [failure(s.check, s.message) for s in T2.signature[1:]])
    assert full is not None and full.score == 1.0
    assert diagnosis.diagnose(CATALOGUE, "loss", ran + stopped[1:]) is None  # one check of three ran


def test_an_error_where_the_mistake_fails_counts_for_less():
    failures = [failure(s.check, "TypeError: unsupported operand", "error") for s in T2.signature]
    seen = {s.check: ("error", "TypeError: unsupported operand") for s in T2.signature}
    assert diagnosis.score(T2, seen, set(), {}) == pytest.approx(diagnosis.OTHER_OUTCOME * (1 - diagnosis.SHAPE_WEIGHT))
    assert diagnosis.diagnose(CATALOGUE, "loss", failures) is None


def test_a_message_shape_leaves_out_numbers_runs_of_numbers_and_every_line_after_the_first():
    shape = diagnosis.message_shape("d loss / d student[0, 1] is -1.5e-05, expected 0.25 (T=4)\n  at k.py:3")
    assert shape == "d loss / d student[#] is #, expected # (T=#)"
    assert diagnosis.message_shape("the logits hold nan") == "the logits hold nan"


def test_a_knob_at_its_identity_stays_in_the_shape_and_a_mistake_that_never_failed_there_is_not_named():
    """T=1 or alpha=0 is where a term vanishes: a missing T^2 cannot fail at T=1, so a loss that fails there
    (summing the KL, say) is not the T^2 mistake however alike the rest of its failures look. Other
    parameters' 0 and 1 are numbers like any."""
    knobs = ("T", "alpha")
    assert diagnosis.message_shape("(T=1.0, alpha=0.5) ignore_index=1", knobs) == "(T=1, alpha=#) ignore_index=#"
    assert diagnosis.message_shape("with alpha=0 the loss is 1.5 (T=4)", knobs) == "with alpha=0 the loss is # (T=#)"
    assert diagnosis.message_shape("(T=1, alpha=0)") == "(T=#, alpha=#)"  # a kata without knobs: numbers alike
    at_one = [failure(s.check, "the loss is 0.03, expected 0.12 (T=1)") for s in T2_AT_T.signature]
    assert diagnosis.diagnose((T2_AT_T,), "loss", at_one) is None
    elsewhere = [failure(s.check, "the loss is 0.03, expected 0.12 (T=2)") for s in T2_AT_T.signature]
    assert diagnosis.diagnose((T2_AT_T,), "loss", elsewhere).name == T2_AT_T.name  # the control


def test_a_setting_the_gradings_of_a_mistake_disagree_on_is_left_open():
    shapes = Counter({"the loss is # (T=#, alpha=0)": 2, "the loss is # (T=#, alpha=1)": 1})
    knobs = ("T", "alpha")
    assert diagnosis.merged_shape(shapes, knobs) == "the loss is # (T=#, alpha=?)"
    assert not diagnosis.contradicts("the loss is # (T=#, alpha=?)", "the loss is # (T=#, alpha=1)", knobs)
    assert diagnosis.contradicts("the loss is # (T=#, alpha=?)", "the loss is # (T=1, alpha=1)", knobs)
    assert not diagnosis.contradicts("the loss is # (T=#)", "the loss is # (T=1)", ())  # no knobs: no contradiction


def test_a_catalogue_written_reads_back_as_the_same_mistakes(tmp_path: Path):
    path = tmp_path / diagnosis.CATALOGUE
    odd = Mistake(
        "loss",
        'a "quoted" name, T²',
        "a why with \\ and \t",
        ("m",),
        6,
        (Sign("test_x[a-b]", (("fail", 4), ("error", 2)), ""),),
    )
    path.write_text(diagnosis.catalogue_text((*CATALOGUE, odd), "a header\nof two lines"), encoding="utf-8")
    assert diagnosis.read_catalogue(path) == (*CATALOGUE, odd)
    assert path.read_text(encoding="utf-8").startswith("# a header\n# of two lines\n")


def test_a_malformed_catalogue_is_refused_with_its_file_and_entry(tmp_path: Path):
    path = tmp_path / diagnosis.CATALOGUE
    path.write_text('[[mistake]]\ntask = "loss"\nname = "x"\nwhy = "y"\ngradings = 3\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"mistakes.toml: mistake 1 is malformed.*regenerate"):
        diagnosis.read_catalogue(path)


def test_an_edition_without_some_checks_keeps_the_mistakes_it_can_still_tell_apart():
    # without test_alpha_one and test_ignored, T2's signature is test_formula alone; HARD_AT_T keeps test_alpha_zero
    kept = diagnosis.pruned(CATALOGUE, {"test_alpha_one", "test_ignored"})
    assert [m.name for m in kept] == [T2.name, HARD_AT_T.name, OVERFLOW.name]
    assert [s.check for s in kept[0].signature] == ["test_formula"]
    # without test_alpha_zero too, both are test_formula alone: neither can be told from the other
    kept = diagnosis.pruned(CATALOGUE, {"test_alpha_one", "test_ignored", "test_alpha_zero"})
    assert [m.name for m in kept] == [OVERFLOW.name]
    # a check's cases go with their check
    assert diagnosis.pruned((Mistake("t", "n", "w", (), 1, (Sign("test_x[1]", (("fail", 1),)),)),), {"test_x"}) == ()


def test_a_kata_whose_suite_holds_a_catalogue_names_the_mistake_in_the_task_result(tmp_path: Path):
    (tmp_path / diagnosis.CATALOGUE).write_text(diagnosis.catalogue_text(CATALOGUE, "test"), encoding="utf-8")
    task = Task(name="loss", title="the loss", points=2, hints=("which factor?", "which sign?"))
    kata = Kata(name="toy", title="Toy", trade="t", order=1, tasks=(task,), suite=tmp_path)
    checks = {s.check: Check(f"x.py::{s.check}", s.check, "loss", Status.FAIL, s.message) for s in T2.signature}
    checks["x.py::test_other"] = Check("x.py::test_other", "test_other", "loss", Status.PASS)
    graded = kata_result(kata, [task], checks, "", [], 1.0).tasks[0]
    assert (graded.diagnosis, graded.diagnosis_why) == (T2.name, T2.why)
    assert graded.looks_like == f"looks like: {T2.name} (why: {T2.why})"
    assert (graded.status, graded.score) == (Status.FAIL, 0)  # a diagnosis changes no verdict
    passing = {c: Check(c, c, "loss", Status.PASS) for c in checks}
    assert kata_result(kata, [task], passing, "", [], 1.0).tasks[0].diagnosis == ""


def test_a_kata_whose_catalogue_does_not_read_is_graded_without_diagnoses(tmp_path: Path):
    (tmp_path / diagnosis.CATALOGUE).write_text("[[mistake]\nnot toml", encoding="utf-8")
    task = Task(name="loss", title="the loss", points=2, hints=("which factor?", "which sign?"))
    kata = Kata(name="toy", title="Toy", trade="t", order=1, tasks=(task,), suite=tmp_path)
    assert diagnosis.catalogue(kata) == ()
    assert diagnosis.catalogue(kata.model_copy(update={"suite": tmp_path / "x.py"})) == ()
