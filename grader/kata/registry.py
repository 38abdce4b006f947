"""The kata registry: every kata's kata.toml loaded into validated dataclasses.

The registry is a folder of kata folders, grader/suites/ unless told another:
each folder holding a kata.toml is one kata (the folder named after it), and
presets.toml beside them holds the ready-made interviews (presets).
grader/suites/README.md lists the keys each file takes. A kata.toml is the one
place that names the kata, its tasks, their points, the hints, which other
tasks' functions each task calls (`depends`: a task that fails while one it
needs fails too is reported as failing because of it), and for
`kata interview`: the functions each task writes and its follow-up questions.
Its shape (which keys each table takes, of which type) is
grader.kata.registry_schema's: a typo or a wrong type is refused with the
file, the table and the key; the rules between values are checked here.

Which suite tests grade a task is said once, on the tests themselves:
`@pytest.mark.task("cache")` on a test function, or, for one check that
grades several tasks case by case, a `task` parameter listing them
literally (`@pytest.mark.parametrize("task", ["symmetric", "affine"])`).
The registry reads both from the suite's source without importing it
(`suite_tasks`); the judge reads them from each collected check.

A kata's suite is a folder, grader/suites/<kata>/ (a package: its test_*.py
modules hold the checks, its other modules what they share), or, where the
registry's `suite` key names one, a single test file; `suite_modules` lists
the test modules either way, in the order pytest collects them.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import string
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Collection

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from grader.kata.registry_schema import (
    KataTable,
    PresetTable,
    QuestionTable,
    RegistryFile,
    ShapeError,
    TaskTable,
    check_shape,
)

SUITES_DIR = Path(__file__).parent.parent / "suites"
REGISTRY_PATH = SUITES_DIR  # the project's registry: its folder of kata folders
KATA_FILE = "kata.toml"  # a kata's own part of the registry, in its folder
PRESETS_FILE = "presets.toml"  # the registry's ready-made interviews, beside the kata folders
FORMAT = 1  # the `format` these files are written in; another is refused
MAX_MINUTES = 600  # the longest interview a preset or `kata interview --minutes` may set


class RegistryError(ValueError):
    """The registry is malformed; the message names the file, the entry and the problem."""


@dataclass(frozen=True)
class Question:
    """A follow-up question for after an interview: it probes understanding beyond passing."""

    ask: str  # the question, as the interviewer asks it
    answer: str  # the answer sketch, for the interviewer's eyes only


@dataclass(frozen=True)
class Rubric:
    """What a task probes in an interview, and what a strong answer shows: for the interviewer's report."""

    probes: str
    strong: str


@dataclass(frozen=True)
class Task:
    name: str  # short id used on the command line, e.g. "cache"
    title: str  # one line for the table and the checklist
    points: int  # what passing the task is worth
    hints: tuple[str, ...]  # two or three questions, each a bigger nudge than the last
    functions: tuple[
        str, ...
    ] = ()  # the kata module's public functions and classes the task writes (none for a speed task)
    questions: tuple[Question, ...] = ()  # two or three follow-up questions for `kata interview`, or none
    rubric: Rubric | None = None  # what the task probes and what a strong answer shows, for `kata interview`
    visibility: str = "visible"  # "hidden": graded, but Gradescope shows it only after the due date
    release: bool = True  # False: held back from the student edition (`kata release`), graded by the instructor
    check_hints: tuple[tuple[str, str], ...] = ()  # (test name, hint): the hint shown when that check fails
    tests: tuple[str, ...] = ()  # the suite's test functions marked with this task (read from the suite)
    hidden: tuple[str, ...] = ()  # a student edition's: the checks it leaves out, graded on submission
    depends: tuple[str, ...] = ()  # the kata's other tasks whose functions this task's code or checks call

    @property
    def graded_here(self) -> bool:
        """Whether this copy of the suite holds every check of the task (False in a student
        edition for a task with hidden checks: `kata grade` there says which are graded on submission)."""
        return not self.hidden

    def hint_for(self, test_name: str) -> str | None:
        """The hint attached to this check ([[kata.task.check]]), if any."""
        return next((h for t, h in self.check_hints if t == test_name), None)


