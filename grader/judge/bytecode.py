"""Where judges keep the bytecode of what they import, so the next judge loads it instead of compiling it."""

from __future__ import annotations

import os
import sys

PYCACHE_VAR = "KATA_PYCACHE"  # set by the runner: the folder where judges keep bytecode


def use_pycache() -> None:
    """Keep the bytecode of what a judge imports from now on (the grader, the
    model, the suites as pytest rewrites them) in the folder $KATA_PYCACHE
    names, so that the next judge loads it instead of compiling it again.
    What is imported already (the preloaded libraries) keeps its own cache."""
    folder = os.environ.get(PYCACHE_VAR)
    if folder:
        sys.pycache_prefix, sys.dont_write_bytecode = folder, False
