"""The frames the judge and the jail exchange (grader.wire.protocol carries values in them):

    !II   header length, number of buffers
    JSON  the header: {"v": VERSION, "op": ..., "id": ..., ...}
    !Q + bytes, once per buffer (the raw bytes of arrays and bytes objects)

Runs on both sides, so it imports only the standard library.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from typing import Callable

VERSION = 1
MAX_HEADER = 16 * 1024 * 1024  # bytes of JSON in one frame
MAX_FRAME = 256 * 1024 * 1024  # bytes of one frame, buffers included


class ProtocolError(Exception):
    """A frame or value broke the protocol (too big, malformed, a refused dtype)."""


class PeerGone(Exception):
    """The other end closed the channel or died."""


class PeerTimeout(Exception):
    """No answer came before the deadline."""


IDLE_SECONDS = 0.1  # while a Reader with an idle callback waits, it calls it at least this often


class Reader:
    """Buffered reads from a socket, with a deadline: one recv usually brings a whole frame.
    idle, when set, is called at least every IDLE_SECONDS while the reader waits for bytes (the
    judge watches what the jail writes meanwhile); what it raises ends the read."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, bytearray()
        self.idle: Callable[[], None] | None = None

    def _wait(self, deadline: float | None) -> None:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise PeerTimeout("no answer before the deadline")
            if self.idle is None and left is None:
                return  # recv blocks
            wait = left if self.idle is None else IDLE_SECONDS if left is None else min(left, IDLE_SECONDS)
            if select.select([self.sock], [], [], wait)[0]:
                return
            if self.idle is not None:
                self.idle()

    def read(self, n: int, deadline: float | None) -> bytes | bytearray:
        """The next n bytes: bytes when small, else a bytearray that nothing else holds."""
        if n <= 1 << 16:  # small: one recv usually brings this and the rest of the frame
            while len(self.buf) < n:
                self._wait(deadline)
                try:
                    chunk = self.sock.recv(1 << 16)
                except OSError as exc:
                    raise PeerGone(str(exc)) from None
                if not chunk:
                    raise PeerGone("the channel closed")
                self.buf += chunk
            out = bytes(self.buf[:n])
            del self.buf[:n]
            return out
        out = bytearray(n)  # large: straight into its own buffer
        view = memoryview(out)
        have = min(len(self.buf), n)
        view[:have] = self.buf[:have]
        del self.buf[:have]
        while have < n:
            self._wait(deadline)
            try:
                got = self.sock.recv_into(view[have:], n - have)
            except OSError as exc:
                raise PeerGone(str(exc)) from None
            if not got:
                raise PeerGone("the channel closed")
            have += got
        return out  # a bytearray of its own: arrays decoded from it may keep it without a copy


def send_frame(sock: socket.socket, header: dict, buffers: list) -> None:
    """Send one frame. buffers: bytes, or flat uint8 views of arrays (protocol's
    encoding), sent as they lie in memory: a large frame is written with one
    scatter-gather call per IOV_MAX pieces, not joined into a copy first."""
    text = json.dumps(header, separators=(",", ":")).encode()
    parts = [struct.pack("!II", len(text), len(buffers)), text]
    for b in buffers:
        parts += [struct.pack("!Q", len(b)), b]
    total = sum(map(len, parts))
    if total > MAX_FRAME:
        raise ProtocolError(f"a message of more than {MAX_FRAME >> 20} MiB cannot cross")
    try:
        if total <= JOIN_BYTES:
            sock.sendall(b"".join(parts))
        else:
            _send_parts(sock, [memoryview(p) for p in parts if len(p)])
    except OSError as exc:
        raise PeerGone(str(exc)) from None


JOIN_BYTES = 1 << 16  # frames up to this size are joined and sent in one piece
IOV_MAX = 1024  # pieces one sendmsg takes on Linux


def _send_parts(sock: socket.socket, views: list[memoryview]) -> None:
    first = 0
    while first < len(views):
        sent = sock.sendmsg(views[first : first + IOV_MAX])
        while sent:
            size = len(views[first])
            if sent < size:
                views[first] = views[first][sent:]
                break
            sent -= size
            first += 1


def recv_frame(reader: Reader, deadline: float | None = None) -> tuple[dict, list[bytes]]:
    size, count = struct.unpack("!II", reader.read(8, deadline))
    if size > MAX_HEADER or count > 100_000:
        raise ProtocolError("a frame header is too large")
    try:
        header = json.loads(reader.read(size, deadline))
    except (ValueError, RecursionError):
        raise ProtocolError("a frame header is not JSON") from None
    if not isinstance(header, dict) or header.get("v") != VERSION:
        raise ProtocolError(f"a frame of another protocol version (this end speaks {VERSION})")
    buffers, total = [], size
    for _ in range(count):
        (n,) = struct.unpack("!Q", reader.read(8, deadline))
        total += n
        if total > MAX_FRAME:
            raise ProtocolError(f"a message of more than {MAX_FRAME >> 20} MiB cannot cross")
        buffers.append(reader.read(n, deadline))
    return header, buffers
