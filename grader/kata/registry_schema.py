"""The shape of a registry file (a kata's kata.toml, presets.toml): which tables and keys it holds,
and the type of each (a pydantic schema).

`check_shape` refuses an unknown key (a typo such as `recapp`) or a value of the wrong type,
naming the table it sits in (kata 'moe' task 'router') and what that table allows, and a task's
`depends` that names no other task of its kata, or goes round in a circle; the other rules
between values (points at least 1, two or three hints, each function under one task, ...) are
grader.kata.registry's, checked on the tables this returns.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator


class _Table(BaseModel):
    """A TOML table: only the keys below, each of exactly its type (strict: no 1 for true, no "3" for 3)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class QuestionTable(_Table):
    """[[kata.task.question]]: a follow-up question for `kata interview`."""

    ask: str
    answer: str


class RubricTable(_Table):
    """[kata.task.rubric]: what the task probes in an interview, and what a strong answer shows."""

    probes: str
    strong: str


class CheckTable(_Table):
    """[[kata.task.check]]: the hint shown when one of these checks fails."""

    tests: list[str]
    hint: str


class TaskTable(_Table):
    """[[kata.task]]: one task of a kata."""

    name: str
    title: str
    points: int
    hints: list[str]
    functions: list[str] = []
    question: list[QuestionTable] = []
    rubric: RubricTable | None = None
    visibility: str = "visible"
    release: bool = True
    hidden_checks: list[str] = []
    depends: list[str] = []  # the other tasks of the kata whose functions this task's code or checks call
    check: list[CheckTable] = []


class KataTable(_Table):
    """[[kata]]: one kata and its tasks."""

    name: str
    title: str
    trade: str
    order: int
    recap: str = ""
    suite: str | None = None  # a path relative to the registry file
    task: list[TaskTable] = []

    @model_validator(mode="after")
    def _depends_name_other_tasks(self) -> "KataTable":
        """Each task's `depends` names other tasks of this kata, once each, and no task depends on itself
        through others (a ValueError naming the task, the key and what it may name)."""
        names = [t.name for t in self.task]
        for task in self.task:
            where = f"task {task.name!r}: 'depends'"
            unknown = [d for d in task.depends if d not in names]
            if unknown:
                raise ValueError(
                    f"{where} names {unknown[0]!r}, which is not a task of kata {self.name!r}; "
                    f"its tasks are: {', '.join(names)}"
                )
            if task.name in task.depends or len(set(task.depends)) != len(task.depends):
                raise ValueError(f"{where} must name other tasks of the kata, each once, got {task.depends!r}")
        circle = _circle({t.name: tuple(t.depends) for t in self.task})
        if circle:
            raise ValueError(f"task {circle[0]!r}: 'depends' goes round in a circle: {' -> '.join(circle)}")
        return self


def _circle(depends: dict[str, tuple[str, ...]]) -> list[str]:
    """A chain of tasks that leads back to its first (a -> b -> a), or [] when there is none."""
    done: set[str] = set()

    def walk(name: str, path: list[str]) -> list[str]:
        if name in path:
            return path[path.index(name) :] + [name]
        if name in done:
            return []
        for other in depends.get(name, ()):
            found = walk(other, path + [name])
            if found:
                return found
        done.add(name)
        return []

    return next((found for found in (walk(name, []) for name in depends) if found), [])


class PresetTable(_Table):
    """[[preset]]: a ready-made interview."""

    name: str
    title: str
    kata: str
    tasks: list[str] = []
    minutes: int
    difficulty: str


class RegistryFile(_Table):
    """The whole file: its katas, then its presets."""

    kata: list[KataTable] = []
    preset: list[PresetTable] = []


class ShapeError(ValueError):
    """The file holds a key its table does not allow, or a value of the wrong type; the message says which."""


