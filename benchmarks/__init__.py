"""What each technique buys, measured: `python -m benchmarks.bench_KATA` (what `kata bench KATA` runs) or, from a
checkout, `python benchmarks/bench_KATA.py`; and the project's own costs (bench_grader, bench_suites, bench_tests)."""
