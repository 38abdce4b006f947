"""The student edition: the project as a class receives it, without the answers.

`kata release OUT` writes it: the stubs made from the solutions (into katas/,
and into grader/kata/stub_files/, which `kata reset` restores from where the
solutions are absent), the grading suites, the reference model with
its weights and corpus, the grader, the benchmarks, README, CHECKLIST and
packaging (pyproject.toml; setup.py and MANIFEST.in, which put CHECKLIST.md
into its wheel). It leaves out reference/solutions/, tests/ (the alternative
implementations live there), each kata's mutants.toml, tools/, and every task
the registry marks `release = false`: its registry entry (hints, check hints
and questions with it), its CHECKLIST line, its suite tests (a test module
holding only those is left out whole) and the helpers, oracles, strategies
and fixtures that only those use (grader.instructor.held_back). A speed
check's baseline ships only while released code still calls load_baseline,
and a recap that quotes a figure only held-back code measures is left out.
Interview presets on part of a kata are left out too: they hand the
candidate the rest of the module as the solution writes it.

Each suite ships its public checks only. A hidden check (one that needs an
oracle or a baseline: held_back.hidden_checks) is left out with the code only
it uses, so that no function the edition holds computes an answer; the
edition's registry names each task's hidden checks (hidden_checks), and
`kata grade` there reports them as graded on submission.

`write_edition(OUT, held_back=True)` keeps the held-back tasks and the hidden
checks: that is the grading edition the Gradescope kit installs, still
without the solutions.
"""

from __future__ import annotations

import ast
import re
import shutil
import string
from pathlib import Path

import tomlkit

from grader.instructor import held_back
from grader.kata.checklist import CHECKLIST_FILE
from grader.kata.registry import (
    KATA_FILE,
    PRESETS_FILE,
    SUITES_DIR,
    Kata,
    RegistryError,
    kata_file,
    load_presets,
    load_registry,
    registry_folder,
    suite_tasks,
)
from grader.kata.stubs import stub_for
from grader.kata.target import ROOT
from grader.run import diagnosis
from grader.suites.common import HIDDEN_BASELINE, baseline_path

TOP_FILES = (
    "README.md",
    "CHECKLIST.md",
    "CONTRIBUTING.md",
    "pyproject.toml",
    "setup.py",  # a wheel built from the edition carries its CHECKLIST.md (MANIFEST.in: its sdist too)
    "MANIFEST.in",
    ".gitignore",
    "LICENSE",
    "LICENSE.md",
    "LICENSE.txt",
)
TREES = ("grader", "reference", "benchmarks", "docs")  # copied whole, except what LEFT_OUT names
LEFT_OUT = ("reference/solutions", "grader/kata/stub_files")  # the stubs are written afresh below
JUNK = ("__pycache__", ".pytest_cache", ".hypothesis", ".kata")
MUTANTS_FILE = "mutants.toml"  # in each kata's folder: the project's tests' mutants, which stay with tests/


def held_back_tasks(katas: tuple[Kata, ...]) -> dict[str, set[str]]:
    """kata name -> the names of its tasks marked release = false."""
    return {k.name: {t.name for t in k.tasks if not t.release} for k in katas}


def write_edition(out: Path, *, held_back: bool = False, registry: Path | None = None) -> list[Path]:
    """Write the student edition (held_back=False) or the grading edition
    (held_back=True: every task, still no solutions) into `out`, which must
    not exist or be an empty folder outside this checkout. Returns the files
    written. ValueError says what is wrong with `out` or the registry.

    registry: the registry folder to release (default: $KATA_REGISTRY or the
    project's, grader/suites/); each kata's suite must be its folder
    grader/suites/NAME/, and the registry's kata.toml of it and presets.toml
    become the edition's there."""
    out = _edition_folder(out)
    registry = registry_folder(registry)
    katas = load_registry(registry)
    drop = {} if held_back else held_back_tasks(katas)
    dropped_tests = _dropped_tests(katas, drop)
    hidden = {} if held_back else hidden_by_task(katas, drop)
    for k in katas:
        dropped_tests[k.name] |= {test for tests in hidden.get(k.name, {}).values() for test in tests}
    edition = _Edition(out)
    _copy_trees(edition, katas, registry, drop, dropped_tests, hidden)
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
    _check(out, katas, drop, held_back)
    return edition.written


