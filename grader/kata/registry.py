"""The kata registry: every kata's kata.toml loaded into the registry's types.

The registry is a folder of kata folders, grader/suites/ unless told another:
each folder holding a kata.toml is one kata (the folder named after it), and
presets.toml beside them holds the ready-made interviews (presets).
grader/suites/README.md lists the keys each file takes. A kata.toml is the one
place that names the kata, its tasks, their points, the hints, which other
tasks' functions each task calls (`depends`: a task that fails while one it
needs fails too is reported as failing because of it), and for
`kata interview`: the functions each task writes and its follow-up questions.
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
import contextlib
import functools
import hashlib
import json
import os
import sys
import tempfile
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
    "FORMAT",
    "KATA_FILE",
    "MAX_MINUTES",
    "PRESETS_FILE",
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
    "kata_file",
    "load_presets",
    "load_registry",
    "registry_folder",
    "suite_modules",
    "suite_tasks",
    "tomllib",
    "user_cache",
]

SUITES_DIR = Path(__file__).parent.parent / "suites"
REGISTRY_PATH = SUITES_DIR  # the project's registry: its folder of kata folders
KATA_FILE = "kata.toml"  # a kata's own part of the registry, in its folder
PRESETS_FILE = "presets.toml"  # the registry's ready-made interviews, beside the kata folders
FORMAT = 1  # the `format` these files are written in; another is refused


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


# A suite module's source -> its tests and their tasks: the registry is read by every command, and by
# tests and tools many times per process, from the same few dozen modules (or copies of them).
Marks = tuple[tuple[str, tuple[str, ...]], ...]
_MARKS: dict[str, Marks] = {}
_MARKS_KEPT = 512
# ... and by every process: parsing the suites was a third of a `kata` command's start (0.16 s of kata list's
# 0.5 s). The marks of each source are kept in the user's cache, under the source's SHA-256 (so a copy of a
# suite shares them, and an edit is read anew), as pip keeps its downloads: nothing is written beside the
# sources. A cache that cannot be read or written costs the parse, nothing else.
MARKS_CACHE = "llm-speed-katas/suite-marks"
MARKS_FORMAT = b"marks 1\n"  # hashed before the source: a grader that reads marks otherwise starts afresh


def _suite_marks(path: Path) -> Marks:
    """(test name, its tasks) for each test function of the suite module `path`, parsed once per source."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read the suite {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if source not in _MARKS:
        cache = marks_cache()
        stored = cache / f"{hashlib.sha256(MARKS_FORMAT + source.encode('utf-8')).hexdigest()}.json" if cache else None
        marks = _stored_marks(stored) if stored else None
        if marks is None:
            marks = _parsed_marks(path, source)
            if stored:
                _store_marks(stored, marks)
        if len(_MARKS) >= _MARKS_KEPT:
            _MARKS.clear()
        _MARKS[source] = marks
    return _MARKS[source]


def _parsed_marks(path: Path, source: str) -> Marks:
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise RegistryError(f"the suite {path} does not parse: {exc}") from None
    tests = [
        n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
    ]
    return tuple((test.name, _tasks_of(test, path)) for test in tests)


def user_cache(name: str) -> Path | None:
    """The folder `name` of the user's cache: $XDG_CACHE_HOME/name, else ~/.cache/name; None for a process
    with no home (a uid the system does not know, and no $HOME)."""
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / name
    except (RuntimeError, KeyError):
        return None


def marks_cache() -> Path | None:
    """The folder of kept suite marks: $XDG_CACHE_HOME/llm-speed-katas/suite-marks, else under ~/.cache (None
    without a home)."""
    return user_cache(MARKS_CACHE)


def _stored_marks(stored: Path) -> Marks | None:
    """The marks kept in `stored`, or None (none kept, or unreadable)."""
    try:
        data = json.loads(stored.read_text(encoding="utf-8"))
        return tuple((str(name), tuple(str(task) for task in tasks)) for name, tasks in data)
    except (OSError, ValueError, TypeError):
        return None


def _store_marks(stored: Path, marks: Marks) -> None:
    """Keep `marks` in `stored`: written whole, then renamed, so that a reader never sees half of them."""
    with contextlib.suppress(OSError):
        stored.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=stored.parent, prefix=stored.stem, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(marks, f)
            os.replace(temporary, stored)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


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
        for test, owners in _suite_marks(module):
            if test in tasks:
                raise RegistryError(
                    f"{module}: {test} is defined in {where[test].name} too; give each check its own name"
                )
            tasks[test], where[test] = owners, module
    return tasks


