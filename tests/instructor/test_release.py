"""The student edition's registry: katas.toml edited as TOML, whatever way a table or a name is written."""

from __future__ import annotations

import sys

from grader.instructor import release
from grader.kata.registry import REGISTRY_PATH, load_presets

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
    assert release.without_functions(SUITE_MODULE, {"test_held"}) == SUITE_MODULE.replace(held, "")
    assert "parametrize" in held and "test_held" in held  # the check and every decorator of it go
    assert release.without_functions(SUITE_MODULE, set()) == SUITE_MODULE
