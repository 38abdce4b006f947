"""`kata new NAME`: a new kata in every place the project expects one.

A kata is its stub, its solution and its folder grader/suites/NAME/
(CONTRIBUTING.md draws how they fit). This module writes a working
placeholder into each, so that the project's tests pass straight after and
the kata shows up in `kata list` and `kata grade`:

    reference/solutions/NAME.py   two placeholder functions, `as_finite` and `double`, really implemented
    katas/NAME.py                 its stub (grader.kata.stubs.make_stub; `kata reset` makes it again from the solution)
    grader/suites/NAME/           the kata's folder, a package: __init__.py, and test_NAME.py with per
                                  function a Hypothesis property and an error check, and a check that
                                  records the figure the recap quotes; kata.toml: the kata (order = next
                                  free, a recap), a task per function with hints, a rubric and follow-up
                                  questions; checklist.md: its section of CHECKLIST.md, in the
                                  format tests/suites/test_katas.py reads; bench.py: a script that
                                  times `double` on a --target (`kata bench NAME`)
    grader/suites/presets.toml    a ready-made interview of the kata
    CHECKLIST.md                  put together again with the kata's section (grader.kata.checklist)
    README.md                     a row in the table of katas

Mutants and an alternative implementation (grader/suites/NAME/mutants.toml,
tests/fixtures/alt/NAME.py) are left to the author: they only make sense
once the kata's real functions exist.

It writes nothing unless the name is valid and none of the new files exists,
and it puts back whatever it changed if a write fails half way.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import keyword
import re
import string
import sys
import tempfile
from pathlib import Path

from grader.kata.checklist import CHECKLIST_FILE
from grader.kata.registry import KATA_FILE, PRESETS_FILE, RegistryError, load_presets, load_registry
from grader.kata.stubs import make_stub
from grader.kata.target import ROOT

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
# The placeholder every scaffolded kata starts with: two public functions, each
# the work of one task (an interview on one task needs another task's function
# to write out from the reference, and tests/test_interview.py checks that).
CHECK, FUNCTION = "as_finite", "double"
FIGURE_KEY = "values_doubled"  # the figure the scaffolded suite records and the recap quotes
FIGURE_VALUES = 4096  # how many values that check doubles
PRESET_MINUTES = 15


class ScaffoldError(ValueError):
    """`kata new` refused: the message says why; nothing was written."""


# ------------------------------------------------------------------ checks


def check_name(name: str, root: Path = ROOT) -> None:
    """ScaffoldError unless name can be a new kata under root: a lowercase
    Python identifier, not a keyword, not a kata already in the registry,
    and not the name of a module Python would find or of a top-level part
    of the project (the kata module must not shadow anything)."""
    _check_identifier(name)
    katas = [k.name for k in load_registry(root / "grader" / "suites")]
    if name in katas:
        raise ScaffoldError(f"there is already a kata named {name!r}; the katas are: {', '.join(katas)}")
    if (root / name).exists() or (root / f"{name}.py").exists():
        raise ScaffoldError(f"{name!r} is already the name of {root / name} in the project: pick another name")
    if name in getattr(sys, "stdlib_module_names", ()) or _findable(name):
        raise ScaffoldError(
            f"{name!r} is the name of an existing Python module, which the kata's module "
            "would shadow: pick another name"
        )


def _check_identifier(name: str) -> None:
    """ScaffoldError unless name is a lowercase Python identifier and not a keyword."""
    if not NAME_PATTERN.fullmatch(name or ""):
        raise ScaffoldError(
            f"{name!r} is not a valid kata name: use a lowercase Python identifier "
            "(a letter, then letters, digits and underscores), e.g. 'flash_attention'"
        )
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise ScaffoldError(f"{name!r} is a Python keyword: a kata's module needs a name it can be imported by")


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return True


def _check_text(what: str, text: str) -> str:
    text = (text or "").strip()
    if not text:
        raise ScaffoldError(f"the {what} must not be empty")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ScaffoldError(f"the {what} must be one line of text, without control characters: {text!r}")
    return text


def paths(name: str, root: Path = ROOT) -> dict[str, Path]:
    """The files `kata new` creates (each must not exist yet), by role."""
    return {
        "solution": root / "reference" / "solutions" / f"{name}.py",
        "stub": root / "katas" / f"{name}.py",
        "suite package": root / "grader" / "suites" / name / "__init__.py",
        "suite": root / "grader" / "suites" / name / f"test_{name}.py",
        "registry": root / "grader" / "suites" / name / KATA_FILE,
        "checklist": root / "grader" / "suites" / name / CHECKLIST_FILE,
        "benchmark": root / "grader" / "suites" / name / "bench.py",
    }


# ------------------------------------------------------------------ the texts

# The texts `kata new` writes, as files of this package: templates/*.tmpl in string.Template's syntax
# (${name}; a literal dollar is $$). Every template may use ${check}, ${function}, ${figure_key},
# ${figure_values} and ${minutes}; what else each takes is in the function that fills it.
TEMPLATES = importlib.resources.files("grader.dev") / "templates"


def _fill(template: str, **values) -> str:
    """The text of templates/<template> with its ${placeholders} filled in."""
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    constants = dict(
        check=CHECK, function=FUNCTION, figure_key=FIGURE_KEY, figure_values=FIGURE_VALUES, minutes=PRESET_MINUTES
    )
    return string.Template(text).substitute(constants, **values)


def _in_toml(text: str) -> str:
    """text escaped to go between the quotes of a TOML basic string (it has no control characters: _check_text)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def solution_text(name: str, title: str, trade: str) -> str:
    """reference/solutions/NAME.py: the two placeholder functions, really implemented."""
    return _fill("solution.py.tmpl", name=name, title=title, trade=trade)


