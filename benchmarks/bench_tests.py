"""Time the project's own test suite, the quick part or all of it.

    python benchmarks/bench_tests.py [--all]

Runs `python -m pytest -n auto -m "not slow" -q` (with --all, `python -m pytest -n auto -q`)
in this checkout, as a contributor would, on every core (pytest-xdist's `-n auto`, as
pyproject.toml's addopts and .ci/run pass it), and prints its wall time, pytest's count, and
where the time goes: the tests' own durations summed by file (on all the
cores together, so they add up to more than the wall time).
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from grader.measure.bench import Parser  # noqa: E402  (one BLAS thread; --native-blas; the BLAS kernel in the header)


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every test, the slow ones too (as CI runs them)")
    args = parser.parse_args()

    select = [] if args.all else ["-m", "not slow"]
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "auto", "-q", "--durations=0", *select],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    lines = run.stdout.splitlines()
    summary = next((line for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), "(no summary)")
    if run.returncode != 0:
        raise SystemExit(f"pytest exited {run.returncode}: {summary}\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
    by_file: collections.Counter = collections.Counter()
    for line in lines:
        m = re.match(r"([\d.]+)s (?:setup|call|teardown)\s+(\S+?)::", line)
        if m:
            by_file[m.group(2)] += float(m.group(1))
    which = "python -m pytest -n auto" + ("" if args.all else ' -m "not slow"')
    print(f"{which}: {wall:.0f} s on {os.cpu_count()} cores (Python {sys.version.split()[0]}); {summary.strip('= ')}")
    print(f"\n{'file':<36}{'test seconds':>13}")
    for name, seconds in by_file.most_common():
        print(f"{name:<36}{seconds:>13.1f}")


if __name__ == "__main__":
    main()
