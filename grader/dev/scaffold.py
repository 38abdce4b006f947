"""`kata new NAME`: a new kata in every place the project expects one.

A kata lives in seven places (CONTRIBUTING.md draws how they fit). This
module writes a working placeholder into each, so that the project's tests
pass straight after and the kata shows up in `kata list` and `kata grade`:

    reference/solutions/NAME.py   two placeholder functions, `as_finite` and `double`, really implemented
    katas/NAME.py                 its stub (grader.kata.stubs.make_stub; `kata reset` makes it again from the solution)
    grader/suites/test_NAME.py    per function a Hypothesis property and an error check, and a check
                                  that records the figure the recap quotes
    grader/kata/katas.toml        the kata (order = next free, a recap), a task per function with
                                  hints, a rubric and follow-up questions, and a ready-made interview
    CHECKLIST.md                  the kata's section, in the format tests/test_katas.py reads
    README.md                     a row in the table of katas
    benchmarks/bench_NAME.py      a script that times `double` on a --target

Mutants and an alternative implementation (tests/mutants/NAME.toml,
tests/fixtures/alt/NAME.py) are left to the author: they only make sense
once the kata's real functions exist.

It writes nothing unless the name is valid and none of the new files exists,
and it puts back whatever it changed if a write fails half way.
"""

from __future__ import annotations

import importlib.util
import json
import keyword
import re
import sys
import tempfile
from dataclasses import dataclass
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
        "suite": root / "grader" / "suites" / f"test_{name}.py",
        "benchmark": root / "benchmarks" / f"bench_{name}.py",
    }


# ------------------------------------------------------------------ the texts


def _toml(text: str) -> str:
    """A TOML basic string (the text has no control characters: _check_text)."""
    return json.dumps(text, ensure_ascii=False)


def solution_text(name: str, title: str, trade: str) -> str:
    return f'''"""{name}: {title} ({trade}).

Scaffolded by `kata new`: `{CHECK}` and `{FUNCTION}` are placeholders, really
implemented, so that the grader, the suite, the stubs and the benchmark work
from the start. Replace them with the kata's own functions and classes
(CONTRIBUTING.md says how), then run `python -m grader.kata.stubs {name}` to
rewrite the stubs.
"""

from __future__ import annotations

import numpy as np


def {CHECK}(x) -> np.ndarray:
    """x as a float64 array, checked to hold only finite numbers.

    x: real numbers, any array-like of any shape (a plain number is shape ()).
    Returns an np.ndarray of x's shape and dtype float64 holding x's values.

    Raises ValueError if x holds NaN or an infinity.
    """
    values = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError("x must hold finite numbers only; it holds NaN or an infinity")
    return values


def {FUNCTION}(x) -> np.ndarray:
    """Twice x, in float64.

    x: real numbers, any array-like of any shape (a plain number is shape ()).
    Returns 2 * x as float64 numbers of x's shape.

    Raises ValueError if x holds NaN or an infinity (as {CHECK} does).
    """
    return 2.0 * {CHECK}(x)
'''


SUITE_TESTS = {
    "finite": (f"test_{CHECK}_keeps_every_value_in_float64", f"test_{CHECK}_rejects_nan_and_infinity"),
    "double": (
        f"test_{FUNCTION}_is_two_times_x_in_float64",
        f"test_{FUNCTION}_rejects_non_finite_input",
        f"test_{FUNCTION}_of_many_values_is_exact",
    ),
}


