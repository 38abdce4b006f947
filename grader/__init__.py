"""The grader: the `kata` CLI, the runner, the judge and jail, the suites and reporting."""

# The environment that runs NumPy on one BLAS thread. Anything that times code (a grade's speed checks,
# kata bench, play and test, the benchmark scripts) sets it before NumPy loads, so that a figure measures
# the code, not how many cores the machine had free.
ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
