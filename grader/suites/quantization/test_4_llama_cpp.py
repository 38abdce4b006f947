"""Checks of the llama_cpp task: the bytes of llama.cpp's Q8_0 and Q4_0 blocks, against
hand-computed blocks, llama.cpp's formula and (where installed) the gguf package.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from grader.suites.common import rng
from grader.suites.quantization.oracles import _expected_q4_0, _expected_q8_0, _q4_0_bytes, _q8_0_bytes

# Hand-computed blocks: (values, d, codes).
_TIES = [0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.0, -127.0] + [0.0] * 24
Q8_0_BLOCKS = {
    # max|x| = 127 so d = 1: every .5 rounds away from zero (0.5 -> 1, 2.5 -> 3, -2.5 -> -3).
    "ties": (_TIES, 1.0, [1, 2, 3, -1, -3, 127, 127, -127] + [0] * 24),
    "zeros": ([0.0] * 32, 0.0, [0] * 32),
    # max|x| = 254 from a negative value: d = 2, x / d = -127, 2.5, -1.5, 0.5, 0.25.
    "negative max": ([-254.0, 5.0, -3.0, 1.0, 0.5] + [0.0] * 27, 2.0, [-127, 3, -2, 1, 0] + [0] * 27),
    # d = 1: roundf(±(0.5 - 2^-25)) is 0, though |x| + 0.5 rounds up to 1.0 in float32.
    "just below a half": ([127.0, 0.5 - 2.0**-25, -(0.5 - 2.0**-25)] + [0.0] * 29, 1.0, [127, 0, 0] + [0] * 29),
    # d = max|x| / 127 and x * (1 / d) in float32 give 84.5, so 85; in float64, x * id is 84.49999: 84.
    "float32 d": (
        [1.8586623668670654, 1.2366689443588257] + [0.0] * 30,
        float(np.float32(1.8586623668670654) / np.float32(127)),
        [127, 85] + [0] * 30,
    ),
}
Q4_0_BLOCKS = {
    # m = -8 (negative): d = 1, q = min(15, floor(x + 8.5)); ties x = 0.5 -> 9, -0.5 -> 8, 7.5 -> 15.
    "negative max": ([-8.0, 0.5, -0.5, 1.5, 7.5, 3.0] + [0.0] * 26, 1.0, [0, 9, 8, 10, 15, 11] + [8] * 26),
    # m = 16 (positive): d = -2, q = floor(-x / 2 + 8.5).
    "positive max": (
        [16.0, -10.0, 1.0, -1.0] + [0.0] * 12 + [2.0, -3.0] + [0.0] * 14,
        -2.0,
        [0, 13, 8, 9] + [8] * 12 + [7, 10] + [8] * 14,
    ),
    # |8| == |-8|: the first one (8) wins, so d = -1 and -8 maps to min(15, 16) = 15.
    "first max wins": ([0.0, 8.0, -8.0] + [0.0] * 29, -1.0, [8, 0, 15] + [8] * 29),
    # The same tie with the negative value first: it wins, d = 1, and 8 maps to min(15, 16) = 15.
    "first max wins, negative first": ([0.0, -8.0, 8.0] + [0.0] * 29, 1.0, [8, 0, 15] + [8] * 29),
    # m = 32: d = -4, id = -0.25. -(2 - 2^-21) * id = 0.5 - 2^-23, plus 8.5 rounds to 9.0 in float32: code 9
    # (rounding x * id first, then adding 8, gives 8); (2 + 2^-20) * id = -(0.5 + 2^-22), plus 8.5 rounds
    # to 8.0: code 8 (the other way, 7).
    "just below a half": ([32.0, -(2 - 2.0**-21), 2 + 2.0**-20] + [0.0] * 29, -4.0, [0, 9, 8] + [8] * 29),
    # m = 0: d = 0 / -8 = -0.0 in IEEE arithmetic, stored as fp16 bytes 00 80; id = 0, so every q = 8.
    "zeros": ([0.0] * 32, -0.0, [8] * 32),
}


def _assert_block_bytes(quantize, fmt: str, block: str, values: list, want: bytes) -> None:
    """quantize (the learner's Q8_0 or Q4_0 quantizer) writes the bytes llama.cpp writes for the named block."""
    got = quantize(np.array(values, dtype=np.float32))
    assert isinstance(got, bytes), f"{fmt} returned a {type(got).__name__}; it returns bytes"
    assert got == want, f"{fmt} of the '{block}' block: got {got.hex()}, llama.cpp writes {want.hex()}"


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("block", list(Q8_0_BLOCKS), ids=str)
def test_q8_0_matches_hand_computed_blocks(kata, block):
    values, d, codes = Q8_0_BLOCKS[block]
    _assert_block_bytes(kata.quantize_q8_0, "Q8_0", block, values, _q8_0_bytes(d, codes))


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("block", list(Q4_0_BLOCKS), ids=str)
def test_q4_0_matches_hand_computed_blocks(kata, block):
    values, d, codes = Q4_0_BLOCKS[block]
    _assert_block_bytes(kata.quantize_q4_0, "Q4_0", block, values, _q4_0_bytes(d, codes))


# The failure message names the first differing block, so these tests skip
# Hypothesis's shrinking, which is slow on arrays of 32-64 floats.
NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate]
_halves = st.integers(-40, 40).map(lambda k: k / 2)
# A pinned largest value that makes d a power of two (Q8_0: d = 127 / 127 or 254 / 127; Q4_0: d = 32 / -8
# or 64 / -8): halves under it give exact ties, x / d = n + 0.5 in Q8_0 and x / d + 8.5 = n in Q4_0.
_PINS = [127.0, -127.0, 254.0, -254.0, 32.0, -32.0, 64.0, -64.0]


