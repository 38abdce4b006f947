"""One prefork server and its client: a process that forks a child for each
request, so that every child starts with the server's imports already loaded.
It serves both the judge server (grader.judge.judge_server, which forks the
judges) and the jail zygote (grader.jailer.zygote, which forks the jails); what a
child becomes is the handler's business, not the server's.

Protocol, over SOCK_SEQPACKET (one JSON message a packet):

    client -> server   a request: a JSON object, with descriptors attached
    server -> client   {"pid": N}, or {"error": "..."} when no child could be made
    server -> client   {"exited": N, "code": C}: child N ended; C as subprocess's returncode

A server has one or more client connections: given ones (a socketpair's end),
or ones it accepts on a listening socket, each only from a peer of its own uid
that is not one of its own children or their descendants (those it forked run
what it was asked to run: a jail must not ask for more).
When a connection closes, the server kills the children made for it; when its
life socket closes (or, with none, its last given connection), it kills every
child and returns.

This module runs on both sides of the trust boundary (it is in the jail's
runtime copy), so it imports nothing of the grader's.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import threading
import time
from collections import deque
from typing import Callable

MAX_MESSAGE = 1 << 20  # bytes of one request


# ------------------------------------------------------------------ server


class Server:
    """Forks a child for each request. handler(request, fds) runs in the
    server: it checks the request (raising says why there is no child) and
    returns what the child runs, a function that never returns; the
    descriptors received stay open in the child and are closed in the
    server. Before that function runs, the child has closed the server's own
    sockets and pipes and reset its signals."""

    def __init__(self, handler: Callable[[dict, list[int]], Callable[[], None]], fds_per_request: int):
        self.handler, self.fds_per_request = handler, fds_per_request
        self.owner: dict[int, socket.socket] = {}  # each live child -> the connection it was made for

    def serve(self, connections=(), listener: socket.socket | None = None, life: socket.socket | None = None) -> None:
        """Answer requests until life closes (with no life, until the given
        connections have all closed); then kill every child and return."""
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD writes to the wakeup pipe
        self.selector = selectors.DefaultSelector()
        self.listener, self.life, self.given = listener, life, set(connections)
        for fileobj in (*connections, *(s for s in (listener, life) if s is not None), self.wake_r):
            self.selector.register(fileobj, selectors.EVENT_READ)
        while self._step():
            pass
        for pid in self.owner:
            kill_group(pid)

    def _step(self) -> bool:
        """Handle what is ready; False once the server must end."""
        for key, _ in self.selector.select():
            sock = key.fileobj
            if sock is self.wake_r:
                os.read(self.wake_r, 4096)
            elif sock is self.life:
                if not self.life.recv(1):
                    return False
            elif sock is self.listener:
                self._accept()
            elif not self._request(sock) and sock in self.given:
                self.given.discard(sock)
                if self.life is None and not self.given:
                    return False
        reap(self._ended)
        return True

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        pid, uid = peer_ids(conn)
        # A client runs as the server's user (a jail of the root and uid modes never does) and outside its
        # tree (a jail and all it starts are inside: a plain-mode jail shares the user's uid).
        if uid != os.geteuid() or pid <= 0 or descends_from(pid, os.getpid()):
            conn.close()
        else:
            self.selector.register(conn, selectors.EVENT_READ)

    def _request(self, conn: socket.socket) -> bool:
        """Serve one request of conn; False when conn has closed (its children are then killed)."""
        try:
            message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, self.fds_per_request)
        except OSError:
            message, fds = b"", []
        if not message:
            _close(fds)
            self.selector.unregister(conn)
            for pid in [pid for pid, c in self.owner.items() if c is conn]:
                kill_group(pid)
            if conn is not self.life:
                conn.close()
            return False
        try:
            if len(fds) != self.fds_per_request:
                raise ValueError(f"a request carries {self.fds_per_request} descriptors, not {len(fds)}")
            child = self.handler(json.loads(message), fds)
            pid = os.fork()
        except Exception as exc:  # noqa: BLE001 - a bad request or a failed fork: the client hears why
            _close(fds)
            _tell(conn, {"error": f"could not fork: {type(exc).__name__}: {exc}"})
            return True
        if pid == 0:
            self._become_child(child)  # never returns
        _close(fds)
        self.owner[pid] = conn
        _tell(conn, {"pid": pid})
        return True

    def _become_child(self, child: Callable[[], None]) -> None:
        """In the forked child: drop the server's sockets, pipes and signal set-up, then run child."""
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for key in list(self.selector.get_map().values()):
                fileobj = key.fileobj
                os.close(fileobj) if isinstance(fileobj, int) else fileobj.close()
            self.selector.close()
            os.close(self.wake_w)
            child()
        finally:
            os._exit(1)

    def _ended(self, pid: int, code: int) -> None:
        conn = self.owner.pop(pid, None)
        if conn is not None and conn.fileno() >= 0:
            _tell(conn, {"exited": pid, "code": code})


