#!/usr/bin/env bash
# Written by `kata classroom`; the autograding workflow runs it before the tests.
# 1. The jail: bubblewrap, and a check that it can isolate the learner's code on this runner.
#    The grader is told to use it (KATA_JAIL=bwrap in every test's command), so it never falls
#    back to grading unconfined; if bubblewrap cannot run here, this stops and says so.
# 2. The grader: the instructor's wheel at GRADER_URL, checked against its sha256 by pip, with its
#    dependencies at the versions the wheel's grader/instructor/constraints.txt pins. Never the
#    grader/ folder of this repository, which the student may have edited.
# The workflow starts this in the student's checkout. Python puts the folder it starts in first on
# sys.path for -m and -c, so a pip/ package or a zipfile.py there would run instead of the real one:
# every Python here runs from a folder of its own, isolated (-I: no start folder, user site or
# PYTHON* variables on its path).
set -euo pipefail
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT  # the wheel's copy and the pins go with the script, whatever way it ends
cd "$work"
grader_url="@GRADER_URL@"
grader_sha256="@GRADER_SHA256@"
sudo apt-get update
sudo apt-get install -y --no-install-recommends bubblewrap
if [ -e /proc/sys/kernel/apparmor_restrict_unprivileged_userns ]; then
    # Ubuntu 24.04's AppArmor forbids the unprivileged user namespaces that bubblewrap makes.
    sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0
fi
if ! bwrap --unshare-all --die-with-parent --ro-bind / / -- /bin/true; then
    echo "::error::bubblewrap cannot make namespaces on this runner, so the katas cannot be graded in isolation: not grading" >&2
    exit 1
fi
printf '%s @ %s --hash=sha256:%s\n' "@PACKAGE@" "$grader_url" "$grader_sha256" > "$work/grader.txt"
python -I -m pip download --no-deps --require-hashes -r "$work/grader.txt" -d "$work/wheel"
wheel="$(ls "$work"/wheel/*.whl)"
python -I -c 'import sys, zipfile; sys.stdout.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())' \
    "$wheel" grader/instructor/constraints.txt > "$work/constraints.txt"
python -I -m pip install -c "$work/constraints.txt" "$wheel"
