"""A result whose arrays are views of one buffer, brought back whole: the
arrays of a timed call's result that lie in the memory of one array (a KV
cache's keys and values, views of its buffers) cross as that memory once,
and each array as where it lies in it (offset, shape, strides). The judge
rebuilds every array, read-only, from the bytes it received inside the
timed round trip, so it holds each result whole without paying a copy per
view; an array that is not such a view crosses as its own bytes, as
always. What the judge checks is data it holds, never an answer the jail
works out on request.

Runs on both sides, so it imports only the standard library, NumPy and the protocol.
"""

from __future__ import annotations

import math

import numpy as np

from grader.wire.protocol import DTYPES, MAX_DECODED, ProtocolError


def _arrays(value, out: list) -> list:
    """The non-empty arrays of value, itself or inside nested lists and tuples, in order."""
    if type(value) in (list, tuple):
        for item in value:
            _arrays(item, out)
    elif type(value) is np.ndarray and value.dtype.str in DTYPES and value.size:
        out.append(value)
    return out


def _root(a: np.ndarray) -> np.ndarray | None:
    """The array that owns a's memory, when it is one block of its own bytes (else None)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    contiguous = a.flags.c_contiguous or a.flags.f_contiguous
    return a if a.base is None and contiguous else None


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def extent(shape, strides, itemsize: int) -> tuple[int, int]:
    """(lowest, highest + 1) byte an array of that layout reads, from where its first item lies."""
    low = sum(s * (n - 1) for n, s in zip(shape, strides) if s < 0)
    high = sum(s * (n - 1) for n, s in zip(shape, strides) if s > 0)
    return low, high + itemsize


def plan(value, buffers: list) -> dict[int, tuple[np.ndarray, dict]]:
    """In the jail: for each array of value that shares its memory with others,
    id -> (the array, what crosses in its place), the memory they share
    appended to buffers once. Memory is shared only where it is no more
    bytes than the arrays' own."""
    groups: dict[int, list[np.ndarray]] = {}
    roots: dict[int, np.ndarray] = {}
    for a in _arrays(value, []):
        root = _root(a)
        if root is not None:
            roots[id(root)] = root
            members = groups.setdefault(id(root), [])
            if not any(m is a for m in members):
                members.append(a)
    out = {}
    for key, members in groups.items():
        spans = [(_address(a), extent(a.shape, a.strides, a.itemsize)) for a in members]
        low, high = min(at + lo for at, (lo, _) in spans), max(at + hi for at, (_, hi) in spans)
        if len(members) < 2 or high - low > sum(a.nbytes for a in members):
            continue
        root = roots[key]
        memory = root.reshape(-1, order="A").view(np.uint8)  # one block: the root's bytes as they lie
        start = low - _address(root)
        buffers.append(memory[start : start + high - low])
        for a in members:
            out[id(a)] = (
                a,
                {
                    "$": "view",
                    "buf": len(buffers) - 1,
                    "offset": _address(a) - low,
                    "dtype": a.dtype.str,
                    "shape": list(a.shape),
                    "strides": list(a.strides),
                },
            )
    return out


def decode(data: dict, buffers: list) -> np.ndarray:
    """In the judge: the read-only array a view describes, over the bytes that
    crossed (checked to lie inside them)."""
    dtype, shape, strides, offset, i = (data.get(k) for k in ("dtype", "shape", "strides", "offset", "buf"))
    if dtype not in DTYPES:
        raise ProtocolError(f"arrays of dtype {dtype!r} cannot cross; numeric dtypes only")
    if type(i) is not int or not 0 <= i < len(buffers):
        raise ProtocolError("a view names a buffer that was not sent")
    layout = (shape, strides)
    if not all(type(x) is list and len(x) <= 32 and all(type(n) is int for n in x) for x in layout):
        raise ProtocolError("a malformed view")
    if len(shape) != len(strides) or min(shape, default=1) < 1 or type(offset) is not int:
        raise ProtocolError("a malformed view")
    dt = np.dtype(dtype)
    low, high = extent(shape, strides, dt.itemsize)
    memory = buffers[i]
    if offset + low < 0 or offset + high > len(memory) or math.prod(shape) * dt.itemsize > MAX_DECODED:
        raise ProtocolError("a view that does not lie inside the bytes that crossed")
    arr = np.ndarray(tuple(shape), dt, buffer=memory, offset=offset, strides=tuple(strides))
    arr.flags.writeable = False
    return arr
