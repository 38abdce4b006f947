"""The judge's side of the jail: start a kata's jail, and see the learner's
module and objects through proxies.

    kv = kata_module("kv_cache")          # a proxy: nothing of the learner's runs here
    cache = kv.KVCache(2, 2, 4, 12)       # built in the jail; `cache` is a proxy
    k, v = cache.update(0, keys, values)  # arrays come back as data

A suite never imports learner code: every attribute, call, `len` and
exception comes over the channel (grader.wire.protocol). A reference `Model`
goes as a copy the jail keeps (sent once), except while the suite counts
its work (inside `with model.count_work()`) and always for a `SecretModel`:
then it goes as a handle, its pieces run here when the learner's code calls
them, the count is the judge's own, and its weights never leave. Objects whose class lists the methods it offers in
`__jail_api__` (the suites' language models) also stay here and are called
back. Exceptions from the learner's code are raised here
as classes of the same name with the same built-in bases, carrying the
learner's own frames as file:line.

A jail that dies, hangs past the check's deadline, breaks the protocol or
writes more than its cap (grader.jailer.jail_space) is
killed, and the check fails with JailCrash or JailTimeout (BaseException
subclasses, so no `except Exception` in a suite swallows them); the next use
starts a fresh jail. A module that fails to import fails the same way on
every use, without a new try.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from grader.jail import confine
from grader.jailer import failing_calls, jail_space
from grader.jailer import zygote as forks
from grader.jailer.jail_log import PRINTED_BYTES, PRINTED_LINES, JailLog, shown  # noqa: F401 (PRINTED_*: the judge's)
from grader.jailer.remote import (  # noqa: F401 (the suites use them as jail_client's)
    EXPORTS,
    LOCAL_MISSES,
    BadResult,
    JailCrash,
    JailTimeout,
    JudgeCodec,
    KataLoadError,
    LearnerBaseException,
    Remote,
    RemoteMethod,
    SecretModel,
    api_of,
    checked_batch,
    mirror_class,
    raise_remote,
)
from grader.jailer.stopped import stopped
from grader.kata import target as _target
from grader.wire import protocol as p
from reference.model import Model

MODEL_PIECES = ("embed", "qkv", "attend", "mlp", "logits", "forward")
# Bytes the channel's each end may have on their way (what the kernel allows, net.core.wmem_max, at most): a
# timed call's arguments and result cross inside its round trip, and a small buffer splits a large one into
# writes that each wait for the other process to wake, which a busy machine makes slow.
CHANNEL_BUFFER = 4 * 1024 * 1024


@dataclasses.dataclass
class Settings:
    """Set by the judge process (grader.judge.judge) or left at the defaults (kata test)."""

    target: str = "katas"
    memory_mb: int = 4096  # address space of a jail
    output_mb: int = 64  # what a jail may write to its log
    cpu_seconds: int = 600  # CPU time one jail may use in all
    load_seconds: float = 60.0  # wall clock importing the kata module may take
    deadline: float | None = None  # time.monotonic() by which the running check must end
    judged: bool = False  # the judge takes what the learner's code prints (printed()); else the suites' conftest does


SETTINGS = Settings()

# The latest calls of learner code (grader.jailer.failing_calls.Call, arguments frozen), for the example a failing
# check shows. Only a few are kept; grader.judge.judge forgets them when a check or a Hypothesis example starts.
CALLS: collections.deque = collections.deque(maxlen=8)
_CALLS_MADE = [0]  # calls since they were last forgotten, the ones no longer kept included


def forget_calls() -> None:
    CALLS.clear()
    _CALLS_MADE[0] = 0


def recorded_calls() -> tuple[list, int]:
    """(the latest calls of learner code, oldest first; how many were made since forget_calls)."""
    return list(CALLS), _CALLS_MADE[0]


def _record(jail: "Jail", obj: "Remote", method: str | None, args, kwargs, batch: bool) -> None:
    """Note a call of the learner's module (never of a baseline's) before it is sent."""
    if method is not None and method.startswith("__"):
        return  # len() and [] of a learner object: not a call the learner wrote out
    if batch:
        n, args = len(args), (args[-1] if args else ())
    else:
        n = 1
    try:
        frozen = failing_calls.Call(
            jail.kata,
            str(obj._ref.get("type")),
            str(obj._ref.get("kind")),
            method,
            tuple(failing_calls.freeze(a) for a in args),
            {str(k): failing_calls.freeze(v) for k, v in kwargs.items()},
            n,
        )
    except Exception:  # noqa: BLE001 - an example is a courtesy; it never fails a check
        return
    CALLS.append(frozen)
    _CALLS_MADE[0] += n


def is_load_failure(exc: BaseException) -> bool:
    """True if exc is why a kata module could not be loaded (raised again by every check)."""
    return any(jail.failed is exc for jail in _JAILS.values())


def view() -> list:
    """The file system a confined jail sees (confine.view(); none in the modes that share the grader's),
    worked out once for each sys.path of this judge (pytest adds to it as it collects the suite): it reads
    the installation and sys.path's folders, which no jail can change, and every jail start asks for it."""
    if confine.mode() not in ("root", "bwrap"):
        return []
    return list(_view_of(tuple(sys.path)))


@functools.lru_cache(maxsize=8)  # as zygote.runtime_paths: it changes only with sys.path, the key
def _view_of(path: tuple[str, ...]) -> tuple:
    return tuple(confine.view())


def _free_uid() -> int:
    """A uid for a new jail that no live jail of this judge has. Other judges
    use other ranges (the range is the judge's pid), so no two live jails on
    the machine share one and none can signal another."""
    taken = {jail.uid for jail in _JAILS.values() if jail.proc is not None}
    base = confine.UID_BASE + confine.UIDS_PER_JUDGE * os.getpid()
    return next(uid for uid in range(base, base + confine.UIDS_PER_JUDGE) if uid not in taken)


class Jail:
    """One jail process holding one module file, restarted after a crash.

    kata: the module's name (kv_cache); source: the file it is copied from."""

    def __init__(self, kata: str, source: Path):
        self.kata, self.source = kata, source
        self.generation = 0
        self.proc: subprocess.Popen | None = None
        self.peer: p.Peer | None = None
        self.module_remote: Remote | None = None
        self.failed: BaseException | None = None  # the import failed: every use fails the same way
        self.dir: str | None = None
        self.runtime: str | None = None  # the runtime copy the jail runs: its own, or the zygote's
        self.uid = 0
        self.learner = False  # the learner's module (its calls are recorded), not a trusted baseline
        self.log: JailLog | None = None  # where the jail's stdout and stderr go
        self.running = ""  # ' (it was running k.py:5 in f)': the learner's line a jail that timed out was in
        self.space: jail_space.Space | None = None  # the places it writes, which the judge adds up
        self._stopping = threading.Lock()  # kata play --web: its close() and a request's thread may both stop it

    # -- life
    def _prepare(self, runtime: str | None) -> None:
        """The jail's folder: its copy of the submission (sub), its working
        folder (work), and, unless the zygote's shared one is given, its own
        runtime copy (runtime)."""
        self.uid = _free_uid()
        self.dir = tempfile.mkdtemp(prefix="kata-jail-")
        if confine.mode() in ("root", "uid"):  # the folder is the jail's alone: no other jail's uid can enter it
            os.chown(self.dir, self.uid, self.uid)
            os.chmod(self.dir, 0o700)
        else:
            os.chmod(self.dir, 0o755)
        if runtime is None:
            runtime = str(Path(self.dir, "runtime"))
            forks.make_runtime(Path(runtime))
        self.runtime = runtime
        sub = Path(self.dir, "sub")
        sub.mkdir()
        shutil.copyfile(self.source, sub / f"{self.kata}.py", follow_symlinks=False)
        for path in [sub, *sub.rglob("*")]:
            os.chmod(path, 0o555 if path.is_dir() else 0o444)
        work = Path(self.dir, "work")
        work.mkdir(mode=0o700)
        if confine.mode() in ("root", "uid"):
            os.chown(work, self.uid, self.uid)
        self.sub, self.work = str(sub), str(work)
        self.space = jail_space.Space(self.dir, self.uid if confine.mode() == "uid" else None)

    def start(self) -> None:
        """Start the jail: forked by the zygote where there is one, else a new process; JailCrash if neither can."""
        zygote = forks.connection()
        self._prepare(zygote.runtime if zygote is not None else None)
        parent, child = socket.socketpair()
        for end in (parent, child):  # a large argument or result crosses in one write, without waiting for the reader
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHANNEL_BUFFER)
        self.log = JailLog()
        config = {
            "fd": child.fileno(),
            "sub": self.sub,
            "limits": {
                "memory_mb": SETTINGS.memory_mb,
                "output_mb": SETTINGS.output_mb,
                "cpu_seconds": SETTINGS.cpu_seconds,
            },
        }
        paths = [self.runtime] + forks.runtime_paths()
        self.proc = None
        try:
            if zygote is not None:
                self.proc = self._forked(zygote, config, paths, child)
            if self.proc is None:
                self.proc = self._started(config, paths, child, shared=zygote is not None)
        except (OSError, subprocess.SubprocessError) as exc:
            parent.close()
            raise JailCrash(
                f"the grader could not start the kata process in {confine.mode()!r} mode ({exc}); "
                "see grader/jail/confine.py for the modes, KATA_JAIL to choose one"
            ) from None
        finally:
            child.close()
        self.generation += 1
        self.peer = p.Peer(parent, JudgeCodec(self), self.serve, lambda exc: p.error_of(exc, lambda f: False))

    def _forked(self, zygote, config: dict, paths: list[str], child: socket.socket):
        """The jail as the zygote forked it, or None if it would not (then it is started the usual way: the
        zygote forks jails of the mode it started in, and refuses a request for another)."""
        how = {"mode": confine.mode(), "jaildir": self.dir, "workdir": self.work, "uid": self.uid}
        request = {
            "config": config,
            "env": forks.jail_env(self.work),
            "cwd": self.work,
            "paths": paths,
            "confine": dict(how, extra=[self.runtime], view=view()),
        }
        try:
            return zygote.spawn(request, [child.fileno(), self.log.fileno()])
        except OSError:
            return None

    def _started(self, config: dict, paths: list[str], child: socket.socket, shared: bool) -> subprocess.Popen:
        """The jail as a new process, confined as confine.launch says; shared: its runtime is the zygote's."""
        boot = f"import sys; sys.path[:] = {paths!r}; from grader.jail.server import main; main(sys.argv[1])"
        argv, preexec = confine.launch(
            [os.path.realpath(sys.executable), "-s", "-S", "-B", "-c", boot, json.dumps(config)],
            self.dir,
            self.work,
            self.uid,
            view(),
            (self.runtime,) if shared else (),
        )
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self.log.fileno(),
            stderr=self.log.fileno(),
            pass_fds=(child.fileno(),),
            close_fds=True,
            env=forks.jail_env(self.work),
            cwd=self.work,
            start_new_session=True,
            preexec_fn=preexec,
        )

    def stop(self) -> None:
        """Kill the jail and everything it started; remove its directory. Safe from two threads at once: the
        second waits for the first and finds nothing left to do."""
        with self._stopping:
            self._stop()

    def _stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.kill()
            self.proc.wait()
            self.peer.sock.close()
            if self.learner:
                _PRINTED_BY_STOPPED.append(self.log.take())
            self.log.close()
        self.proc, self.peer, self.module_remote = None, None, None
        if self.space is not None:
            self.space.remove_shared()
            self.space = None
        if self.dir:
            forks.remove_tree(self.dir)
            self.dir = None

    def _death(self) -> str:
        """Why the jail ended, with the tail of what it printed (faulthandler's traceback)."""
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            why = "broke the protocol"
        elif code < 0:
            try:
                why = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                why = f"was killed by signal {-code}"
        else:
            why = f"exited with code {code}"
        tail = self.log.tail().replace(self.sub + "/", "")
        lines = [ln.strip() for ln in tail.splitlines() if f"{self.kata}.py" in ln or "Fatal Python" in ln]
        return f"the kata process {why}" + (": " + "; ".join(lines[-4:]) if lines else "")

    # -- requests
    def ensure(self) -> None:
        """A live jail with the module loaded, or the reason there cannot be one."""
        if self.failed is not None:
            raise self.failed
        if self.peer is None:
            self.start()
        if self.module_remote is not None:
            return
        start = time.monotonic()
        deadline = start + SETTINGS.load_seconds
        if SETTINGS.deadline is not None:
            deadline = min(deadline, max(SETTINGS.deadline, start + 1))
        try:
            self.module_remote = self._send(p.Op.LOAD, deadline, name=self.kata)[0]
        except JailTimeout:
            self.failed = JailTimeout(
                f"importing the kata module took longer than {deadline - start:.0f} s{self.running}"
            )
        except JailCrash as exc:
            self.failed = JailCrash(f"{exc} while importing the kata module")
        except KataLoadError as exc:
            self.failed = exc
        if self.failed is not None:
            self.stop()
            raise self.failed

    def _send(self, op: p.Op, deadline: float | None, timed: bool = False, **fields):
        peer = self.peer
        peer.deadline = deadline
        peer.codec.sent_rngs = []
        try:
            watched = self.learner and not timed  # a timed call's clock is running: its space is counted later
            if watched:
                self.space.check()
            # Nor is it counted while the judge waits for a timed answer: the clock would time the count.
            peer.reader.idle = self.space.check if watched else None
            header, bufs = peer.request(op, **fields)
            if watched:  # after the answer too: a judge a busy machine kept waiting may have missed every idle look
                self.space.check()
            rngs = list(peer.codec.sent_rngs)
            if header["op"] == p.Op.ERR.value:
                raise_remote(p.RemoteError.from_json(header.get("error")))
            try:
                value = peer.codec.decode(header.get("value"), bufs)
                states = header.get("rngs") or []
                if len(states) != len(rngs):
                    raise p.ProtocolError("random generator states that do not match the call")
                for gen, state in zip(rngs, states):
                    p.set_rng_state(gen, state)
            except p.ProtocolError as exc:
                raise BadResult(f"the kata code returned something that cannot be graded: {exc}") from None
            return value, header
        except p.PeerTimeout:
            self.running = self.log.running_line(self.proc.pid, self.kata)
            self.stop()
            raise JailTimeout(f"the kata code did not finish before the check's time limit{self.running}") from None
        except (p.PeerGone, p.ProtocolError) as exc:
            why = self._death() if isinstance(exc, p.PeerGone) else f"the kata process broke the protocol ({exc})"
            self.stop()
            raise JailCrash(why) from None
        except jail_space.SpaceExceeded as exc:
            self.stop()
            raise JailCrash(f"the kata process was stopped: {exc}") from None

    def request(self, op: p.Op, **fields):
        self.ensure()
        return self._send(op, SETTINGS.deadline, **fields)[0]

    def call(self, obj: Remote, method: str | None, args, kwargs, keep: bool = False, batch: bool = False, timed=False):
        """obj(*args, **kwargs) or obj.method(*args, **kwargs). keep: leave the
        result in the jail and return its proxy instead of its data. batch:
        args is a list of argument lists, one call each, in order, in one
        round trip; returns the list of results. timed: a call on the clock,
        which timed() recorded before its clock started; its result's arrays
        that share memory cross as that memory once (grader.wire.views) and
        come back as read-only arrays over it."""
        self.ensure()
        if obj._gen != self.generation:
            raise JailCrash("this kata object was made before the kata process restarted")
        if self.learner and not timed:
            _record(self, obj, method, args, kwargs, batch)
        fields = {"obj": obj, "method": method, "args": list(args), "kwargs": dict(kwargs)}
        if keep:
            fields["keep"] = True
        if batch:
            fields["batch"] = True
        if timed and not keep:
            fields["views"] = True
        self.peer.codec.views_asked = timed and not keep
        try:
            result = self._send(p.Op.CALL, SETTINGS.deadline, timed, **fields)[0]
        finally:
            if self.peer is not None:
                self.peer.codec.views_asked = False
        return checked_batch(result, len(fields["args"])) if batch else result

    def put(self, value) -> Remote:
        """Keep value in the jail; its proxy can then be passed without sending it again."""
        return self.request(p.Op.PUT, value=value)

    def module(self) -> "ModuleProxy":
        return ModuleProxy(self)

    # -- serving the jail's callbacks: only the calls a model or an exported object offers, never an attribute
    # (a model's weights stay here: what the jail learns of it is what the pieces it calls return)
    def serve(self, header: dict, bufs: list[bytes]):
        codec = self.peer.codec
        target = codec.decode(header.get("obj"), bufs)
        op, name = header.get("op"), header.get("method") or header.get("name")
        allowed = () if op != p.Op.CALL.value else MODEL_PIECES if isinstance(target, Model) else api_of(target)
        if name not in allowed:
            raise p.ProtocolError(f"the grader's {type(target).__name__} offers {list(allowed)}, not {name!r}")
        args, kwargs = codec.decode_call(header, bufs)
        return getattr(target, name)(*args, **kwargs), {}


