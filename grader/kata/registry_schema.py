"""The registry's types: a kata, its tasks (with their follow-up questions, rubric and check hints) and the
ready-made interviews, each a frozen pydantic model that holds every rule its table of the registry obeys.

A table of a registry file (a kata's kata.toml, presets.toml) becomes its type once: `Kata.from_table` (the
kata's tasks given their tests by the marks of its suite) and `Preset.from_table` (checked against the katas)
return the value the rest of the grader uses, or a RegistryError naming the file, the kata (and task), the key
and what it allows. The rules are declared on the fields and models they are about: only the keys below, each
of exactly its type (strict: no 1 for true, no "3" for 3), points at least 1, names that are identifiers, two
or three hints, each task once, each function under one task, a `depends` naming other tasks of the kata and
going round in no circle, check hints naming tests of their own task, and what the suite's marks must agree
with.
"""

from __future__ import annotations

import string
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Collection, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

MAX_MINUTES = 600  # the longest interview a preset or `kata interview --minutes` may set
Marks = dict[str, tuple[str, ...]]  # a suite's test functions -> the tasks each one grades


class RegistryError(ValueError):
    """The registry is malformed; the message names the file, the entry and the problem."""


def _must(holds: Callable[[Any], object], says: str) -> AfterValidator:
    """A rule on a value: refused, saying `says` ("must ..."), unless holds(value) is true."""

    def check(value: Any) -> Any:
        if not holds(value):
            raise ValueError(says)
        return value

    return AfterValidator(check)


def _names_figure_keys(text: str) -> bool:
    """Whether text is a format string whose {placeholders} are identifiers (keys of the figures checks record)."""
    try:
        return all(name.isidentifier() for _, name, _, _ in string.Formatter().parse(text) if name is not None)
    except ValueError:
        return False


T = TypeVar("T")
Array = Annotated[tuple[T, ...], Field(strict=False)]  # a TOML array (a list), kept as a tuple
Name = Annotated[str, _must(str.isidentifier, "must be a Python identifier")]
Public = Annotated[
    str, _must(lambda s: s.isidentifier() and s[0] != "_", "must name a public function or class of the kata module")
]
TestName = Annotated[str, _must(lambda s: s.startswith("test_") and s.isidentifier(), "must name a test (test_...)")]
Filled = Annotated[str, _must(str.strip, "must not be empty")]  # kept as written
Stripped = Annotated[str, AfterValidator(str.strip), _must(bool, "must not be empty")]
Recap = Annotated[
    str, _must(_names_figure_keys, "must be a string whose {placeholders} name figure keys"), AfterValidator(str.strip)
]
Once = _must(lambda names: len(set(names)) == len(names), "must name each one once")


class _Table(BaseModel):
    """A table of the registry: only the keys below, each of exactly its type (strict: no 1 for true, no "3" for 3).
    A key named otherwise than its attribute is the attribute's alias (`question` holds `questions`); in Python,
    either name makes one."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class Question(_Table):
    """A follow-up question for after an interview: it probes understanding beyond passing."""

    ask: Stripped  # the question, as the interviewer asks it
    answer: Stripped  # the answer sketch, for the interviewer's eyes only


class Rubric(_Table):
    """What a task probes in an interview, and what a strong answer shows: for the interviewer's report."""

    probes: Stripped
    strong: Stripped


class CheckHint(_Table):
    """Some of a task's checks, and the hint shown instead of the task's when one of them fails."""

    tests: Annotated[Array[TestName], _must(bool, "must name one or more of the task's tests")]
    hint: Stripped