def suite_package_text(name: str) -> str:
    return f'"""The grading suite of the {name} kata: its checks are in test_{name}.py."""\n'


def suite_text(name: str, title: str) -> str:
    """grader/suites/NAME/test_NAME.py: a property and an error check per function, and the recap's figure."""
    return _fill("suite.py.tmpl", name=name, title=title)


def registry_text(name: str, title: str, trade: str, order: int) -> str:
    """grader/suites/NAME/kata.toml: the kata's part of the registry."""
    recap_trade = trade.replace("{", "{{").replace("}", "}}")  # the recap is a format string of figure keys
    return _fill(
        "kata.toml.tmpl",
        name=name,
        title=_in_toml(title),
        trade=_in_toml(trade),
        recap_trade=_in_toml(recap_trade),
        order=order,
    )


def preset_text(name: str, title: str, preset: str) -> str:
    """The kata's ready-made interview, a [[preset]] of grader/suites/presets.toml."""
    return _fill("preset.toml.tmpl", name=name, title=_in_toml(title), preset=preset)


def checklist_text(name: str, title: str, trade: str, order: int) -> str:
    """grader/suites/NAME/checklist.md: the kata's section of CHECKLIST.md, in the format tests/suites/test_katas.py
    reads."""
    return _fill("checklist.md.tmpl", name=name, title=title, trade=trade, order=order)


def readme_row(name: str, trade: str, order: int) -> str:
    """The kata's row of the README's table of katas."""
    return _fill("readme_row.md.tmpl", name=name, trade=trade.replace("|", "\\|"), order=order)


def bench_text(name: str, title: str) -> str:
    """grader/suites/NAME/bench.py: times the placeholder on arrays of growing size, on a --target."""
    return _fill("bench.py.tmpl", name=name, title=title)


# ------------------------------------------------------------------ editing the shared files


def _with_preset(text: str, name: str, title: str, preset: str) -> str:
    return text.rstrip("\n") + "\n\n" + preset_text(name, title, preset)


def _with_checklist(text: str, section: str) -> str:
    ends = list(re.finditer(r"^<!-- end \w+ -->\n?", text, re.MULTILINE))
    if not ends:
        return text.rstrip("\n") + "\n\n" + section
    at = ends[-1].end()
    head = text[:at] if text[:at].endswith("\n") else text[:at] + "\n"
    return head + "\n" + section + text[at:]


def _with_readme(text: str, row: str) -> str:
    lines = text.splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines) if re.match(r"\|\s*order\s*\|\s*kata\s*\|", line)), None)
    if header is None:
        raise ScaffoldError("README.md has no table of katas (a line starting '| order | kata |') to add a row to")
    end = header + 1
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[:end] + [row] + lines[end:])