# Names test tools look up on any object (Hypothesis on a test's arguments): answered here, not asked of the jail.
class ModuleProxy:
    """The learner's kata module as the judge sees it. It outlives jail restarts."""

    def __init__(self, jail: Jail):
        self._jail = jail
        self._known: dict[str, Remote] = {}  # functions and classes already looked up, in this jail

    def __getattr__(self, name):
        if name.startswith("_") or name in LOCAL_MISSES:
            raise AttributeError(name)
        self._jail.ensure()
        known = self._known.get(name)
        if known is not None and known._gen == self._jail.generation:
            return known
        value = self._jail.request(p.Op.GETATTR, obj=self._jail.module_remote, name=name)
        if isinstance(value, Remote) and value._ref.get("kind") in ("function", "class"):
            self._known[name] = value
        return value

    def __repr__(self):
        return f"<kata module {self._jail.kata}>"


_JAILS: dict[tuple[str, str], Jail] = {}

_PRINTED_BY_STOPPED: list[tuple[bytes, int]] = []  # what learner jails stopped since the last printed() took


def printed(last: bool = False) -> str:
    """What the learner's jails printed since the last call, stdout and stderr
    as they were written, capped (grader.jailer.jail_log.shown; `last`: its
    end, not its start). Baseline jails' output is never shown."""
    mine = [jail.log.take(last=last) for jail in _JAILS.values() if jail.learner and jail.log]
    taken = _PRINTED_BY_STOPPED + mine
    _PRINTED_BY_STOPPED.clear()
    return shown(taken, last)


