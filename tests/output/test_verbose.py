"""`kata grade -v` (report.details): one line where one line says it all,
and examples that show the calls of the learner's functions a failing check
made, with the stub's argument names and one-line values."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

from grader.jailer import failing_calls
from grader.jailer.jail_client import ModuleProxy, Remote, RemoteMethod
from grader.judge.events import Status
from grader.kata.registry import load_registry
from grader.kata.stubs import stub_for
from grader.output import report
from grader.run.results import GradeResult, KataResult, TaskResult
from grader.run.runner import grade_kata
from reference.model import Config, Model

from helpers import FAST, SUBS, TOY_KATAS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def toy():
    return load_registry(TOY_KATAS)[0]


@pytest.fixture(scope="module")
def moe():
    return {k.name: k for k in load_registry()}["moe"]


def result_of(kata: KataResult, target: str = "") -> GradeResult:
    return GradeResult(
        target=target, seed=0, score=kata.score, max_score=kata.max_score, duration=kata.duration, katas=[kata]
    )


def verbose(kata, target: str, **kwargs) -> tuple[KataResult, str]:
    graded = grade_kata(kata, target, limits=FAST, **kwargs)
    return graded, report.details(result_of(graded, target))


@functools.lru_cache(maxsize=None)
def toy_verbose(sub: str) -> tuple[KataResult, str]:
    """A toy fixture submission graded once for every test that reads it."""
    return verbose(load_registry(TOY_KATAS)[0], str(SUBS / sub))


def normalised(text: str) -> str:
    """Paths and durations out of a report, so a snapshot holds on any machine."""
    text = text.replace(str(SUBS), "SUBS").replace(str(ROOT), "ROOT")
    return re.sub(r"\d+(\.\d+)? s\b", "N s", text)


def moe_submission(tmp_path: Path, router_body: str) -> str:
    """The moe stub with router_probs written as router_body."""
    stub = stub_for("moe")
    head, rest = stub.split("def router_probs(", 1)
    doc, tail = rest.split("    raise NotImplementedError\n", 1)
    (tmp_path / "moe.py").write_text(head + "def router_probs(" + doc + router_body + tail)
    return str(tmp_path)


# ------------------------------------------------------------------ one line where one line says it all


def test_an_untouched_stub_is_one_line_and_a_hint_per_task():
    graded, text = toy_verbose("stub")
    lines = text.splitlines()
    assert len(lines) == 2 * len(graded.tasks) == 6, text
    for task in graded.tasks:
        mine = [ln for ln in lines if ln.startswith(f"toy / {task.name}:")]
        assert mine == [f"toy / {task.name}: todo (not started: its functions raise NotImplementedError)"]
    assert text.count("NotImplementedError") == len(graded.tasks)
    assert "Falsifying" not in text and "<kata module" not in text
    assert all(f["example"] == "" for t in graded.tasks for f in t.failures)


def test_an_untouched_real_kata_is_one_line_and_a_hint_per_task(moe, tmp_path):
    (tmp_path / "moe.py").write_text(stub_for("moe"))
    graded, text = verbose(moe, str(tmp_path))
    assert len(text.splitlines()) == 2 * len(moe.tasks), text
    assert text.count("NotImplementedError") == len(moe.tasks)


def test_a_syntax_error_is_reported_once_for_the_kata():
    graded, text = toy_verbose("syntax")
    assert text.count("syntax error at line 13") == 1, text
    # The line and a caret under where Python stopped, in place however the report indents them.
    assert "    toy.py has a syntax error at line 13: invalid syntax\n    | def broken(:\n    |            ^\n" in text
    assert [ln for ln in text.splitlines() if ln.endswith("(see above)")] == [
        "toy / scale: error (see above)",
        "toy / fast: error (see above)",
    ]
    assert all(f["example"] == "" for t in graded.tasks for f in t.failures)  # no draw leaks from another check
    summary = report.failing_summary(result_of(graded))
    assert summary == "toy: every check failed the same way: toy.py has a syntax error at line 13: invalid syntax"


def _task(name: str, status: Status, failures: list[tuple[str, str, str]], passed: int = 0) -> TaskResult:
    fs = [{"test": t, "outcome": o, "message": m, "example": ""} for t, o, m in failures]
    return TaskResult(
        name, name, status, 0, 1, passed, passed + len(fs), fs[0]["message"] if fs else "", f"hint for {name}", fs
    )


def test_consecutive_checks_that_failed_alike_are_counted_not_repeated():
    same = "IndexError: boom\n    at k.py:3 in f: raise IndexError('boom')"
    task = _task(
        "t",
        Status.ERROR,
        [
            ("test_a", "error", same),
            ("test_b", "error", same),
            ("test_c", "error", same),
            ("test_d", "fail", "wrong"),
            ("test_e", "error", same),
        ],
        passed=1,
    )
    text = report.details(result_of(KataResult("k", "K", 0, 1, 0.0, [task])))
    assert text == "\n".join(
        [
            "k / t: error",
            "  test_a [error]: IndexError: boom",
            "      at k.py:3 in f: raise IndexError('boom')",
            "  ... and 2 more checks failed the same way",
            "  test_d [fail]: wrong",
            "  test_e [error]: IndexError: boom",
            "      at k.py:3 in f: raise IndexError('boom')",
            "  hint: hint for t",
        ]
    )


def test_a_module_that_hangs_while_loading_is_one_message_despite_the_checks_not_run():
    hang = "importing the kata module took longer than 4 s"
    not_run = "not run: test_a1 of this task timed out"
    tasks = [
        _task("a", Status.TIMEOUT, [("test_a1", "timeout", hang), ("test_a2", "timeout", not_run)]),
        _task("b", Status.TIMEOUT, [("test_b1", "timeout", hang)]),
    ]
    text = report.details(result_of(KataResult("k", "K", 0, 2, 0.0, tasks)))
    assert text == f"k / a: timeout\n  every check of k failed the same way:\n    {hang}\n\nk / b: timeout (see above)"


# ------------------------------------------------------------------ readable examples


def test_a_failing_hypothesis_check_shows_the_learners_call_with_named_one_line_arguments(moe, tmp_path):
    # Wrong only for one token: the first explicit example fails, the one Hypothesis runs after it passes,
    # so the example must be the calls of the last example that failed, not of the last example run.
    target = moe_submission(
        tmp_path,
        """\
    if x.ndim != 2 or w_router.ndim != 2 or x.shape[1] != w_router.shape[0] or x.shape[0] == 0:
        raise ValueError("bad shapes")
    z = x.astype(np.float64) @ w_router.astype(np.float64)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    return p * 0.5 if x.shape[0] == 1 else p
