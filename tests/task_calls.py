"""Which other tasks of a kata each task calls, read (never run) from the reference solution and the suite:
what the registry's `depends` must say (tests/suites/test_katas.py holds it to this).

A task calls another when one of its functions (the registry's `functions`) reaches a public function
or class of the other, in reference/solutions/KATA.py, directly or through private helpers; or when one
of its checks calls one, in the suite (a speed task, which writes nothing, calls what it times).

- A private helper that a public function returns the call of (`return _gating(probs, k, normalize)`)
  is that function's body, shared with others in the reference: reaching it is calling the function.
  Other private helpers (validators, small maths) are followed to what they call.
- An exception class carries no code that can be wrong: raising another task's is no call.
- A check that grades several tasks case by case (a `task` parameter) calls each task's own function
  in its case: it makes no task call another.
"""

from __future__ import annotations

import ast
from pathlib import Path

from grader.kata.registry import Kata, suite_modules, suite_tasks
from grader.kata.target import SOLUTIONS_DIR

from helpers import parsed


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def _is_exception(node: ast.AST) -> bool:
    """A class whose bases are exceptions by name (ValueError, Exception, ...)."""
    return isinstance(node, ast.ClassDef) and any(
        ast.unparse(b).split(".")[-1].endswith(("Error", "Exception")) for b in node.bases
    )


def _body_helper(node: ast.AST, defs: dict[str, ast.AST]) -> str | None:
    """The private helper a public function returns the call of, or None."""
    last = node.body[-1] if isinstance(node, ast.FunctionDef) else None
    if isinstance(last, ast.Return) and isinstance(last.value, ast.Call) and isinstance(last.value.func, ast.Name):
        name = last.value.func.id
        return name if name.startswith("_") and name in defs else None
    return None


def _solution(kata: Kata, solution: Path | None) -> dict[str, ast.AST]:
    return _definitions(parsed((solution or SOLUTIONS_DIR / f"{kata.name}.py").read_text(encoding="utf-8")))


def _owners(kata: Kata, defs: dict[str, ast.AST]) -> dict[str, str]:
    """Each public function and class of the solution, but its exception classes -> the task that writes it."""
    return {f: t.name for t in kata.tasks for f in t.functions if f in defs and not _is_exception(defs[f])}


def solution_calls(kata: Kata, solution: Path | None = None) -> dict[str, set[str]]:
    """task -> the other tasks whose functions its functions reach in the reference solution."""
    defs = _solution(kata, solution)
    owner = _owners(kata, defs)
    bodies = {h: f for f in owner if (h := _body_helper(defs[f], defs)) is not None}

    def reached(function: str) -> set[str]:
        out, seen, todo = set(), {function}, [function]
        while todo:
            for node in ast.walk(defs[todo.pop()]):
                name = node.id if isinstance(node, ast.Name) else None
                if name in owner:
                    out.add(name)
                elif name in bodies and bodies[name] != function:
                    out.add(bodies[name])
                elif name in defs and name.startswith("_") and name not in seen:
                    seen.add(name)
                    todo.append(name)
        return out

    calls = {}
    for task in kata.tasks:
        functions = set().union(*(reached(f) for f in task.functions if f in defs))
        calls[task.name] = {owner[f] for f in functions} - {task.name}
    return calls


def _kata_fixtures(trees: list[ast.Module]) -> set[str]:
    """The names the suite's checks know the kata module by: `kata`, and every fixture that returns
    `kata` or load_kata(...)."""
    names = {"kata"}
    for tree in trees:
        for node in tree.body:
            last = node.body[-1] if isinstance(node, ast.FunctionDef) else None
            value = last.value if isinstance(last, ast.Return) else None
            if (isinstance(value, ast.Name) and value.id == "kata") or (
                isinstance(value, ast.Call) and ast.unparse(value.func).endswith("load_kata")
            ):
                names.add(node.name)
    return names


def _suite_helpers(tree: ast.Module, package: str) -> dict[str, ast.AST]:
    """The module's own functions, and those it imports from its suite's other modules (checks, strategies)."""
    helpers = _definitions(tree)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + "."):
            path = Path(*node.module.split(".")).with_suffix(".py")
            theirs = _definitions(parsed((Path(__file__).parent.parent / path).read_text(encoding="utf-8")))
            helpers.update({a.name: theirs[a.name] for a in node.names if a.name in theirs})
    return helpers


def suite_calls(kata: Kata, solution: Path | None = None) -> dict[str, set[str]]:
    """task -> the other tasks whose functions its checks call (through the suite's helpers too)."""
    owner = _owners(kata, _solution(kata, solution))
    marks = suite_tasks(kata.suite)
    modules = suite_modules(kata.suite)
    trees = [parsed(m.read_text(encoding="utf-8")) for m in modules]
    conftest = Path(kata.suite) / "conftest.py"
    fixtures = _kata_fixtures(trees + ([parsed(conftest.read_text(encoding="utf-8"))] if conftest.is_file() else []))
    calls: dict[str, set[str]] = {t.name: set() for t in kata.tasks}
    for tree in trees:
        helpers = _suite_helpers(tree, f"grader.suites.{kata.name}")
        for test in (n for n in tree.body if isinstance(n, ast.FunctionDef) and len(marks.get(n.name, ())) == 1):
            (task,) = marks[test.name]
            seen, todo = {test.name}, [test]
            while todo:
                for node in ast.walk(todo.pop()):
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                        if node.value.id in fixtures and node.attr in owner:
                            calls[task].add(owner[node.attr])
                    elif isinstance(node, ast.Name) and node.id in helpers and node.id not in seen:
                        seen.add(node.id)
                        todo.append(helpers[node.id])
    return {task: found - {task} for task, found in calls.items()}


def called_tasks(kata: Kata, solution: Path | None = None) -> dict[str, set[str]]:
    """task -> every other task it calls, in the reference solution or in its checks."""
    by_code, by_checks = solution_calls(kata, solution), suite_calls(kata, solution)
    return {t.name: by_code[t.name] | by_checks[t.name] for t in kata.tasks}
