"""What each technique buys, measured: `python -m benchmarks.bench_KATA` (what `kata bench KATA` runs) or, from a
checkout, `python benchmarks/bench_KATA.py`; and the project's own costs (bench_grader, bench_suites, bench_tests)."""

# Imported first, while `python -m benchmarks.bench_KATA` is still locating its module: grader/__init__ then takes
# the folder the benchmark was started in (the learner's, under `kata bench`) off sys.path, so that a numpy.py
# there is never imported in place of NumPy.
import grader  # noqa: F401
