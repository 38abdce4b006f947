"""The wire between the judge and the jail: length-prefixed frames
(grader.wire.frames), a codec that carries only data, and the message types
both ends share.

This module runs on both sides, so it imports only the standard library,
NumPy and the frames.

Values travel as JSON with tagged objects ({"$": tag, ...}): numpy arrays as
dtype + shape + raw bytes (numeric dtypes only, never object), Python
scalars, strings, lists, tuples and dicts as themselves, and anything else as
a *handle*, a number naming an object that stays on the side that owns it and
is reached through a proxy. Nothing here unpickles or evaluates what it
receives; the side that decodes checks sizes, dtypes and shapes.

Either side may send a request while it waits for the answer to its own
(the jail calls back into the judge's model from inside a learner's
function), so `Peer.request` serves incoming requests until its reply comes.
"""

from __future__ import annotations

import math
import socket

# Imported here, not when the first error happens: a uid-mode jail forked by the zygote may not be able to read
# the standard library's files (a Python under /root), so what it needs must be loaded before the fork.
import traceback
from dataclasses import dataclass
from enum import Enum

import numpy as np

from grader.wire.frames import (  # noqa: F401 (both ends use them as the protocol's)
    MAX_FRAME,
    MAX_HEADER,
    VERSION,
    PeerGone,
    PeerTimeout,
    ProtocolError,
    Reader,
    recv_frame,
    send_frame,
)

MAX_DEPTH = 40  # nesting of containers in one value
MAX_MESSAGE = 4000  # characters of an error message kept
MAX_DECODED = MAX_FRAME  # bytes of arrays one frame may decode to, an array it repeats counted at every use

# Array dtypes that may cross; anything else (object, structured, strings) is refused.
DTYPES = frozenset(
    np.dtype(t).str
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
    )
)
_PLAIN = frozenset({bool, int, float, str})  # JSON's own values, exactly these types (no subclasses)
BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


class Op(str, Enum):
    """What a frame asks for, or answers."""

    LOAD = "load"  # judge -> jail: import a kata module from a file; answer: its handle
    PUT = "put"  # judge -> jail: keep a value there; answer: its handle (a later call gets that very object)
    GETATTR = "getattr"  # read an attribute of a handle's object
    CALL = "call"  # call a handle's object, or one of its methods
    OK = "ok"  # the answer: a value
    ERR = "err"  # the answer: an exception
    BYE = "bye"  # judge -> jail: stop serving


@dataclass(frozen=True)
class RemoteError:
    """An exception raised on the other side, as data.

    bases: the names of the built-in exception classes it derives from (most
    derived first), so the receiver can rebuild a class that `except` and
    `pytest.raises` still match. frames: 'file:line in function' for the
    frames of the code that raised, innermost last.
    """

    name: str
    module: str
    qualname: str
    bases: tuple[str, ...]
    message: str
    errno: int | None = None
    frames: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "module": self.module,
            "qualname": self.qualname,
            "bases": list(self.bases),
            "message": self.message,
            "errno": self.errno,
            "frames": list(self.frames),
        }

    @classmethod
    def from_json(cls, data) -> "RemoteError":
        if not isinstance(data, dict):
            raise ProtocolError("an error must be an object")
        text = lambda key: str(data.get(key, ""))[:MAX_MESSAGE]  # noqa: E731
        errno = data.get("errno")
        return cls(
            text("name")[:200],
            text("module")[:200],
            text("qualname")[:200],
            tuple(str(b)[:100] for b in list(data.get("bases") or [])[:8]),
            text("message"),
            errno if type(errno) is int else None,
            tuple(str(f)[:300] for f in list(data.get("frames") or [])[:30]),
        )


def builtin_bases(cls: type) -> tuple[str, ...]:
    """Names of the most derived built-in exception classes in cls's MRO."""
    import builtins

    found = [
        c
        for c in cls.__mro__
        if isinstance(c, type) and issubclass(c, BaseException) and getattr(builtins, c.__name__, None) is c
    ]
    return tuple(c.__name__ for c in found if not any(o is not c and issubclass(o, c) for o in found))


def builtin_exceptions(names) -> tuple[type, ...]:
    """The built-in exception classes named (unknown names dropped): the bases
    a receiver gives the class it rebuilds from a RemoteError."""
    import builtins

    found = (getattr(builtins, str(n), None) for n in names)
    return tuple(b for b in found if isinstance(b, type) and issubclass(b, BaseException))


