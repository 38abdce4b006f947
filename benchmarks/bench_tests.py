"""Time the project's own test suite, the quick part or all of it.

    python benchmarks/bench_tests.py [--all]

Runs `python -m pytest -m "not slow" -q` (with --all, `python -m pytest -q`)
in this checkout, as a contributor would, and prints its wall time, the
counts pytest reports, and how the time splits between the mutant gradings
(tests/test_mutants.py) and everything else. The suite runs on every core
(pytest-xdist, configured in pyproject.toml).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_pytest(args: list[str]) -> tuple[float, str]:
    """(wall seconds, pytest's last line) of `python -m pytest -q` with args, from the checkout."""
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines else "(no output)"
    if run.returncode != 0:
        raise SystemExit(f"pytest exited {run.returncode}: {summary}\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
    return seconds, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every test, the slow ones too (as CI runs them)")
    args = parser.parse_args()

    marker = [] if args.all else ["-m", "not slow"]
    which = "python -m pytest" + ("" if args.all else ' -m "not slow"')
    print(f"{which}: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    total, summary = run_pytest(marker)
    mutants, mutant_summary = run_pytest([*marker, "tests/test_mutants.py"])
    rest, rest_summary = run_pytest([*marker, "--ignore=tests/test_mutants.py"])
    print(f"{'part':<32} {'wall s':>7}  pytest says")
    print(f"{'everything':<32} {total:>7.1f}  {summary}")
    print(f"{'the mutants (test_mutants.py)':<32} {mutants:>7.1f}  {mutant_summary}")
    print(f"{'the rest':<32} {rest:>7.1f}  {rest_summary}")
    n = re.search(r"(\d+) passed", mutant_summary)
    if n:
        print(f"{int(n.group(1))} mutant and alternative gradings: {mutants / int(n.group(1)):.2f} s each, all cores")


if __name__ == "__main__":
    main()
