"""The student edition's registry: its files edited as TOML, whatever way a table or a name is written."""

from __future__ import annotations

import sys
from pathlib import Path

from grader.instructor import held_back, release
from grader.kata.registry import PRESETS_FILE, SUITES_DIR, kata_file, load_presets, load_registry

from helpers import copy_registry, write_registry

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


def test_the_edition_registry_drops_a_held_back_task_from_the_depends_of_the_tasks_it_keeps(tmp_path):
    shipped = kata_file("speculative").read_text(encoding="utf-8")
    text = release.registry_text(shipped, {"speculative": {"greedy", "speed"}}, set())
    write_registry(tmp_path, {"speculative": text})
    (speculative,) = load_registry(tmp_path, suites_dir=tmp_path / "none")  # no suites
    assert [(t.name, t.depends) for t in speculative.tasks] == [("accept_reject", ()), ("loop", ("accept_reject",))]
    text = release.registry_text(shipped, {"speculative": {"loop"}}, set())
    speed = tomllib.loads(text)["kata"][0]["task"][-1]
    assert speed["name"] == "speed" and "depends" not in speed  # no `depends = []` left behind


def test_the_edition_registry_is_the_shipped_registry_itself_when_nothing_is_dropped():
    for path in [*SUITES_DIR.glob("*/kata.toml"), SUITES_DIR / PRESETS_FILE]:
        text = path.read_text(encoding="utf-8")
        assert release.registry_text(text, {}, {p.name for p in load_presets()}) == text


def test_the_edition_registry_without_presets_holds_no_preset_key():
    data = tomllib.loads(release.registry_text(REGISTRY, {"toy": {"last"}}, set()))
    assert "preset" not in data and [t["name"] for t in data["kata"][0]["task"]] == ["mean", "held"]


SUITE_MODULE = '''"""A test module of two tasks."""

import pytest


@pytest.mark.task("mean")
def test_kept(toy):
    assert toy


@pytest.mark.task("held")
@pytest.mark.parametrize("n", [1, 2])
def test_held(toy, n):
    assert n


def test_after(toy):
    assert toy
'''


def test_a_suite_module_loses_each_held_back_check_with_its_decorators_and_keeps_the_rest():
    held = SUITE_MODULE[SUITE_MODULE.index('@pytest.mark.task("held")') : SUITE_MODULE.index("def test_after")]
    assert held_back.without_functions(SUITE_MODULE, {"test_held"}) == SUITE_MODULE.replace(held, "")
    assert "parametrize" in held and "test_held" in held  # the check and every decorator of it go
    assert held_back.without_functions(SUITE_MODULE, set()) == SUITE_MODULE


# ---------------------------------------------------------------- held back means absent

# A suite folder as grader/suites/KATA/ is: test modules, and modules of helpers, oracles and fixtures they share.
SUITE_FOLDER = {
    "oracles.py": """\
def _oracle(x):
    return _deeper(x) + 1


def _deeper(x):
    return x * 2


def _shared(x):
    return x
""",
    "conftest.py": """\
import pytest


@pytest.fixture
def only_held():
    return 3


@pytest.fixture
def by_name():
    return 4


@pytest.fixture
def everyone():
    return 5
""",
    "test_1_kept.py": """\
import pytest

from grader.suites.toy.oracles import _oracle, _shared

BAR = 2


class Helper:
    pass


@pytest.mark.task("held")
def test_held(only_held):
    assert _oracle(only_held) == 7 and Helper


@pytest.mark.task("kept")
def test_kept(everyone):
    assert _shared(BAR) == 2
""",
    "test_2_held.py": """\
import pytest

from grader.suites.common import load_baseline
from grader.suites.toy import oracles


@pytest.mark.usefixtures("by_name")
@pytest.mark.task("held")
def test_held_too():
    load_baseline("toy").f(oracles._deeper(1))
""",
}


def suite_folder(tmp_path) -> Path:
    folder = tmp_path / "toy"
    folder.mkdir()
    for name, text in SUITE_FOLDER.items():
        (folder / name).write_text(text)
    return folder


