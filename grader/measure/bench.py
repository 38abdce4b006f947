"""What the benchmark scripts share: the shipped models' shapes, loading a
shipped model or a random stand-in of its shape, loading a kata module to
time, a median timer, the parser (--native-blas, and a header naming the BLAS
kernel), the --target and --repeats options; and one BLAS thread for every
script that imports it.

A kata's benchmark runs as a module, `python -m grader.suites.KATA.bench`
(what `kata bench KATA` runs, from a checkout or an installed wheel alike),
or from a checkout as a script, `python grader/suites/KATA/bench.py`; the
others as `python benchmarks/bench_X.py`. A script puts the checkout on
sys.path before importing this module.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from dataclasses import dataclass, field

from grader import ONE_BLAS_THREAD
from grader.kata import writable
from grader.measure import blas, timing

NATIVE_FLAG = "--native-blas"


def _one_blas_thread() -> None:
    """Re-run this script with NumPy on one BLAS thread (grader.ONE_BLAS_THREAD),
    as `kata bench` runs it, unless every variable is set already (a value the
    caller set is kept); with --native-blas, also without the variables that
    force an OpenBLAS kernel (grader.measure.blas). NumPy reads them once, when it
    loads, which every script has done by the time it imports this module:
    hence the re-run."""
    missing = {k: v for k, v in ONE_BLAS_THREAD.items() if k not in os.environ}
    environ = {**os.environ, **missing}
    if NATIVE_FLAG in sys.argv[1:]:
        environ = blas.without_forcing(environ)
    if environ != dict(os.environ):  # the same command line again: `-m grader.suites.KATA.bench` or the script's path
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environ)


_one_blas_thread()

from reference.lm import SHIPPED_SHAPES, shipped_model  # noqa: E402
from reference.model import Model  # noqa: E402

SHAPES = SHIPPED_SHAPES  # the shipped models' shapes, for random stand-ins
TEACHER, DRAFT = SHAPES["teacher"], SHAPES["draft"]


def shipped_or_random(name: str, seed: int = 0) -> tuple[Model, bool]:
    """(the shipped model `name`, True), or (a random model of its shape, False)
    when its weights are missing or do not load (said on stderr)."""
    try:
        model = shipped_model(name)
    except ValueError as exc:
        print(f"(the {name} weights did not load: {exc})", file=sys.stderr)
        model = None
    if model is not None:
        return model, True
    return Model.random(SHAPES[name], seed=seed), False


def load_kata(target: str, kata: str):
    """The module of `kata` from a --target ('katas', 'reference' or a
    directory), imported into this process. A benchmark only reports; unlike
    grading, it runs the code it times in its own process."""
    from grader.kata.in_process import import_kata
    from grader.kata.target import NoKataFolder

    try:
        return import_kata(target, kata)
    except (ValueError, NoKataFolder) as exc:
        raise SystemExit(f"error: {exc}") from None
    except Exception as exc:  # the module's own error (a SyntaxError, say): one line, not a traceback
        raise SystemExit(f"error: {kata}.py of {target} does not load: {type(exc).__name__}: {exc}") from None


def median_seconds(fn, repeats: int, warmup: bool = True):
    """(median wall seconds of fn's calls, the last call's result): at least
    `repeats` calls (more, up to 3 x repeats within 10 s, while their times
    spread by more than 5%), through grader.measure.timing.interleave, the one timing
    primitive, after one untimed call when warmup is set."""
    result = [None]

    def call() -> None:
        result[0] = fn()  # the last result only: holding every one (a 16 MiB copy each) slows the calls timed

    rounds = timing.interleave([timing.ignoring_round(call)], rounds=repeats, spread=0.05, warmup=warmup)
    return rounds.median(0), result[0]


def default_target() -> str:
    """'reference' where this copy of the project ships the reference
    solutions, else 'katas' (a student edition ships none)."""
    from grader.kata import target as _target

    return "reference" if any(_target.SOLUTIONS_DIR.glob("[!_]*.py")) else "katas"


class Parser(argparse.ArgumentParser):
    """The parser of every benchmark script: it takes --native-blas, and once the
    arguments parse, prints the BLAS kernel the figures come from (grader.measure.blas)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_argument(
            NATIVE_FLAG,
            action="store_true",
            help=f"run on the CPU's own OpenBLAS kernel: drop {' and '.join(blas.FORCING)} for this run "
            "(where a host sets them, they force an older kernel that multiplies a few rows 2-3x slower)",
        )

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        print(blas.header(f"run with {NATIVE_FLAG} to measure on this CPU's own kernel") + "\n")
        return parsed


