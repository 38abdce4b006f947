"""The registry validated once, into its types: a key no table takes, a value of the wrong type or a broken
rule is refused with the file, the kata (and task), the key and what is allowed, and `kata` exits 2 saying so."""

from __future__ import annotations

import pydantic
import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.kata.registry import RegistryError, Task, kata_file, load_presets, load_registry

from helpers import TOY, write_registry

QUESTIONS = '\n  [[kata.task.question]]\n  ask = "Why?"\n  answer = "Because."\n' * 2
RUBRIC = '\n  [kata.task.rubric]\n  probes = "Sums."\n  strong = "Exact sums."\n'
CHECK = '\n  [[kata.task.check]]\n  tests = ["test_mean_is_as_fast_as_numpy"]\n  hint = "Is there a loop left?"\n'
PRESET = (
    'format = 1\n[[preset]]\nname = "toy-10"\ntitle = "Toy in 10"\nkata = "toy"\nminutes = 10\ndifficulty = "easy"\n'
)
FUNCTIONS = 'functions = ["mean_of"]\n  hints = ["What does the mean'
TASK_KEYS = (
    "name, title, points, hints, functions, question, rubric, visibility, release, hidden_checks, depends, check"
)


def toy_text() -> str:
    """The toy registry, with functions for a preset to write and, on its last task, two questions,
    a rubric and a check hint."""
    return (
        (TOY / "kata.toml").read_text().replace('hints = ["What does the mean', FUNCTIONS) + QUESTIONS + RUBRIC + CHECK
    )


def toy_registry(folder, text: str, presets: str = ""):
    """A registry folder holding the toy kata as text, and presets; returns the toy's kata.toml."""
    return write_registry(folder, {"toy": text}, presets) / "toy" / "kata.toml"


@pytest.mark.parametrize(
    "edit,says",
    [
        (
            lambda t: t.replace("order = 1", "order = 1\nrecapp = 'x'"),
            "kata 'toy': unknown key 'recapp' (allowed: name, title, trade, order, task, suite, recap)",
        ),
        (
            lambda t: t.replace("points = 2", "points = 2\n  recapp = 'x'"),
            f"kata 'toy', task 'mean': unknown key 'recapp' (allowed: {TASK_KEYS})",
        ),
        (
            lambda t: t.replace('answer = "Because."', 'answer = "Because."\n  hint = "no"', 1),
            "kata 'toy', task 'fast', question 1: unknown key 'hint' (allowed: ask, answer)",
        ),
        (
            lambda t: t.replace('strong = "Exact sums."', 'strong = "Exact sums."\n  answer = "np.sum"'),
            "kata 'toy', task 'fast', rubric: unknown key 'answer' (allowed: probes, strong)",
        ),
        (
            lambda t: t.replace('hint = "Is there a loop left?"', 'hnt = "Is there a loop left?"'),
            "kata 'toy', task 'fast', check 1: unknown key 'hnt' (allowed: tests, hint)",
        ),
        (
            lambda t: PRESET.replace("minutes = 10", "minutes = 10\nminute = 10"),
            "preset 'toy-10': unknown key 'minute' (allowed: name, title, kata, tasks, minutes, difficulty)",
        ),
        (
            lambda t: t.replace("format = 1", "format = 1\nkatas = 'x'"),
            "the top level: unknown key 'katas' (allowed: kata, preset)",
        ),
        (lambda t: t.replace("points = 2", 'points = "2"'), "task 'mean': 'points' must be a valid integer, got '2'"),
        (lambda t: t.replace("points = 2", "points = true"), "'points' must be a valid integer, got True"),
        (lambda t: t.replace("points = 1", "points = 1\n  release = 1", 1), "'release' must be a valid boolean, got 1"),
        (
            lambda t: t.replace('"Is broadcasting enough?"', "7"),
            "task 'scale': 'hints' item 2 must be a valid string, got 7",
        ),
        (lambda t: t.replace('title = "Toy"', "title = ['Toy']"), "kata 'toy': 'title' must be a valid string"),
        (lambda t: PRESET.replace('kata = "toy"\n', ""), "preset 'toy-10': missing 'kata'"),
        (lambda t: t.replace('suite = "test_toy.py"', "suite = 3"), "kata 'toy': 'suite' must be a path relative to"),
    ],
    ids=[
        "kata key",
        "task key",
        "question key",
        "rubric key",
        "check key",
        "preset key",
        "top-level key",
        "string for an integer",
        "boolean for an integer",
        "integer for a boolean",
        "integer among strings",
        "array for a string",
        "missing key",
        "integer for a path",
    ],
)
def test_a_key_no_table_takes_or_a_wrong_type_is_refused_with_the_file_and_what_is_allowed(tmp_path, edit, says):
    path = toy_registry(tmp_path, toy_text(), PRESET)
    assert [p.name for p in load_presets(tmp_path)] == ["toy-10"]  # the registry before the edit loads
    if "preset" in says:
        path = path.parent.parent / "presets.toml"
        path.write_text(edit(PRESET))
    else:
        path.write_text(edit(toy_text()))
    with pytest.raises(RegistryError) as refused:
        load_presets(tmp_path)
    assert str(refused.value).startswith(f"{path.resolve()}: ")
    assert says in str(refused.value)


