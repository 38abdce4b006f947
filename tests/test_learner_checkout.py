"""The project's tests do not depend on what a learner wrote in katas/: the tests that read stubs, grade
them or copy them pass in a copy of this checkout whose katas/ hold every kata solved by the reference, or
a mix (one solved, one half solved, one with a syntax error, one a binary file, the rest untouched).
Those tests make the stubs they need from the solutions (grader.kata.stubs.stub_for); a file in katas/
is checked against the stubs only while it is one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.kata.registry import load_registry
from grader.kata.stubs import make_stub, stub_for
from grader.kata.target import ROOT, SOLUTIONS_DIR

# The tests that read, grade or copy stubs (every one that read katas/ before), run in the copy.
AFFECTED = [
    "tests/suites/test_katas.py",
    "tests/learn/test_learner.py",
    "tests/instructor/test_instructor.py",
    "tests/test_readme.py",
]
WORDS = "stub or init or reset or bench or edition or readme"


def copy_checkout(dest: Path) -> None:
    """The files of this checkout a contributor has (tracked, or new and not ignored), as in the work tree."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs git to list the checkout's files: {exc}")
    for rel in filter(None, listed.decode().split("\0")):
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())


def solution(kata: str) -> str:
    return (SOLUTIONS_DIR / f"{kata}.py").read_text(encoding="utf-8")


def half_solved(kata: str) -> str:
    """The stub with its first function written as the solution writes it (and the helpers it uses)."""
    first = re.search(r"^def ([A-Za-z]\w*)", stub_for(kata), re.M)[1]
    return make_stub(
        solution(kata), only=set(re.findall(r"^(?:def|class) ([A-Za-z]\w*)", stub_for(kata), re.M)) - {first}
    )


def learners_katas(how: str) -> dict[str, bytes]:
    """What a learner's katas/ holds: every kata solved, or the mix."""
    names = [k.name for k in load_registry()]
    if how == "solved":
        return {name: solution(name).encode() for name in names}
    solved, half, broken, binary = names[:4]
    return {
        solved: solution(solved).encode(),
        half: half_solved(half).encode(),
        broken: stub_for(broken).replace("    raise NotImplementedError", "    raise NotImplementedError(", 1).encode(),
        binary: b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)),
    }


@pytest.mark.slow  # a copy of the checkout, and a pytest run in it
@pytest.mark.parametrize("how", ["solved", "mixed"])
def test_the_tests_that_use_stubs_pass_whatever_the_learner_wrote_in_katas(tmp_path, how):
    copy = tmp_path / "checkout"
    copy_checkout(copy)
    written = learners_katas(how)
    for name, data in written.items():
        (copy / "katas" / f"{name}.py").write_bytes(data)
    assert all(data != stub_for(name).encode() for name, data in written.items())
    env = {k: v for k, v in os.environ.items() if not k.startswith("KATA_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(copy), NO_COLOR="1")
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-n", "0", "-m", "not slow", "-k", WORDS]
        + AFFECTED,
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert ran.returncode == 0, f"with katas {how}:\n" + ran.stdout[-4000:]
    assert re.search(r"\b\d+ passed", ran.stdout), ran.stdout[-2000:]
    assert all((copy / "katas" / f"{name}.py").read_bytes() == data for name, data in written.items())
