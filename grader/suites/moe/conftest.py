"""Fixtures of the moe suite: the kata under test, made once per grading."""

from __future__ import annotations

import pytest

from grader.suites.common import load_kata


@pytest.fixture(scope="package")
def kata():
    return load_kata("moe")