@pytest.mark.parametrize(
    "edit,says",
    [
        (
            lambda t: t.replace("points = 2", "points = 0"),
            "task 'mean': 'points' must be greater than or equal to 1, got 0",
        ),
        (
            lambda t: t.replace('name = "mean"', 'name = "the mean"'),
            "'name' must be a Python identifier, got 'the mean'",
        ),
        (
            lambda t: t.replace('name = "scale"', 'name = "mean"'),
            "kata 'toy': task names repeat: ['mean', 'mean', 'fast']",
        ),
        (
            lambda t: t.replace("order = 1", "order = 0"),
            "kata 'toy': 'order' must be greater than or equal to 1, got 0",
        ),
        (
            lambda t: t.replace('hints = ["What shape should come back?", ', "hints = ["),
            "task 'scale': 'hints' must hold two or three hints, got ['Is broadcasting enough?']",
        ),
        (
            lambda t: t + CHECK,
            "task 'fast': test_mean_is_as_fast_as_numpy has two check hints; give each check one",
        ),
        (
            lambda t: t.replace('visibility = "visible"', 'visibility = "secret"'),
            "task 'fast': 'visibility' must be 'visible' or 'hidden', got 'secret'",
        ),
        (
            lambda t: t.replace("order = 1", 'order = 1\nrecap = "{0 sums}"'),
            "kata 'toy': 'recap' must be a string whose {placeholders} name figure keys, got '{0 sums}'",
        ),
    ],
    ids=["points", "task name", "task twice", "order", "one hint", "two check hints", "visibility", "recap"],
)
def test_a_value_breaking_a_rule_of_its_model_is_refused_naming_the_kata_task_key_and_rule(tmp_path, edit, says):
    path = toy_registry(
        tmp_path, toy_text().replace('depends = ["mean"]', 'depends = ["mean"]\n  visibility = "visible"')
    )
    assert load_registry(tmp_path)[0].task("fast").visibility == "visible"  # the registry before the edit loads
    path.write_text(edit(path.read_text()))
    with pytest.raises(RegistryError) as refused:
        load_registry(tmp_path)
    assert str(refused.value).startswith(f"{path.resolve()}: ")
    assert says in str(refused.value)


def test_the_rules_hold_for_a_task_made_in_python_too():
    assert Task(name="mean", title="the mean", points=1, hints=["a?", "b?"]).hints == ("a?", "b?")
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 1"):
        Task(name="mean", title="the mean", points=0, hints=("a?", "b?"))
    with pytest.raises(pydantic.ValidationError, match="two or three hints"):
        Task(name="mean", title="the mean", points=1, hints=("a?",))


def test_a_task_that_still_lists_its_tests_is_told_to_mark_them_in_the_suite(tmp_path):
    toy_registry(tmp_path, toy_text().replace("points = 1\n", 'points = 1\n  tests = ["test_x"]\n', 1))
    with pytest.raises(RegistryError, match=r"task 'scale': 'tests' is not read any more.*mark\.task\(\"scale\"\)"):
        load_registry(tmp_path)


