"""What the student edition takes out of a suite: the checks of a held-back
task and the hidden checks (hidden_checks), and every helper, oracle,
strategy, fixture and class that only they use, in whichever module of the
suite it is defined (a suite folder's test modules, checks.py, oracles.py,
strategies.py, conftest.py; or a single-file suite). Read from the source,
never imported.

A check is hidden when it needs an answer to compare with: when it reaches,
through the helpers, strategies and fixtures it uses, a definition of the
suite's oracles.py or code that loads the speed task's baseline, or when it
is marked @pytest.mark.needs (it compares with an optional package's answer:
gguf's encoders, which the edition's dev extra installs), unless it is
marked @pytest.mark.public (what it uses computes no answer a student could
paste: a count, or a baseline the model package already ships; the project's
tests paste every function the edition ships into every task to hold that).
Every other check is public: properties, shapes, refusals, comparisons with
the reference model the edition ships anyway.

A definition stays when anything that stays uses it: a released check, a
module-level statement of a module that ships, or another definition that
stays. A name counts as used where it is read, is a parameter (a fixture),
is a string (pytest.mark.usefixtures) or is an attribute of a suite module
imported whole. An import of a name that goes goes with it.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.kata.registry import suite_modules
from grader.suites.common import HIDDEN_BASELINE

_FILE_CONSTANTS = {"HIDDEN_BASELINE": HIDDEN_BASELINE}  # grader.suites.common's names of the baseline files

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
Ref = tuple[str, str]  # (module stem, name): a top-level definition of the suite
ORACLES = "oracles"  # the module of a suite folder that computes expected answers


@dataclass
class _Module:
    path: Path
    text: str  # as read, the text the tree was parsed from
    tree: ast.Module
    defs: dict[str, ast.stmt] = field(default_factory=dict)
    names: dict[str, Ref] = field(default_factory=dict)  # local name -> the suite definition it imports
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> the suite module it imports whole


def suite_texts(suite: Path, tests: set[str]) -> dict[Path, str | None]:
    """Every module of a suite (a folder's .py files, or the file) -> its text in the
    edition without the held-back `tests` and the code only they use; None for a test
    module whose every check is held back (it ships nothing)."""
    modules, uses = _modules(Path(suite))
    test_modules = {p.stem for p in suite_modules(suite)}
    gone = {stem for stem in test_modules if _only_checks_of(modules[stem], tests)}
    dropped = {(stem, name) for stem, m in modules.items() for name in m.defs if name in tests or stem in gone}
    dropped |= {ref for stem in gone for node in _statements(modules[stem]) for ref in _uses(modules, stem, node)}
    dropped = _reached(uses, dropped)
    kept = {ref for ref in uses if ref not in dropped}
    kept |= {
        ref
        for stem in modules.keys() - gone
        for node in _statements(modules[stem])
        for ref in _uses(modules, stem, node)
    }
    removed = dropped - _reached(uses, kept)
    out: dict[Path, str | None] = {}
    for stem, m in modules.items():
        if stem in gone:
            out[m.path] = None
        else:
            out[m.path] = _without(m.text, m, {name for s, name in removed if s == stem}, removed)
    return out


def hidden_checks(suite: Path) -> dict[str, str]:
    """The suite's hidden checks: test name -> what answer it needs ("oracles._route64",
    "the baseline"), in the suite's order. Public checks are not listed."""
    return dict(_hidden(Path(suite), _texts(Path(suite))))


@functools.lru_cache(maxsize=32)
def _hidden(suite: Path, texts: tuple[tuple[Path, str], ...]) -> tuple[tuple[str, str], ...]:
    modules, uses = _parsed(suite, texts)
    answers = {
        ref: "the baseline" if _calls_baseline(modules[ref[0]].defs[ref[1]]) else f"{ref[0]}.{ref[1]}"
        for ref in uses
        if ref[0] == ORACLES or _calls_baseline(modules[ref[0]].defs[ref[1]])
    }
    hidden = {}
    for path in suite_modules(suite):
        for name, node in modules[path.stem].defs.items():
            if name.startswith("test") and isinstance(node, ast.FunctionDef) and not _marked_public(node):
                needs = sorted({answers[ref] for ref in _reached(uses, {(path.stem, name)}) if ref in answers})
                needs = _packages_needed(node) + needs
                if needs:
                    hidden[name] = needs[0]
    return tuple(hidden.items())