""",
    )
    graded, text = verbose(moe, target, tasks=["router"])
    (failure,) = graded.tasks[0].failures
    example = failure["example"]
    number = r"-?\d+(\.\d+)?(e-?\d+)?"
    assert re.fullmatch(
        rf"moe\.router_probs\(x=array\(\[\[{number}\]\], dtype=float32\), "
        rf"w_router=array\(\[\[{number}\]\], dtype=float32\)\)",
        example,
    ), example
    assert "<kata module" not in text and "shape=(" not in text and "scale=" not in text and "Falsifying" not in text
    assert f"      example: {example}" in text.splitlines()


def test_an_error_in_the_learners_code_keeps_its_frames_and_shows_the_minimal_example(toy, tmp_path):
    last = "    return np.sum(x, dtype=np.float64) / x.size"
    (tmp_path / "toy.py").write_text(
        (SUBS / "correct" / "toy.py")
        .read_text()
        .replace(last, "    if np.any(x > 50):\n        raise RuntimeError('too big')\n" + last)
    )
    graded = grade_kata(toy, str(tmp_path), tasks=["mean"], limits=FAST)
    (failure,) = graded.tasks[0].failures
    assert failure["message"] == "RuntimeError: too big\n    at toy.py:9 in mean_of: raise RuntimeError('too big')"
    # Every example calls mean_of once: one call shown, none before it, and an input that fails. So the
    # calls are those of one failing execution (the final replay), not of the shrinking around it.
    shown = re.fullmatch(r"toy\.mean_of\(array\((\[.*\]), dtype=float32\)\)", failure["example"])
    assert shown, failure["example"]
    assert np.any(np.array(eval(shown.group(1))) > 50)  # the grader's own text: numbers only


def test_a_speed_check_describes_the_large_arrays_it_timed():
    graded, _ = toy_verbose("nan")
    fast = {t.name: t for t in graded.tasks}["fast"]
    assert fast.failures[0]["example"] == "toy.mean_of(array(shape=(100000,), dtype=float64, ...))  (2 times)"


def test_values_are_compact_one_liners():
    frozen = failing_calls.freeze
    text = failing_calls.value_text
    assert text(frozen(np.array([[0.5, -1.0]], dtype=np.float32))) == "array([[0.5, -1.0]], dtype=float32)"
    assert text(frozen(np.array([1, 2, 3]))) == "array([1, 2, 3])"
    assert text(frozen(np.zeros((64, 128), dtype=np.float32))) == "array(shape=(64, 128), dtype=float32, ...)"
    assert text(frozen([3, 1, 4])) == "[3, 1, 4]"
    assert text(frozen(list(range(100)))) == "[0, 1, 2, 3, 4, 5, 6, 7, ... (100 items)]"
    assert text(frozen((2,))) == "(2,)"
    assert text(frozen(np.random.default_rng(0))) == "<Generator>"
    model = Model.random(Config(vocab_size=8, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=16, max_seq_len=8))
    assert text(frozen(model)) == "<Model n_layers=1, d_model=16>"
    before = np.array([1.0, 2.0])
    snap = frozen(before)
    before[0] = 9.0  # a later change to the argument does not change the example
    assert text(snap) == "array([1.0, 2.0])"


def test_proxies_are_named_from_what_the_judge_holds_without_a_round_trip():
    module = ModuleProxy.__new__(ModuleProxy)  # no jail behind it: asking it anything would raise
    cache = Remote.__new__(Remote)
    object.__setattr__(cache, "_ref", {"kind": "object", "type": "KVCache"})
    assert [failing_calls.describe(v) for v in (module, cache, RemoteMethod(cache, "update"))] == [
        "<the kata module>",
        "<KVCache>",
        "<KVCache>.update",
    ]


def test_a_call_takes_the_stubs_argument_names_and_stays_within_its_length():
    call = failing_calls.Call(
        "kv_cache",
        "generate",
        "function",
        None,
        (failing_calls.Text("<Model n_layers=1, d_model=16>"), [3, 1, 4], 5),
        {"temperature": 0.7},
    )
    assert failing_calls.call_text(call) == (
        "kv_cache.generate(model=<Model n_layers=1, d_model=16>, prompt=[3, 1, 4], n_new=5, temperature=0.7)"
    )
    method = failing_calls.Call("kv_cache", "KVCache", "object", "update", (0, np.ones((1, 2), np.float32), 1.0))
    assert failing_calls.call_text(method) == "<KVCache>.update(layer=0, k=array([[1.0, 1.0]], dtype=float32), v=1.0)"
    build = failing_calls.Call("kv_cache", "KVCache", "class", None, (2, 2, 4, 12))
    assert failing_calls.call_text(build) == "kv_cache.KVCache(n_layers=2, n_kv_heads=2, head_dim=4, max_len=12)"
    unknown = failing_calls.Call("toy", "mean_of", "function", None, (1.5,))  # no stub: positional
    assert failing_calls.call_text(unknown) == "toy.mean_of(1.5)"
    big = failing_calls.Call(
        "moe",
        "router_probs",
        "function",
        None,
        tuple(failing_calls.freeze(np.full((4, 5), 1 / 3, np.float32)) for _ in range(2)),
    )
    text = failing_calls.calls_text([big] * 5, total=7)
    assert text.startswith("(after 2 earlier calls)\nmoe.router_probs(x=") and text.endswith("  (5 times)")
    assert all(len(line) <= failing_calls.MAX_CHARS for line in text.splitlines())


def test_without_recorded_calls_hypothesis_own_example_is_tidied():
    note = (
        "Falsifying explicit example: test_x(\n    moe=<kata module moe>,\n    tokens=[1,\n     2,\n     3],\n"
        "    scale=1.0,\n)"
    )
    want = "Falsifying explicit example: test_x(\n    tokens=[1, 2, 3],\n    scale=1.0,\n)"
    assert failing_calls.hypothesis_text(note) == want


# ------------------------------------------------------------------ snapshots


STUB = """\
toy / mean: todo (not started: its functions raise NotImplementedError)
  hint: What does the mean divide by?
