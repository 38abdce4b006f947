"""The read-only view a confined jail gets of the file system (grader.jail.confine.view), as its mount list."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

from grader.jail import confine


@pytest.fixture
def bound_checkout():
    """A copy of the project (a checkout: its packages, solutions, tests and .git) inside a folder the jail
    reads, the Python installation, as /usr/local/src/katas would be inside /usr."""
    try:
        checkout = tempfile.mkdtemp(prefix="kata-checkout-", dir=sys.prefix)
    except OSError:
        pytest.skip(f"cannot write into {sys.prefix}")
    for rel in ("grader/__init__.py", "reference/__init__.py", "reference/solutions/moe.py", ".git/HEAD"):
        os.makedirs(os.path.dirname(os.path.join(checkout, rel)), exist_ok=True)
        open(os.path.join(checkout, rel), "w").close()
    yield os.path.realpath(checkout)
    shutil.rmtree(checkout)


def test_a_checkout_inside_a_bound_folder_is_hidden_whole(bound_checkout):
    mounts = confine.view([bound_checkout])
    assert any(kind == "ro" and confine._within(bound_checkout, src) for kind, src in mounts), (
        "the fake checkout should lie inside a bound folder"
    )
    assert ("empty", bound_checkout) in mounts
    shown = [src for kind, src in mounts if kind == "ro" and confine._within(src, bound_checkout)]
    assert shown == [], f"bound again inside the hidden checkout: {shown}"


def test_a_folder_on_the_path_without_the_project_is_left_alone(bound_checkout):
    other = os.path.join(bound_checkout, "reference")  # holds a package, but neither grader nor reference
    assert ("empty", other) not in confine.view([other]) and ("empty", bound_checkout) not in confine.view([other])


def test_the_view_still_binds_numpy_and_the_python_a_jail_runs_on():
    import numpy

    mounts = confine.view()
    seen = [src for kind, src in mounts if kind == "ro"]
    hidden = [src for kind, src in mounts if kind == "empty"]

    def visible(path: str) -> bool:
        cover = max((s for s in seen if confine._within(path, s)), key=len, default=None)
        over = max((h for h in hidden if confine._within(path, h)), key=len, default="")
        return cover is not None and len(cover) > len(over)

    assert visible(os.path.realpath(numpy.__file__))
    assert visible(os.path.realpath(os.__file__))