def _packages_needed(node: ast.FunctionDef) -> list[str]:
    """The optional packages a check is marked @pytest.mark.needs("...") with: it compares with
    their answers (gguf's llama.cpp encoders), which the edition's pyproject names."""
    return [
        f"the package {ast.literal_eval(d.args[0])}"
        for d in node.decorator_list
        if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("mark.needs") and d.args
    ]


def _marked_public(node: ast.FunctionDef) -> bool:
    """Whether a check is decorated @pytest.mark.public."""
    return any(ast.unparse(d) in ("pytest.mark.public", "mark.public") for d in node.decorator_list)


def _calls_baseline(node: ast.AST, file: str | None = None) -> bool:
    """Whether node calls load_baseline; with file, a call whose arguments name that file (by its name in a
    string, or by the constant grader.suites.common holds it in)."""
    return any(
        isinstance(sub, ast.Call) and _called_name(sub) == "load_baseline" and (file is None or _names(sub, file))
        for sub in ast.walk(node)
    )


def _names(call: ast.Call, file: str) -> bool:
    return any(
        (isinstance(n, ast.Constant) and n.value == file)
        or (isinstance(n, ast.Name) and _FILE_CONSTANTS.get(n.id) == file)
        for n in ast.walk(call)
    )


def _called_name(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")


@functools.lru_cache(maxsize=256)  # an edition asks of each shipped module, and a class's editions ship the same
def loads_baseline(source: str, file: str | None = None) -> bool:
    """Whether a module's code calls load_baseline (an import of the name alone does not count); with
    file, whether it loads that file (common.HIDDEN_BASELINE, say)."""
    return _calls_baseline(ast.parse(source), file)


def without_functions(source: str, names: set[str]) -> str:
    """source without its top-level functions and classes called `names` (decorators included)."""
    if not names:
        return source
    return _delete(
        source, [node for node in ast.parse(source).body if isinstance(node, DEFINITIONS) and node.name in names]
    )


def without_unused_imports(source: str) -> str:
    """source without the imports nothing in it uses (`from __future__` too, once nothing but
    imports is left): what is left of a student edition's oracles.py, whose imports would still
    point at the parts the removed oracles were made of."""
    tree = ast.parse(source)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    bare = not any(isinstance(n, (*DEFINITIONS, ast.Assign, ast.AnnAssign)) for n in tree.body)
    deleted, rewritten = [], {}
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if getattr(node, "module", "") == "__future__":
            if bare:
                deleted.append(node)
            continue
        kept = [a for a in node.names if (a.asname or a.name).split(".")[0] in used]
        if not kept:
            deleted.append(node)
        elif len(kept) < len(node.names):
            node.names = kept
            rewritten[node.lineno] = (node, ast.unparse(node) + "\n")
    text = _delete(source, deleted, rewritten)
    return re.sub(r"\n{3,}", "\n\n\n", text).rstrip("\n") + "\n"


def _modules(suite: Path) -> tuple[dict[str, _Module], dict[Ref, set[Ref]]]:
    """Every module of a suite (a folder's .py files, or the file), parsed, by stem, and
    the suite definitions each top-level definition uses: the files read every time, the
    rest worked out once per text (callers only read what comes back)."""
    return _parsed(suite, _texts(suite))


def _texts(suite: Path) -> tuple[tuple[Path, str], ...]:
    paths = sorted(suite.glob("*.py")) if suite.is_dir() else [suite]
    return tuple((p, p.read_text(encoding="utf-8")) for p in paths)


@functools.lru_cache(maxsize=32)
def _parsed(suite: Path, texts: tuple[tuple[Path, str], ...]) -> tuple[dict[str, _Module], dict[Ref, set[Ref]]]:
    modules = {path.stem: _parse(path, text, suite) for path, text in texts}
    uses = {(stem, name): _uses(modules, stem, node) for stem, m in modules.items() for name, node in m.defs.items()}
    return modules, uses


def _parse(path: Path, text: str, suite: Path) -> _Module:
    """A module of the suite, with what it defines and what of the suite it imports."""
    m = _Module(path, text, ast.parse(text))
    package = Path(suite).name if Path(suite).is_dir() else None
    for node in m.tree.body:
        if isinstance(node, DEFINITIONS):
            m.defs[node.name] = node
        elif isinstance(node, ast.ImportFrom) and package:
            parts = (node.module or "").split(".")
            for alias in node.names:
                local = alias.asname or alias.name
                if node.level == 0 and parts[-1] == package:  # from grader.suites.KATA import oracles
                    m.aliases[local] = alias.name
                elif (node.level == 1 and len(parts) == 1) or (node.level == 0 and parts[-2:-1] == [package]):
                    m.names[local] = (parts[-1], alias.name)  # from grader.suites.KATA.oracles import x
    return m


def _statements(m: _Module) -> list[ast.stmt]:
    """A module's top-level statements but its definitions and imports."""
    return [n for n in m.tree.body if not isinstance(n, (*DEFINITIONS, ast.Import, ast.ImportFrom))]


def _uses(modules: dict[str, _Module], stem: str, node: ast.AST) -> set[Ref]:
    """The suite definitions that node, in module stem, uses."""
    m, found = modules[stem], set()
    conftest = modules.get("conftest")
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in m.aliases:
            found.add((m.aliases[sub.value.id], sub.attr))
            continue
        name = _name_of(sub)
        if name is None:
            continue
        if name in m.defs:
            found.add((stem, name))
        elif name in m.names:
            found.add(m.names[name])
        elif conftest is not None and name in conftest.defs:  # a fixture, by its parameter's name
            found.add(("conftest", name))
    return {(s, n) for s, n in found if s in modules and n in modules[s].defs}


def _name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _reached(uses: dict[Ref, set[Ref]], start: set[Ref]) -> set[Ref]:
    """start and every definition reachable from it through uses."""
    seen, stack = set(start), list(start)
    while stack:
        for ref in uses.get(stack.pop(), set()) - seen:
            seen.add(ref)
            stack.append(ref)
    return seen


def _only_checks_of(m: _Module, tests: set[str]) -> bool:
    """Whether every test function of a test module is one of `tests` (and it has one)."""
    mine = {name for name, node in m.defs.items() if isinstance(node, ast.FunctionDef) and name.startswith("test")}
    return bool(mine) and mine <= tests


def _without(text: str, m: _Module, names: set[str], removed: set[Ref]) -> str:
    """text without the definitions `names`, and without its imports of removed definitions
    (an import that names only those goes whole; one that names others too is rewritten)."""
    if not names and not any(ref in removed for ref in m.names.values()):
        return text
    deleted = [m.defs[name] for name in names]
    rewritten = {}
    for node in m.tree.body:
        if isinstance(node, ast.ImportFrom):
            keep = [a for a in node.names if m.names.get(a.asname or a.name) not in removed]
            if not keep:
                deleted.append(node)
            elif len(keep) < len(node.names):
                rewritten[node.lineno] = (node, ast.unparse(ast.ImportFrom(node.module, keep, node.level)) + "\n")
    return _delete(text, deleted, rewritten)


def _delete(text: str, nodes: list[ast.stmt], rewritten: dict | None = None) -> str:
    """text without the lines of nodes (a definition's decorators and the blank lines after it
    included), and with each rewritten node's lines replaced by its new text."""
    lines = text.splitlines(keepends=True)
    spans = []
    for node in nodes:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        end = node.end_lineno
        while isinstance(node, DEFINITIONS) and end < len(lines) and not lines[end].strip():
            end += 1
        spans.append((start, end, ""))
    for node, new in (rewritten or {}).values():
        spans.append((node.lineno - 1, node.end_lineno, new))
    for start, end, new in sorted(spans, reverse=True):
        lines[start:end] = [new] if new else []
    return "".join(lines)