def error_of(exc: BaseException, keep_frame=lambda filename: True) -> RemoteError:
    """RemoteError for an exception caught on this side."""
    frames = tuple(
        f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}: {(f.line or '').strip()}"[:300]
        for f in traceback.extract_tb(exc.__traceback__)
        if keep_frame(f.filename)
    )[-10:]
    try:
        message = str(exc)
    except Exception:  # a learner's __str__ that raises still gets a message
        message = f"<{type(exc).__name__} whose str() failed>"
    errno = getattr(exc, "errno", None)
    cls = type(exc)
    return RemoteError(
        cls.__name__,
        str(getattr(cls, "__module__", "")),
        str(getattr(cls, "__qualname__", "")),
        builtin_bases(cls),
        message[:MAX_MESSAGE],
        errno if type(errno) is int else None,
        frames,
    )


# ---------------------------------------------------------------- values


class Codec:
    """Turns values into JSON + buffers and back. Subclasses say what becomes a
    handle (`export`), how a handle of the other side is represented
    (`remote`), and how the tags only one side understands are encoded
    (`encode_special`, `decode_special`)."""

    side = ""  # "judge" or "jail": which end owns a handle

    def __init__(self):
        self.objects: dict[int, object] = {}  # handle -> object this side owns
        self._ids: dict[int, int] = {}  # id(object) -> handle
        self._next = 1
        # One frame's arrays, so that an array passed many times (a batch's shared
        # argument) crosses once: the buffer list being filled or read, and its arrays.
        self._frame: list | None = None
        self._arrays: dict = {}
        self._decoded = 0  # bytes of arrays decoded from the frame so far (MAX_DECODED)
        self._taken: set[int] = set()  # the frame's buffers an array decoded from it holds without a copy

    def _frame_memo(self, buffers: list) -> dict:
        if self._frame is not buffers:  # a new frame (the list is held, so its id is not reused)
            self._frame, self._arrays, self._decoded, self._taken = buffers, {}, 0, set()
        return self._arrays

    def handle(self, obj) -> int:
        h = self._ids.get(id(obj))
        if h is None or self.objects.get(h) is not obj:
            h, self._next = self._next, self._next + 1
            self.objects[h], self._ids[id(obj)] = obj, h
        return h

    def release(self, handles) -> None:
        for h in handles:
            obj = self.objects.pop(h, None)
            if obj is not None:
                self._ids.pop(id(obj), None)

    def lookup(self, h) -> object:
        if type(h) is not int or h not in self.objects:
            raise ProtocolError(f"no object with handle {h!r} on the {self.side} side")
        return self.objects[h]

    # -- encoding
    def encode(self, value, buffers: list, depth: int = 0):
        t = type(value)
        if t in _PLAIN or value is None:
            return value
        if t is np.ndarray or isinstance(value, (np.ndarray, np.generic)):
            out = self._encode_array(value, buffers)
            if out is not None:
                return out
        if depth > MAX_DEPTH:
            raise ProtocolError(f"a value nested more than {MAX_DEPTH} deep cannot cross")
        if t in (list, tuple, dict):
            return self._encode_container(value, buffers, depth)
        if t in (bytes, bytearray):
            buffers.append(bytes(value))
            return {"$": "bytes", "buf": len(buffers) - 1}
        if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
            dt = np.dtype(value)
            if dt.str in DTYPES:
                return {"$": "dtype", "str": dt.str, "type": isinstance(value, type)}
        special = self.encode_special(value, buffers, depth)
        if special is not None:
            return special
        return self.export(value)

    def _encode_array(self, value, buffers: list):
        """An array or NumPy scalar of a numeric dtype as dtype + shape + a buffer (the same
        array again in one frame: the same buffer); None for another dtype."""
        dt = value.dtype.str
        if dt not in DTYPES:
            return None
        memo = self._frame_memo(buffers)
        known = memo.get(id(value))
        if known is not None and known[0] is value:  # the same array again in this frame
            return known[1]
        # Its bytes in C order, as they lie in memory when they already do (sent without a copy).
        buffers.append(
            np.ascontiguousarray(value).reshape(-1).view(np.uint8) if type(value) is np.ndarray else value.tobytes()
        )
        out = {
            "$": "np" if isinstance(value, np.generic) else "nd",
            "dtype": dt,
            "shape": list(value.shape),
            "buf": len(buffers) - 1,
        }
        if type(value) is np.ndarray:
            memo[id(value)] = (value, out)  # the array is held, so its id is not reused
        return out

    def _encode_container(self, value, buffers: list, depth: int):
        """A list, tuple or dict, its items encoded (plain lists and tuples as JSON as they are)."""
        if type(value) is dict:
            items = [[self.encode(k, buffers, depth + 1), self.encode(v, buffers, depth + 1)] for k, v in value.items()]
            return {"$": "dict", "items": items}
        plain = all(type(v) in _PLAIN for v in value)  # token lists and the like
        items = list(value) if plain else [self.encode(v, buffers, depth + 1) for v in value]
        return items if type(value) is list else {"$": "tuple", "items": items}

    def encode_special(self, value, buffers, depth):
        return None

    def export(self, value):
        raise ProtocolError(f"a {type(value).__name__} cannot cross to the other side")

    def ref(self, obj, kind: str, methods=()) -> dict:
        return {
            "$": "ref",
            "side": self.side,
            "id": self.handle(obj),
            "kind": kind,
            "type": type(obj).__name__ if kind == "object" else getattr(obj, "__name__", kind),
            "methods": list(methods),
        }

    # -- decoding
    def decode(self, data, buffers: list[bytes], depth: int = 0):
        t = type(data)
        if t in _PLAIN or data is None:
            return data
        if depth > MAX_DEPTH:
            raise ProtocolError(f"a value nested more than {MAX_DEPTH} deep")
        if t is list:
            if all(type(v) in _PLAIN for v in data):
                return data  # fresh from the JSON parser, and nobody else's
            return [self.decode(v, buffers, depth + 1) for v in data]
        if type(data) is not dict:
            raise ProtocolError("a malformed value")
        tag = data.get("$")
        if tag == "nd" or tag == "np":
            return self._decode_array(tag, data, buffers)
        if tag == "tuple":
            items = _items(data)
            if all(type(v) in _PLAIN for v in items):
                return tuple(items)
            return tuple(self.decode(v, buffers, depth + 1) for v in items)
        if tag == "dict":
            return self._decode_dict(data, buffers, depth)
        if tag == "bytes":
            return bytes(_buffer(data, buffers))
        if tag == "dtype":
            return _decode_dtype(data)
        if tag == "ref":
            return self._decode_ref(data)
        return self.decode_special(tag, data, buffers, depth)

    def _decode_array(self, tag: str, data: dict, buffers: list[bytes]):
        memo = self._frame_memo(buffers)
        key = (tag, data.get("buf"), data.get("dtype"), str(data.get("shape")))
        known = memo.get(key)
        first = known is None
        if first:  # checked once per buffer and layout; the first array made of a buffer may keep it
            known = memo[key] = decode_array(data, buffers, self._taken)
        self._decoded += getattr(known, "nbytes", 0)
        if self._decoded > MAX_DECODED:  # one buffer named a million times would be a million copies
            raise ProtocolError(f"a message that decodes to more than {MAX_DECODED >> 20} MiB of arrays")
        return known.copy() if tag == "nd" and not first else known  # every use its own array, as if sent again

    def _decode_dict(self, data: dict, buffers: list[bytes], depth: int) -> dict:
        out = {}
        for pair in _items(data):
            if type(pair) is not list or len(pair) != 2:
                raise ProtocolError("a malformed dict entry")
            key = self.decode(pair[0], buffers, depth + 1)
            if type(key) not in (str, int, float, bool, tuple) and key is not None:
                raise ProtocolError("a dict key must be a plain value")
            out[key] = self.decode(pair[1], buffers, depth + 1)
        return out

    def _decode_ref(self, data: dict):
        h = data.get("id")
        if data.get("side") == self.side:
            return self.lookup(h)
        if type(h) is not int:
            raise ProtocolError("a malformed handle")
        return self.remote(data)

    def decode_special(self, tag, data, buffers, depth):
        raise ProtocolError(f"an unknown value tag {tag!r}")

    def decode_call(self, header: dict, buffers: list[bytes]) -> tuple[list, dict]:
        """The (args, kwargs) of a CALL request, checked."""
        args = self.decode(header.get("args", []), buffers)
        kwargs = self.decode(header.get("kwargs", {"$": "dict", "items": []}), buffers)
        if type(args) is not list or type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
            raise ProtocolError("malformed call arguments")
        return args, kwargs

    def remote(self, data: dict):
        raise ProtocolError("this side accepts no handles of the other")