def prestart(name: str, baseline: Path | None = None) -> None:
    """Start the jail of kata `name` now (and the baseline's, when given), so
    that their interpreters start while the judge collects the suite."""
    try:
        jails = [kata_module(name)._jail]
    except KataLoadError:
        jails = []  # the suite meets the same error and reports it
    if baseline is not None and baseline.is_file():
        jails.append(baseline_module(baseline)._jail)
    for jail in jails:
        if jail.peer is None and jail.failed is None:
            jail.start()


def load(name: str) -> None:
    """Start kata `name`'s jail and import its module now (or raise why it cannot be)."""
    kata_module(name)._jail.ensure()


def kata_module(name: str) -> ModuleProxy:
    """The module of kata `name` from the configured target, in its jail."""
    source = _target.kata_path(SETTINGS.target, name)
    key = (name, str(source))
    if key not in _JAILS:
        why = _target.why_not_a_module(source)
        if why:
            raise KataLoadError(why)
        text = source.read_text(encoding="utf-8", errors="replace")
        if SETTINGS.target != "reference" and _target.USES_SOLUTIONS.search(text):
            raise KataLoadError(f"{source.name} uses the reference solution; a kata must be your own code")
        _JAILS[key] = Jail(name, source)
        _JAILS[key].learner = True
    return _JAILS[key].module()


