"""Learner stubs, made from the reference solutions.

A stub is its reference solution with every function body replaced by
`raise NotImplementedError` (docstrings, signatures, decorators, classes,
imports and constants kept) and the private helpers, functions and methods
whose names start with one underscore, removed. The solution is the one
source: katas/ holds the learner's copy (which they edit; while a file there
is still a stub, a project test keeps it equal to this text, and the project's
tests never read a learner's code there), and `stub_for` makes the untouched stub
(what `kata reset` restores) from the solution again. Where the solutions
are absent (a student edition, or a wheel built from one), it reads the
copy `kata release` wrote to grader/kata/stub_files/ instead; the project
itself never checks that copy in. `kata interview` asks for a partial
stub: only some functions and classes opened, the rest left as written.

    python -m grader.kata.stubs [KATA ...]          # rewrite katas/KATA.py from the solutions (all by default)
    python -m grader.kata.stubs --check [KATA ...]  # exit 1 if any of them differs
"""

from __future__ import annotations

import argparse
import ast
import functools
import sys
from pathlib import Path
from typing import Callable, Collection

from grader.kata.target import KATAS_DIR, SOLUTIONS_DIR


def _is_private_helper(node: ast.stmt) -> bool:
    name = getattr(node, "name", "")
    return (
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and name.startswith("_") and not name.startswith("__")
    )


def _first_line(node: ast.stmt) -> int:
    """1-based first line of a definition, decorators included."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def make_stub(source: str, only: Collection[str] | None = None) -> str:
    """The stub text for a reference solution's source.

    only: the names of the top-level functions and classes to open (their
    bodies replaced, their private methods removed); the others stay as the
    solution wrote them, with the private helpers they use. None opens
    everything and removes every private helper: the learner's stub.
    """
    return _made_stub(source, None if only is None else frozenset(only))


@functools.lru_cache(maxsize=32)
def _made_stub(source: str, only: frozenset[str] | None) -> str:
    """make_stub's text, made once per source and set of names (a pure function of both)."""
    if only is None:
        return _stub(source, lambda name: True, lambda name: True).rstrip("\n") + "\n"  # no blank lines a helper left
    opened = set(only)
    text = _stub(source, lambda name: name in opened, lambda name: False)
    needed = _helpers_in_use(_tree(text))
    return _stub(text, lambda name: False, lambda name: name not in needed).rstrip("\n") + "\n"


def _helpers_in_use(tree: ast.Module) -> set[str]:
    """The private helpers that the module's other statements use, directly or through another helper."""
    helpers = {node.name: node for node in tree.body if _is_private_helper(node)}

    def names(node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in helpers}

    todo = set().union(*(names(node) for node in tree.body if not _is_private_helper(node)))
    used: set[str] = set()
    while todo:
        name = todo.pop()
        used.add(name)
        todo |= names(helpers[name]) - used
    return used


@functools.lru_cache(maxsize=32)
def _tree(source: str) -> ast.Module:
    """source's syntax tree, parsed once per text: the stub and each interview's partial stub of a kata start from
    the same solution (nothing here changes a tree)."""
    return ast.parse(source)


Edit = tuple[int, int, list[str]]  # lines [start, end) (0-based) and what replaces them


def _stub(source: str, opened: Callable[[str], bool], dropped: Callable[[str], bool]) -> str:
    """source with the bodies of the opened top-level functions and classes
    replaced and the dropped private helpers (and the opened classes' private methods) removed."""
    tree = _tree(source)
    lines = source.splitlines(keepends=True)
    classes = [
        c
        for top in tree.body
        if isinstance(top, ast.ClassDef) and opened(top.name)
        for c in ast.walk(top)
        if isinstance(c, ast.ClassDef)
    ]  # with the classes they hold
    members = [m for c in classes for m in c.body]
    gone = [n for n in tree.body if _is_private_helper(n) and dropped(n.name)]
    gone += [m for m in members if _is_private_helper(m)]
    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and opened(n.name)]
    emptied = [_emptied(node) for node in functions + members]
    return _applied(lines, [_removed(node, lines) for node in gone] + [e for e in emptied if e])


def _removed(node: ast.stmt, lines: list[str]) -> Edit:
    """The edit that removes a definition, decorators and the blank lines after it included."""
    start, end = _first_line(node) - 1, node.end_lineno
    while end < len(lines) and not lines[end].strip():
        end += 1
    return start, end, []


def _emptied(node: ast.stmt) -> Edit | None:
    """The edit that replaces a public function's body (after its docstring) by `raise NotImplementedError`;
    None for anything else, or a function that is a docstring alone."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_private_helper(node):
        return None
    body = node.body
    documented = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    keep = 1 if documented and isinstance(body[0].value.value, str) else 0
    if keep == len(body):
        return None
    first = body[keep]
    if first.lineno == node.lineno:
        raise ValueError(f"line {node.lineno}: put the body of {node.name} on its own lines")
    return first.lineno - 1, body[-1].end_lineno, [f"{' ' * first.col_offset}raise NotImplementedError\n"]


def _applied(lines: list[str], edits: list[Edit]) -> str:
    """The text of lines with the edits made, from the bottom up (so earlier line numbers stay valid); an edit
    inside one made already (a method of a removed helper class) is left out."""
    applied_from = len(lines) + 1
    for start, end, replacement in sorted(edits, key=lambda e: e[0], reverse=True):
        if end <= applied_from:
            lines[start:end] = replacement
            applied_from = start
    return "".join(lines)


STUB_FILES = Path(__file__).with_name("stub_files")  # the stubs `kata release` stores in an edition without solutions


def stub_for(kata: str) -> str:
    """The untouched stub of kata: made from its reference solution, or, where the
    solutions are absent (a student edition), the copy stored in grader/kata/stub_files/.
    ValueError names the kata when neither is there."""
    if not kata.isidentifier():
        raise ValueError(f"a kata's name is a Python identifier, not {kata!r}")
    if (SOLUTIONS_DIR / f"{kata}.py").is_file():
        return stub_from_solution(kata)
    stored = STUB_FILES / f"{kata}.py"
    if not stored.is_file():
        raise ValueError(f"kata {kata!r} has no reference solution in {SOLUTIONS_DIR} and no stored stub {stored}")
    return stored.read_text(encoding="utf-8")


def stub_from_solution(kata: str) -> str:
    """The stub made from kata's reference solution (which only the full project ships)."""
    return make_stub((SOLUTIONS_DIR / f"{kata}.py").read_text(encoding="utf-8"))


def main(argv: list[str]) -> int:
    solutions = sorted(SOLUTIONS_DIR.glob("[!_]*.py"))
    parser = argparse.ArgumentParser(
        prog="python -m grader.kata.stubs",
        description="Write each kata's stub, made from its reference solution, over katas/KATA.py (your work there "
        "is replaced with no backup; `kata reset KATA` keeps one), or with --check only say which differ (exit 1).",
    )
    parser.add_argument("katas", nargs="*", metavar="KATA", help="these katas only (default: all)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a stub differs")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.katas) - {s.stem for s in solutions})
    if unknown:
        parser.error(f"no reference solution of {', '.join(unknown)}; katas: {', '.join(s.stem for s in solutions)}")
    status = 0
    for solution in solutions:
        if args.katas and solution.stem not in args.katas:
            continue
        stub, path = stub_from_solution(solution.stem), KATAS_DIR / solution.name
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != stub:
                print(f"{path} differs from the stub made from {solution}")
                status = 1
        else:
            path.write_text(stub, encoding="utf-8")
            print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