def suite_text(name: str, title: str) -> str:
    (keeps, rejects), (twice, double_rejects, many) = SUITE_TESTS["finite"], SUITE_TESTS["double"]
    return f'''"""Grading suite of the {name} kata: {title}.

Scaffolded by `kata new`: for each placeholder function a property
(Hypothesis) and an error check, and one check that records a figure for the
recap. Expected values come from this file's own float64 formulas, never
from the code under test.

Audit: each promise of the stub's docstrings that a learner could get
wrong, and the checks that fail without it.

| where | promise | checks |
|---|---|---|
| `{CHECK}` | x comes back as float64 numbers of x's shape, values unchanged | `{keeps}` |
| `{CHECK}` | ValueError when x holds NaN or an infinity | `{rejects}` |
| `{FUNCTION}` | 2 * x as float64 numbers of x's shape, exactly | `{twice}`, `{many}` |
| `{FUNCTION}` | ValueError when x holds NaN or an infinity | `{double_rejects}` |
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis.extra import numpy as hnp

from grader.suites import common
from grader.suites.common import float_arrays, load_kata, rng

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)
NON_FINITE = (np.nan, np.inf, -np.inf)


@pytest.fixture(scope="module")
def kata():
    return load_kata("{name}")


def _with(bad: float, salt: int) -> np.ndarray:
    """Finite values with one bad value at a place that depends on salt and --seed."""
    g = rng(salt)
    x = g.standard_normal(7)
    x[g.integers(x.size)] = bad
    return x


# ------------------------------------------------------------ {CHECK}


@pytest.mark.task("finite")
@given(x=float_arrays(SHAPES, lo=-1e6, hi=1e6, dtype=np.float32))
def {keeps}(kata, x):
    got = np.asarray(kata.{CHECK}(x))
    assert got.dtype == np.float64, f"{CHECK} returned dtype {{got.dtype}}, expected float64"
    assert got.shape == x.shape, f"{CHECK} returned shape {{got.shape}} for x of shape {{x.shape}}"
    np.testing.assert_array_equal(got, x.astype(np.float64), err_msg="{CHECK}(x) changed x's values")


@pytest.mark.task("finite")
def {rejects}(kata):
    for i, bad in enumerate(NON_FINITE):
        with pytest.raises(ValueError):
            kata.{CHECK}(_with(bad, i))


# ------------------------------------------------------------ {FUNCTION}


@pytest.mark.task("double")
@given(x=float_arrays(SHAPES, lo=-1e6, hi=1e6, dtype=np.float64))
def {twice}(kata, x):
    got = np.asarray(kata.{FUNCTION}(x))
    assert got.dtype == np.float64, f"{FUNCTION} returned dtype {{got.dtype}}, expected float64"
    assert got.shape == x.shape, f"{FUNCTION} returned shape {{got.shape}} for x of shape {{x.shape}}"
    np.testing.assert_array_equal(got, 2.0 * x, err_msg="{FUNCTION}(x) is not 2 * x")


@pytest.mark.task("double")
def {double_rejects}(kata):
    for i, bad in enumerate(NON_FINITE):
        with pytest.raises(ValueError):
            kata.{FUNCTION}(_with(bad, 10 + i))


@pytest.mark.task("double")
def {many}(kata):
    x = rng(20).standard_normal({FIGURE_VALUES}) * 1e3
    got = np.asarray(kata.{FUNCTION}(x))
    np.testing.assert_array_equal(got, 2.0 * x, err_msg="{FUNCTION}(x) is not 2 * x on {FIGURE_VALUES} values")
    common.figure("values doubled exactly", x.size, unit="values", key="{FIGURE_KEY}")
'''


@dataclass(frozen=True)
class _Task:
    """A placeholder task of the registry text: what one [[kata.task]] table holds."""

    name: str
    title: str
    points: int
    hints: tuple[str, ...]
    function: str
    questions: tuple[tuple[str, str], ...]  # (ask, answer)
    rubric: tuple[str, str]  # (what the task probes, what a strong answer shows)


