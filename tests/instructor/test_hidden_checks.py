"""Public and hidden checks: a check that needs an oracle or a baseline is hidden, the student
edition ships the public ones alone and names the rest, `kata grade` there reports a task whose
public checks pass as graded on submission, and no function the edition ships computes the answer
a hidden check asks for (pasting.py tries each of them in each function's place)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pasting
import pytest

from grader.instructor import release
from grader.instructor.held_back import hidden_checks
from grader.judge.events import Status
from grader.kata.registry import Kata, RegistryError, Task, find_kata, load_registry
from grader.kata.target import ROOT, SOLUTIONS_DIR
from grader.output import report
from grader.run import diagnosis
from grader.run.judges import Grader
from grader.run.results import Check, GradeResult, KataResult, kata_result, task_result

from helpers import copy_registry, edition_cli

TOY = {
    "oracles.py": "def _answer(x):\n    return x + 1\n",
    "checks.py": (
        "from grader.suites.toy.oracles import _answer\n\n\n"
        "def _shape(y):\n    return y.shape\n\n\n"
        "def _compare(f, x):\n    assert f(x) == _answer(x)\n"
    ),
    "conftest.py": (
        "import pytest\n\nfrom grader.suites.toy import oracles\n\n\n"
        "@pytest.fixture\ndef expected():\n    return oracles._answer(1)\n\n\n"
        "@pytest.fixture\ndef size():\n    return 3\n"
    ),
    "test_1_toy.py": (
        "import pytest\n\nfrom grader.suites.common import load_baseline\n"
        "from grader.suites.toy.checks import _compare, _shape\n\n\n"
        '@pytest.mark.task("t")\ndef test_public(size):\n    assert _shape(size) is not None\n\n\n'
        '@pytest.mark.task("t")\ndef test_through_a_helper():\n    _compare(abs, 1)\n\n\n'
        '@pytest.mark.task("t")\ndef test_through_a_fixture(expected):\n    assert expected\n\n\n'
        '@pytest.mark.task("speed")\ndef test_speed():\n    load_baseline("toy")\n\n\n'
        '@pytest.mark.task("speed")\n@pytest.mark.public\ndef test_marked_public():\n    load_baseline("toy")\n\n\n'
        '@pytest.mark.task("t")\n@pytest.mark.needs("gguf")\ndef test_against_a_package():\n    import gguf\n'
    ),
}


def test_a_check_is_hidden_when_it_reaches_an_oracle_or_the_baseline_through_anything(tmp_path):
    folder = tmp_path / "toy"
    folder.mkdir()
    for name, text in TOY.items():
        (folder / name).write_text(text)
    assert hidden_checks(folder) == {
        "test_through_a_helper": "oracles._answer",
        "test_through_a_fixture": "oracles._answer",
        "test_speed": "the baseline",
        "test_against_a_package": "the package gguf",
    }


def test_the_shipped_suites_hide_what_compares_with_an_oracle_and_keep_public_checks_for_every_function():
    kv = hidden_checks(find_kata("kv_cache").suite)
    greedy = "test_the_teacher_on_a_quantized_cache_agrees_with_float32_greedy_decoding_at_98_percent_of_256_positions"
    assert kv[greedy] == "oracles._float_greedy_text"
    assert "test_update_returns_everything_written_so_far" not in kv
    assert "test_cached_generation_is_at_least_3x_faster_than_naive_at_384_tokens" not in kv  # marked public
    moe = hidden_checks(find_kata("moe").suite)
    assert moe["test_moe_forward_is_within_3x_of_a_vectorized_layer"] == "the baseline"
    quantization = hidden_checks(find_kata("quantization").suite)
    assert quantization["test_q8_0_and_q4_0_match_gguf_on_random_blocks"] == "the package gguf"
    for kata in load_registry():
        hidden = hidden_checks(kata.suite)
        for task in kata.tasks:
            if task.functions:  # a student of the edition still has checks to work against
                assert any(t not in hidden for t in task.tests), f"{kata.name}:{task.name} has no public check"


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hidden") / "edition"
    release.write_edition(out)
    return out


def _edition_registry(edition: Path):
    return load_registry(edition / "grader" / "suites")


def test_the_student_edition_ships_the_public_checks_and_names_each_hidden_one(edition):
    shipped = {k.name: k for k in _edition_registry(edition)}
    for kata in load_registry():
        hidden = hidden_checks(kata.suite)
        folder = edition / "grader" / "suites" / kata.name
        text = "".join(p.read_text(encoding="utf-8") for p in folder.glob("*.py"))
        oracles = (folder / "oracles.py").read_text(encoding="utf-8")
        assert "\ndef " not in oracles and "\nclass " not in oracles, f"{kata.name}'s oracles ship"
        imports = [n for n in ast.parse(oracles).body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert all(getattr(n, "module", "") == "__future__" for n in imports), f"{kata.name}'s oracles.py imports"
        baseline = edition / "grader" / "suites" / kata.name / "baseline.py"
        assert baseline.exists() == (kata.name == "kv_cache")  # its speed check is marked public
        for task in kata.tasks:
            mine = shipped[kata.name].task(task.name)
            assert mine.hidden == tuple(t for t in task.tests if t in hidden)
            assert mine.tests == tuple(t for t in task.tests if t not in hidden)
            assert not [t for t, _ in mine.check_hints if t in hidden]
            for test in task.tests:
                assert (f"def {test}(" in text) == (test not in hidden), f"{kata.name}: {test}"
    everything = "".join(p.read_text(encoding="utf-8") for p in (edition / "grader" / "suites").rglob("*.py"))
    for answer in ("_suite_forward", "_expected_q8_0", "_expected_q4_0", "_route64", "vectorized_layer"):
        assert f"def {answer}(" not in everything, f"the edition holds {answer}"


def test_the_grading_edition_keeps_every_check_and_names_none_hidden(tmp_path):
    out = tmp_path / "grading"
    release.write_edition(out, held_back=True)
    assert "def _suite_forward(" in (out / "grader" / "suites" / "kv_cache" / "oracles.py").read_text()
    assert (out / "grader" / "suites" / "moe" / "baseline.py").is_file()
    assert all(not t.hidden for k in _edition_registry(out) for t in k.tasks)
    for kata in load_registry():
        shipped = diagnosis.read_catalogue(out / "grader" / "suites" / kata.name / diagnosis.CATALOGUE)
        assert shipped == diagnosis.catalogue(kata)  # every check ships, so every known mistake does


def test_a_registry_that_names_a_check_its_suite_holds_as_hidden_is_refused(tmp_path):
    named = 'functions = ["CacheFullError", "KVCache"]'
    public = "test_update_returns_everything_written_so_far"
    registry = copy_registry(
        tmp_path / "katas", lambda text: text.replace(named, f'{named}\n  hidden_checks = ["{public}"]')
    )
    with pytest.raises(RegistryError, match="'hidden_checks' names checks kv_cache/ holds"):
        load_registry(registry)
    registry = copy_registry(
        tmp_path / "other", lambda text: text.replace(named, f'{named}\n  hidden_checks = ["update"]')
    )
    with pytest.raises(RegistryError, match=r"'hidden_checks' item 1 must name a test \(test_...\), got 'update'"):
        load_registry(registry)
    registry = copy_registry(
        tmp_path / "twice", lambda text: text.replace(named, f'{named}\n  hidden_checks = ["test_gone", "test_gone"]')
    )
    with pytest.raises(RegistryError, match="'hidden_checks' must name each one once, got"):
        load_registry(registry)


TASK = Task(name="t", title="a task", points=2, hints=("a?", "b?"), hidden=("test_secret", "test_other"))


def _check(outcome: Status, name: str = "test_open") -> Check:
    return Check(id=f"x.py::{name}", name=name, task="t", outcome=outcome, message="" if outcome == "pass" else "no")


def test_a_task_with_hidden_checks_is_on_submission_when_every_check_here_passes():
    done = task_result(TASK, [_check(Status.PASS)], "")
    assert (done.status, done.score, done.hint, done.checks_hidden) == (Status.SUBMIT, 0, "", 2)
    assert "its 1 public check passes; 2 hidden checks of this task are graded on submission" in done.message
    assert task_result(TASK, [], "").status is Status.SUBMIT  # a speed task whose every check is hidden
    assert task_result(TASK, [], "the kata's process died").status is Status.CRASH
    failed = task_result(TASK, [_check(Status.PASS), _check(Status.FAIL, "test_b")], "")
    assert (failed.status, failed.message, failed.hint) == (Status.FAIL, "no", "a?")
    assert (
        task_result(Task(name="u", title="open", points=1, hints=("a?", "b?")), [_check(Status.PASS)], "").status
        is Status.PASS
    )
    result = GradeResult("katas", 0, 0, 2, 1.0, [KataResult("toy", "Toy", 0, 2, 1.0, [done])])
    assert result.passed and result.on_submission == 2
    table = report.table(result)
    assert "on submission" in table and "1/1 +2 hidden" in table
    assert "(2 more whose hidden checks are graded on submission)" in report.total_line(result)
    assert "passes here" in report.next_step(result, [])
    assert "toy / t: on submission: its 1 public check passes" in report.details(result)
    assert report.failing_summary(result) == ""


def test_a_task_whose_every_check_is_hidden_is_todo_while_a_task_graded_with_it_is_not_done():
    speed = Task(name="speed", title="speed", points=1, hints=("a?", "b?"), hidden=("test_fast",))
    kata = Kata(name="toy", title="Toy", trade="nothing", order=1, tasks=(TASK, speed), suite=Path("toy"))
    waiting = kata_result(kata, [TASK, speed], {"a": _check(Status.TODO)}, "", [], 1.0).tasks
    assert [t.status for t in waiting] == [Status.TODO, Status.TODO]
    assert "it grades the functions of t, which do not pass here yet" in waiting[1].message and waiting[1].hint == "a?"
    done = kata_result(kata, [TASK, speed], {"a": _check(Status.PASS)}, "", [], 1.0).tasks
    assert [t.status for t in done] == [Status.SUBMIT, Status.SUBMIT]
    alone = kata_result(kata, [speed], {}, "", [], 1.0).tasks
    assert [t.status for t in alone] == [Status.SUBMIT]


@pytest.mark.slow
def test_kata_grade_in_the_student_edition_reports_the_hidden_checks_as_graded_on_submission(edition, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "moe.py").write_text((SOLUTIONS_DIR / "moe.py").read_text(encoding="utf-8"))
    graded = edition_cli(edition, work, tmp_path / "state", "grade", "moe", "--json")
    assert graded.returncode == 0, graded.stdout + graded.stderr  # nothing left to do here
    (moe,) = json.loads(graded.stdout)["katas"]
    tasks = {t["name"]: t for t in moe["tasks"]}
    shipped = {t.name: t for t in find_kata("moe").tasks}
    hidden = hidden_checks(find_kata("moe").suite)
    for name, task in tasks.items():
        assert task["status"] == "on submission", (name, task["message"])
        assert task["checks_hidden"] == sum(t in hidden for t in shipped[name].tests)
        assert task["checks_passed"] == task["checks_total"] and task["score"] == 0


def _hidden_by_task(kata) -> dict[str, list[str]]:
    hidden = hidden_checks(kata.suite)
    return {t.name: [x for x in t.tests if x in hidden] for t in kata.tasks if any(x in hidden for x in t.tests)}


@pytest.fixture
def plain_grader(monkeypatch):
    """A grader of its own whose jails run in the plain mode, where a pasted module can import
    the edition's helper (see pasting.py)."""
    monkeypatch.setenv("KATA_JAIL", "plain")
    grader = Grader()
    yield grader
    grader.close()


