"""The kata registry: grader/katas.toml loaded into validated dataclasses.

The TOML file is the one place that names each kata, its tasks, their
points, the suite tests that belong to each task, and the hints.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

REGISTRY_PATH = Path(__file__).with_name("katas.toml")
SUITES_DIR = Path(__file__).with_name("suites")


class RegistryError(ValueError):
    """katas.toml is malformed; the message names the entry and the problem."""


@dataclass(frozen=True)
class Task:
    name: str  # short id used on the command line, e.g. "cache"
    title: str  # one line for the table and the checklist
    points: int  # what passing the task is worth
    tests: tuple[str, ...]  # names of the suite's test functions that grade it
    hints: tuple[str, ...]  # two or three questions, each a bigger nudge than the last


@dataclass(frozen=True)
class Kata:
    name: str  # module name in katas/, e.g. "kv_cache"
    title: str
    trade: str  # the trade the technique makes, e.g. "memory for time"
    order: int  # position in the recommended order, from 1
    tasks: tuple[Task, ...]
    suite: Path  # the grading suite, grader/suites/test_<name>.py unless the registry says otherwise

    @property
    def max_score(self) -> int:
        return sum(t.points for t in self.tasks)

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise ValueError(f"kata {self.name!r} has no task {name!r}; its tasks are: {', '.join(t.name for t in self.tasks)}")

    def task_of_test(self, test_name: str) -> Task | None:
        for t in self.tasks:
            if test_name in t.tests:
                return t
        return None


def _need(entry: dict, key: str, kind: type, where: str):
    if key not in entry:
        raise RegistryError(f"{where}: missing '{key}'")
    value = entry[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RegistryError(f"{where}: '{key}' must be a {kind.__name__}, got {value!r}")
    return value


def _task(entry: dict, where: str) -> Task:
    name = _need(entry, "name", str, where)
    where = f"{where} task {name!r}"
    points = _need(entry, "points", int, where)
    if points < 1:
        raise RegistryError(f"{where}: points must be >= 1, got {points}")
    tests = tuple(_need(entry, "tests", list, where))
    hints = tuple(_need(entry, "hints", list, where))
    if not tests or not all(isinstance(t, str) and t.startswith("test_") for t in tests):
        raise RegistryError(f"{where}: 'tests' must list one or more test function names (test_...)")
    if not 2 <= len(hints) <= 3 or not all(isinstance(h, str) and h.strip() for h in hints):
        raise RegistryError(f"{where}: give two or three non-empty hints, got {len(hints)}")
    return Task(name, _need(entry, "title", str, where), points, tests, hints)


def load_registry(path: Path | None = None) -> tuple[Kata, ...]:
    """Every kata in recommended order, or a RegistryError naming the problem.

    The registry is grader/katas.toml unless `path` or the KATA_REGISTRY
    environment variable names another (an instructor's own set of katas).
    A kata's optional `suite` key is a path relative to the registry file."""
    path = Path(path or os.environ.get("KATA_REGISTRY") or REGISTRY_PATH).resolve()
    with open(path, "rb") as f:
        data = tomllib.load(f)
    katas = []
    for entry in data.get("kata", []):
        name = _need(entry, "name", str, "kata")
        where = f"kata {name!r}"
        tasks = tuple(_task(t, where) for t in entry.get("task", []))
        if not tasks:
            raise RegistryError(f"{where}: has no tasks")
        task_names = [t.name for t in tasks]
        if len(set(task_names)) != len(task_names):
            raise RegistryError(f"{where}: task names repeat: {task_names}")
        tests = [x for t in tasks for x in t.tests]
        if len(set(tests)) != len(tests):
            raise RegistryError(f"{where}: a test is listed under two tasks")
        suite = path.parent / entry["suite"] if "suite" in entry else SUITES_DIR / f"test_{name}.py"
        katas.append(Kata(name, _need(entry, "title", str, where), _need(entry, "trade", str, where),
                          _need(entry, "order", int, where), tasks, suite))
    names = [k.name for k in katas]
    if len(set(names)) != len(names):
        raise RegistryError(f"kata names repeat: {names}")
    orders = [k.order for k in katas]
    if len(set(orders)) != len(orders) or min(orders, default=1) < 1:
        raise RegistryError(f"kata orders must be distinct positive integers, got {orders}")
    return tuple(sorted(katas, key=lambda k: k.order))


def find_kata(name: str, katas: tuple[Kata, ...] | None = None) -> Kata:
    katas = load_registry() if katas is None else katas
    for k in katas:
        if k.name == name:
            return k
    raise ValueError(f"no kata named {name!r}; the katas are: {', '.join(k.name for k in katas)}")
