"""The benchmarks of no one kata: the model, the floor, the pretrained models and the project's own costs
(bench_grader, bench_suites, bench_tests), `python -m benchmarks.bench_X` or, from a checkout, `python
benchmarks/bench_X.py`. A kata's own benchmark is grader/suites/KATA/bench.py, what `kata bench KATA` runs."""

# Imported first, while `python -m benchmarks.bench_X` is still locating its module: grader/__init__ then takes
# the folder the benchmark was started in (the learner's, under `kata bench`) off sys.path, so that a numpy.py
# there is never imported in place of NumPy.
import grader  # noqa: F401
