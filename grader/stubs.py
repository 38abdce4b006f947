"""Learner stubs, made from the reference solutions.

A stub is its reference solution with every function body replaced by
`raise NotImplementedError` (docstrings, signatures, decorators, classes,
imports and constants kept) and the private helpers, functions and methods
whose names start with one underscore, removed. `kata reset` writes this text, and a
project test keeps katas/ equal to it.

    python -m grader.stubs [KATA ...]          # rewrite the stubs in katas/ (all by default)
    python -m grader.stubs --check [KATA ...]  # exit 1 if any stub differs
"""

from __future__ import annotations

import ast
import sys

from grader.target import KATAS_DIR, SOLUTIONS_DIR


def _is_private_helper(node: ast.stmt) -> bool:
    name = getattr(node, "name", "")
    return (
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and name.startswith("_")
        and not name.startswith("__")
    )


def _first_line(node: ast.stmt) -> int:
    """1-based first line of a definition, decorators included."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def make_stub(source: str) -> str:
    """The stub text for a reference solution's source."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, list[str]]] = []  # (start, end) 0-based half-open, replacement

    classes = [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)]
    for node in tree.body + [m for c in classes for m in c.body]:
        if _is_private_helper(node):
            start, end = _first_line(node) - 1, node.end_lineno
            while end < len(lines) and not lines[end].strip():
                end += 1  # swallow the blank lines that followed it
            edits.append((start, end, []))

    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_private_helper(node):
            continue
        if node in tree.body or any(node in c.body for c in classes):
            body = node.body
            keep = 1 if (isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
                         and isinstance(body[0].value.value, str)) else 0
            if keep == len(body) and keep:
                first_stmt = None
            else:
                first_stmt = body[keep]
            if first_stmt is None:
                continue
            if first_stmt.lineno == node.lineno:
                raise ValueError(f"line {node.lineno}: put the body of {node.name} on its own lines")
            indent = " " * first_stmt.col_offset
            edits.append((first_stmt.lineno - 1, body[-1].end_lineno, [f"{indent}raise NotImplementedError\n"]))

    # Apply from the bottom up so earlier line numbers stay valid; nested
    # functions fall inside their parent's replaced body and are skipped.
    edits.sort(key=lambda e: e[0], reverse=True)
    applied_from = len(lines) + 1
    for start, end, repl in edits:
        if end > applied_from:
            continue
        lines[start:end] = repl
        applied_from = start
    return "".join(lines)


def stub_for(kata: str) -> str:
    return make_stub((SOLUTIONS_DIR / f"{kata}.py").read_text(encoding="utf-8"))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    names = [a for a in argv if not a.startswith("-")]
    status = 0
    for solution in sorted(SOLUTIONS_DIR.glob("[!_]*.py")):
        if names and solution.stem not in names:
            continue
        stub = stub_for(solution.stem)
        path = KATAS_DIR / solution.name
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != stub:
                print(f"{path} differs from the stub made from {solution}")
                status = 1
        else:
            path.write_text(stub, encoding="utf-8")
            print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