class Task(_Table):
    """A task of a kata: what it is worth, its hints, what it writes, and what grades it."""

    name: Name  # short id used on the command line, e.g. "cache"
    title: str  # one line for the table and the checklist
    points: int = Field(ge=1)  # what passing the task is worth
    # two or three questions, each a bigger nudge than the last
    hints: Annotated[Array[Filled], _must(lambda h: 2 <= len(h) <= 3, "must hold two or three hints")]
    functions: Array[Public] = ()  # the kata module's public functions and classes the task writes (none: speed)
    questions: Annotated[
        Array[Question], _must(lambda q: len(q) in (0, 2, 3), "must be two or three follow-up questions, or none")
    ] = Field((), alias="question")  # for `kata interview`, or none
    rubric: Rubric | None = None  # what the task probes and what a strong answer shows, for `kata interview`
    visibility: Literal["visible", "hidden"] = "visible"  # "hidden": Gradescope shows it only after the due date
    release: bool = True  # False: held back from the student edition (`kata release`), graded by the instructor
    # a student edition's: the checks it leaves out, graded on submission
    hidden: Annotated[Array[TestName], Once] = Field((), alias="hidden_checks")
    depends: Array[Name] = ()  # the kata's other tasks whose functions this task's code or checks call
    hinted_checks: Array[CheckHint] = Field((), alias="check")  # checks with a hint of their own
    tests: Array[str] = Field((), exclude=True)  # the suite's test functions marked with this task (from the suite)

    @property
    def check_hints(self) -> tuple[tuple[str, str], ...]:
        """(test name, hint) for each check with a hint of its own."""
        return tuple((test, check.hint) for check in self.hinted_checks for test in check.tests)

    @property
    def graded_here(self) -> bool:
        """Whether this copy of the suite holds every check of the task (False in a student
        edition for a task with hidden checks: `kata grade` there says which are graded on submission)."""
        return not self.hidden

    def hint_for(self, test_name: str) -> str | None:
        """The hint attached to this check ([[kata.task.check]]), if any."""
        return next((h for t, h in self.check_hints if t == test_name), None)

    @model_validator(mode="before")
    @classmethod
    def _tests_from_the_suite(cls, data: Any, info: ValidationInfo) -> Any:
        """A task read from a file (validated with a context) takes its tests from its suite's marks, never the file."""
        if info.context is None or not isinstance(data, dict):
            return data
        if "tests" in data:
            raise ValueError(
                "'tests' is not read any more; mark each of the task's tests in the suite with "
                f'@pytest.mark.task("{data.get("name", "NAME")}") instead'
            )
        marks = info.context.get("marks") or {}
        return {**data, "tests": tuple(test for test, tasks in marks.items() if data.get("name") in tasks)}

    @model_validator(mode="after")
    def _one_hint_per_check(self) -> Task:
        tests = [test for test, _ in self.check_hints]
        twice = [test for test in tests if tests.count(test) > 1]
        if twice:
            raise ValueError(f"{twice[0]} has two check hints; give each check one")
        return self

    @model_validator(mode="after")
    def _agrees_with_its_suite(self, info: ValidationInfo) -> Task:
        """The task's tests, hidden checks and check hints agree with the suite's marks (when there is a suite)."""
        marks, suite = (info.context or {}).get("marks"), (info.context or {}).get("suite")
        if marks is None:
            return self
        held = [test for test in self.hidden if test in marks]
        if held:
            raise ValueError(
                f"'hidden_checks' names checks {suite} holds: {', '.join(held)} "
                "(only a student edition lists them, for the checks `kata release` left out)"
            )
        if not self.tests and not self.hidden:
            raise ValueError(f'no test in {suite} is marked @pytest.mark.task("{self.name}")')
        strays = [test for test, _ in self.check_hints if test not in self.tests]
        if strays:
            raise ValueError(f"a check hint's 'tests' must name one or more of the task's own tests, not {strays!r}")
        return self


