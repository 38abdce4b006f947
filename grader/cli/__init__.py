"""The `kata` command line: click commands that parse, call the library below, and print."""

import os as _os

from grader import ONE_BLAS_THREAD as _ONE_BLAS_THREAD

# Every `kata` command runs NumPy on one BLAS thread, set before NumPy loads (before any command's module
# is imported); a value the caller set is kept.
for _name, _value in _ONE_BLAS_THREAD.items():
    _os.environ.setdefault(_name, _value)