@pytest.mark.slow
def test_the_pasting_finds_the_answers_the_instructors_suite_holds(plain_grader, tmp_path):
    # The harness can fire: helpers of the instructor's copy that the edition leaves out pass hidden checks.
    wanted = {
        "quantization": [
            ("llama_cpp", "quantize_q8_0", "_expected_q8_0"),
            ("llama_cpp", "quantize_q4_0", "_expected_q4_0"),
        ],
        "moe": [("capacity", "expert_capacity", "_capacity"), ("speed", "moe_forward", "vectorized_layer")],
    }
    for name, cases in wanted.items():
        kata = find_kata(name)
        helpers = {h.name: h for h in pasting.shipped_helpers(ROOT, name)}
        tried = [
            p
            for task, slot, helper in cases
            for p in pasting.pastings(kata, [task], [helpers[helper]])
            if p.slot == slot
        ]
        assert len(tried) == len(cases)
        found, _ = pasting.leaks(kata, tried, _hidden_by_task(kata), ROOT, tmp_path / name, plain_grader)
        assert found == tried, f"{name}: only {[p.helper.name for p in found]} of {[h for *_, h in cases]} passed"


@pytest.mark.slow
@pytest.mark.parametrize("name", [k.name for k in load_registry()])
def test_no_function_the_edition_ships_passes_the_hidden_checks_of_a_task(name, edition, plain_grader, tmp_path):
    kata = find_kata(name)
    helpers = pasting.shipped_helpers(edition, name)
    hidden = _hidden_by_task(kata)
    pasted = pasting.pastings(kata, list(hidden), helpers)
    found, untested = pasting.leaks(kata, pasted, hidden, edition, tmp_path, plain_grader)
    assert not found, [f"{p.helper.module}.{p.helper.name} as {name}.{p.slot}" for p in found]
    untried = ", ".join(f"{p.task}:{p.slot}" for p in untested) or "none"
    print(f"{name}: {len(helpers)} helpers, {len(pasted)} pastings graded; slots no hidden check tests: {untried}")
    assert pasted  # the kata's helpers were tried somewhere


def test_the_student_editions_catalogues_name_only_the_checks_it_ships(edition):
    for kata in _edition_registry(edition):
        path = edition / "grader" / "suites" / kata.name / diagnosis.CATALOGUE
        shipped = {t.name: set(t.tests) for t in kata.tasks}
        mistakes = diagnosis.read_catalogue(path)
        named = [(m.task, s.check) for m in mistakes for s in m.signature]
        assert named, f"{kata.name}: the edition ships no known mistake"
        assert not [(t, c) for t, c in named if c.split("[", 1)[0] not in shipped.get(t, ())]
        full = {m.name for m in diagnosis.catalogue(find_kata(kata.name))}
        assert {m.name for m in mistakes} <= full
        assert diagnosis.pruned(mistakes, set()) == mistakes  # none it cannot tell from another
