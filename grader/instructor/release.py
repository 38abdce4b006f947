"""The student edition: the project as a class receives it, without the answers.

`kata release OUT` writes it: the stubs made from the solutions (into katas/,
and into grader/kata/stub_files/, which `kata reset` restores from where the
solutions are absent), the grading suites, the reference model with
its weights and corpus, the grader, the benchmarks, README, CHECKLIST and
packaging. It leaves out reference/solutions/, tests/ (the alternative
implementations and the mutant catalogue live there), tools/, and every task
the registry marks `release = false`: its registry entry, its CHECKLIST line
and its suite tests (a test module holding only those is left out whole). A
speed check's baseline ships only while a released test still uses it.
Interview presets on part of a kata are left out too: they hand the
candidate the rest of the module as the solution writes it.

`write_edition(OUT, held_back=True)` keeps the held-back tasks: that is the
grading edition the Gradescope kit installs, still without the solutions.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
from pathlib import Path

import tomlkit

from grader.kata.registry import (
    REGISTRY_PATH,
    SUITES_DIR,
    Kata,
    RegistryError,
    load_presets,
    load_registry,
    suite_modules,
    suite_tasks,
)
from grader.kata.stubs import stub_for
from grader.kata.target import ROOT

TOP_FILES = (
    "README.md",
    "CHECKLIST.md",
    "CONTRIBUTING.md",
    "pyproject.toml",
    ".gitignore",
    "LICENSE",
    "LICENSE.md",
    "LICENSE.txt",
)
TREES = ("grader", "reference", "benchmarks", "docs")  # copied whole, except what LEFT_OUT names
LEFT_OUT = ("reference/solutions", "grader/kata/stub_files")  # the stubs are written afresh below
JUNK = ("__pycache__", ".pytest_cache", ".hypothesis", ".kata")


def held_back_tasks(katas: tuple[Kata, ...]) -> dict[str, set[str]]:
    """kata name -> the names of its tasks marked release = false."""
    return {k.name: {t.name for t in k.tasks if not t.release} for k in katas}


def write_edition(out: Path, *, held_back: bool = False, registry: Path | None = None) -> list[Path]:
    """Write the student edition (held_back=False) or the grading edition
    (held_back=True: every task, still no solutions) into `out`, which must
    not exist or be an empty folder outside this checkout. Returns the files
    written. ValueError says what is wrong with `out` or the registry.

    registry: the katas.toml to release (default: $KATA_REGISTRY or the
    project's); it becomes the edition's grader/kata/katas.toml, and its katas'
    suites must sit in grader/suites/ (a folder there, or a file)."""
    out = _edition_folder(out)
    registry = Path(registry or os.environ.get("KATA_REGISTRY") or REGISTRY_PATH).resolve()
    katas = load_registry(registry)
    drop = {} if held_back else held_back_tasks(katas)
    dropped_tests = _dropped_tests(katas, drop)
    edition = _Edition(out)
    _copy_trees(edition, katas, registry, drop, dropped_tests)
    edition.put("katas/__init__.py", source=ROOT / "katas" / "__init__.py")
    for k in katas:
        stub = stub_for(k.name)
        edition.put(f"katas/{k.name}.py", stub)
        edition.put(f"grader/kata/stub_files/{k.name}.py", stub)  # what `kata reset` restores there (its wheel's data)
    for name in TOP_FILES:
        path = ROOT / name
        if path.is_file():
            if name == "CHECKLIST.md":
                edition.put(name, checklist_text(path.read_text(encoding="utf-8"), drop))
            else:
                edition.put(name, source=path)
    _check(out, katas, drop)
    return edition.written


def _edition_folder(out: Path) -> Path:
    """out, resolved, or a ValueError unless it is outside this checkout and new or an empty folder."""
    out = Path(out).expanduser().resolve()
    if out == ROOT or ROOT in out.parents:
        raise ValueError(f"the edition must go outside this checkout ({ROOT}), not into {out}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} already exists and is not an empty folder; give a new folder")
    return out


def _dropped_tests(katas: tuple[Kata, ...], drop: dict[str, set[str]]) -> dict[str, set[str]]:
    """kata name -> the checks of its held-back tasks, after making sure that every
    suite can ship, that each kata releases a task, and that no dropped check also
    grades a released task (it would vanish from it)."""
    for k in katas:
        if k.suite.resolve().parent != SUITES_DIR.resolve():
            raise ValueError(f"kata {k.name!r}'s suite {k.suite} is not in {SUITES_DIR}, so no edition can ship it")
        if len(drop.get(k.name, ())) == len(k.tasks):
            raise ValueError(
                f"kata {k.name!r} holds back every task (release = false); "
                "release at least one of its tasks, or take the kata out of the registry"
            )
    dropped = {k.name: {x for t in k.tasks if t.name in drop.get(k.name, ()) for x in t.tests} for k in katas}
    for k in katas:
        owners = suite_tasks(k.suite)
        for test in sorted(dropped[k.name]):
            kept = [t for t in owners.get(test, ()) if t not in drop.get(k.name, ())]
            if kept:
                raise ValueError(
                    f"kata {k.name!r}: {test} grades the held-back task(s) "
                    f"{', '.join(t for t in owners[test] if t not in kept)} and the released {', '.join(kept)}; "
                    "hold those back too, or split the check so that each task has its own"
                )
    return dropped


class _Edition:
    """The files written into an edition's folder, as they are written."""

    def __init__(self, out: Path):
        self.out, self.written = out, []

    def put(self, rel: str, text: str | None = None, source: Path | None = None) -> None:
        dest = self.out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if text is not None:
            dest.write_text(text, encoding="utf-8")
        else:
            shutil.copy2(source, dest)
        self.written.append(dest)


def _copy_trees(edition: _Edition, katas, registry: Path, drop: dict[str, set[str]], dropped_tests) -> None:
    """TREES into the edition, but for LEFT_OUT and JUNK: each suite's test modules
    without their dropped checks, none whose checks are all dropped (and the suite's
    baseline only where what is left still loads one), the registry without its
    held-back tasks, everything else as it is."""
    suites = {m.resolve(): k for k in katas for m in suite_modules(k.suite)}
    baselines = {(SUITES_DIR / f"baseline_{k.name}.py").resolve(): k for k in katas}
    shipped: dict[str, str] = {}  # kata -> the text of its test modules in the edition
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if not path.is_file() or _left_out(path, rel) or path.resolve() in baselines:
                continue  # a baseline is written after the suite it serves
            if path.resolve() in suites:
                kata = suites[path.resolve()]
                text = path.read_text(encoding="utf-8")
                if _only_checks_of(text, dropped_tests[kata.name]):
                    continue  # a test module of held-back checks alone ships nothing
                text = without_functions(text, dropped_tests[kata.name])
                edition.put(rel, text)
                shipped[kata.name] = shipped.get(kata.name, "") + text
            elif path == REGISTRY_PATH:
                text = registry_text(registry.read_text(encoding="utf-8"), drop, whole_kata_presets(registry, drop))
                edition.put(rel, text)
            else:
                edition.put(rel, source=path)
    for baseline, kata in baselines.items():
        if baseline.is_file() and "load_baseline" in shipped.get(kata.name, ""):
            edition.put(baseline.relative_to(ROOT.resolve()).as_posix(), source=baseline)


def _only_checks_of(source: str, names: set[str]) -> bool:
    """Whether every test function of a test module is one of `names` (and it has one)."""
    tests = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}
    return bool(tests) and tests <= names


