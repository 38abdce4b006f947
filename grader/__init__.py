"""The grader: the `kata` CLI, the runner, the judge and jail, the suites and reporting."""

import os as _os
import sys as _sys


def _forget_the_start_folder() -> None:
    """Take the folder `python -m grader...` was started in off sys.path, before anything imports from it.

    `python -m` puts that folder first on sys.path, so a submission's tabulate.py, numpy.py or
    click.py would otherwise be imported into the grader itself. While Python is still locating
    the module to run (importing this package), sys.argv[0] is "-m"; the `kata` entry point and an
    import from other code never see that. The folder that holds this grader is kept: it is the
    grader's own checkout. A start folder that holds a grader/ package of its own is beyond this:
    Python imports that package instead of this one (docs/cli.md names the entry points to use there)."""
    if _sys.argv[:1] != ["-m"] or not _sys.path:
        return
    first = _os.path.abspath(_sys.path[0] or _os.curdir)
    home = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    if first == _os.path.abspath(_os.curdir) and first != home:
        del _sys.path[0]


_forget_the_start_folder()

# The environment that runs NumPy on one BLAS thread. Anything that times code (a grade's speed checks,
# kata bench, play and test, the benchmark scripts) sets it before NumPy loads, so that a figure measures
# the code, not how many cores the machine had free.
ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