def baseline_module(path) -> ModuleProxy:
    """A module of trusted baselines, in a jail of its own, so that a speed
    check times both sides through the same channel."""
    source = Path(path)
    key = (source.stem, str(source))
    if key not in _JAILS:
        _JAILS[key] = Jail(source.stem, source)
    return _JAILS[key].module()


def _owner(fn, what: str) -> tuple[Remote, str | None]:
    owner, method = (fn.owner, fn.name) if isinstance(fn, RemoteMethod) else (fn, None)
    if not isinstance(owner, Remote):
        raise TypeError(f"{what}() takes a kata function or method, a proxy from the jail")
    return owner, method


def _clock(fn, args, batch: bool, run) -> tuple[float, object]:
    """(seconds, run(jail, owner, method, args)) timed here around everything the
    jail does with args: they travel inside the timed round trip (nothing
    reaches the jail before the clock starts), and every other jail of the
    judge is stopped meanwhile, so no side burns CPU on the other's clock."""
    owner, method = _owner(fn, "timed")
    jail = owner._jail
    args = [list(a) for a in args] if batch else list(args)
    if jail.learner:
        _record(jail, owner, method, args, {}, batch)
    others = [j.proc for j in _JAILS.values() if j is not jail and j.proc is not None]
    with stopped([proc.pid for proc in others if proc.poll() is None]):
        t0 = time.perf_counter()
        value = run(jail, owner, method, args)
        return time.perf_counter() - t0, value