def _left_out(path: Path, rel: str) -> bool:
    return any(part in JUNK for part in path.parts) or any(rel == x or rel.startswith(x + "/") for x in LEFT_OUT)


def whole_kata_presets(registry: Path, drop: dict[str, set[str]]) -> set[str]:
    """The presets that interview a whole kata, none of whose tasks is dropped:
    the others need the solutions (see grader.interview.session)."""
    tasks = {k.name: {t.name for t in k.tasks} for k in load_registry(registry)}
    return {
        p.name
        for p in load_presets(registry)
        if (not p.tasks or set(p.tasks) == tasks[p.kata]) and not drop.get(p.kata)
    }


def without_functions(source: str, names: set[str]) -> str:
    """source without its top-level functions called `names` (decorators included)."""
    if not names:
        return source
    lines = source.splitlines(keepends=True)
    spans = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            end = node.end_lineno
            while end < len(lines) and not lines[end].strip():  # and the blank lines after it
                end += 1
            spans.append((start, end))
    for start, end in sorted(spans, reverse=True):
        del lines[start:end]
    return "".join(lines)


def registry_text(text: str, drop: dict[str, set[str]], presets: set[str]) -> str:
    """katas.toml without the dropped tasks (and their questions and check hints) and with
    only the named presets. Edited as a TOML document (tomlkit), so every comment and the
    layout of what stays are kept."""
    doc = tomlkit.parse(text)
    for kata in doc.get("kata", []):
        _keep(kata.get("task", []), lambda task: task.get("name") not in drop.get(kata.get("name"), ()))
    _keep(doc.get("preset", []), lambda preset: preset.get("name") in presets)
    if "preset" in doc and not doc["preset"]:
        del doc["preset"]  # no `preset = []` left behind
    return tomlkit.dumps(doc).rstrip("\n") + "\n"


def _keep(tables, wanted) -> None:
    """Delete, in place, the tables of an array of tables that `wanted` says no to."""
    for i in reversed(range(len(tables))):
        if not wanted(tables[i]):
            del tables[i]


def checklist_text(text: str, drop: dict[str, set[str]]) -> str:
    """CHECKLIST.md without the lines of the dropped tasks."""
    for kata, tasks in drop.items():
        section = re.search(rf"<!-- {re.escape(kata)} -->\n.*?<!-- end {re.escape(kata)} -->", text, re.S)
        if not section or not tasks:
            continue
        kept = [
            line
            for line in section.group(0).splitlines(keepends=True)
            if not any(line.startswith(f"- [ ] **{t}** ") for t in tasks)
        ]
        text = text[: section.start()] + "".join(kept) + text[section.end() :]
    return text


def _check(out: Path, katas: tuple[Kata, ...], drop: dict[str, set[str]]) -> None:
    """The edition's registry loads and holds exactly the tasks it should."""
    try:
        edition = load_registry(out / "grader" / "kata" / "katas.toml", suites_dir=out / "grader" / "suites")
        shipped = {k.name: {t.name for t in k.tasks} for k in edition}
    except RegistryError as exc:
        raise RuntimeError(f"the edition's registry does not load: {exc}") from None
    want = {k.name: {t.name for t in k.tasks} - drop.get(k.name, set()) for k in katas}
    if shipped != want:
        raise RuntimeError(f"the edition's registry lists {shipped}, expected {want}")