_TASKS = (
    _Task(
        name="finite",
        title=f"{CHECK}: x as float64, ValueError on NaN or infinity",
        points=1,
        hints=(
            "What dtype does np.asarray give you when you do not ask for one, and which does the docstring promise?",
            "Which numpy function tells you, element by element, that a value is neither NaN nor an infinity?",
        ),
        function=CHECK,
        rubric=(
            "Validating input at a boundary: dtypes, and refusing values that would spread silently.",
            "A float64 array whatever came in, NaN and infinities refused with a ValueError that says what was wrong.",
        ),
        questions=(
            (
                "Why convert to float64 instead of keeping x's own dtype?",
                "So that callers know what comes back and later arithmetic is exact where it can be: every float32 "
                "and every integer below 2^53 is exactly a float64, and doubling in float64 cannot overflow where "
                "int8 (127 wraps to -2) or float32 (near 3.4e38) would.",
            ),
            (
                "Why refuse NaN and infinity with an error instead of passing them through?",
                "A NaN spreads silently through every later step and surfaces far from its cause; failing at the "
                "boundary, with a message, points at the input that is wrong. The price is one pass over the data "
                "(np.isfinite), cheap next to most work.",
            ),
        ),
    ),
    _Task(
        name="double",
        title=f"{FUNCTION}: twice x in float64, through {CHECK}",
        points=2,
        hints=(
            "Which function of this module already turns x into checked float64 numbers?",
            "Once x is a checked float64 array, what single operation gives twice it, for every shape at once?",
        ),
        function=FUNCTION,
        rubric=(
            f"Reusing the module's own checked conversion, and whole-array arithmetic in {FUNCTION}.",
            f"{FUNCTION} built on {CHECK}, one vectorized multiplication for every shape, the result exact.",
        ),
        questions=(
            (
                f"What does {FUNCTION} return for x = 1e308, and should it?",
                f"inf: 2e308 is past float64's largest value (about 1.8e308), and {CHECK} checked the input, not the "
                "result. Either check the result too (raise, or promise only |x| < 8.9e307) or accept inf as IEEE "
                "arithmetic's honest answer; the docstring should say which.",
            ),
            (
                "Is 2 * x ever inexact in float64 for a finite x?",
                "No, unless it overflows: multiplying by a power of two only changes the exponent, so the mantissa "
                "is kept bit for bit (subnormals included, since doubling moves them up). That is why the suite can "
                "demand exact equality.",
            ),
        ),
    ),
)


def _task_toml(task: _Task) -> str:
    """One [[kata.task]] table of the registry text, its rubric and questions after it."""
    hints = "".join(f"    {_toml(h)},\n" for h in task.hints)
    questions = "".join(
        f"\n  [[kata.task.question]]\n  ask = {_toml(ask)}\n  answer = {_toml(answer)}\n"
        for ask, answer in task.questions
    )
    probes, strong = task.rubric
    rubric = f"\n  [kata.task.rubric]\n  probes = {_toml(probes)}\n  strong = {_toml(strong)}\n"
    return (
        f"\n  [[kata.task]]\n  name = {_toml(task.name)}\n  title = {_toml(task.title)}\n  points = {task.points}\n"
        f"  hints = [\n{hints}  ]\n  functions = [{_toml(task.function)}]\n{rubric}{questions}"
    )


def registry_text(name: str, title: str, trade: str, order: int) -> str:
    recap = (
        f"You traded {trade.replace('{', '{{').replace('}', '}}')}: your {FUNCTION} matched 2 * x exactly "
        f"on {{{FIGURE_KEY}:.0f}} values."
    )
    check_hint = (
        f"Does {FUNCTION} pass x through {CHECK} first, so that NaN or an infinity raises ValueError instead of "
        "coming back doubled?"
    )
    return f"""# ---- {name} ----
# Scaffolded by `kata new`: replace the placeholder tasks, their hints and
# questions, and the recap with the kata's own (CONTRIBUTING.md says how).
[[kata]]
name = {_toml(name)}
title = {_toml(title)}
trade = {_toml(trade)}
order = {order}
recap = {_toml(recap)}
{"".join(_task_toml(task) for task in _TASKS)}
  [[kata.task.check]]
  tests = [{_toml(SUITE_TESTS["double"][1])}]
  hint = {_toml(check_hint)}

# ---- end {name} ----
"""


def preset_text(name: str, title: str, preset: str) -> str:
    return f'''[[preset]]
name = "{preset}"
title = {_toml(f"{title} in {PRESET_MINUTES} minutes")}
kata = "{name}"
minutes = {PRESET_MINUTES}
difficulty = "easy"
'''