def test_held_back_checks_take_the_helpers_fixtures_and_classes_only_they_use_from_every_module(tmp_path):
    folder = suite_folder(tmp_path)
    texts = {p.name: t for p, t in held_back.suite_texts(folder, {"test_held", "test_held_too"}).items()}
    assert texts["test_2_held.py"] is None  # held-back checks alone: the module ships nothing
    assert "_oracle" not in texts["test_1_kept.py"] and "class Helper" not in texts["test_1_kept.py"]
    assert "from grader.suites.toy.oracles import _shared\n" in texts["test_1_kept.py"]  # its import, rewritten
    assert "BAR = 2" in texts["test_1_kept.py"] and "def test_kept(everyone)" in texts["test_1_kept.py"]
    assert "def _shared(" in texts["oracles.py"] and "_oracle" not in texts["oracles.py"]
    assert "_deeper" not in texts["oracles.py"]  # used by the held-back checks alone, through others
    assert "def everyone(" in texts["conftest.py"] and "only_held" not in texts["conftest.py"]
    assert "by_name" not in texts["conftest.py"]  # named by a held-back check's usefixtures
    assert not any(held_back.loads_baseline(t) for t in texts.values() if t is not None)
    assert held_back.loads_baseline(SUITE_FOLDER["test_2_held.py"])


def test_a_suite_ships_whole_when_nothing_is_held_back(tmp_path):
    folder = suite_folder(tmp_path)
    texts = {p.name: t for p, t in held_back.suite_texts(folder, set()).items()}
    assert texts == SUITE_FOLDER


def test_holding_back_llama_cpp_takes_its_bit_exact_encoders_out_of_the_suite():
    kata = next(k for k in load_registry() if k.name == "quantization")
    texts = held_back.suite_texts(kata.suite, set(kata.task("llama_cpp").tests))
    oracles = texts[kata.suite / "oracles.py"]
    assert "def _expected_q8_0(" not in oracles and "def _expected_q4_0(" not in oracles
    assert "def _expected_q8_0(" in (kata.suite / "oracles.py").read_text()
    shipped = "\n".join(text for text in texts.values() if text is not None)
    for path, text in texts.items():
        if text is not None:
            compile(text, str(path), "exec")
    assert all(f"def {test}(" in shipped for test in kata.task("grouped").tests)


def held_back_registry(tmp_path, tasks: dict[str, str]) -> Path:
    """The project's registry, copied, with each kata's named task marked release = false."""

    def held(text: str) -> str:
        task = next((task for kata, task in tasks.items() if f'[[kata]]\nname = "{kata}"' in text), None)
        return text.replace(f'name = "{task}"', f'name = "{task}"\n  release = false', 1) if task else text

    return copy_registry(tmp_path / "katas", held)


def test_a_held_back_speed_task_leaves_no_baseline_hint_or_recap_in_the_student_edition(tmp_path):
    registry = held_back_registry(tmp_path, {"kv_cache": "speed", "moe": "speed"})
    out = tmp_path / "edition"
    release.write_edition(out, registry=registry)
    suites = out / "grader" / "suites"
    assert not (suites / "kv_cache" / "baseline.py").exists() and not (suites / "moe" / "baseline.py").exists()
    assert not (suites / "quantization" / "baseline.py").exists()  # released, but the checks that load it are hidden
    assert not list(suites.glob("*/baseline_hidden.py"))  # a working cache: an answer only hidden checks load
    shipped = [p.read_text(encoding="utf-8") for p in (suites / "kv_cache").glob("*.py")]
    assert shipped and not any(held_back.loads_baseline(text) for text in shipped)
    edition = "".join(p.read_text(encoding="utf-8") for p in suites.glob("*/kata.toml"))
    for kata in ("kv_cache", "moe"):
        speed = next(k for k in load_registry(registry) if k.name == kata).task("speed")
        for text in [*speed.hints, *(hint for _, hint in speed.check_hints), *(q.answer for q in speed.questions)]:
            assert text not in edition, f"{kata}:speed's {text[:40]!r} is in the edition's registry"
    recaps = {k.name: k.recap for k in load_registry(suites)}
    assert recaps["kv_cache"] == "" and recaps["moe"] == ""  # both quote a figure only the speed task measures
    assert recaps["quantization"] == ""  # released, but the checks that measure its figures are hidden


def test_the_grading_edition_keeps_the_baselines_of_held_back_speed_tasks(tmp_path):
    registry = held_back_registry(tmp_path, {"kv_cache": "speed"})
    out = tmp_path / "grading"
    release.write_edition(out, held_back=True, registry=registry)
    assert (out / "grader" / "suites" / "kv_cache" / "baseline.py").is_file()
    assert (out / "grader" / "suites" / "kv_cache" / "baseline_hidden.py").is_file()  # its hidden check's
    speed = (out / "grader" / "suites" / "kv_cache" / "test_6_speed.py").read_text()
    assert "def test_cached_generation_is_at_least_3x_faster" in speed