class Kata(_Table):
    """A kata: one technique, its tasks in order, and the suite that grades them."""

    name: Name  # module name in katas/, e.g. "kv_cache"
    title: str
    trade: str  # the trade the technique makes, e.g. "memory for time"
    order: int = Field(ge=1)  # position in the recommended order, from 1
    tasks: Annotated[Array[Task], _must(bool, "must hold at least one task")] = Field(alias="task")
    suite: Path  # the grading suite: grader/suites/<name>/ unless the registry names another folder or a file
    recap: Recap = ""  # said when the kata turns fully green: a format string over its checks' figure keys

    @classmethod
    def from_table(cls, table: dict, path: Path, suite: Path, marks: Marks | None = None) -> Kata:
        """The kata a table of the registry file `path` describes, graded by `suite` (a folder or a test file),
        each task given the tests `marks` (read from the suite; None while there is no suite) mark with it.
        A RegistryError names the file, the kata (and task), the key and what it allows."""
        context = {"marks": marks, "suite": f"{suite.name}/" if suite.is_dir() else suite.name}
        return _validated(cls, {**table, "suite": suite}, path, _named("kata", table), context)

    @property
    def max_score(self) -> int:
        return sum(t.points for t in self.tasks)

    def needs(self, name: str) -> tuple[str, ...]:
        """The tasks task `name` depends on, directly or through others (registry's `depends`), in registry order."""
        found, todo = set(), list(self.task(name).depends)
        while todo:
            other = todo.pop()
            if other not in found:
                found.add(other)
                todo += self.task(other).depends
        return tuple(t.name for t in self.tasks if t.name in found)

    def root(self, name: str, failing: Collection[str]) -> str | None:
        """Among the tasks task `name` needs, the first in registry order that is in `failing` while none
        of the tasks it needs is: the one to fix first. None when `name` needs no task in `failing`."""
        return next(
            (t for t in self.needs(name) if t in failing and not any(u in failing for u in self.needs(t))), None
        )

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise ValueError(
            f"kata {self.name!r} has no task {name!r}; its tasks are: {', '.join(t.name for t in self.tasks)}"
        )

    @model_validator(mode="after")
    def _each_task_and_function_once(self) -> Kata:
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names repeat: {names}")
        owners: dict[str, str] = {}
        for task in self.tasks:
            for function in task.functions:
                if function in owners:
                    raise ValueError(
                        f"function {function!r} is listed under tasks {owners[function]!r} and {task.name!r}; "
                        "each function belongs to exactly one task"
                    )
                owners[function] = task.name
        return self

    @model_validator(mode="after")
    def _depends_name_other_tasks(self) -> Kata:
        """Each task's `depends` names other tasks of this kata, once each, and no task depends on itself
        through others."""
        names = [t.name for t in self.tasks]
        for task in self.tasks:
            where = f"task {task.name!r}: 'depends'"
            unknown = [d for d in task.depends if d not in names]
            if unknown:
                raise ValueError(
                    f"{where} names {unknown[0]!r}, which is not a task of kata {self.name!r}; "
                    f"its tasks are: {', '.join(names)}"
                )
            if task.name in task.depends or len(set(task.depends)) != len(task.depends):
                raise ValueError(f"{where} must name other tasks of the kata, each once, got {list(task.depends)!r}")
        circle = _circle({t.name: t.depends for t in self.tasks})
        if circle:
            raise ValueError(f"task {circle[0]!r}: 'depends' goes round in a circle: {' -> '.join(circle)}")
        return self

    @model_validator(mode="after")
    def _marks_name_its_tasks(self, info: ValidationInfo) -> Kata:
        """Every test of the suite is marked with tasks of this kata (when there is a suite)."""
        marks, suite = (info.context or {}).get("marks"), (info.context or {}).get("suite")
        if marks is None:
            return self
        unmarked = [test for test, tasks in marks.items() if not tasks]
        if unmarked:
            raise ValueError(
                f'{suite} has tests with no @pytest.mark.task("...") mark or task parameter: {", ".join(unmarked)}'
            )
        names = {t.name for t in self.tasks}
        strays = sorted({task for tasks in marks.values() for task in tasks} - names)
        if strays:
            raise ValueError(
                f"{suite} marks tests with tasks the registry does not list: {', '.join(strays)} "
                f"(its tasks: {', '.join(sorted(names))})"
            )
        return self


def _circle(depends: dict[str, tuple[str, ...]]) -> list[str]:
    """A chain of tasks that leads back to its first (a -> b -> a), or [] when there is none."""
    done: set[str] = set()

    def walk(name: str, path: list[str]) -> list[str]:
        if name in path:
            return path[path.index(name) :] + [name]
        if name in done:
            return []
        found = next((f for f in (walk(other, path + [name]) for other in depends.get(name, ())) if f), [])
        done.add(name)
        return found

    return next((found for found in (walk(name, []) for name in depends) if found), [])


class Difficulty(str, Enum):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"

    def __str__(self) -> str:
        return self.value