def _validated_registry(name: str, texts: dict[str, str]) -> None:
    """RegistryError (as ScaffoldError) unless the new kata, with its suite (texts: file name -> text, in its
    folder) and its preset (texts[PRESETS_FILE]), loads as a registry of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / name).mkdir()
        for file, text in texts.items():
            (Path(tmp) / (file if file == PRESETS_FILE else f"{name}/{file}")).write_text(text, encoding="utf-8")
        try:
            load_registry(Path(tmp))
            load_presets(Path(tmp))
        except RegistryError as exc:
            raise ScaffoldError(f"the registry entry would not load ({exc}); nothing was written") from None


def _preset_name(name: str, taken: set[str]) -> str:
    base = f"{name.replace('_', '-')}-{PRESET_MINUTES}"
    preset, n = base, 2
    while preset in taken:
        preset, n = f"{base}-{n}", n + 1
    return preset


# ------------------------------------------------------------------ the command


def new_kata(name: str, *, title: str, trade: str, root: Path = ROOT) -> list[Path]:
    """Scaffold the kata `name` under root (a checkout): create its solution,
    its stub, and its folder (suite, kata.toml, benchmark), and add it to
    grader/suites/presets.toml, CHECKLIST.md and README.md. Returns the paths written, created ones
    first. A ScaffoldError (a ValueError) says why it refused; then nothing
    was written."""
    root = Path(root)
    try:
        check_name(name, root)
    except RegistryError:  # say first that a file of the new kata is in the way (its kata.toml, half written)
        _refuse_unless_free(name, root, paths(name, root))
        raise
    created = paths(name, root)
    _refuse_unless_free(name, root, created)
    title, trade = _check_text("title", title), _check_text("trade", trade)
    solution = solution_text(name, title, trade)
    order = max((k.order for k in load_registry(root / "grader" / "suites")), default=0) + 1
    new_files = {
        created["solution"]: solution,
        created["stub"]: make_stub(solution),
        created["suite package"]: suite_package_text(name),
        created["suite"]: suite_text(name, title),
        created["registry"]: registry_text(name, title, trade, order),
        created["checklist"]: checklist_text(name, title, trade, order),
        created["benchmark"]: bench_text(name, title),
    }
    edits = _edits(name, title, trade, order, root)
    _validated_registry(
        name,
        {
            created["suite"].name: new_files[created["suite"]],
            KATA_FILE: new_files[created["registry"]],
            PRESETS_FILE: "format = 1\n\n" + preset_text(name, title, _preset_name(name, set())),
        },
    )
    return _write_all(created["suite"].parent, new_files, edits)


def _refuse_unless_free(name: str, root: Path, created: dict[str, Path]) -> None:
    """ScaffoldError if a file the kata would create exists, or root is not a checkout to create them in."""
    suite_folder = created["suite"].parent
    existing = [str(p.relative_to(root)) for p in [suite_folder, *created.values()] if p.exists()]
    if existing:
        raise ScaffoldError(f"kata {name!r} would overwrite {', '.join(existing)}: nothing was written")
    for needed in {path.parent if path.parent != suite_folder else suite_folder.parent for path in created.values()}:
        if not needed.is_dir():
            raise ScaffoldError(f"{root} is not a checkout of the katas: there is no {needed}")


def _edits(name: str, title: str, trade: str, order: int, root: Path) -> dict[Path, tuple[str, str]]:
    """The shared files the kata is added to: path -> (its text now, its text with the kata)."""
    presets_path, checklist_path, readme_path = (
        root / "grader" / "suites" / PRESETS_FILE,
        root / "CHECKLIST.md",
        root / "README.md",
    )
    preset = _preset_name(name, {p.name for p in load_presets(root / "grader" / "suites")})
    originals = {path: path.read_text(encoding="utf-8") for path in (presets_path, checklist_path, readme_path)}
    edits = {
        presets_path: _with_preset(originals[presets_path], name, title, preset),
        checklist_path: _with_checklist(originals[checklist_path], checklist_text(name, title, trade, order)),
        readme_path: _with_readme(originals[readme_path], readme_row(name, trade, order)),
    }
    return {path: (originals[path], edits[path]) for path in edits}


def _write_all(folder: Path, new_files: dict[Path, str], edits: dict[Path, tuple[str, str]]) -> list[Path]:
    """Make the suite's new folder, create new_files (never over a file that appeared meanwhile) and rewrite
    the edited files; if a write fails half way, put back every file as it was and remove the folder.
    Returns the paths written, in that order."""
    written: list[Path] = []
    made = False  # the suite's folder (new_kata refused one already there)
    try:
        folder.mkdir()
        made = True
        for path, text in new_files.items():
            with open(path, "x", encoding="utf-8") as f:  # "x": never overwrite a file that appeared meanwhile
                written.append(path)
                f.write(text)
        for path, (_, text) in edits.items():
            written.append(path)
            path.write_text(text, encoding="utf-8")
    except BaseException:
        for path in written:
            if path in edits:
                path.write_text(edits[path][0], encoding="utf-8")
            else:
                path.unlink(missing_ok=True)
        if made:
            folder.rmdir()  # empty again: only this call wrote into it
        raise
    return written
