"""Checks of the packing task: two int4 codes to a byte, and back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st


@pytest.mark.task("packing")
def test_pack_int4_puts_element_2i_in_the_low_nibble(kata):
    packed = np.asarray(kata.pack_int4(np.array([1, -1, -8, 7, 0, 5], dtype=np.int8)))
    want = [0xF1, 0x78, 0x50]  # -1 is 0xF, -8 is 0x8 in 4-bit two's complement
    assert packed.dtype == np.uint8, f"pack_int4 must return uint8, got {packed.dtype}"
    assert packed.tolist() == want, (
        f"pack_int4([1, -1, -8, 7, 0, 5]) gave {[hex(b) for b in packed.tolist()]}, expected {[hex(b) for b in want]}"
    )


@pytest.mark.task("packing")
@given(codes=st.lists(st.integers(-8, 7), min_size=0, max_size=41))
@example(codes=[])
@example(codes=[-8])
@example(codes=[7, -8, 3])
def test_pack_then_unpack_round_trips_exactly(pack, codes):
    q = np.array(codes, dtype=np.int8)
    packed = np.asarray(pack.pack_int4(q))
    assert packed.shape == ((q.size + 1) // 2,), (
        f"{q.size} codes packed into {packed.shape} bytes, expected {(q.size + 1) // 2}"
    )
    lows = packed.astype(np.int64) & 0xF
    want = np.array(codes[0::2], dtype=np.int64) & 0xF
    assert np.array_equal(lows, want), (
        f"the low nibbles {lows.tolist()} should hold elements 0, 2, 4, ...: {want.tolist()}"
    )
    back = np.asarray(pack.unpack_int4(packed, q.size))
    assert back.tolist() == codes, f"unpack_int4(pack_int4({codes})) gave {back.tolist()}"


@pytest.mark.task("packing")
def test_unpack_int4_returns_int8_codes(kata):
    back = np.asarray(kata.unpack_int4(np.array([0xF1, 0x78, 0x05], dtype=np.uint8), 5))
    assert back.dtype == np.int8, f"unpack_int4 returned dtype {back.dtype}; the docstring promises int8 codes"
    assert back.tolist() == [1, -1, -8, 7, 5], f"unpack_int4([0xF1, 0x78, 0x05], 5) gave {back.tolist()}"


ODD_CODES = st.integers(0, 20).flatmap(lambda k: st.lists(st.integers(-8, 7), min_size=2 * k + 1, max_size=2 * k + 1))


@pytest.mark.task("packing")
@given(codes=ODD_CODES)
@example(codes=[-1])
@example(codes=[1, -1, 7])
def test_pack_int4_pads_an_odd_count_with_one_zero_code(pack, codes):
    padded = [c & 0xF for c in codes] + [0]
    want = [lo | (hi << 4) for lo, hi in zip(padded[0::2], padded[1::2])]
    got = np.asarray(pack.pack_int4(np.array(codes, dtype=np.int8))).tolist()
    assert got == want, (
        f"pack_int4({codes}) gave {[hex(b) for b in got]}, expected {[hex(b) for b in want]} "
        "(the last byte's high nibble holds the zero code that pads an odd count)"
    )


@pytest.mark.task("packing")
@pytest.mark.parametrize("codes", [[8], [-9], [0, 16]])
def test_pack_int4_rejects_codes_outside_4_bits(kata, codes):
    with pytest.raises(ValueError):
        kata.pack_int4(np.array(codes, dtype=np.int16))


@pytest.mark.task("packing")
@pytest.mark.parametrize(
    "packed, n",
    [
        (np.zeros(2, np.uint8), 5),  # 5 codes need 3 bytes
        (np.zeros(2, np.uint8), 2),  # 2 codes fill 1 byte
        (np.zeros((2, 1), np.uint8), 4),  # not 1-D
        (np.zeros(2, np.int16), 4),  # not bytes
    ],
    ids=["too-few-bytes", "too-many-bytes", "2-d", "int16"],
)
def test_unpack_int4_rejects_bytes_that_do_not_hold_n_codes(kata, packed, n):
    with pytest.raises(ValueError):
        kata.unpack_int4(packed, n)
