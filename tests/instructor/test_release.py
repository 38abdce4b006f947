"""The student edition's registry: katas.toml edited as TOML, whatever way a table or a name is written."""

from __future__ import annotations

import sys
from pathlib import Path

from grader.instructor import release
from grader.kata.registry import REGISTRY_PATH, load_presets, load_registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# Valid TOML, written in the ways a person may write it: a comment after a header, spaces inside the
# brackets, a literal string for a name, a key with spaces around nothing.
REGISTRY = """\
# the header comment stays
[[kata]]
name = "toy"
title = "Toy"
trade = "nothing for testing"
order = 1

  [[kata.task]]  # the one a class gets
  name = "mean"
  title = "mean_of"
  points = 2
  hints = ["a?", "b?"]

  [[ kata.task ]]
  name = 'held'
  title = "held back"
  points = 1
  hints = ["c?", "d?"]

  [[kata.task.question]]
  ask = "Why?"
  answer = "The answer only the instructor sees."

  [[kata.task.check]]
  tests = ["test_held"]
  hint = "a check hint of the held-back task"

  [[kata.task]]
  name="last"
  title = "the last task"
  points = 1
  hints = ["e?", "f?"]

# ---- presets ----
[[preset]]
name = 'toy-all'
title = "All of it"
kata = "toy"
minutes = 10
difficulty = "easy"

[[preset]]  # on part of the kata
name = "toy-held"
title = "The held-back one"
kata = "toy"
tasks = ["held"]
minutes = 5
difficulty = "easy"
"""


def test_the_edition_registry_drops_a_held_back_task_however_its_table_and_name_are_written():
    text = release.registry_text(REGISTRY, {"toy": {"held"}}, {"toy-all"})
    data = tomllib.loads(text)
    assert [t["name"] for t in data["kata"][0]["task"]] == ["mean", "last"]
    assert [p["name"] for p in data["preset"]] == ["toy-all"]
    assert "The answer only the instructor sees" not in text and "a check hint of the held-back task" not in text
    assert "# the header comment stays" in text and "# the one a class gets" in text and "# ---- presets ----" in text


def test_the_edition_registry_is_the_shipped_registry_itself_when_nothing_is_dropped():
    text = REGISTRY_PATH.read_text(encoding="utf-8")
    assert release.registry_text(text, {}, {p.name for p in load_presets()}) == text


def test_the_edition_registry_without_presets_holds_no_preset_key():
    data = tomllib.loads(release.registry_text(REGISTRY, {"toy": {"last"}}, set()))
    assert "preset" not in data and [t["name"] for t in data["kata"][0]["task"]] == ["mean", "held"]


# ---------------------------------------------------------------- held back means absent

SUITE = """\
import pytest

SHARED_BAR = 2


def _oracle(x):
    return _deeper(x) + 1


def _deeper(x):
    return x * 2


def _shared(x):
    return x


@pytest.fixture
def only_held():
    return 3


@pytest.fixture
def by_name():
    return 4


class Helper:
    pass


@pytest.mark.task("held")
def test_held(only_held):
    assert _oracle(only_held) == _shared(7) and Helper


@pytest.mark.usefixtures("by_name")
@pytest.mark.task("held")
def test_held_too():
    load_baseline("toy").f()


@pytest.mark.task("kept")
def test_kept():
    assert _shared(SHARED_BAR) == 2
"""


def test_held_back_tests_take_the_helpers_fixtures_and_classes_only_they_use_with_them():
    dropped = release.held_back_code(SUITE, {"test_held", "test_held_too"})
    assert dropped == {"test_held", "test_held_too", "_oracle", "_deeper", "only_held", "by_name", "Helper"}
    kept = release.without_functions(SUITE, dropped)
    assert "def _shared(" in kept and "def test_kept(" in kept and "SHARED_BAR = 2" in kept
    assert "_oracle" not in kept and "class Helper" not in kept and "by_name" not in kept
    assert release.loads_baseline(SUITE) and not release.loads_baseline(kept)
    assert not release.loads_baseline("from grader.suites.common import load_baseline\n")


def test_holding_back_llama_cpp_takes_its_bit_exact_encoders_out_of_the_suite():
    kata = next(k for k in load_registry() if k.name == "quantization")
    source = kata.suite.read_text(encoding="utf-8")
    dropped = release.held_back_code(source, set(kata.task("llama_cpp").tests))
    assert {"_expected_q8_0", "_expected_q4_0"} <= dropped
    assert not dropped & set(kata.task("grouped").tests)


def held_back_registry(tmp_path, tasks: dict[str, str]) -> Path:
    """The project's registry with each kata's named task marked release = false."""
    text = REGISTRY_PATH.read_text(encoding="utf-8")
    for kata, task in tasks.items():
        start = text.index(f"# ---- {kata} ----")
        at = text.index(f'name = "{task}"', start) + len(f'name = "{task}"')
        text = text[:at] + "\n  release = false" + text[at:]
    path = tmp_path / "katas.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_held_back_speed_task_leaves_no_baseline_hint_or_recap_in_the_student_edition(tmp_path):
    registry = held_back_registry(tmp_path, {"kv_cache": "speed", "moe": "speed"})
    out = tmp_path / "edition"
    release.write_edition(out, registry=registry)
    suites = out / "grader" / "suites"
    assert not (suites / "baseline_kv_cache.py").exists() and not (suites / "baseline_moe.py").exists()
    assert (suites / "baseline_quantization.py").is_file()  # its speed task is released
    assert not release.loads_baseline((suites / "test_kv_cache.py").read_text(encoding="utf-8"))
    edition = (out / "grader" / "kata" / "katas.toml").read_text(encoding="utf-8")
    for kata in ("kv_cache", "moe"):
        speed = next(k for k in load_registry(registry) if k.name == kata).task("speed")
        for text in [*speed.hints, *(hint for _, hint in speed.check_hints), *(q.answer for q in speed.questions)]:
            assert text not in edition, f"{kata}:speed's {text[:40]!r} is in the edition's registry"
    recaps = {k.name: k.recap for k in load_registry(out / "grader" / "kata" / "katas.toml", suites_dir=suites)}
    assert recaps["kv_cache"] == "" and recaps["moe"] == ""  # both quote a figure only the speed task measures
    assert recaps["quantization"]


def test_the_grading_edition_keeps_the_baselines_of_held_back_speed_tasks(tmp_path):
    registry = held_back_registry(tmp_path, {"kv_cache": "speed"})
    out = tmp_path / "grading"
    release.write_edition(out, held_back=True, registry=registry)
    assert (out / "grader" / "suites" / "baseline_kv_cache.py").is_file()
    assert (
        "test_cached_generation_is_at_least_3x_faster" in (out / "grader" / "suites" / "test_kv_cache.py").read_text()
    )