def _decode_dtype(data: dict):
    if data.get("str") not in DTYPES:
        raise ProtocolError(f"a dtype {data.get('str')!r} cannot cross; numeric dtypes only")
    dt = np.dtype(data["str"])
    return dt.type if data.get("type") else dt


def _items(data: dict) -> list:
    items = data.get("items")
    if type(items) is not list:
        raise ProtocolError("a malformed container")
    return items


def _buffer(data: dict, buffers: list[bytes]) -> bytes:
    i = data.get("buf")
    if type(i) is not int or not 0 <= i < len(buffers):
        raise ProtocolError("a value names a buffer that was not sent")
    return buffers[i]


def decode_array(data: dict, buffers: list, taken: set[int] | None = None):
    """A numpy array (or scalar) from dtype + shape + raw bytes, checked. A
    buffer that is a bytearray of its own (frames.Reader's large reads) and
    not in `taken` becomes the array's memory without a copy, and joins
    `taken`; any other is copied."""
    dtype, shape = data.get("dtype"), data.get("shape")
    if dtype not in DTYPES:
        raise ProtocolError(f"arrays of dtype {dtype!r} cannot cross; numeric dtypes only")
    if type(shape) is not list or len(shape) > 32 or not all(type(n) is int and n >= 0 for n in shape):
        raise ProtocolError("a malformed array shape")
    raw = _buffer(data, buffers)
    dt = np.dtype(dtype)
    if math.prod(shape) * dt.itemsize != len(raw):
        raise ProtocolError(f"an array of shape {tuple(shape)} and dtype {dt} does not fit its {len(raw)} bytes")
    arr = np.frombuffer(raw, dtype=dt).reshape(shape)
    if taken is not None and type(raw) is bytearray and data["buf"] not in taken:
        taken.add(data["buf"])
    else:
        arr = arr.copy()
    if data.get("$") == "np":
        if shape:
            raise ProtocolError("a scalar with a shape")
        return arr[()]
    return arr


