"""The jail zygote's trusted end: one zygote process per `kata` command forks the jails; this module starts it
(`Zygote`, in the runner) and connects to it (`connection`, in each judge). The zygote process itself runs
`grader.jail.server.serve_forks`, from the jail's runtime copy (RUNTIME_FILES).

A jail is a new Python that imports NumPy and the model before it serves
anything: about 0.16 s of the 0.2 s a grading of one quick check takes, paid
again for every jail of every grading. The zygote (`grader.jail.server.serve_forks`)
is that Python, started once with the jail's own flags, environment and
sys.path, and it forks each jail with NumPy and the model already loaded.
The child confines itself exactly as a jail started with subprocess does
(grader.jail.confine.preexec, in the same order: session, descriptors,
namespaces and root, uid, parent-death signal) and then runs
`grader.jail.server.main`.

Only the modes whose confinement runs in the child before exec use it:
root, uid and plain. Under bubblewrap each jail needs a sandbox of its own,
so every jail is still a new process (see grader/jail/confine.py).

The runner's Grader (grader.run.judges; under `kata test`, the pytest
process: grader/suites/conftest.py; under `kata play`, the command itself:
`own`) starts the zygote (`Zygote`) with a
runtime folder, the read-only copy of the files a jail runs (RUNTIME_FILES, compiled, and the weights), shared by every
jail it forks; a jail sees that folder besides its own. The judges find the
zygote by the Unix socket that KATA_JAIL_FORKS names (a file in a folder
only the runner's uid may enter), and connect one connection each
(`connection`). No jail can ask the zygote for anything, in any mode: it
answers only a peer of its own uid (a root- or uid-mode jail has a uid of its
own, and cannot even enter the socket's folder; a root-mode jail does not
see it at all) that is not one of its own jails or their descendants (a
plain-mode jail is the user: the zygote is a child subreaper, so whatever a
jail starts stays in its tree, daemonised or not, and the peer's ancestry
says so). The mode every jail gets is the zygote's, fixed when the runner
started it: a request that names another is refused, and its judge starts
that jail as a new process.

Protocol, over SOCK_SEQPACKET (one JSON message a packet):

    judge -> zygote   {"config": {...}, "env": {...}, "cwd": "...", "paths": [...], "confine": {...}},
                      the jail's channel and log descriptors attached

and the answers of every grader.wire.prefork server (a pid or an error, then the exit notice).

A jail dies with its zygote (its parent-death signal); the zygote kills
every jail and exits when the runner is gone (its end of a socketpair reads
end-of-file: a parent-death signal would come when the runner's thread that
started it ends); when a judge's connection closes (the judge ended or was killed)
the zygote kills every jail it forked for that judge.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import py_compile
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from grader import ONE_BLAS_THREAD
from grader.jail import confine
from grader.kata import target as _target
from grader.wire.prefork import Child, Client

# What a jail runs, copied out of the checkout: the jail and the wire it speaks. confine.py and prefork.py are there
# for the zygote.
RUNTIME_FILES = (
    "grader/jail/__init__.py",
    "grader/jail/server.py",
    "grader/jail/confine.py",
    "grader/wire/__init__.py",
    "grader/wire/frames.py",
    "grader/wire/protocol.py",
    "grader/wire/views.py",
    "grader/wire/prefork.py",
    "reference/__init__.py",
    "reference/aligned.py",
    "reference/checks.py",
    "reference/model.py",
    "reference/work.py",
    "reference/sampling.py",
    "reference/tokenizer.py",
    "reference/lm.py",
    "reference/ngram.py",
)
VAR = "KATA_JAIL_FORKS"  # set by the runner for its judges: the zygote's socket; "off": no zygote
MODES = confine.FORKED_MODES  # the confinement modes the zygote serves
SPAWN_SECONDS = 30  # how long a judge waits for the zygote's answer to a fork

_BYTECODE: dict[tuple[str, int, int], bytes] = {}


def _bytecode(source: Path) -> bytes:
    """The compiled form of a runtime file, as a .pyc that Python loads without
    checking it against its source (unchecked-hash): no jail compiles the
    model's files again. Compiled once per process and per version of the
    file (its path, size and modification time)."""
    stat = source.stat()
    key = (str(source), stat.st_size, stat.st_mtime_ns)
    if key not in _BYTECODE:
        with tempfile.TemporaryDirectory(prefix="kata-pyc-") as tmp:
            out = Path(tmp, "file.pyc")
            py_compile.compile(
                str(source),
                cfile=str(out),
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
            _BYTECODE[key] = out.read_bytes()
    return _BYTECODE[key]


def make_runtime(runtime: Path) -> None:
    """Fill the new folder runtime with the files a jail runs, compiled, and the
    shipped weights, all read-only."""
    root = _target.ROOT
    for rel in RUNTIME_FILES:
        (runtime / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, runtime / rel)
        # Where the jail's Python looks for it (the judge's own sys.pycache_prefix may differ).
        cached = (runtime / rel).parent / "__pycache__" / f"{Path(rel).stem}.{sys.implementation.cache_tag}.pyc"
        cached.parent.mkdir(exist_ok=True)
        cached.write_bytes(_bytecode(root / rel))
    (runtime / "grader" / "__init__.py").write_text("")
    weights = root / "reference" / "weights"
    if weights.is_dir():
        shutil.copytree(weights, runtime / "reference" / "weights")
    for path in [runtime, *runtime.rglob("*")]:
        os.chmod(path, 0o555 if path.is_dir() else 0o444)


def runtime_paths() -> list[str]:
    """A jail's sys.path after its runtime copy: the standard library and site-packages, never the checkout."""
    return list(_runtime_paths(tuple(sys.path)))