VISIBILITIES = ("visible", "hidden")


class Difficulty(str, Enum):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Preset:
    """A ready-made interview: `kata interview --preset NAME`."""

    name: str  # id on the command line, e.g. "kv-cache-30"
    title: str  # e.g. "KV cache in 30 minutes"
    kata: str
    tasks: tuple[str, ...]  # the tasks under interview; empty for the whole kata
    minutes: int
    difficulty: Difficulty


@dataclass(frozen=True)
class Kata:
    name: str  # module name in katas/, e.g. "kv_cache"
    title: str
    trade: str  # the trade the technique makes, e.g. "memory for time"
    order: int  # position in the recommended order, from 1
    tasks: tuple[Task, ...]
    suite: Path  # the grading suite: grader/suites/<name>/ unless the registry names another folder or a file
    recap: str = ""  # said when the kata turns fully green: a format string over its checks' figure keys

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


def _task(entry: TaskTable, where: str) -> Task:
    name = entry.name
    where = f"{where} task {name!r}"
    points = entry.points
    if points < 1:
        raise RegistryError(f"{where}: points must be >= 1, got {points}")
    hints = tuple(entry.hints)
    if not 2 <= len(hints) <= 3 or not all(h.strip() for h in hints):
        raise RegistryError(f"{where}: give two or three non-empty hints, got {len(hints)}")
    functions = tuple(entry.functions)
    bad = [f for f in functions if not (f.isidentifier() and not f.startswith("_"))]
    if bad:
        raise RegistryError(
            f"{where}: 'functions' must list public function or class names of the kata module, got {bad!r}"
        )
    questions = tuple(_question(q, f"{where} question {i}") for i, q in enumerate(entry.question, 1))
    if questions and not 2 <= len(questions) <= 3:
        raise RegistryError(
            f"{where}: give two or three follow-up questions ([[kata.task.question]]), got {len(questions)}"
        )
    visibility = entry.visibility
    if visibility not in VISIBILITIES:
        raise RegistryError(f"{where}: visibility must be one of {', '.join(VISIBILITIES)}, got {visibility!r}")
    check_hints = []
    for i, check in enumerate(entry.check, 1):
        at = f"{where} check {i}"
        named, hint = check.tests, check.hint
        if not named or not all(t.startswith("test_") for t in named):
            raise RegistryError(f"{at}: 'tests' must name one or more of the task's tests (test_...), not {named!r}")
        if not hint.strip():
            raise RegistryError(f"{at}: the hint is empty")
        check_hints += [(t, hint.strip()) for t in named]
    if len({t for t, _ in check_hints}) != len(check_hints):
        raise RegistryError(f"{where}: a test has two check hints")
    hidden = tuple(entry.hidden_checks)
    if not all(t.startswith("test_") and t.isidentifier() for t in hidden) or len(set(hidden)) != len(hidden):
        raise RegistryError(f"{where}: 'hidden_checks' must name distinct tests (test_...), not {list(hidden)!r}")
    rubric = None
    if entry.rubric is not None:
        probes, strong = entry.rubric.probes.strip(), entry.rubric.strong.strip()
        if not probes or not strong:
            raise RegistryError(f"{where} rubric: 'probes' and 'strong' must not be empty")
        rubric = Rubric(probes, strong)
    return Task(
        name,
        entry.title,
        points,
        hints,
        functions,
        questions,
        rubric,
        visibility,
        entry.release,
        tuple(check_hints),
        hidden=hidden,
        depends=tuple(entry.depends),
    )


def _question(entry: QuestionTable, where: str) -> Question:
    ask, answer = entry.ask, entry.answer
    if not ask.strip() or not answer.strip():
        raise RegistryError(f"{where}: 'ask' and 'answer' must not be empty")
    return Question(ask.strip(), answer.strip())