# The arrays of tables, by key: how a message names one entry, the TOML header, and the table's schema.
_ARRAYS = {
    "kata": ("kata", "[[kata]]", KataTable),
    "task": ("task", "[[kata.task]]", TaskTable),
    "question": ("question", "[[kata.task.question]]", QuestionTable),
    "check": ("check", "[[kata.task.check]]", CheckTable),
    "preset": ("preset", "[[preset]]", PresetTable),
}
# The single tables inside an entry, by key: how a message names one, its TOML header, its schema.
_TABLES = {"rubric": ("rubric", "[kata.task.rubric]", RubricTable)}
_TYPES = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
    "list_type": "an array",
    "model_type": "a table",
}
# Keys the registry once read and no longer does, and what to do instead.
_RETIRED = {
    (TaskTable, "tests"): "'tests' is not read any more; mark each of the task's tests in the suite with "
    '@pytest.mark.task("{name}") instead',
}


def check_shape(data: dict) -> RegistryFile:
    """data (the parsed TOML) as typed tables, or a ShapeError naming the first misfit and how many more there are."""
    try:
        return RegistryFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        others = len(errors) - 1
        more = f" (and {others} more problem{'s' if others > 1 else ''})" if others else ""
        raise ShapeError(_describe(data, errors[0]) + more) from None


def _describe(data: dict, error: dict) -> str:
    """One pydantic error as the registry's words: where (the entry's table path), which key, what is allowed."""
    loc, node, table, entry, names = list(error["loc"]), data, RegistryFile, {}, []
    while len(loc) >= 2 and loc[0] in _ARRAYS and isinstance(loc[1], int) and isinstance(node, dict):
        label, _, table = _ARRAYS[loc[0]]
        items = node.get(loc[0])
        entry = items[loc[1]] if isinstance(items, list) and loc[1] < len(items) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        named = isinstance(name, str) and "name" in table.model_fields  # a question or a check goes by number
        names.append(f"{label} {name!r}" if named else f"{label} {loc[1] + 1}")
        node, loc = entry, loc[2:]
    if len(loc) >= 2 and loc[0] in _TABLES and isinstance(node, dict) and isinstance(node.get(loc[0]), dict):
        label, _, table = _TABLES[loc[0]]  # a key of a single table inside the entry, such as its rubric
        names.append(label)
        entry, loc = node[loc[0]], loc[1:]
    where = " ".join(names) or "the top level"
    if error["type"] == "value_error":  # a rule between the entry's values (KataTable's validator): its own words
        return f"{where}: {error['ctx']['error']}"
    if not loc:  # the entry itself is not a table
        return f"{where}: must be a table ({_ARRAYS[error['loc'][-2]][1]}), got {_shown(error['input'])}"
    key = str(loc[0])
    if error["type"] == "extra_forbidden":
        retired = _RETIRED.get((table, key))
        if retired:
            return f"{where}: " + retired.format(name=entry.get("name", "NAME") if isinstance(entry, dict) else "NAME")
        allowed = ", ".join(table.model_fields)
        header = next((h for _, h, t in [*_ARRAYS.values(), *_TABLES.values()] if t is table), "the top level")
        return f"{where}: unknown key '{key}'; {header} takes only: {allowed}"
    if error["type"] == "missing":
        return f"{where}: missing '{key}'"
    what = f"'{key}'" + "".join(f" item {i + 1}" for i in loc[1:] if isinstance(i, int))
    if key in _ARRAYS and len(loc) == 1:
        expected = f"an array of tables ({_ARRAYS[key][1]})"
    elif key in _TABLES and len(loc) == 1:
        expected = f"a table ({_TABLES[key][1]})"
    else:
        expected = _TYPES.get(error["type"], error["msg"].removeprefix("Input should be ").rstrip("."))
    return f"{where}: {what} must be {expected}, got {_shown(error['input'])}"


def _shown(value, most: int = 80) -> str:
    """repr(value), cut to `most` characters: a misplaced table can be pages long."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."