def timed(fn, args, batch: bool = False) -> tuple[float, object]:
    """(seconds, result) of one call of a kata function or method, timed here
    around its round trip (see _clock): the arguments go and the whole result
    comes back inside it, so the judge checks data it received, never a
    summary the jail made or a value it works out on request after the
    clock stops. batch: args is a list of argument lists, called in order in
    one round trip (the result is then their list), for calls too quick to
    time one by one. Arrays of the result that are views of one buffer (a
    KV cache's keys and values) cross as that buffer once and come back
    read-only (grader.wire.views), so a result made of views costs what its
    buffer does, and one made of copies what the copies do."""
    return _clock(
        fn, args, batch, lambda jail, owner, method, sent: jail.call(owner, method, sent, {}, batch=batch, timed=True)
    )


def put(fn, value) -> Remote:
    """value kept in the jail of fn (a kata function or method): its proxy. A
    call given the proxy gets that very object, so what the call does to it
    stays there for the suite to read back (proxy.copy() of an array)."""
    return _owner(fn, "put")[0]._jail.put(value)


def kept(fn, *args, items=None):
    """fn(*args) left in fn's jail: its proxy, whose methods run on the very
    object the call returned (an array's fill edits it where the learner's
    code can see the edit); with items, the list of proxies of result[i]."""
    owner, method = _owner(fn, "kept")
    result = owner._jail.call(owner, method, list(args), {}, keep=True)
    if items is None:
        return result
    return [result._jail.call(result, "__getitem__", [i], {}, keep=True) for i in items]


def call_many(fn, arg_lists, **kwargs) -> list:
    """[fn(*args, **kwargs) for args in arg_lists] in one round trip: the same calls in the same order (a
    generator shared by the calls advances through them as in a loop). For suites that call one thousands of times."""
    owner, method = _owner(fn, "call_many")
    return owner._jail.call(owner, method, [list(a) for a in arg_lists], kwargs, batch=True)


def stop_all() -> None:
    """Stop every jail of this process (a walk over a copy: another thread may stop or start one meanwhile)."""
    for jail in list(_JAILS.values()):
        jail.stop()
    _JAILS.clear()