def checklist_text(name: str, title: str, trade: str, order: int) -> str:
    return f"""<!-- {name} -->
## {order}. {title}: {trade} (`katas/{name}.py`)

Scaffolded by `kata new`: replace this paragraph with what the technique buys and what it costs, and the tasks below with the kata's own.

- [ ] **finite** (1 pt): {CHECK}: x as float64, ValueError on NaN or infinity. Done when: `{CHECK}(x)` gives x's values exactly, as a float64 array of x's shape, for any finite x (float32 input, a plain number and empty arrays included), and x holding NaN or an infinity raises ValueError.
- [ ] **double** (2 pts): {FUNCTION}: twice x in float64, through {CHECK}. Done when: `{FUNCTION}(x)` equals 2 * x exactly, in float64 and of x's shape, for any finite x (a plain number and empty arrays included), and x holding NaN or an infinity raises ValueError.
<!-- end {name} -->
"""


def readme_row(name: str, trade: str, order: int) -> str:
    trade = trade.replace("|", "\\|")
    return f"| {order} | `{name}` | {trade} | `{CHECK}` and `{FUNCTION}`, placeholders `kata new` wrote, to be replaced |\n"


def bench_text(name: str, title: str) -> str:
    return f'''"""What {FUNCTION} costs in the {name} kata ({title}): time per call on arrays of growing size.

    python benchmarks/bench_{name}.py [--repeats 5] [--target reference]

Scaffolded by `kata new`: replace it with a benchmark of what the kata trades.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from grader.kata import target as _target  # noqa: E402
from shared import bench_parser, load_kata, median_seconds, run_main  # noqa: E402

SIZES = (1_000, 100_000, 1_000_000)


def main() -> None:
    args = bench_parser(__doc__, "{name}", 5, "timed runs per size; the median is reported").parse_args()

    module = load_kata(args.target, "{name}")
    print(f"{FUNCTION} from {{_target.describe(args.target)}}; median of {{args.repeats}} runs")
    print(f"{{'values':>10}}  {{'ms':>8}}  {{'values/s':>12}}")
    for n in SIZES:
        x = np.random.default_rng(0).standard_normal(n)
        seconds, _ = median_seconds(lambda: module.{FUNCTION}(x), args.repeats)
        print(f"{{n:>10,}}  {{seconds * 1e3:>8.3f}}  {{n / seconds:>12,.0f}}")


if __name__ == "__main__":
    run_main(main)
'''


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
    existing = [str(p.relative_to(root)) for p in created.values() if p.exists()]
    if existing:
        raise ScaffoldError(f"kata {name!r} would overwrite {', '.join(existing)}: nothing was written")
    for needed in (
        created["solution"].parent,
        created["stub"].parent,
        created["suite"].parent,
        created["benchmark"].parent,
    ):
        if not needed.is_dir():
            raise ScaffoldError(f"{root} is not a checkout of the katas: there is no {needed}")

    registry_path, checklist_path, readme_path = (
        root / "grader" / "kata" / "katas.toml",
        root / "CHECKLIST.md",
        root / "README.md",
    )
    katas = load_registry(registry_path)
    order = max((k.order for k in katas), default=0) + 1
    preset = _preset_name(name, {p.name for p in load_presets(registry_path)})

    solution = solution_text(name, title, trade)
    stub = make_stub(solution)
    new_files = {
        created["solution"]: solution,
        created["stub"]: stub,
        created["suite"]: suite_text(name, title),
        created["benchmark"]: bench_text(name, title),
    }
    originals = {path: path.read_text(encoding="utf-8") for path in (registry_path, checklist_path, readme_path)}
    edits = {
        registry_path: _with_registry(originals[registry_path], name, title, trade, order, preset),
        checklist_path: _with_checklist(originals[checklist_path], checklist_text(name, title, trade, order)),
        readme_path: _with_readme(originals[readme_path], readme_row(name, trade, order)),
    }
    _validated_registry(edits[registry_path])

    written: list[Path] = []
    try:
        for path, text in new_files.items():
            with open(path, "x", encoding="utf-8") as f:  # "x": never overwrite a file that appeared meanwhile
                written.append(path)
                f.write(text)
        for path, text in edits.items():
            written.append(path)
            path.write_text(text, encoding="utf-8")
    except BaseException:
        for path in written:
            if path in originals:
                path.write_text(originals[path], encoding="utf-8")
            else:
                path.unlink(missing_ok=True)
        raise
    return written
