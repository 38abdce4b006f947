"""Fixtures of the distillation suite: the kata under test and the teacher's data, each made
once per grading.
"""

import pytest

from grader.suites import common
from grader.suites.common import load_kata
from grader.suites.distillation.strategies import SEQUENCES, TEACHER_CONFIG, _teacher_positions
from reference.model import Model


@pytest.fixture(scope="package")
def kata():
    return load_kata("distillation")


@pytest.fixture(scope="package")
def teacher_data():
    """A small random teacher and two splits of the text it writes."""
    gen = common.rng(6)
    model = Model.random(TEACHER_CONFIG, seed=int(gen.integers(2**31)))
    return _teacher_positions(model, gen, SEQUENCES), _teacher_positions(model, gen, SEQUENCES)