toy / scale: todo (not started: its functions raise NotImplementedError)
  hint: What shape should come back?
toy / fast: todo (not started: its functions raise NotImplementedError)
  hint: Is there a Python loop?"""

SYNTAX = """\
toy / mean: error
  every check of toy failed the same way:
    toy.py has a syntax error at line 13: invalid syntax
    | def broken(:
    |            ^

toy / scale: error (see above)
toy / fast: error (see above)"""

NAN = """\
toy / mean: fail
  test_mean_matches_a_float64_sum [fail]: mean_of returned nan for finite input
      example: toy.mean_of(array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=float32))
  hint: What does the mean divide by?

toy / fast: fail, because mean fails: fix mean first (`kata grade -v toy:fast` shows its own failing checks)"""


@pytest.mark.parametrize("sub, want", [("stub", STUB), ("syntax", SYNTAX), ("nan", NAN)], ids=["stub", "syntax", "nan"])
def test_the_verbose_report_of_a_submission(sub, want):
    graded, text = toy_verbose(sub)
    assert normalised(text) == want
    assert all(isinstance(f["example"], str) for t in graded.tasks for f in t.failures)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_the_values_shown_read_back_as_the_very_values_the_call_got(dtype):
    """The example of a failing call writes each float with the shortest digits that read back as the same
    value of its dtype (as repr does), not rounded: pasted back, the call gets the very arguments that failed."""
    gen = np.random.default_rng(7)
    reach = min(9, int(np.log10(np.finfo(dtype).max)) - 1)  # every value finite in the dtype
    values = np.concatenate([gen.standard_normal(12) * 10.0 ** gen.integers(-reach, reach, 12), [-41.1874752770682, 0]])
    a = values.astype(dtype)
    shown = failing_calls.value_text(failing_calls.freeze(a))
    back = eval(shown, {"array": np.array, "float32": np.float32, "float16": np.float16})  # noqa: S307 - our own text
    assert back.dtype == a.dtype and np.array_equal(back, a), shown
    for x in [float(values[0]), float(values[-2]), 2 / 3]:
        assert float(failing_calls.value_text(x)) == x


def test_verbose_says_under_a_failing_task_what_it_looks_like_before_its_hint():
    failure = {"test": "test_loss_matches_the_formula", "outcome": "fail", "message": "the loss is 0.03", "example": ""}
    task = TaskResult("loss", "the loss", Status.FAIL, 0, 2, 3, 4, "the loss is 0.03", "Which factor?", [failure])
    task.diagnosis, task.diagnosis_why = "the T^2 factor is missing", "the soft term shrinks by 1/T^2"
    text = report.details(result_of(KataResult("distillation", "Distillation", 0, 2, 1.0, [task])))
    assert text.splitlines()[-2:] == [
        "  looks like: the T^2 factor is missing (why: the soft term shrinks by 1/T^2)",
        "  hint: Which factor?",
    ]
    assert report.as_json(result_of(KataResult("d", "D", 0, 2, 1.0, [task])))["katas"][0]["tasks"][0]["diagnosis"] == (
        "the T^2 factor is missing"
    )
    task.diagnosis = ""
    assert "looks like" not in report.details(result_of(KataResult("distillation", "D", 0, 2, 1.0, [task])))
