"""The house's sizes, short enough to read in one sitting: no function over MAX_FUNCTION_LINES lines and no
module over MAX_MODULE_LINES in the checkout's tracked Python files outside tests/ (a kata's stub and its
reference solution, each a whole exercise, may be longer), and docs/performance.md at most
MAX_PERFORMANCE_PAGE_LINES. A function counts from its `def` line to its last, docstring and nested
functions included; decorators do not count."""

from __future__ import annotations

import ast
import subprocess
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600
MAX_PERFORMANCE_PAGE_LINES = 250

# What the measures leave out, as globs of paths from the checkout's root: the project's tests, and for the
# module measure the kata stubs and the reference solutions.
NOT_MEASURED = ("tests/*",)
LONG_MODULES_ALLOWED = ("katas/*.py", "reference/solutions/*.py")
# Modules others are splitting right now, allowed over MAX_MODULE_LINES until that work lands. Each entry is
# a glob of paths from the checkout's root; remove it once its module is short (the goal: an empty tuple).
LONG_MODULES_BEING_SPLIT = ()
# Functions allowed over MAX_FUNCTION_LINES while their module is rewritten, as "path::qualified name".
LONG_FUNCTIONS_BEING_SPLIT = ()


def python_files(*folders: str, root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in folders for p in (root / folder).rglob("*.py"))


def measured_files() -> list[str]:
    """The checkout's git-tracked Python files, as paths from its root, but those NOT_MEASURED."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    return [path for path in listed if path and not any(fnmatch(path, pattern) for pattern in NOT_MEASURED)]


def function_lengths(path: Path) -> dict[str, int]:
    """Each function and method of a module (nested ones too) -> its lines, by qualified name (Class.method)."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "")
    return lengths


def long_functions(paths: list[Path], root: Path = ROOT) -> list[str]:
    """'path::name (N lines)' for every function over MAX_FUNCTION_LINES in the modules at paths."""
    return [
        f"{path.relative_to(root).as_posix()}::{name} ({lines} lines)"
        for path in paths
        for name, lines in function_lengths(path).items()
        if lines > MAX_FUNCTION_LINES
    ]


def long_modules(paths: list[Path], root: Path = ROOT) -> list[str]:
    """'path (N lines)' for every module at paths over MAX_MODULE_LINES."""
    found = []
    for path in paths:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(root).as_posix()} ({lines} lines)")
    return found


def test_no_function_outside_tests_is_over_60_lines():
    allowed = set(LONG_FUNCTIONS_BEING_SPLIT)
    found = long_functions([ROOT / path for path in measured_files()])
    offenders = [one for one in found if one.split(" (")[0] not in allowed]
    assert offenders == [], f"split these functions into pieces of at most {MAX_FUNCTION_LINES} lines: {offenders}"


def test_no_module_outside_tests_is_over_600_lines_but_kata_stubs_and_solutions():
    allowed = LONG_MODULES_ALLOWED + LONG_MODULES_BEING_SPLIT
    paths = [path for path in measured_files() if not any(fnmatch(path, pattern) for pattern in allowed)]
    offenders = long_modules([ROOT / path for path in paths])
    assert offenders == [], (
        f"split these modules by concept into files of at most {MAX_MODULE_LINES} lines: {offenders}"
    )


def test_the_measures_cover_every_folder_of_code_but_tests():
    assert {path.split("/")[0] for path in measured_files() if "/" in path} >= {
        "benchmarks",
        "grader",
        "katas",
        "reference",
        "tools",
    }
    assert not any(path.startswith("tests/") for path in measured_files())


def test_docs_performance_md_is_at_most_250_lines():
    lines = len((ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_PERFORMANCE_PAGE_LINES, (
        f"docs/performance.md is {lines} lines: keep today's figures in at most {MAX_PERFORMANCE_PAGE_LINES}"
    )


def _function(name: str, lines: int, indent: str = "") -> str:
    """The text of a function `name` of exactly `lines` lines, at indent."""
    return f"{indent}def {name}():\n" + "".join(f"{indent}    x = {i}\n" for i in range(lines - 1))


def test_the_measure_flags_a_61_line_function_and_a_601_line_module_and_nothing_shorter(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "short.py").write_text(_function("fits", 60))
    outer = "def outer():\n" + _function("inner", 5, "    ") + "    y = 1\n" * 54  # 60 lines with its nested one
    text = "class Room:\n" + _function("method", 61, "    ") + outer
    module = tmp_path / "pkg" / "long.py"
    module.write_text(text + "# padding\n" * (MAX_MODULE_LINES - len(text.splitlines())))
    assert function_lengths(module) == {"Room.method": 61, "outer": 60, "outer.inner": 5}
    paths = python_files("pkg", root=tmp_path)
    assert long_functions(paths, root=tmp_path) == ["pkg/long.py::Room.method (61 lines)"]
    assert long_modules(paths, root=tmp_path) == []
    module.write_text(module.read_text() + "# one line too many\n")
    assert long_modules(paths, root=tmp_path) == [f"pkg/long.py ({MAX_MODULE_LINES + 1} lines)"]