@st.composite
def _pinned_blocks(draw, n: int) -> np.ndarray:
    x = draw(hnp.arrays(np.float32, 32 * n, elements=_halves))
    for b in range(n):
        x[32 * b + draw(st.integers(0, 31))] = draw(st.sampled_from(_PINS))
    return x


llama_blocks = st.integers(1, 2).flatmap(
    lambda n: st.one_of(
        hnp.arrays(
            np.float32,
            32 * n,
            elements=st.one_of(
                st.just(0.0),
                st.floats(2.0**-10, 1000.0, width=32),
                st.floats(-1000.0, -(2.0**-10), width=32),
                _halves,
            ),
        ),
        _pinned_blocks(n),  # in the mixed blocks the floats set d, and exact ties practically never happen
    )
)


def _assert_same_blocks(fmt: str, n: int, got: bytes, want: bytes, size: int) -> None:
    """got equals llama.cpp's bytes want, else name the first block of `size` bytes that differs."""
    assert len(got) == len(want), f"{n} values gave {len(got)} bytes; {fmt} takes {size} per block of 32, {len(want)}"
    if got != want:
        b = next(i for i in range(0, len(want), size) if got[i : i + size] != want[i : i + size])
        raise AssertionError(
            f"{fmt} block {b // size} differs from llama.cpp's: "
            f"got {got[b : b + size].hex()}, want {want[b : b + size].hex()}"
        )


@pytest.mark.task("llama_cpp")
@given(x=llama_blocks)
@settings(phases=NO_SHRINK)
def test_q8_0_matches_the_llama_cpp_formula_on_random_blocks(q8, x):
    _assert_same_blocks("Q8_0", x.size, bytes(q8.quantize_q8_0(x)), _expected_q8_0(x), 34)


@pytest.mark.task("llama_cpp")
@given(x=llama_blocks)
@settings(phases=NO_SHRINK)
def test_q4_0_matches_the_llama_cpp_formula_on_random_blocks(q4, x):
    _assert_same_blocks("Q4_0", x.size, bytes(q4.quantize_q4_0(x)), _expected_q4_0(x), 18)