def bench_parser(doc: str, kata: str, repeats: int | None = None, what: str = "") -> argparse.ArgumentParser:
    """The parser a benchmark of `kata` starts from: doc's first paragraph as its
    description, --native-blas, --target, --plot, and --repeats (default
    `repeats`, `what` says what is done with them) unless repeats is None."""
    # Its usage line names the command that runs it (kata bench KATA runs this), not "bench.py".
    parser = Parser(prog=f"python -m grader.suites.{kata}.bench", description=doc.split("\n\n")[0])
    add_target_option(parser, kata)
    if repeats is not None:
        add_repeats_option(parser, repeats, what)

    def picture(text: str) -> str:
        """FILE of --plot, refused before any work is done: its kind, matplotlib and the folder it goes in."""
        if not text.endswith((".png", ".svg")):
            raise argparse.ArgumentTypeError(f"the picture must be a .png or .svg file, got {text!r}")
        if importlib.util.find_spec("matplotlib") is None:
            raise argparse.ArgumentTypeError("drawing needs matplotlib, which is not installed: pip install matplotlib")
        why = writable.why_not_writable(text)
        if why:
            raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {why}")
        return text

    parser.add_argument(
        "--plot",
        metavar="FILE",
        type=picture,
        help="also draw the figures to FILE (.png or .svg); needs matplotlib: pip install -e '.[plot]'",
    )
    return parser


@dataclass
class Panel:
    """One plot of a picture: lines of (label, xs, ys), drawn with markers."""

    title: str
    xlabel: str
    ylabel: str
    lines: list[tuple[str, list, list]] = field(default_factory=list)
    log_y: bool = False
    dashed: tuple[str, ...] = ()  # labels of lines drawn dashed, without markers (a formula, not a measurement)


def plot(path: str | None, title: str, panels: list[Panel]) -> None:
    """Draw panels side by side into path (nothing when path is None), and say where."""
    if path is None:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install -e '.[plot]'") from None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for label, xs, ys in panel.lines:
            style = dict(linestyle="--") if label in panel.dashed else dict(marker="o")
            ax.plot(xs, ys, label=label, **style)
        ax.set(title=panel.title, xlabel=panel.xlabel, ylabel=panel.ylabel)
        if panel.log_y:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"\n(the picture: {path})")


def whole(low: int):
    """An argparse type: a whole number >= low, or the option's own error (exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def positive(text: str) -> float:
    """An argparse type: a finite number > 0, or the option's own error (exit 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def add_repeats_option(parser: argparse.ArgumentParser, default: int, what: str) -> None:
    """The --repeats option: how many timed runs, at least 1; `what` says what is done with them."""
    parser.add_argument("--repeats", type=whole(1), default=default, help=f"{what} (default {default})")


def add_target_option(parser, kata: str) -> None:
    """The --target option every benchmark script takes."""
    default = default_target()
    parser.add_argument(
        "--target",
        default=default,
        help=f"whose {kata} module to run: 'reference', 'katas' (your code) or a directory of "
        f"kata modules (default: {default})",
    )


def run_main(main) -> None:
    """Run a benchmark's main; unfinished kata code ends it with one line, not a traceback."""
    try:
        main()
    except NotImplementedError as exc:
        what = f" ({exc})" if str(exc) else ""
        raise SystemExit(
            f"the kata code this benchmark runs is not written yet{what}: finish the kata first, "
            "or run the reference solutions with --target reference"
        ) from None