def test_kata_list_exits_2_naming_a_mistyped_key_of_the_shipped_registry(tmp_path, monkeypatch):
    text = kata_file("moe").read_text().replace("[[kata]]\n", f'[[kata]]\nsuite = "{kata_file("moe").parent}"\n')
    at = text.index('name = "router"')
    path = write_registry(tmp_path, {"moe": text[:at] + 'recapp = "typo"\n  ' + text[at:]}) / "moe" / "kata.toml"
    monkeypatch.setenv("KATA_REGISTRY", str(tmp_path))
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 2, result.output
    assert f"{path.resolve()}: kata 'moe', task 'router': unknown key 'recapp' (allowed: {TASK_KEYS})" in result.output
    assert "Traceback" not in result.output
    path.write_text(text)
    assert CliRunner().invoke(main, ["list"]).exit_code == 0


@pytest.mark.parametrize(
    "edit,says",
    [
        (
            lambda t: t.replace('depends = ["mean"]', 'depends = ["meen"]'),
            "kata 'toy': task 'fast': 'depends' names 'meen', which is not a task of kata 'toy'; "
            "its tasks are: mean, scale, fast",
        ),
        (
            lambda t: t.replace('depends = ["mean"]', 'depends = "mean"'),
            "task 'fast': 'depends' must be an array, got 'mean'",
        ),
        (
            lambda t: t.replace('depends = ["mean"]', 'depends = ["mean", "fast"]'),
            "kata 'toy': task 'fast': 'depends' must name other tasks of the kata, each once",
        ),
        (
            lambda t: t.replace("points = 2\n", 'points = 2\n  depends = ["fast"]\n', 1),
            "kata 'toy': task 'mean': 'depends' goes round in a circle: mean -> fast -> mean",
        ),
    ],
    ids=["unknown task", "string for an array", "itself", "a circle"],
)
def test_a_depends_naming_no_other_task_of_its_kata_or_going_round_is_refused_with_the_file_kata_and_key(
    tmp_path, edit, says
):
    path = toy_registry(tmp_path, toy_text())
    assert load_registry(tmp_path)[0].task("fast").depends == ("mean",)  # the registry before the edit loads
    path.write_text(edit(toy_text()))
    with pytest.raises(RegistryError) as refused:
        load_registry(tmp_path)
    assert str(refused.value).startswith(f"{path.resolve()}: ")
    assert says in str(refused.value)


def test_a_task_needs_what_it_depends_on_through_others_and_its_root_is_the_first_failing_one_needing_none():
    speculative = next(k for k in load_registry() if k.name == "speculative")
    assert speculative.needs("speed") == ("accept_reject", "greedy", "loop")  # speed -> loop -> both rules
    assert speculative.needs("greedy") == ()
    assert speculative.root("speed", {"greedy", "loop", "speed"}) == "greedy"
    assert speculative.root("speed", {"loop", "speed"}) == "loop"
    assert speculative.root("speed", {"accept_reject", "greedy", "loop"}) == "accept_reject"  # registry order
    assert speculative.root("loop", {"speed", "loop"}) is None


@pytest.mark.parametrize(
    "edit,says",
    [
        (lambda t: t.replace("format = 1", "format = 2"), "format = 2 is not one this grader reads; write format = 1"),
        (lambda t: t.replace("format = 1\n", ""), "format = None is not one this grader reads"),
        (lambda t: t.replace('name = "toy"', 'name = "other"'), "holds one [[kata]] table, named 'toy' as its folder"),
        (lambda t: t + PRESET.replace("format = 1", ""), "a [[preset]] table goes in the registry's presets.toml"),
    ],
    ids=["unknown format", "no format", "named unlike its folder", "a preset in a kata's file"],
)
def test_a_kata_file_of_another_format_or_not_its_folders_kata_is_refused_naming_the_file(tmp_path, edit, says):
    path = toy_registry(tmp_path, edit(toy_text()))
    with pytest.raises(RegistryError) as refused:
        load_registry(tmp_path)
    assert str(refused.value).startswith(f"{path.resolve()}: ") and says in str(refused.value)
