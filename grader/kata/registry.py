"""The kata registry: grader/kata/katas.toml loaded into the registry's types.

The TOML file is the one place that names each kata, its tasks, their
points, the hints, which other tasks' functions each task calls (`depends`:
a task that fails while one it needs fails too is reported as failing because
of it), and for `kata interview`: the functions each task writes, its
follow-up questions and the ready-made interviews (presets).
Each table becomes its type of grader.kata.registry_schema (Kata, Task,
Preset, ...: frozen pydantic models that hold every rule the registry obeys)
once: a typo, a wrong type or a broken rule is refused with the file, the
kata (and task), the key and what is allowed.

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
import functools
import os
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from grader.kata.registry_schema import (
    MAX_MINUTES,
    Difficulty,
    Kata,
    Preset,
    Question,
    RegistryError,
    RegistryFile,
    Rubric,
    Task,
)

__all__ = [  # the registry's types are imported from here, beside what loads them
    "MAX_MINUTES",
    "REGISTRY_PATH",
    "SUITES_DIR",
    "Difficulty",
    "Kata",
    "Preset",
    "Question",
    "RegistryError",
    "Rubric",
    "Task",
    "find_kata",
    "load_presets",
    "load_registry",
    "suite_modules",
    "suite_tasks",
    "tomllib",
]

REGISTRY_PATH = Path(__file__).with_name("katas.toml")
SUITES_DIR = Path(__file__).parent.parent / "suites"


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
    tests = [
        n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
    ]
    return tuple((test.name, _tasks_of(test, path)) for test in tests)


def _tasks_of(test: ast.FunctionDef | ast.AsyncFunctionDef, path: Path) -> tuple[str, ...]:
    """The tasks a test function of the suite module `path` grades: its task mark's, or its task parameter's."""
    own = [t for t in map(_task_mark, test.decorator_list) if t is not None]
    cases = [t for d in test.decorator_list for t in _task_cases(d, f"{path}: {test.name}")]
    if own and cases:
        raise RegistryError(f"{path}: {test.name} has both a task mark and a task parameter; give it one or the other")
    if len(own) > 1:
        raise RegistryError(f"{path}: {test.name} is marked with {len(own)} tasks; a test grades one task")
    return tuple(dict.fromkeys(own or cases))


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


def _registry_file(path: Path | None) -> tuple[Path, RegistryFile]:
    """The registry's path and its tables; a RegistryError naming the file otherwise."""
    path = Path(path or os.environ.get("KATA_REGISTRY") or REGISTRY_PATH).resolve()
    try:
        return path, RegistryFile.from_table(_parsed(path.read_bytes()), path)
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{path} is not valid TOML: {exc}") from None


@functools.lru_cache(maxsize=16)
def _parsed(data: bytes) -> dict:
    """A registry file's tables, parsed once per content (read, never changed: the models copy what they keep)."""
    return tomllib.loads(data.decode("utf-8"))


def load_registry(path: Path | None = None, suites_dir: Path | None = None) -> tuple[Kata, ...]:
    """Every kata in recommended order, or a RegistryError naming the problem.

    The registry is grader/kata/katas.toml unless `path` or the KATA_REGISTRY
    environment variable names another (an instructor's own set of katas).
    A kata's optional `suite` key is a path relative to the registry file,
    of a suite folder or a single test file; without one, its suite is the
    folder suites_dir/<name>/ (grader/suites/ unless told). Each task's tests are read from the suite's task marks
    when the suite exists (a missing suite fails when the kata is graded)."""
    path, data = _registry_file(path)
    katas = [_kata(table, path, _suite(table, path, suites_dir or SUITES_DIR)) for table in data.kata]
    _once(path, "kata names", [k.name for k in katas])
    _once(path, "kata orders", [k.order for k in katas])
    return tuple(sorted(katas, key=lambda k: k.order))


def _suite(table: dict, path: Path, suites_dir: Path) -> Path:
    """A kata's suite: its table's `suite` (a path relative to the registry file), else suites_dir/NAME/."""
    named = table.get("suite")
    if named is not None and not isinstance(named, str):
        raise RegistryError(f"{path}: kata {table.get('name')!r}: 'suite' must be a path relative to {path.name}")
    return path.parent / named if named is not None else suites_dir / str(table.get("name"))


def _kata(table: dict, path: Path, suite: Path) -> Kata:
    """A kata's table, read from `path`, as the Kata `suite` grades, its tasks' tests read from the suite's
    marks when the suite exists; a RegistryError naming the file and the problem otherwise."""
    try:
        marks = suite_tasks(suite) if suite.is_file() or suite.is_dir() else None
    except RegistryError as exc:
        raise RegistryError(f"{path}: kata {table.get('name')!r}: {exc}") from None
    return Kata.from_table(table, path, suite, marks)


def _once(path: Path, what: str, values: list) -> None:
    """A RegistryError naming the file unless no two of values are equal."""
    if len(set(values)) != len(values):
        raise RegistryError(f"{path}: {what} repeat: {values}")


def load_presets(path: Path | None = None) -> tuple[Preset, ...]:
    """The ready-made interviews ([[preset]] tables) of the registry, in the
    order it lists them, each checked against its kata; a RegistryError
    names the first problem."""
    katas = {k.name: k for k in load_registry(path)}
    path, data = _registry_file(path)
    presets = tuple(Preset.from_table(table, path, katas) for table in data.preset)
    _once(path, "preset names", [p.name for p in presets])
    return presets


def find_kata(name: str, katas: tuple[Kata, ...] | None = None) -> Kata:
    katas = load_registry() if katas is None else katas
    for k in katas:
        if k.name == name:
            return k
    raise ValueError(f"no kata named {name!r}; the katas are: {', '.join(k.name for k in katas)}")
