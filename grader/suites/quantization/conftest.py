"""Fixtures of the quantization suite: the kata under test and, per function, the same kata
once a first call has shown it written (an unwritten stub is reported todo before Hypothesis
spends time shrinking its NotImplementedError); each made once per grading. Also the small
random model the model checks quantize.
"""

from __future__ import annotations

import numpy as np
import pytest

from grader.suites.common import load_kata
from grader.suites.quantization.strategies import MODEL_CONFIG
from reference.model import Model


@pytest.fixture(scope="package")
def kata():
    return load_kata("quantization")


def _probe(call) -> None:
    """Call a function once on a plain input, so an unimplemented stub is
    reported as todo before Hypothesis spends time shrinking its
    NotImplementedError. Any other outcome is left for the test to judge."""
    try:
        call()
    except NotImplementedError:
        raise
    except Exception:
        pass


@pytest.fixture(scope="package")
def sym(kata):
    _probe(lambda: kata.quantize_symmetric(np.ones(4, np.float32), 8))
    return kata


@pytest.fixture(scope="package")
def aff(kata):
    _probe(lambda: kata.quantize_affine(np.ones(4, np.float32), 8))
    return kata


@pytest.fixture(scope="package")
def grp(kata):
    _probe(lambda: kata.quantize_grouped(np.ones(4, np.float32), 8, 2))
    return kata


@pytest.fixture(scope="package")
def pack(kata):
    _probe(lambda: kata.pack_int4(np.zeros(2, np.int8)))
    return kata


@pytest.fixture(scope="package")
def q8(kata):
    _probe(lambda: kata.quantize_q8_0(np.ones(32, np.float32)))
    return kata


@pytest.fixture(scope="package")
def q4(kata):
    _probe(lambda: kata.quantize_q4_0(np.ones(32, np.float32)))
    return kata


@pytest.fixture(scope="package")
def small_model():
    return Model.random(MODEL_CONFIG, seed=3)


@pytest.fixture(scope="package")
def cal(kata):
    _probe(lambda: kata.calibrate(np.ones(4, np.float32), 8))
    return kata


@pytest.fixture(scope="package")
def planner(kata):
    _probe(lambda: kata.mixed_precision_plan({2: {"a": 0.0}}, {"a": 32}, 100, choices=(2,)))
    return kata


@pytest.fixture(scope="package")
def scales(kata):
    _probe(lambda: kata.activation_scales(np.ones((2, 2), np.float32), 0.5))
    return kata
