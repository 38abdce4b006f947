#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image
# (Ubuntu; /autograder/source holds this zip's contents). Written by `kata gradescope build`.
# KATA_AUTOGRADER_ROOT lets the grader's own tests run this script outside Gradescope.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
root="${KATA_AUTOGRADER_ROOT:-/autograder}"
# Every Python here runs isolated (-I) from a folder that holds nothing: whatever folder this is started
# in, nothing there (a pip/ package, a sitecustomize.py) is imported in place of the real one.
cd /
apt-get update
# bubblewrap: the jail's namespaces when the grader does not run as root.
apt-get install -y --no-install-recommends python3 python3-pip python3-venv bubblewrap
if ! python3 -I -c 'import sys; sys.exit(sys.version_info < (@MIN_PYTHON@))'; then
    echo "the grader's pinned dependencies need Python >= @MIN_PYTHON_DOTTED@; this image has $(python3 --version 2>&1):" \
         "choose a newer Ubuntu base image in the autograder settings" >&2
    exit 1
fi
# A virtual environment of its own: the image's Python packages stay as they are.
python3 -I -m venv "$root/venv"
# The grader's dependencies at the versions its grades are checked with (constraints.txt). The grader
# itself is not installed: run_autograder runs it from $root/source, so the venv, which the jail
# reads for numpy, holds no copy of the grading edition (held-back suites and baselines included).
"$root/venv/bin/python" -I -m pip install -c "$root/source/grader/instructor/constraints.txt" \
    -r "$root/source/requirements.txt"
# Only root reads the grading edition: a jail that shares the file system (where the grader cannot
# make namespaces, its "uid" mode) runs as a uid of its own.
chmod -R go-rwx "$root/source"