class Preset(_Table):
    """A ready-made interview: `kata interview --preset NAME`."""

    name: Annotated[
        str, _must(lambda s: s and all(c.isalnum() or c == "-" for c in s), "must use only letters, digits and '-'")
    ]  # id on the command line, e.g. "kv-cache-30"
    title: str  # e.g. "KV cache in 30 minutes"
    kata: str
    tasks: Array[str] = ()  # the tasks under interview; empty for the whole kata
    minutes: int = Field(ge=1, le=MAX_MINUTES)
    difficulty: Difficulty = Field(strict=False)

    @classmethod
    def from_table(cls, table: dict, path: Path, katas: dict[str, Kata]) -> Preset:
        """The preset a [[preset]] table of the registry file `path` describes, checked against `katas`
        (by name); a RegistryError names the file, the preset, the key and what it allows."""
        return _validated(cls, table, path, _named("preset", table), {"katas": katas})

    @field_validator("kata")
    @classmethod
    def _a_kata_of_the_registry(cls, kata: str, info: ValidationInfo) -> str:
        katas = (info.context or {}).get("katas")
        if katas is not None and kata not in katas:
            raise ValueError(f"must name a kata of the registry ({', '.join(katas)})")
        return kata

    @model_validator(mode="after")
    def _leaves_something_to_write(self, info: ValidationInfo) -> Preset:
        """Its tasks are tasks of its kata, and at least one of them (or of the whole kata's) writes functions."""
        katas = (info.context or {}).get("katas")
        if katas is None:
            return self
        kata = katas[self.kata]
        chosen = [kata.task(t) for t in self.tasks] or kata.tasks  # a ValueError names a task the kata lacks
        if not any(t.functions for t in chosen):
            raise ValueError("none of its tasks lists 'functions', so it leaves nothing to write")
        return self


class RegistryFile(_Table):
    """A registry file's top level (its `format` taken off): a kata.toml's [[kata]] table, or presets.toml's
    [[preset]] tables (each its model's to check)."""

    kata: Array[dict] = ()
    preset: Array[dict] = ()

    @classmethod
    def from_table(cls, table: dict, path: Path) -> RegistryFile:
        return _validated(cls, table, path, "the top level")


_TABLES = {"task": Task, "question": Question, "check": CheckHint, "rubric": Rubric}  # tables within a table, by key
_SAYS = {"model_type": "must be a table", "dict_type": "must be a table", "tuple_type": "must be an array"}


def _validated(model: type[_Table], table: dict, path: Path, where: str, context: dict | None = None) -> Any:
    """model's value for a table of the registry file `path`, or a RegistryError naming the file, `where` the
    table is, its first misfit and how many more there are."""
    try:
        return model.model_validate(table, context=context)
    except ValidationError as exc:
        errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")  # a typo first
        more = f" (and {len(errors) - 1} more problem{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
        raise RegistryError(f"{path}: {_sentence(where, model, table, errors[0])}{more}") from None


def _named(label: str, entry: Any, index: int | None = None) -> str:
    """How a message names an entry: by its name (kata 'moe'), else by its number (question 2)."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return f"{label} {name!r}" if isinstance(name, str) else label if index is None else f"{label} {index + 1}"


def _sentence(where: str, model: type[_Table], table: dict, error: Any) -> str:
    """One pydantic error in the registry's words: where (kata 'moe', task 'router'), the key, what it allows."""
    loc, node, at = list(error["loc"]), table, [where]
    while len(loc) > 1 and loc[0] in _TABLES and isinstance(node, dict):  # down the tables the error is in
        key = loc.pop(0)
        model, node = _TABLES[key], node.get(key)
        if isinstance(node, list):  # an array of tables: the entry at loc's next index
            index = loc.pop(0)
            node = node[index]
            at.append(_named(key, node, index))
        else:
            at.append(key)
    where, kind = ", ".join(at), error["type"]
    if kind == "extra_forbidden":
        # a field left out of dumps (a task's tests, read from its suite) is no key of the file
        keys = [field.alias or name for name, field in model.model_fields.items() if not field.exclude]
        return f"{where}: unknown key '{loc[0]}' (allowed: {', '.join(keys)})"
    if kind == "missing":
        return f"{where}: missing '{loc[0]}'"
    if kind == "value_error" and not loc:  # a rule between the table's values: its own words
        return f"{where}: {error['ctx']['error']}"
    says = str(error["ctx"]["error"]) if kind == "value_error" else _SAYS.get(kind, error["msg"])
    what = "".join(f"'{part}' " if isinstance(part, str) else f"item {part + 1} " for part in loc)
    return f"{where}: {what}{says.replace('Input should be', 'must be')}, got {_shown(error['input'])}"


def _shown(value: Any, most: int = 80) -> str:
    """repr(value), cut to `most` characters: a misplaced table can be pages long."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."