@pytest.mark.task("llama_cpp")
def test_q8_0_dequantizes_to_code_times_d(kata):
    data = _q8_0_bytes(0.5, list(range(-16, 16))) + _q8_0_bytes(-3.0, [127, -127, 1] + [0] * 29)
    got = np.asarray(kata.dequantize_q8_0(data, 64), dtype=np.float64)
    want = np.concatenate([np.arange(-16, 16) * 0.5, np.array([127, -127, 1] + [0] * 29) * -3.0])
    assert got.shape == (64,), f"dequantize_q8_0(data, 64) returned shape {got.shape}"
    bad = got != want
    assert not bad.any(), f"value {int(np.argmax(bad))} is {got[bad][0]}, code * d is {want[bad][0]}"


@pytest.mark.task("llama_cpp")
def test_q4_0_dequantizes_to_q_minus_8_times_d(kata):
    codes = list(range(16)) + list(range(15, -1, -1))
    data = _q4_0_bytes(0.25, codes) + _q4_0_bytes(0.0, [8] * 32)
    got = np.asarray(kata.dequantize_q4_0(data, 64), dtype=np.float64)
    want = np.concatenate([(np.array(codes) - 8) * 0.25, np.zeros(32)])
    assert got.shape == (64,), f"dequantize_q4_0(data, 64) returned shape {got.shape}"
    bad = got != want
    assert not bad.any(), f"value {int(np.argmax(bad))} is {got[bad][0]}, (q - 8) * d is {want[bad][0]}"


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_q8_0_and_q4_0_dequantize_to_float32(kata, fmt):
    data = _q8_0_bytes(0.5, list(range(-16, 16))) if fmt == "q8_0" else _q4_0_bytes(0.25, list(range(16)) * 2)
    got = np.asarray(getattr(kata, f"dequantize_{fmt}")(data, 32))
    assert got.dtype == np.float32, f"dequantize_{fmt} returned dtype {got.dtype}; it gives float32 values"


# float64 values that float32 rounds onto exact ties or past a code boundary, under a largest value
# that makes d = 1 (Q8_0: 127) or -1 (Q4_0: 8): taken as float32 first, they code as the float32 block does.
_NEAR_TIES = [2.5 - 2.0**-40, -(1.5 + 2.0**-40), 0.5 - 2.0**-30, 3.0 - 2.0**-35] + [0.0] * 27


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_q8_0_and_q4_0_take_float64_input_as_float32(kata, fmt):
    x = np.array([127.0 if fmt == "q8_0" else 8.0] + _NEAR_TIES, dtype=np.float64)
    expected = _expected_q8_0 if fmt == "q8_0" else _expected_q4_0
    got, want = bytes(getattr(kata, f"quantize_{fmt}")(x)), expected(x.astype(np.float32))
    assert got == want, (
        f"quantize_{fmt} of float64 values gave {got.hex()}; taken as float32, as the docstring says, they give "
        f"{want.hex()}"
    )


@pytest.mark.task("llama_cpp")
@pytest.mark.needs("gguf")
def test_q8_0_and_q4_0_match_gguf_on_random_blocks(kata):
    """Exists only where the optional `gguf` package (llama.cpp's Python side,
    in the dev extra) is installed; elsewhere it is not graded at all."""
    import gguf

    x = (rng(31).standard_normal(32 * 64) * np.repeat(10.0 ** rng(32).integers(-3, 4, 64), 32)).astype(np.float32)
    x[:32] = 0.0
    for name, quantize in (("Q8_0", kata.quantize_q8_0), ("Q4_0", kata.quantize_q4_0)):
        want = np.asarray(gguf.quants.quantize(x, getattr(gguf.GGMLQuantizationType, name))).tobytes()
        assert bytes(quantize(x)) == want, (
            f"{name} bytes differ from gguf.quants.quantize (llama.cpp's own Python port)"
        )


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("fn", ["quantize_q8_0", "quantize_q4_0"])
@pytest.mark.parametrize(
    "x",
    [
        np.ones(33, np.float32),
        np.ones(16, np.float32),
        np.arange(32),
        np.where(np.arange(32) == 7, np.nan, 1.0),
        np.where(np.arange(32) == 0, np.inf, 1.0),
    ],
    ids=["33 values", "16 values", "int", "nan", "inf"],
)
def test_llama_cpp_blocks_reject_bad_input(kata, fn, x):
    with pytest.raises(ValueError):
        getattr(kata, fn)(x)


