"""`kata new NAME`: a new kata in every place the project expects one.

A kata lives in seven places (CONTRIBUTING.md draws how they fit). This
module writes a working placeholder into each, so that the project's tests
pass straight after and the kata shows up in `kata list` and `kata grade`:

    reference/solutions/NAME.py   two placeholder functions, `as_finite` and `double`, really implemented
    katas/NAME.py                 its stub (grader.kata.stubs.make_stub; `kata reset` makes it again from the solution)
    grader/suites/NAME/           the suite, a package: __init__.py, and test_NAME.py with per function
                                  a Hypothesis property and an error check, and a check that records
                                  the figure the recap quotes
    grader/kata/katas.toml        the kata (order = next free, a recap), a task per function with
                                  hints, a rubric and follow-up questions, and a ready-made interview
    CHECKLIST.md                  the kata's section, in the format tests/suites/test_katas.py reads
    README.md                     a row in the table of katas
    benchmarks/bench_NAME.py      a script that times `double` on a --target

Mutants and an alternative implementation (tests/mutants/NAME.toml,
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

from grader.kata.registry import RegistryError, load_presets, load_registry
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
    if not NAME_PATTERN.fullmatch(name or ""):
        raise ScaffoldError(
            f"{name!r} is not a valid kata name: use a lowercase Python identifier "
            "(a letter, then letters, digits and underscores), e.g. 'flash_attention'"
        )
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise ScaffoldError(f"{name!r} is a Python keyword: a kata's module needs a name it can be imported by")
    katas = [k.name for k in load_registry(root / "grader" / "kata" / "katas.toml")]
    if name in katas:
        raise ScaffoldError(f"there is already a kata named {name!r}; the katas are: {', '.join(katas)}")
    if (root / name).exists() or (root / f"{name}.py").exists():
        raise ScaffoldError(f"{name!r} is already the name of {root / name} in the project: pick another name")
    if name in getattr(sys, "stdlib_module_names", ()) or _findable(name):
        raise ScaffoldError(
            f"{name!r} is the name of an existing Python module, which the kata's module "
            "would shadow: pick another name"
        )


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
        "benchmark": root / "benchmarks" / f"bench_{name}.py",
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
    """The kata's entry of grader/kata/katas.toml, between its `# ---- NAME ----` markers."""
    recap_trade = trade.replace("{", "{{").replace("}", "}}")  # the recap is a format string of figure keys
    return _fill(
        "registry.toml.tmpl",
        name=name,
        title=_in_toml(title),
        trade=_in_toml(trade),
        recap_trade=_in_toml(recap_trade),
        order=order,
    )


def preset_text(name: str, title: str, preset: str) -> str:
    """The kata's ready-made interview, a [[preset]] of grader/kata/katas.toml."""
    return _fill("preset.toml.tmpl", name=name, title=_in_toml(title), preset=preset)


def checklist_text(name: str, title: str, trade: str, order: int) -> str:
    """The kata's section of CHECKLIST.md, in the format tests/suites/test_katas.py reads."""
    return _fill("checklist.md.tmpl", name=name, title=title, trade=trade, order=order)


def readme_row(name: str, trade: str, order: int) -> str:
    """The kata's row of the README's table of katas."""
    return _fill("readme_row.md.tmpl", name=name, trade=trade.replace("|", "\\|"), order=order)


def bench_text(name: str, title: str) -> str:
    """benchmarks/bench_NAME.py: times the placeholder on arrays of growing size, on a --target."""
    return _fill("bench.py.tmpl", name=name, title=title)


# ------------------------------------------------------------------ editing the shared files


def _insert_before(text: str, marker: str, block: str) -> str:
    """text with block inserted before the line `marker` (appended when there is none)."""
    at = re.search(rf"^{re.escape(marker)}$", text, re.MULTILINE)
    if at is None:
        return text.rstrip("\n") + "\n\n" + block
    return text[: at.start()] + block + "\n" + text[at.start() :]


def _with_registry(text: str, name: str, title: str, trade: str, order: int, preset: str) -> str:
    kata = registry_text(name, title, trade, order)
    if re.search(r"^# ---- presets ----$", text, re.MULTILINE):
        text = _insert_before(text, "# ---- presets ----", kata)
    elif re.search(r"^\[\[preset\]\]$", text, re.MULTILINE):
        text = _insert_before(text, "[[preset]]", kata)
    else:
        text = text.rstrip("\n") + "\n\n" + kata
    return _insert_before(text, "# ---- end presets ----", preset_text(name, title, preset))


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


def _validated_registry(text: str) -> None:
    """RegistryError (as ScaffoldError) if the new katas.toml does not load."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "katas.toml"
        path.write_text(text, encoding="utf-8")
        try:
            load_registry(path)
            load_presets(path)
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
    its stub, suite and benchmark, and add it to grader/kata/katas.toml,
    CHECKLIST.md and README.md. Returns the paths written, created ones
    first. A ScaffoldError (a ValueError) says why it refused; then nothing
    was written."""
    root = Path(root)
    check_name(name, root)
    title, trade = _check_text("title", title), _check_text("trade", trade)
    created = paths(name, root)
    _refuse_unless_free(name, root, created)
    solution = solution_text(name, title, trade)
    new_files = {
        created["solution"]: solution,
        created["stub"]: make_stub(solution),
        created["suite package"]: suite_package_text(name),
        created["suite"]: suite_text(name, title),
        created["benchmark"]: bench_text(name, title),
    }
    return _write_all(created["suite"].parent, new_files, _edits(name, title, trade, root))


def _refuse_unless_free(name: str, root: Path, created: dict[str, Path]) -> None:
    """ScaffoldError if a file the kata would create exists, or root is not a checkout to create them in."""
    suite_folder = created["suite"].parent
    existing = [str(p.relative_to(root)) for p in [suite_folder, *created.values()] if p.exists()]
    if existing:
        raise ScaffoldError(f"kata {name!r} would overwrite {', '.join(existing)}: nothing was written")
    for needed in {path.parent if path.parent != suite_folder else suite_folder.parent for path in created.values()}:
        if not needed.is_dir():
            raise ScaffoldError(f"{root} is not a checkout of the katas: there is no {needed}")


def _edits(name: str, title: str, trade: str, root: Path) -> dict[Path, tuple[str, str]]:
    """The shared files the kata is added to: path -> (its text now, its text with the kata), the
    registry's checked to load."""
    registry_path, checklist_path, readme_path = (
        root / "grader" / "kata" / "katas.toml",
        root / "CHECKLIST.md",
        root / "README.md",
    )
    katas = load_registry(registry_path)
    order = max((k.order for k in katas), default=0) + 1
    preset = _preset_name(name, {p.name for p in load_presets(registry_path)})
    originals = {path: path.read_text(encoding="utf-8") for path in (registry_path, checklist_path, readme_path)}
    edits = {
        registry_path: _with_registry(originals[registry_path], name, title, trade, order, preset),
        checklist_path: _with_checklist(originals[checklist_path], checklist_text(name, title, trade, order)),
        readme_path: _with_readme(originals[readme_path], readme_row(name, trade, order)),
    }
    _validated_registry(edits[registry_path])
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
