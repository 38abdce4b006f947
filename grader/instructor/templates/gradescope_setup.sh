#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image
# (Ubuntu; /autograder/source holds this zip's contents). Written by `kata gradescope build`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
# bubblewrap: the jail's namespaces when the grader does not run as root.
apt-get install -y --no-install-recommends python3 python3-pip python3-venv bubblewrap
if ! python3 -c 'import sys; sys.exit(sys.version_info < (@MIN_PYTHON@))'; then
    echo "the grader's pinned dependencies need Python >= @MIN_PYTHON_DOTTED@; this image has $(python3 --version 2>&1):" \
         "choose a newer Ubuntu base image in the autograder settings" >&2
    exit 1
fi
# A virtual environment of its own: the image's Python packages stay as they are.
python3 -m venv /autograder/venv
# The grader's dependencies at the versions its grades are checked with (constraints.txt). The grader
# itself is not installed: run_autograder runs it from /autograder/source, so the venv, which the jail
# reads for numpy, holds no copy of the grading edition (held-back suites and baselines included).
/autograder/venv/bin/python -m pip install -c /autograder/source/grader/instructor/constraints.txt \
    -r /autograder/source/requirements.txt
# Only root reads the grading edition: a jail that shares the file system (where the grader cannot
# make namespaces, its "uid" mode) runs as a uid of its own.
chmod -R go-rwx /autograder/source