def registry_folder(path: Path | None = None) -> Path:
    """The registry's folder: `path`, else $KATA_REGISTRY, else the project's (REGISTRY_PATH), resolved."""
    return Path(path or os.environ.get("KATA_REGISTRY") or REGISTRY_PATH).resolve()


def kata_file(name: str, path: Path | None = None) -> Path:
    """Where the registry (registry_folder(path)) keeps kata `name`'s part: NAME/kata.toml."""
    return registry_folder(path) / name / KATA_FILE


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RegistryError(f"cannot read {path}: {exc.strerror or exc}") from None


def _read(path: Path) -> RegistryFile:
    """One file of the registry, its format and its top level checked; a RegistryError naming the file otherwise."""
    return _checked_file(path, _bytes(path))


# The registry is read by every command, and by `kata watch`, the page of `kata play --web`, the tests and tools many
# times in one process: what a file says is checked once per content (a file's tables are read, never changed).
@functools.lru_cache(maxsize=64)
def _checked_file(path: Path, data: bytes) -> RegistryFile:
    """_read's answer for the file `path` holding `data`."""
    try:
        tables = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{path} is not valid TOML: {exc}") from None
    written = tables.pop("format", None)
    if written != FORMAT:
        raise RegistryError(
            f"{path}: format = {written!r} is not one this grader reads; write format = {FORMAT} at the top"
        )
    return RegistryFile.from_table(tables, path)


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
        data = _bytes(file)
        tables = _checked_file(file, data)
        if tables.preset:
            raise RegistryError(f"{file}: a [[preset]] table goes in the registry's {PRESETS_FILE}, not a kata's file")
        named = [e.get("name") for e in tables.kata]
        if named != [file.parent.name]:
            raise RegistryError(
                f"{file}: a kata's file holds one [[kata]] table, named {file.parent.name!r} as its folder; "
                f"this one holds {named}"
            )
        suite = _suite(tables.kata[0], file, suites_dir or folder)
        try:
            marks = suite_tasks(suite) if suite.is_file() or suite.is_dir() else None
        except RegistryError as exc:
            raise RegistryError(f"{file}: kata {tables.kata[0].get('name')!r}: {exc}") from None
        katas.append(_kata(file, data, suite, None if marks is None else tuple(marks.items())))
    _once(folder, "kata orders", [k.order for k in katas])
    return tuple(sorted(katas, key=lambda k: k.order))


def _suite(table: dict, path: Path, suites_dir: Path) -> Path:
    """A kata's suite: its table's `suite` (a path relative to its file), else suites_dir/NAME/."""
    named = table.get("suite")
    if named is not None and not isinstance(named, str):
        raise RegistryError(f"{path}: kata {table.get('name')!r}: 'suite' must be a path relative to {path.name}")
    return path.parent / named if named is not None else suites_dir / str(table.get("name"))


@functools.lru_cache(maxsize=64)
def _kata(path: Path, data: bytes, suite: Path, marks: tuple[tuple[str, tuple[str, ...]], ...] | None) -> Kata:
    """The kata that the file `path`, holding `data`, describes, as the Kata `suite` grades, its tasks' tests
    those `marks` (suite_tasks's, as pairs) give them, or none while the suite is missing; a RegistryError
    naming the file and the problem otherwise. Checked once per file, content, suite and marks (a Kata is
    frozen)."""
    return Kata.from_table(_checked_file(path, data).kata[0], path, suite, None if marks is None else dict(marks))


def _once(path: Path, what: str, values: list) -> None:
    """A RegistryError naming the file unless no two of values are equal."""
    if len(set(values)) != len(values):
        raise RegistryError(f"{path}: {what} repeat: {values}")


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
    presets = tuple(Preset.from_table(table, path, katas) for table in data.preset)
    _once(path, "preset names", [p.name for p in presets])
    return presets


def find_kata(name: str, katas: tuple[Kata, ...] | None = None) -> Kata:
    katas = load_registry() if katas is None else katas
    for k in katas:
        if k.name == name:
            return k
    raise ValueError(f"no kata named {name!r}; the katas are: {', '.join(k.name for k in katas)}")