def _tell(conn: socket.socket, answer: dict) -> None:
    try:
        conn.send(json.dumps(answer).encode())
    except OSError:
        pass  # the client is gone: the next read says so


def _close(fds) -> None:
    for fd in fds:
        os.close(fd)


def peer_ids(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket, as it connected (pid 0: one in
    another pid namespace)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether process pid is ancestor or one of its descendants, by the parents /proc names (True
    when that cannot be read: a process that has gone, or no /proc, is not known to be outside)."""
    seen = set()
    while pid > 1 and pid not in seen:
        if pid == ancestor:
            return True
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return True
    return pid == ancestor


def reap(tell: Callable[[int, int], None]) -> None:
    """Call tell(pid, code) for each child of this process that has ended (code
    as subprocess's returncode), until none is left to reap."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        tell(pid, os.waitstatus_to_exitcode(status))


def kill_group(pid: int) -> None:
    """SIGKILL the process group of pid (a child's session), if it is still there."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ------------------------------------------------------------------ client


class Client:
    """A connection to a Server; several threads may use it at once (the
    runner's do). One thread at a time reads the socket; the others wait for
    what it reads."""

    def __init__(self, sock: socket.socket, what: str = "child"):
        self.sock, self.what = sock, what
        self.state = threading.Condition()
        self.reading = False
        self.answers: deque[dict] = deque()  # pid and error answers, in order
        self.exited: dict[int, int] = {}
        self.gone = False
        self.requests = threading.Lock()  # one request at a time: its answer is the next pid or error

    def spawn(self, request: dict, fds: list[int], timeout: float | None = None) -> "Child":
        """A child made for request, or OSError saying why there is none."""
        with self.requests:
            if self.gone:
                raise OSError(f"the {self.what} server is gone")
            socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
            deadline = None if timeout is None else time.monotonic() + timeout
            if not self._until(lambda: bool(self.answers), deadline):
                raise OSError(f"the {self.what} server {'is gone' if self.gone else 'did not answer'}")
            with self.state:
                answer = self.answers.popleft()
        if "pid" not in answer:
            raise OSError(str(answer.get("error", "no pid")))
        return Child(self, int(answer["pid"]))

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """Child pid's exit code once it has ended (SIGKILL's if the server
        died, and its children with it), or None after timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._until(lambda: pid in self.exited, deadline):
            return -signal.SIGKILL if self.gone else None
        with self.state:
            return self.exited.pop(pid)

    def _until(self, ready: Callable[[], bool], deadline: float | None) -> bool:
        """Read answers until ready() (True), the deadline or the server's end (False)."""
        with self.state:
            while not ready():
                remaining = None if deadline is None else deadline - time.monotonic()
                if self.gone or (remaining is not None and remaining <= 0):
                    return False
                if self.reading:  # another thread reads: wait for what it finds
                    self.state.wait(remaining)
                    continue
                self.reading = True
                self.state.release()
                try:
                    message = self._read(remaining)
                finally:
                    self.state.acquire()
                    self.reading = False
                self._take(message)
                self.state.notify_all()
            return True

    def _read(self, timeout: float | None) -> bytes | None:
        """The next message; None if none came within timeout, b"" once the server is gone."""
        try:
            if not select.select([self.sock], [], [], timeout)[0]:
                return None
            return self.sock.recv(MAX_MESSAGE)
        except (OSError, ValueError):
            return b""

    def _take(self, message: bytes | None) -> None:
        if message is None:
            return
        if not message:
            self.gone = True
            return
        answer = json.loads(message)
        if "exited" in answer:
            self.exited[int(answer["exited"])] = int(answer["code"])
        else:
            self.answers.append(answer)

    def close(self) -> None:
        self.sock.close()


class Child:
    """A child a server forked: what a Popen's user needs of it (pid, poll, wait, kill, returncode)."""

    def __init__(self, client: Client, pid: int):
        self.client, self.pid = client, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode if self.returncode is not None else self._ended(0)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and self._ended(timeout) is None:
            raise subprocess.TimeoutExpired(f"{self.client.what} {self.pid}", timeout)
        return self.returncode

    def _ended(self, timeout: float | None) -> int | None:
        code = self.client.exit_code(self.pid, timeout)
        if code is not None:
            self.returncode = code
        return code

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