def hidden_by_task(katas: tuple[Kata, ...], drop: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """kata name -> released task -> its hidden checks (held_back.hidden_checks), in the suite's
    order; tasks with none are not listed."""
    out = {}
    for k in katas:
        hidden = held_back.hidden_checks(k.suite)
        tasks = {t.name: [x for x in t.tests if x in hidden] for t in k.tasks if t.name not in drop.get(k.name, ())}
        out[k.name] = {task: tests for task, tests in tasks.items() if tests}
    return out


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
        if k.suite.resolve() != (SUITES_DIR / k.name).resolve():
            raise ValueError(
                f"kata {k.name!r}'s suite {k.suite} is not its folder {SUITES_DIR / k.name}, so no edition can ship it"
            )
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


def _copy_trees(edition: _Edition, katas, registry: Path, drop: dict[str, set[str]], dropped_tests, hidden) -> None:
    """TREES into the edition, but for LEFT_OUT and JUNK: each suite's modules
    without their dropped checks (held back or hidden) and the code only those
    use, none whose checks are all dropped (and the suite's baseline only where
    what is left still loads one), each kata's checklist.md without the lines of
    its held-back tasks, no mutants.toml, the registry's files (each kata's kata.toml,
    presets.toml) without its held-back tasks and naming the hidden checks, no
    kata.toml of a kata the registry does not hold, everything else as it is."""
    texts = {k.name: held_back.suite_texts(k.suite, dropped_tests[k.name]) for k in katas}
    suites = {path.resolve(): text for by_path in texts.values() for path, text in by_path.items()}
    shipped = {kata: [t for t in by_path.values() if t is not None] for kata, by_path in texts.items()}
    # kata's baseline.py, and its hidden one (an answer only hidden checks load): each ships where shipped code loads it
    baselines = {baseline_path(k.name).resolve(): (k, None) for k in katas}
    baselines |= {(k.suite / HIDDEN_BASELINE).resolve(): (k, HIDDEN_BASELINE) for k in katas}
    catalogues = {k.suite.resolve(): k.name for k in katas}  # a suite folder -> its kata, whose mistakes.toml it holds
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if not path.is_file() or _left_out(path, rel) or path.resolve() in baselines or path.name == MUTANTS_FILE:
                continue  # a baseline is written after the suite it serves
            if path.resolve() in suites:
                if suites[path.resolve()] is not None:  # a test module of held-back checks alone ships nothing
                    text = suites[path.resolve()]
                    if path.stem == held_back.ORACLES and hidden:
                        text = held_back.without_unused_imports(text)
                    edition.put(rel, text)
            elif path.name == CHECKLIST_FILE and path.parent.resolve() in catalogues:
                edition.put(rel, checklist_text(path.read_text(encoding="utf-8"), drop))
            elif path.name == diagnosis.CATALOGUE and path.parent.resolve() in catalogues:
                edition.put(rel, catalogue_text(path, dropped_tests[catalogues[path.parent.resolve()]]))
            elif path.name == KATA_FILE and path.parent.parent.resolve() == SUITES_DIR.resolve():
                if path.parent.resolve() in catalogues:  # the registry's own kata.toml of the kata, edited
                    text = kata_file(path.parent.name, registry).read_text(encoding="utf-8")
                    edition.put(rel, registry_text(text, drop, set(), lost_recaps(katas, shipped), hidden))
            elif path.resolve() == (SUITES_DIR / PRESETS_FILE).resolve():
                if (registry / PRESETS_FILE).is_file():
                    text = (registry / PRESETS_FILE).read_text(encoding="utf-8")
                    edition.put(rel, registry_text(text, drop, whole_kata_presets(registry, drop)))
            else:
                edition.put(rel, source=path)
    for baseline, (kata, file) in baselines.items():
        if baseline.is_file() and any(held_back.loads_baseline(text, file) for text in shipped[kata.name]):
            edition.put(baseline.relative_to(ROOT.resolve()).as_posix(), source=baseline)


def catalogue_text(path: Path, dropped: set[str]) -> str:
    """A suite's catalogue of known mistakes (grader.run.diagnosis) as an edition without the
    checks `dropped` ships it: no signature names one of them, and a mistake it can no longer
    tell apart is left out."""
    header = "".join(line[2:] for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line[:1] == "#")
    mistakes = diagnosis.pruned(diagnosis.read_catalogue(path), dropped)
    return diagnosis.catalogue_text(mistakes, header.rstrip("\n"))


def lost_recaps(katas: tuple[Kata, ...], shipped: dict[str, list[str]]) -> set[str]:
    """The katas whose recap quotes a figure that no shipped module of their suite
    records (its `key="..."`): the edition leaves their recap out rather than
    print "?" for it."""
    lost = set()
    for k in katas:
        keys = {name for _, name, _, _ in string.Formatter().parse(k.recap or "") if name}
        if any(not any(f'key="{key}"' in text for text in shipped[k.name]) for key in keys):
            lost.add(k.name)
    return lost


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


def registry_text(
    text: str,
    drop: dict[str, set[str]],
    presets: set[str],
    no_recap: set[str] = frozenset(),
    hidden: dict[str, dict[str, list[str]]] | None = None,
) -> str:
    """A registry file (a kata.toml, or presets.toml) without the dropped tasks (their hints, check
    hints and questions with them, and every other task's `depends` on them), with only the named
    presets, and without the recap of the katas in no_recap or a `suite` key (an edition's kata.toml
    sits in its suite's folder); each task of `hidden` (kata -> task -> its hidden checks) lists
    them as hidden_checks, and its check hints name none of them. Edited as a TOML document
    (tomlkit), so every comment and the layout of what stays are kept."""
    doc = tomlkit.parse(text)
    for kata in doc.get("kata", []):
        if "suite" in kata:
            del kata["suite"]
        dropped = drop.get(kata.get("name"), ())
        _keep(kata.get("task", []), lambda task: task.get("name") not in dropped)
        for task in kata.get("task", []):
            _not_depending_on(task, dropped)
        if kata.get("name") in no_recap and "recap" in kata:
            del kata["recap"]
        for task in kata.get("task", []):
            _hide(task, (hidden or {}).get(kata.get("name"), {}).get(task.get("name"), []))
    _keep(doc.get("preset", []), lambda preset: preset.get("name") in presets)
    if "preset" in doc and not doc["preset"]:
        del doc["preset"]  # no `preset = []` left behind
    return tomlkit.dumps(doc).rstrip("\n") + "\n"


def _not_depending_on(task, dropped) -> None:
    """A task's table, in place, its `depends` rid of the dropped tasks (the key gone when it names none)."""
    if "depends" not in task or not any(d in dropped for d in task["depends"]):
        return
    kept = [d for d in task["depends"] if d not in dropped]
    if kept:
        task["depends"] = kept
    else:
        del task["depends"]


def _hide(task, tests: list[str]) -> None:
    """A task's table, in place, naming `tests` as its hidden checks (before its sub-tables),
    its check hints rid of them, and a check hint left with no test taken out."""
    if not tests:
        return
    checks = task.get("check", [])
    for check in checks:
        kept = [t for t in check.get("tests", []) if t not in tests]
        if kept != list(check.get("tests", [])):
            check["tests"] = kept
    _keep(checks, lambda check: bool(check.get("tests")))
    if "check" in task and not task["check"]:
        del task["check"]
    listed = tomlkit.array()
    listed.extend(tests)
    listed.multiline(True)
    task["hidden_checks"] = listed


def _keep(tables, wanted) -> None:
    """Delete, in place, the tables of an array of tables that `wanted` says no to."""
    for i in reversed(range(len(tables))):
        if not wanted(tables[i]):
            del tables[i]


def checklist_text(text: str, drop: dict[str, set[str]]) -> str:
    """CHECKLIST.md, or a kata's checklist.md, without the lines of the dropped tasks."""
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


def _check(out: Path, katas: tuple[Kata, ...], drop: dict[str, set[str]], held: bool) -> None:
    """The edition's registry loads and holds exactly the tasks it should; a student
    edition's oracles define nothing."""
    try:
        edition = load_registry(out / "grader" / "suites")
        shipped = {k.name: {t.name for t in k.tasks} for k in edition}
    except RegistryError as exc:
        raise RuntimeError(f"the edition's registry does not load: {exc}") from None
    want = {k.name: {t.name for t in k.tasks} - drop.get(k.name, set()) for k in katas}
    if shipped != want:
        raise RuntimeError(f"the edition's registry lists {shipped}, expected {want}")
    for oracles in [] if held else (out / "grader" / "suites").glob(f"*/{held_back.ORACLES}.py"):
        tree = ast.parse(oracles.read_text(encoding="utf-8"))
        left = [n.name for n in tree.body if isinstance(n, held_back.DEFINITIONS)]
        if left:
            raise RuntimeError(f"the student edition's {oracles} defines {', '.join(left)}: a public check uses it")
