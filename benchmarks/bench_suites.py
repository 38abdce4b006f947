"""How strict the grading suites are: mutants per kata, and the margin of every speed bar.

    python benchmarks/bench_suites.py [--repeats 10] [--hogs 0]

Counts the mutants each kata's suite must catch (grader/suites/KATA/mutants.toml)
and the checks of each suite, then grades the reference solutions' speed
tasks `--repeats` times (two judges at a time, as `kata grade --jobs 2`
runs two katas; each judge grades one kata up to BATCH times), optionally
beside `--hogs` processes that keep a core busy, and prints, for every
figure a speed check measures, its bar and the reference's margin: how
many times over the bar it clears it (value / bar for a figure where higher
is better, bar / value where lower is), the worst and the median.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from grader.kata.registry import load_registry  # noqa: E402
from grader.measure.bench import Parser  # noqa: E402  (one BLAS thread; --native-blas; the BLAS kernel in the header)
from grader.run.runner import Grading, grade_batch  # noqa: E402

from mutation import load_mutants  # noqa: E402

BATCH = 10  # gradings of one kata per judge in speed_figures


def _hog() -> None:
    while True:
        pass


def hogs(count: int):
    """`count` processes that each keep a core busy until the returned list is killed."""
    started = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(count)]
    for hog in started:
        hog.start()
    return started


def speed_figures(repeats: int) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], tuple], int]:
    """(kata, figure) -> margins over repeats; (kata, figure) -> (bar, better); how many grades failed a speed task.
    Grades every kata's speed task `repeats` times, two judges at a time (as --jobs 2). The gradings of a kata
    run in batches of at most BATCH, one after another in one judge (grader.run.runner.grade_batch), each with its
    own jails and fixtures: the judge's start-up is paid once a batch, and the two lanes stay about as busy."""
    katas = [k for k in load_registry() if any(t.name == "speed" for t in k.tasks)]
    batches = [(k, min(BATCH, repeats - done)) for k in katas for done in range(0, repeats, BATCH)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        graded = list(pool.map(lambda b: grade_batch(b[0], [Grading("reference", ("speed",))] * b[1]), batches))
    margins: dict[tuple[str, str], list[float]] = {}
    bars: dict[tuple[str, str], tuple] = {}
    failed = 0
    for (kata, _), results in zip(batches, graded):
        for result in results:
            for task in result.tasks:
                failed += task.status != "pass"
                for fig in task.figures:
                    if fig["bar"] is None:
                        continue
                    key = (kata.name, fig["name"])
                    higher = fig["better"] == "higher"
                    margin = fig["value"] / fig["bar"] if higher else fig["bar"] / max(fig["value"], 1e-12)
                    margins.setdefault(key, []).append(margin)
                    bars[key] = (fig["bar"], fig["unit"], ">=" if higher else "<=")
    return margins, bars, failed


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10, help="grades of every speed task (default 10)")
    parser.add_argument("--hogs", type=int, default=0, help="processes keeping a core busy meanwhile (default 0)")
    args = parser.parse_args()
    if args.repeats < 1 or args.hogs < 0:
        parser.error("need --repeats >= 1 and --hogs >= 0")

    print(f"{'kata':<14}{'checks':>7}{'mutants':>9}{'of the alternative':>20}")
    for kata in load_registry():
        mutants, alternative = load_mutants(kata.name)
        checks = sum(len(t.tests) for t in kata.tasks)
        print(f"{kata.name:<14}{checks:>7}{len(mutants):>9}{len(alternative):>20}")

    busy = hogs(args.hogs)
    try:
        margins, bars, failed = speed_figures(args.repeats)
    finally:
        for hog in busy:
            hog.kill()
    print(
        f"\nthe reference's speed tasks graded {args.repeats} times, two judges at a time (batches of {BATCH}), "
        f"beside {args.hogs} busy processes "
        f"({os.cpu_count()} cores): {failed} grades of a task failed"
    )
    print(f"{'kata':<14}{'figure':<58}{'bar':>14}{'worst margin':>14}{'median':>8}")
    for (kata, name), values in sorted(margins.items()):
        bar, unit, way = bars[(kata, name)]
        worst, median = min(values), statistics.median(values)
        print(f"{kata:<14}{name[:56]:<58}{way + format(bar, '.3g') + unit:>14}{worst:>13.2f}x{median:>7.2f}x")


if __name__ == "__main__":
    main()
