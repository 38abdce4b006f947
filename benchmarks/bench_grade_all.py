"""How long a class takes: `kata grade-all` on N copies of the reference
solutions (each a student folder with katas/ one level down), against N
times one student graded alone, divided by the cores.

    python benchmarks/bench_grade_all.py [--students 30] [--jobs CORES] [--repeats 3]

The target is N x (one student's time) / cores + 10%: grading a class should
keep every core busy and cost nothing on top.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from grader.measure.bench import Parser  # noqa: E402  (one BLAS thread; --native-blas; the BLAS kernel in the header)


def seconds(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-500:]}")
    return took


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30, help="students in the class (default 30)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of one student alone; the median counts (default 3)"
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="--jobs of grade-all (default: all cores)"
    )
    args = parser.parse_args()
    if min(args.students, args.jobs, args.repeats) < 1:
        parser.error("--students, --jobs and --repeats must be at least 1")
    kata = [sys.executable, "-m", "grader.cli"]
    with tempfile.TemporaryDirectory(prefix="kata-bench-class-") as tmp:
        tmp = Path(tmp)
        for i in range(args.students):
            shutil.copytree(
                ROOT / "reference" / "solutions",
                tmp / "class" / f"student{i:02d}" / "katas",
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        alone = kata + ["grade", "--target", str(tmp / "class" / "student00" / "katas")]
        one = statistics.median(seconds(alone, ROOT) for _ in range(args.repeats))
        whole = seconds(
            kata + ["grade-all", str(tmp / "class"), "--out", str(tmp / "book"), "--jobs", str(args.jobs)], ROOT
        )
    bound = args.students * one / args.jobs * 1.10
    print(f"grading {args.students} students (reference solutions) on {os.cpu_count()} cores, --jobs {args.jobs}")
    print(f"one student alone (kata grade, --jobs 1, median of {args.repeats}):  {one:7.1f} s")
    print(f"the class (kata grade-all):                          {whole:7.1f} s")
    print(f"target N x one / jobs + 10%:                         {bound:7.1f} s  ({whole / bound:.2f} of it)")


if __name__ == "__main__":
    main()