@functools.lru_cache(maxsize=8)  # every jail start asks; it changes only with sys.path
def _runtime_paths(path: tuple[str, ...]) -> tuple[str, ...]:
    import sysconfig

    root = str(_target.ROOT)
    keep = [sys.base_prefix, sys.prefix] + [
        sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")
    ]
    out = []
    for entry in path:
        real = os.path.realpath(entry) if entry else ""
        if not real or not any(real == k or real.startswith(k.rstrip("/") + "/") for k in keep if k):
            continue
        if (real == root or real.startswith(root + "/")) and not real.startswith(os.path.realpath(sys.prefix)):
            continue
        if real not in out:
            out.append(real)
    return tuple(out)


def jail_env(home: str) -> dict[str, str]:
    """The whole environment of a jail whose home (and TMPDIR) is `home`."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": home, "TMPDIR": home}
    env.update(ONE_BLAS_THREAD)
    env.update({k: v for k, v in os.environ.items() if k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")})
    return env


def remove_tree(folder: str) -> None:
    """Remove a folder of read-only files (a runtime or a jail's folder); a file that goes meanwhile is
    no error."""
    for path in Path(folder).rglob("*"):
        if not path.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                os.chmod(path, 0o700)
    shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------ runner side


class Zygote:
    """The zygote this process started, and its folder (the runtime)."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="kata-forks-")
        try:
            self._start()
        except BaseException:
            remove_tree(self.folder)
            raise

    def _start(self) -> None:
        os.chmod(self.folder, 0o755)  # the jails' uids read the runtime
        self.runtime = Path(self.folder, "runtime")
        make_runtime(self.runtime)
        # A socket in a folder only this uid may enter, so that no jail of another uid can even connect; the
        # zygote also answers only connections of its own uid (grader.jail.server.serve_forks).
        self.socket_name = _socket_path(self.folder)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.life, theirs = socket.socketpair()  # its end reads EOF once this process is gone
        try:
            listener.bind(self.socket_name)
            listener.listen(64)
            paths = [str(self.runtime)] + runtime_paths()
            boot = (
                f"import sys; sys.path[:] = {paths!r}; "
                "from grader.jail.server import serve_forks; serve_forks(*sys.argv[1:])"
            )
            fds = (listener.fileno(), theirs.fileno())
            self.mode = confine.mode()  # every jail it forks gets this mode, whatever a request says
            self.proc = subprocess.Popen(
                [os.path.realpath(sys.executable), "-s", "-S", "-B", "-c", boot, *map(str, fds), self.mode],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=fds,
                env=jail_env("/"),
                cwd="/",
                start_new_session=True,
            )
        except BaseException:
            self.life.close()
            raise
        finally:
            listener.close()
            theirs.close()

    def address(self) -> str:
        """What KATA_JAIL_FORKS holds for the judges: the socket, then the runtime folder."""
        return json.dumps({"socket": self.socket_name, "runtime": str(self.runtime)})

    def stop(self) -> None:
        self.life.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        remove_tree(self.folder)
        if not self.socket_name.startswith("\0"):
            remove_tree(os.path.dirname(self.socket_name))


SUN_PATH = 100  # bytes a Unix socket's path may take (108 in Linux's sockaddr_un, less its terminator, kept short)


def _socket_path(folder: str) -> str:
    """Where the zygote listens: a file in a folder of its own, mode 0700 (beside the runtime, or under /tmp
    where TMPDIR is too long for a socket's path); an abstract name only where neither fits."""
    for parent in (os.path.dirname(folder), "/tmp"):
        if len(os.path.join(parent, "kata-zygote-XXXXXXXX", "s").encode()) <= SUN_PATH and os.path.isdir(parent):
            return os.path.join(tempfile.mkdtemp(prefix="kata-zygote-", dir=parent), "s")  # mkdtemp: 0700
    return "\0kata-forks-" + secrets.token_hex(16)


def serves_this_mode() -> bool:
    """Whether jails are forked by a zygote here: not under bubblewrap, not
    with KATA_JAIL_FORKS=off, and not with a bad KATA_JAIL (the judge reports it)."""
    if os.environ.get(VAR) == "off":
        return False
    try:
        return confine.mode() in MODES
    except ValueError:
        return False


# ------------------------------------------------------------- judge side


ForkedJail = Child  # a jail the zygote forked: what grader.jailer.jail_client uses of a Popen


class Connection(Client):
    """This judge's connection to the zygote, and the runtime folder its jails share."""

    def __init__(self, address: dict):
        self.runtime = address["runtime"]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(address["socket"])
        except BaseException:
            sock.close()
            raise
        super().__init__(sock, "jail zygote")

    def spawn(self, request: dict, fds: list[int]) -> ForkedJail:
        """A jail forked for request, or OSError saying why there is none."""
        return super().spawn(request, fds, SPAWN_SECONDS)


_CONNECTION: list[Connection] = []
_OWN: list[Zygote] = []  # own()'s
_OWN_LOCK = threading.Lock()


def own() -> str:
    """A zygote of this process's own, for a process that starts jails with no runner's zygote (`kata test`'s
    pytest, `kata play` and its page): started on first call, again if it died, and stopped when the process
    ends. Its address (what KATA_JAIL_FORKS holds), which connection() uses where KATA_JAIL_FORKS is unset;
    "off" where jails are not forked here or it cannot start. Where KATA_JAIL_FORKS is set, none is started:
    its value is the answer."""
    if os.environ.get(VAR) or not serves_this_mode():
        return os.environ.get(VAR) or "off"
    with _OWN_LOCK:  # kata play --web: two runs may start at once
        if _OWN and _OWN[0].proc.poll() is not None:
            _OWN.pop().stop()
        if not _OWN:
            try:
                _OWN.append(Zygote())
            except OSError:
                return "off"
            atexit.register(_OWN[0].stop)
        return _OWN[0].address()


def connection() -> Connection | None:
    """This judge's connection to its runner's zygote (KATA_JAIL_FORKS), or else to own()'s, made on first use;
    None when there is none (neither, bubblewrap, or it is gone)."""
    if _CONNECTION and not _CONNECTION[0].gone:
        return _CONNECTION[0]
    _CONNECTION.clear()
    raw = os.environ.get(VAR) or (_OWN[0].address() if _OWN else None)
    if not raw or raw == "off" or confine.mode() not in MODES:
        return None
    try:
        _CONNECTION.append(Connection(json.loads(raw)))
    except (OSError, ValueError, KeyError, TypeError):
        os.environ.pop(VAR, None)  # not again in this judge
        return None
    return _CONNECTION[0]