def _task_mark(node: ast.AST) -> str | None:
    """The task a `pytest.mark.task("name")` expression names; None for any other expression."""
    if (
        isinstance(node, ast.Call)
        and ast.unparse(node.func) in ("pytest.mark.task", "mark.task")
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def _task_cases(decorator: ast.AST, where: str) -> list[str]:
    """The task names of a `pytest.mark.parametrize("task", ["a", "b"])` decorator; [] for any other."""
    if not (
        isinstance(decorator, ast.Call)
        and ast.unparse(decorator.func) in ("pytest.mark.parametrize", "mark.parametrize")
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
        and decorator.args[0].value == "task"
    ):
        return []
    values = decorator.args[1] if len(decorator.args) > 1 else None
    if not (
        isinstance(values, (ast.List, ast.Tuple))
        and values.elts
        and all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in values.elts)
    ):
        raise RegistryError(f'{where}: parametrize("task", ...) must list the task names literally, as ["a", "b"]')
    return [v.value for v in values.elts]


@functools.lru_cache(maxsize=64)
def _suite_marks(path: Path, mtime_ns: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except OSError as exc:
        raise RegistryError(f"cannot read the suite {path}: {exc.strerror or exc}") from None
    except SyntaxError as exc:
        raise RegistryError(f"the suite {path} does not parse: {exc}") from None
    marks = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            own = [t for t in map(_task_mark, node.decorator_list) if t is not None]
            cases = [t for d in node.decorator_list for t in _task_cases(d, f"{path}: {node.name}")]
            if own and cases:
                raise RegistryError(
                    f"{path}: {node.name} has both a task mark and a task parameter; give it one or the other"
                )
            if len(own) > 1:
                raise RegistryError(f"{path}: {node.name} is marked with {len(own)} tasks; a test grades one task")
            marks.append((node.name, tuple(dict.fromkeys(own or cases))))
    return tuple(marks)


def suite_modules(suite: Path) -> tuple[Path, ...]:
    """The test modules of a suite: the file itself, or the test_*.py files of
    the folder in name order (the order pytest collects and runs them)."""
    suite = Path(suite)
    return tuple(sorted(suite.glob("test_*.py"))) if suite.is_dir() else (suite,)


def suite_tasks(suite: Path) -> dict[str, tuple[str, ...]]:
    """Every test function of the suite (a file, or every test module of a
    folder) -> the tasks it grades: its task mark's, or those its `task`
    parameter lists; none for an unmarked test. Read from the source, never
    imported. A RegistryError if two modules define a test of the same name
    (the name is what the registry, the grade and the hints know a check by)."""
    tasks: dict[str, tuple[str, ...]] = {}
    where: dict[str, Path] = {}
    for module in suite_modules(suite):
        try:
            mtime = module.stat().st_mtime_ns
        except OSError as exc:
            raise RegistryError(f"cannot read the suite {module}: {exc.strerror or exc}") from None
        for test, owners in _suite_marks(module, mtime):
            if test in tasks:
                raise RegistryError(
                    f"{module}: {test} is defined in {where[test].name} too; give each check its own name"
                )
            tasks[test], where[test] = owners, module
    return tasks


def _suite_name(suite: Path) -> str:
    """How messages name a suite: test_toy.py, or kv_cache/ for a folder."""
    return f"{suite.name}/" if suite.is_dir() else suite.name


def _with_tests(tasks: tuple[Task, ...], suite: Path, where: str) -> tuple[Task, ...]:
    """tasks, each with the suite tests marked with it; a RegistryError for a
    test with no task, a mark naming no task, or a task with no test."""
    marks = suite_tasks(suite)
    named = _suite_name(suite)
    names = {t.name for t in tasks}
    unmarked = [test for test, owners in marks.items() if not owners]
    if unmarked:
        raise RegistryError(
            f'{where}: {named} has tests with no @pytest.mark.task("...") mark or task parameter: {", ".join(unmarked)}'
        )
    strays = sorted({o for owners in marks.values() for o in owners} - names)
    if strays:
        raise RegistryError(
            f"{where}: {named} marks tests with tasks the registry does not list: {', '.join(strays)} "
            f"(its tasks: {', '.join(sorted(names))})"
        )
    out = []
    for task in tasks:
        tests = tuple(test for test, owners in marks.items() if task.name in owners)
        held = [t for t in task.hidden if t in marks]
        if held:
            raise RegistryError(
                f"{where} task {task.name!r}: 'hidden_checks' names checks {named} holds: {', '.join(held)} "
                "(only a student edition lists them, for the checks `kata release` left out)"
            )
        if not tests and not task.hidden:
            raise RegistryError(
                f'{where} task {task.name!r}: no test in {named} is marked @pytest.mark.task("{task.name}")'
            )
        strays = [t for t, _ in task.check_hints if t not in tests]
        if strays:
            raise RegistryError(
                f"{where} task {task.name!r}: a check hint's 'tests' must name one or more of the task's own tests, "
                f"not {strays!r}"
            )
        out.append(dataclasses.replace(task, tests=tests))
    return tuple(out)


def registry_folder(path: Path | None = None) -> Path:
    """The registry's folder: `path`, else $KATA_REGISTRY, else the project's (REGISTRY_PATH), resolved."""
    return Path(path or os.environ.get("KATA_REGISTRY") or REGISTRY_PATH).resolve()


def kata_file(name: str, path: Path | None = None) -> Path:
    """Where the registry (registry_folder(path)) keeps kata `name`'s part: NAME/kata.toml."""
    return registry_folder(path) / name / KATA_FILE


def _read(path: Path) -> RegistryFile:
    """One file of the registry, format and shape checked; a RegistryError naming the file otherwise."""
    try:
        return _tables(path.read_bytes())
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{path} is not valid TOML: {exc}") from None
    except (ShapeError, RegistryError) as exc:
        raise RegistryError(f"{path}: {exc}") from None


@functools.lru_cache(maxsize=64)
def _tables(data: bytes) -> RegistryFile:
    """A registry file's tables (frozen), its format checked and its shape checked once per content."""
    tables = tomllib.loads(data.decode("utf-8"))
    written = tables.pop("format", None)
    if written != FORMAT:
        raise RegistryError(f"format = {written!r} is not one this grader reads; write format = {FORMAT} at the top")
    return check_shape(tables)


def _kata_files(folder: Path) -> list[Path]:
    """The kata.toml of each kata folder of the registry folder, by folder name; a RegistryError if there is none."""
    if not folder.is_dir():
        raise RegistryError(
            f"cannot read the registry {folder}: give a folder of kata folders, each with a {KATA_FILE}"
        )
    files = sorted(folder.glob(f"*/{KATA_FILE}"))
    if not files:
        raise RegistryError(f"the registry {folder} holds no kata: no folder in it has a {KATA_FILE}")
    return files


def load_registry(path: Path | None = None, suites_dir: Path | None = None) -> tuple[Kata, ...]:
    """Every kata in recommended order, or a RegistryError naming the problem.

    The registry is the folder grader/suites/ unless `path` or the
    KATA_REGISTRY environment variable names another (an instructor's own set
    of katas): each of its folders that holds a kata.toml is a kata, named as
    the folder is, with exactly one [[kata]] table. A kata's optional `suite`
    key is a path relative to its kata.toml, of a suite folder or a single
    test file; without one, its suite is the folder suites_dir/<name>/
    (its own folder unless told). Each task's tests are read from the suite's
    task marks when the suite exists (a missing suite fails when the kata is graded)."""
    folder = registry_folder(path)
    katas = []
    for file in _kata_files(folder):
        tables = _read(file)
        if tables.preset:
            raise RegistryError(f"{file}: a [[preset]] table goes in the registry's {PRESETS_FILE}, not a kata's file")
        entries = tables.kata
        if len(entries) != 1 or entries[0].name != file.parent.name:
            named = [e.name for e in entries]
            raise RegistryError(
                f"{file}: a kata's file holds one [[kata]] table, named {file.parent.name!r} as its folder; "
                f"this one holds {named}"
            )
        try:
            katas.append(_kata(entries[0], file, suites_dir or folder))
        except RegistryError as exc:
            raise RegistryError(f"{file}: {exc}") from None
    orders = [k.order for k in katas]
    if len(set(orders)) != len(orders) or min(orders) < 1:
        raise RegistryError(f"{folder}: kata orders must be distinct positive integers, got {orders}")
    return tuple(sorted(katas, key=lambda k: k.order))


def _kata(entry: KataTable, path: Path, suites_dir: Path | None) -> Kata:
    """One [[kata]] table as a Kata, its tasks' tests read from its suite; a RegistryError naming the problem."""
    name = entry.name
    where = f"kata {name!r}"
    tasks = tuple(_task(t, where) for t in entry.task)
    if not tasks:
        raise RegistryError(f"{where}: has no tasks")
    task_names = [t.name for t in tasks]
    if len(set(task_names)) != len(task_names):
        raise RegistryError(f"{where}: task names repeat: {task_names}")
    owners: dict[str, str] = {}
    for t in tasks:
        for f in t.functions:
            if f in owners:
                raise RegistryError(
                    f"{where}: function {f!r} is listed under tasks {owners[f]!r} and {t.name!r}; "
                    "each function belongs to exactly one task"
                )
            owners[f] = t.name
    suite = path.parent / entry.suite if entry.suite is not None else (suites_dir or SUITES_DIR) / name
    if suite.is_file() or suite.is_dir():
        tasks = _with_tests(tasks, suite, where)
    recap = entry.recap
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(recap) if f is not None]
    except ValueError:
        fields = None
    if fields is None or not all(f.isidentifier() for f in fields):
        raise RegistryError(f"{where}: recap must be a string whose {{placeholders}} name figure keys, got {recap!r}")
    return Kata(name, entry.title, entry.trade, entry.order, tasks, suite, recap.strip())