# The bytes llama.cpp writes for each hand-computed block above (fp16 d, then the codes), and for 64 float64
# values (np.random.default_rng(11).standard_normal(64) * 3, taken as float32): literal values a public check
# compares with, so that the student edition catches a wrong rounding, clamp, extreme or layout where the
# student works.
Q8_0_HEX = {
    "ties": "003c010203fffd7f7f81" + "00" * 24,
    "zeros": "00" * 34,
    "negative max": "00408103fe01" + "00" * 28,
    "just below a half": "003c7f" + "00" * 31,
    "float32 d": "7e237f55" + "00" * 30,
    "float64 input": (
        "ce29025a51deecdd26fc318668fa2df7e71f37f3f62dc69c1ad481cae1b19d02"
        "3bf15829cb1c34ea274bf1c619124fa4d0c4830926cb643b2d1d45a02c2b8119ee38e0ff"
    ),
}
Q4_0_HEX = {
    "negative max": "003c8089888a8f8b" + "88" * 10,
    "positive max": "00c070ad88898888" + "88" * 10,
    "first max wins": "00bc88808f" + "88" * 13,
    "first max wins, negative first": "003c88808f" + "88" * 13,
    "just below a half": "00c48089" + "88" * 14,
    "zeros": "0080" + "88" * 16,
    "float64 input": "c339b87e7db64726aa580b506f382b87c67a4e39a55aebc7baadc724bab90da275c46089",
}


def _values_of(blocks: dict, block: str) -> np.ndarray:
    if block == "float64 input":
        return np.random.default_rng(11).standard_normal(64) * 3
    return np.array(blocks[block][0], dtype=np.float32)


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize(
    "fmt, block", [("q8_0", b) for b in Q8_0_HEX] + [("q4_0", b) for b in Q4_0_HEX], ids=lambda v: str(v)
)
def test_q8_0_and_q4_0_write_the_bytes_llama_cpp_writes_for_a_few_blocks(kata, fmt, block):
    values = _values_of(Q8_0_BLOCKS if fmt == "q8_0" else Q4_0_BLOCKS, block)
    want = (Q8_0_HEX if fmt == "q8_0" else Q4_0_HEX)[block]
    got = getattr(kata, f"quantize_{fmt}")(values)
    assert isinstance(got, bytes), f"quantize_{fmt} returned a {type(got).__name__}; it returns bytes"
    assert got.hex() == want, f"quantize_{fmt} of the '{block}' block wrote {got.hex()}, llama.cpp writes {want}"


@pytest.mark.task("llama_cpp")
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_q8_0_and_q4_0_dequantize_a_few_blocks_to_float32_within_half_a_step(kata, fmt):
    x = _values_of({}, "float64 input")
    data = bytes.fromhex((Q8_0_HEX if fmt == "q8_0" else Q4_0_HEX)["float64 input"])
    got = np.asarray(getattr(kata, f"dequantize_{fmt}")(data, 64))
    assert got.dtype == np.float32, f"dequantize_{fmt} returned {got.dtype}; llama.cpp dequantizes to float32"
    step = np.repeat(np.abs(np.max(np.abs(x.reshape(2, 32)), axis=1)) / (127 if fmt == "q8_0" else 8), 32)
    assert got.shape == (64,) and np.all(np.abs(got - x) <= step * 0.5 + 1e-3 * step), (
        f"dequantize_{fmt} of two blocks is further than half a step from the values they were made from"
    )