def rng_state(gen: np.random.Generator) -> dict:
    bg = gen.bit_generator
    name = type(bg).__name__
    if name not in BIT_GENERATORS:
        raise ProtocolError(f"a Generator over {name} cannot cross; use one of {BIT_GENERATORS}")
    return {"kind": name, "state": bg.state}


def set_rng_state(gen: np.random.Generator, data) -> None:
    """Set gen's bit-generator state from data sent by the other side, checked."""
    if not isinstance(data, dict) or data.get("kind") != type(gen.bit_generator).__name__:
        raise ProtocolError("a random generator state of the wrong kind")
    state = data.get("state")
    if not isinstance(state, dict) or state.get("bit_generator") != data["kind"]:
        raise ProtocolError("a malformed random generator state")
    try:
        gen.bit_generator.state = state
    except (TypeError, ValueError, KeyError) as exc:
        raise ProtocolError(f"a malformed random generator state ({exc})") from None


def new_rng(data) -> np.random.Generator:
    if not isinstance(data, dict) or data.get("kind") not in BIT_GENERATORS:
        raise ProtocolError("a malformed random generator")
    gen = np.random.Generator(getattr(np.random, data["kind"])())
    set_rng_state(gen, data)
    return gen


# ---------------------------------------------------------------- a peer


class Peer:
    """One end of the channel: sends requests and serves the other end's.

    `serve(header, buffers)` (given by the owner) answers one incoming
    request and returns (value, extra fields) or raises; its exception
    travels back as a RemoteError."""

    def __init__(self, sock: socket.socket, codec: Codec, serve, on_error=None):
        self.sock, self.codec, self.serve = sock, codec, serve
        self.reader = Reader(sock)
        self.on_error = on_error or (lambda exc: exc)  # maps a caught exception to a RemoteError
        self.deadline: float | None = None
        self._next = 1
        self.pending_release: list[int] = []

    def send(self, op: Op, rid: int, fields: dict, buffers: list) -> None:
        header = {"v": VERSION, "op": op.value, "id": rid, **fields}
        if self.pending_release:
            header["release"], self.pending_release = self.pending_release, []
        send_frame(self.sock, header, buffers)

    def request(self, op: Op, **fields) -> tuple[dict, list[bytes]]:
        """Send a request; serve the other side's requests until the answer comes.
        Returns the answer's header and buffers (op OK or ERR)."""
        rid, self._next = self._next, self._next + 1
        buffers: list = []
        encoded = {k: self.codec.encode(v, buffers) for k, v in fields.items()}
        self.send(op, rid, encoded, buffers)
        while True:
            header, bufs = recv_frame(self.reader, self.deadline)
            self.codec.release(header.get("release") or [])
            op_in = header.get("op")
            if op_in in (Op.OK.value, Op.ERR.value):
                if header.get("id") != rid:
                    raise ProtocolError("an answer to a request that was not asked")
                return header, bufs
            self.answer(header, bufs)

    def answer(self, header: dict, bufs: list[bytes]) -> None:
        rid = header.get("id")
        try:
            value, extra = self.serve(header, bufs)
            out: list = []
            fields = {"value": self.codec.encode(value, out), **extra}
            self.send(Op.OK, rid, fields, out)
        except (PeerGone, PeerTimeout):
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure of a request is an answer
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.send(Op.ERR, rid, {"error": self.on_error(exc).to_json()}, [])
