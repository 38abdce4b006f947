"""How long grading takes.

Reports the wall time of `kata grade --target reference` for every kata
(--jobs 2) and for each kata alone, and of the same suites under plain
pytest (`kata test`'s way: one process, no table, no per-check limits).
Both go through the judge and jail: every learner call is a round trip to
the jail process, so the overhead ratio is the runner's (a judge process
per kata, the event pipe), not the jail's. Last, one task graded again and
again in one process, as `kata watch`, `kata grade-all` and the project's
tests do: the first grading starts the judge server, every later judge is
forked from it warm (and its jails from the jail zygote, grader/jailer/zygote.py);
then the same with every jail started as a new process.

    python benchmarks/bench_grader.py [--repeats 3] [--jobs 2]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.jailer import zygote as forks  # noqa: E402
from grader.kata.registry import find_kata, load_registry  # noqa: E402
from grader.measure.bench import Parser  # noqa: E402  (one BLAS thread; --native-blas; the BLAS kernel in the header)
from grader.run.runner import grade_kata  # noqa: E402


def wall(cmd: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--jobs", type=int, default=2, help="--jobs for grading every kata")
    args = parser.parse_args()

    katas = load_registry()
    kata_cmd = [sys.executable, "-m", "grader.cli", "grade", "--target", "reference"]
    plain = [sys.executable, "-m", "pytest", "-q", "-c", os.devnull, "-p", "no:cacheprovider", "--target", "reference"]
    env_note = f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, median of {args.repeats}"
    print(f"grading the reference solutions ({env_note})\n")
    print(f"{'what':<34}{'kata grade s':>14}{'plain pytest s':>16}{'overhead':>10}")
    rows = [
        (
            f"all {len(katas)} katas, --jobs {args.jobs}",
            kata_cmd + ["--jobs", str(args.jobs)],
            plain + [str(k.suite) for k in katas],
        )
    ]
    rows += [(k.name, kata_cmd + [k.name], plain + [str(k.suite)]) for k in katas]
    for label, graded, raw in rows:
        g, p = wall(graded, args.repeats), wall(raw, args.repeats)
        print(f"{label:<34}{g:>14.2f}{p:>16.2f}{g / p:>9.2f}x")

    kata, task = find_kata("moe"), "router"
    times = regrade(kata, task, args.repeats + 1)
    print(f"\nmoe:{task} graded {len(times)} times in one process:")
    print(f"  the first (it starts the judge server)       {times[0]:.2f} s")
    print(f"  each later one (a judge forked from it warm)  {statistics.median(times[1:]):.2f} s (median)")
    os.environ[forks.VAR] = "off"
    spawned = regrade(kata, task, args.repeats)
    median = statistics.median(spawned)
    print(f"  each, every jail a new process               {median:.2f} s (median; KATA_JAIL_FORKS=off)")


def regrade(kata, task: str, n: int) -> list[float]:
    """Seconds of each of n gradings of one task of kata, one after another in this process."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        graded = grade_kata(kata, "reference", tasks=[task])
        times.append(time.perf_counter() - t0)
        assert graded.tasks[0].status.value == "pass", graded.tasks[0].message
    return times


if __name__ == "__main__":
    main()