def load_presets(path: Path | None = None) -> tuple[Preset, ...]:
    """The ready-made interviews ([[preset]] tables of the registry folder's
    presets.toml; none without one), in the order it lists them, each checked
    against its kata; a RegistryError names the first problem."""
    katas = {k.name: k for k in load_registry(path)}
    path = registry_folder(path) / PRESETS_FILE
    if not path.is_file():
        return ()
    data = _read(path)
    if data.kata:
        raise RegistryError(f"{path}: holds only [[preset]] tables; a kata's table goes in its folder's {KATA_FILE}")
    try:
        presets = [_preset(entry, katas) for entry in data.preset]
        names = [p.name for p in presets]
        if len(set(names)) != len(names):
            raise RegistryError(f"preset names repeat: {names}")
    except RegistryError as exc:
        raise RegistryError(f"{path}: {exc}") from None
    return tuple(presets)


def _preset(entry: PresetTable, katas: dict[str, Kata]) -> Preset:
    """One [[preset]] table as a Preset, checked against its kata; a RegistryError naming the problem."""
    name = entry.name
    where = f"preset {name!r}"
    if not name or not all(c.isalnum() or c == "-" for c in name):
        raise RegistryError(f"{where}: a preset name uses only letters, digits and '-'")
    kata_name = entry.kata
    if kata_name not in katas:
        raise RegistryError(f"{where}: no kata named {kata_name!r}; the katas are: {', '.join(katas)}")
    kata = katas[kata_name]
    tasks = tuple(entry.tasks)
    known = [t.name for t in kata.tasks]
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise RegistryError(
            f"{where}: kata {kata_name!r} has no task {unknown[0]!r}; its tasks are: {', '.join(known)}"
        )
    chosen = [kata.task(t) for t in tasks] or list(kata.tasks)
    if not any(t.functions for t in chosen):
        raise RegistryError(f"{where}: none of its tasks lists 'functions', so it leaves nothing to write")
    minutes = entry.minutes
    if not 1 <= minutes <= MAX_MINUTES:
        raise RegistryError(f"{where}: minutes must be in [1, {MAX_MINUTES}], got {minutes}")
    difficulty = entry.difficulty
    if difficulty not in {d.value for d in Difficulty}:
        allowed = ", ".join(d.value for d in Difficulty)
        raise RegistryError(f"{where}: difficulty must be one of {allowed}, got {difficulty!r}")
    return Preset(name, entry.title, kata_name, tasks, minutes, Difficulty(difficulty))


def find_kata(name: str, katas: tuple[Kata, ...] | None = None) -> Kata:
    katas = load_registry() if katas is None else katas
    for k in katas:
        if k.name == name:
            return k
    raise ValueError(f"no kata named {name!r}; the katas are: {', '.join(k.name for k in katas)}")
