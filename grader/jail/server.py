"""The jail: the only process that imports a learner's kata module. It runs
what the judge asks (import, read an attribute, call) and answers with data.

Started by grader.jailer.jail_client as an isolated interpreter (no site, no user site,
sys.path set by the judge to a read-only runtime copy of the model package
and the standard library and site-packages), in a temporary working
directory, with the channel socket as its only inherited descriptor:

    python -s -S -B -c BOOT CONFIG_JSON

or, where the runner started one, forked by the jail zygote (`serve_forks`
below, grader/jailer/zygote.py): the same interpreter, flags, sys.path and
environment, with NumPy and the model already imported.

CONFIG_JSON: {"fd": channel fd, "sub": the submission copy's directory,
"limits": {"memory_mb", "output_mb", "cpu_seconds"}}.

Objects the judge passes that are not data arrive as proxies that call back
over the same channel: a reference `Model` (its pieces run in the judge,
which counts their work) and language models with a `logits` method. A
numpy Generator arrives as its bit-generator state and goes back after the
call, so the judge's generator advances exactly as if it had been used there.

Nothing here decides a grade: a learner's code can rewrite all of this
process, and the judge trusts none of it.
"""

from __future__ import annotations

import faulthandler
import gc
import importlib
import importlib.util
import json
import os
import resource
import signal
import socket
import sys

import numpy as np

from grader.wire import protocol as p
from grader.wire import views
from reference.lm import BigramLM, CachedLM
from reference.model import Config, Model
from reference.ngram import NGramLM

MIB = 1024 * 1024


class JudgeObject:
    """A judge-side object (a language model) seen from the jail."""

    def __init__(self, peer: p.Peer, data: dict):
        self._peer, self._ref = peer, data
        self._methods = {m for m in data.get("methods", []) if type(m) is str}

    def __getattr__(self, name):
        if name.startswith("_") or name not in self._methods:
            raise AttributeError(f"{self._ref.get('type', 'object')} offers {sorted(self._methods)}, not {name!r}")
        return lambda *args, **kwargs: call_judge(self._peer, self._ref, name, args, kwargs)

    def __repr__(self):
        return f"<{self._ref.get('type', 'object')} of the grader>"


def call_judge(peer: p.Peer, ref: dict, method: str, args, kwargs):
    header, bufs = peer.request(p.Op.CALL, obj=_Raw(ref), method=method, args=list(args), kwargs=kwargs)
    if header["op"] == p.Op.ERR.value:
        raise mirror(p.RemoteError.from_json(header.get("error")))
    return peer.codec.decode(header.get("value"), bufs)


_MIRRORS: dict[tuple, type] = {}


def mirror(err: p.RemoteError) -> BaseException:
    """The judge's exception as one the learner's code can catch by its built-in class."""
    bases = tuple(b for b in p.builtin_exceptions(err.bases) if issubclass(b, Exception)) or (Exception,)
    key = (err.name, bases)
    cls = _MIRRORS.get(key) or _MIRRORS.setdefault(key, type(err.name, bases, {"__module__": "grader"}))
    return cls(err.message)


class JudgeModel(Model):
    """A reference Model whose pieces run in the judge (which counts their work).
    Its weights stay there: the judge answers calls of the pieces only, so
    the work it counts is the work that made the answers."""

    def __init__(self, peer: p.Peer, ref: dict, config: Config):  # no weights here: they stay with the judge
        self.config = config
        self._counters = []
        self._peer, self._ref = peer, ref

    @property
    def weights(self):
        raise AttributeError(
            "the grader keeps this model's weights (it counts the work of its pieces): drive the pieces "
            "(model.embed, model.qkv, model.attend, model.mlp, model.logits) instead of reading model.weights"
        )

    def count_work(self):
        raise RuntimeError("the grader counts this model's work; count_work is not available to kata code")


def _piece(name):
    def run(self, *args, **kwargs):
        return call_judge(self._peer, self._ref, name, args, kwargs)

    run.__name__ = run.__qualname__ = name
    run.__doc__ = getattr(Model, name).__doc__
    return run


for _name in ("embed", "qkv", "attend", "mlp", "logits", "forward"):
    setattr(JudgeModel, _name, _piece(_name))
JudgeModel.__name__ = JudgeModel.__qualname__ = "Model"


class _Raw:
    """A value encoded as it is (a judge handle going back to the judge)."""

    def __init__(self, data):
        self.data = data


class _Kept:
    """A result the judge asked to keep here: it gets a handle, not the data."""

    def __init__(self, value):
        self.value = value


class _Views:
    """A result the judge asked to have whole, its arrays that share memory sent as that memory once (views)."""

    def __init__(self, value):
        self.value = value


class JailCodec(p.Codec):
    side = "jail"

    def __init__(self):
        super().__init__()
        self.shared: dict = {}  # while a _Views result is encoded: id(array) -> (array, its place in shared memory)
        self.peer: p.Peer | None = None
        self.rngs: list[np.random.Generator] = []  # generators decoded for the request being served
        self.models: dict[int, JudgeModel] = {}  # judge handle -> its proxy model, one per model
        self.local_models: dict[int, Model] = {}  # key -> a model the judge sent as data
        self.local_tables: dict[int, NGramLM] = {}  # key -> an n-gram draft the judge sent as data

    def _encode_array(self, value, buffers: list):
        known = self.shared.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        return super()._encode_array(value, buffers)

    def encode_special(self, value, buffers, depth):
        if isinstance(value, _Raw):
            return value.data
        if isinstance(value, _Views):
            self.shared = views.plan(value.value, buffers)
            try:
                return {"$": "views", "value": self.encode(value.value, buffers, depth + 1)}
            finally:
                self.shared = {}
        if isinstance(value, _Kept):
            return self.export(value.value)
        if isinstance(value, JudgeModel):
            return value._ref
        if isinstance(value, Model):  # a model built here: its config and weights
            return {
                "$": "model",
                "config": self.encode(_config_fields(value.config), buffers, depth + 1),
                "weights": self.encode(dict(value.weights), buffers, depth + 1),
            }
        if isinstance(value, Config):
            return {"$": "config", "fields": self.encode(_config_fields(value), buffers, depth + 1)}
        if isinstance(value, JudgeObject):
            return value._ref
        if isinstance(value, type) and issubclass(value, BaseException):
            return {
                "$": "excclass",
                "name": value.__name__,
                "module": str(value.__module__),
                "qualname": value.__qualname__,
                "bases": list(p.builtin_bases(value)),
            }
        return None

    def export(self, value):
        kind = "class" if isinstance(value, type) else "function" if callable(value) else "object"
        return self.ref(value, kind, _methods(type(value)) if kind == "object" else ())

    def decode_special(self, tag, data, buffers, depth):
        if tag == "rng":
            if "slot" in data:  # a generator this message already carried
                slot = data["slot"]
                if type(slot) is not int or not 0 <= slot < len(self.rngs):
                    raise p.ProtocolError("a generator slot that was not sent")
                return self.rngs[slot]
            gen = p.new_rng(data)
            self.rngs.append(gen)
            return gen
        if tag == "config":
            return Config(**self.decode(data.get("fields"), buffers, depth + 1))
        if tag == "bigram":
            return BigramLM(self.decode(data.get("table"), buffers, depth + 1))
        if tag == "cached_lm":  # a demo's language model, made here around the model it carries
            model = self.decode(data.get("model"), buffers, depth + 1)
            if not isinstance(model, Model):
                raise p.ProtocolError("a cached language model without a model")
            return CachedLM(model)
        if tag == "ngram":  # an n-gram draft sent as its table, once, to run here (a demo's draft)
            key = data.get("key")
            if "probs" in data:
                table = (self.decode(data.get(f), buffers, depth + 1) for f in ("contexts", "probs"))
                self.local_tables[key] = NGramLM(*table)
            if key not in self.local_tables:
                raise p.ProtocolError("an n-gram table key that was never sent")
            return self.local_tables[key]
        if tag == "model":  # a model sent as data, to run here (a speed check's model)
            key = data.get("key")
            if "weights" in data:
                fields = self.decode(data.get("config"), buffers, depth + 1)
                self.local_models[key] = Model(Config(**fields), self.decode(data["weights"], buffers, depth + 1))
            if key not in self.local_models:
                raise p.ProtocolError("a model key that was never sent")
            return self.local_models[key]
        raise p.ProtocolError(f"an unknown value tag {tag!r}")

    def remote(self, data):
        if data.get("kind") == "model":
            h = data["id"]
            if h not in self.models:
                config = Config(**self.decode(data.get("config"), [], 1))
                self.models[h] = JudgeModel(self.peer, {k: v for k, v in data.items() if k != "config"}, config)
            return self.models[h]
        return JudgeObject(self.peer, data)


_METHODS: dict[type, list[str]] = {}


def _methods(cls: type) -> list[str]:
    """The public methods of a class, which the judge calls in one round trip."""
    if cls not in _METHODS:
        _METHODS[cls] = [n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n, None))]
    return _METHODS[cls]


def _config_fields(config: Config) -> dict:
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


class KataImportError(Exception):
    """The kata module could not be imported; the message says why."""


class Server:
    def __init__(self, sock: socket.socket, sub: str):
        self.sub = os.path.realpath(sub)
        self.codec = JailCodec()
        self.peer = p.Peer(sock, self.codec, self.serve, self.error)
        self.codec.peer = self.peer

    def error(self, exc: BaseException) -> p.RemoteError:
        return p.error_of(exc, keep_frame=lambda f: os.path.realpath(f).startswith(self.sub + os.sep))

    def load(self, name: str):
        path = os.path.join(self.sub, f"{name}.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            where = _source_and_caret(exc)
            at = f" at line {exc.lineno}" if exc.lineno else ""
            raise KataImportError(f"{name}.py has a syntax error{at}: {exc.msg}{where}") from None
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: importing must not end the jail
            err = self.error(exc)
            where = f" (at {err.frames[-1]})" if err.frames else ""
            raise KataImportError(f"importing {name}.py raised {type(exc).__name__}: {err.message}{where}") from None
        return module

    def serve(self, header: dict, bufs: list[bytes]):
        try:
            return self._serve(header, bufs)
        finally:
            _flush()  # what the learner's code printed reaches the log before the judge has the answer

    def _serve(self, header: dict, bufs: list[bytes]):
        op = header.get("op")
        self.codec.rngs = []
        if op == p.Op.LOAD.value:
            name = header.get("name")
            if type(name) is not str or not name.isidentifier():
                raise p.ProtocolError("a bad module name")
            return _Kept(self.load(name)), {}
        if op == p.Op.PUT.value:
            return _Kept(self.codec.decode(header.get("value"), bufs)), {}
        target = self.codec.decode(header.get("obj"), bufs)
        if op == p.Op.GETATTR.value:
            return getattr(target, str(header.get("name"))), {}
        if op == p.Op.CALL.value:
            method = header.get("method")
            fn = target if method is None else getattr(target, str(method))
            args, kwargs = self.codec.decode_call(header, bufs)
            rngs = list(self.codec.rngs)
            if header.get("batch"):
                if not all(type(a) is list for a in args):
                    raise p.ProtocolError("a batch call needs a list of argument lists")
                result = [fn(*a, **kwargs) for a in args]
            else:
                result = fn(*args, **kwargs)
            if header.get("keep"):
                result = _Kept(result)
            elif header.get("views"):
                result = _Views(result)
            return result, {"rngs": [p.rng_state(g) for g in rngs]}
        raise p.ProtocolError(f"an unknown request {op!r}")

    def run(self) -> None:
        while True:
            header, bufs = p.recv_frame(self.peer.reader)
            self.codec.release(header.get("release") or [])
            if header.get("op") == p.Op.BYE.value:
                return
            self.peer.answer(header, bufs)


def _source_and_caret(exc: SyntaxError) -> str:
    """The line a SyntaxError is on and a caret under where Python stopped, as two more lines of its
    message, each led by '| ' so that reports which strip a line's indent keep the caret in place."""
    text = (exc.text or "").rstrip("\r\n")
    if not text.strip():
        return ""
    code = text.lstrip()
    column = max(min((exc.offset or 1) - 1 - (len(text) - len(code)), len(code)), 0)
    return f"\n| {code[:160]}\n| {' ' * min(column, 160)}^"


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # past the output limit, or closed by the learner's code
            pass


def _limit(kind: int, value: int) -> None:
    resource.setrlimit(kind, (value, value))


def main(config_json: str) -> None:
    config = json.loads(config_json)
    limits = config["limits"]
    sock = socket.socket(fileno=config["fd"])
    faulthandler.enable()  # a segfault's traceback goes to the log the judge reads
    faulthandler.register(signal.SIGUSR1, all_threads=False)  # and, asked, the line a check that timed out was in
    for stream in (sys.stdout, sys.stderr):  # each printed line reaches the log at once, even before a hang
        stream.reconfigure(line_buffering=True, errors="backslashreplace")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-long write fails with EFBIG instead of killing us
    _limit(resource.RLIMIT_AS, limits["memory_mb"] * MIB)
    _limit(resource.RLIMIT_FSIZE, limits["output_mb"] * MIB)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_NOFILE, 64)
    _limit(resource.RLIMIT_CPU, limits["cpu_seconds"])
    _limit(resource.RLIMIT_NPROC, 1)  # no child process, no thread: nothing can outlive the kata
    server = Server(sock, config["sub"])
    try:
        server.run()
    except (p.PeerGone, p.ProtocolError):
        pass
    os._exit(0)


# ------------------------------------------------------------------ zygote
# grader.jailer.zygote starts this process once per `kata` command, as a jail starts
# (the same flags, environment and sys.path), and it forks every jail with
# NumPy and the model already imported. It runs nothing of a learner's: each
# child confines itself (grader.jail.confine) before it runs main().


# Modules the zygote imports before it forks: what NumPy imports only when first asked (its submodules that
# `import numpy` leaves to the first np.random, np.fft, ... a kata's code touches; a Generator seeded from fresh
# entropy imports secrets) and standard modules kata code commonly imports. A uid-mode jail shares the file
# system as a uid of its own, and where the Python or its packages lie in a folder other uids cannot read (a
# pyenv under /root, a virtual environment in a private clone) it has only the modules loaded before the fork.
# Not numpy.testing, numpy.f2py and the like: tools for tests and builds, not for kata code.
PRELOADED = (
    "numpy.random",
    "numpy.fft",
    "numpy.linalg",
    "numpy.polynomial",
    "numpy.ma",
    "secrets",
    "bisect",
    "copy",
    "dataclasses",
    "fractions",
    "heapq",
    "itertools",
    "random",
    "statistics",
    "string",
    "typing",
)


def serve_forks(listen_fd: str, life_fd: str, mode: str) -> None:
    """Fork a jail for each request of each judge that connects to the
    listening socket listen_fd (see grader/jailer/zygote.py), until life_fd, the
    runner's socket, closes: then kill every jail and exit. Both are
    descriptor numbers, as the command line gives them; mode is the
    confinement every jail gets (grader.jail.confine), fixed here. A
    grader.wire.prefork server: it answers only a peer of its own uid outside
    its own tree, which it makes hold every jail and all a jail starts."""
    from grader.jail import confine
    from grader.wire.prefork import Server

    if mode not in confine.FORKED_MODES:
        raise ValueError(f"the zygote serves the {', '.join(confine.FORKED_MODES)} modes, not {mode!r}")
    confine.adopt_orphans()
    for name in PRELOADED:
        importlib.import_module(name)
    listener, life = socket.socket(fileno=int(listen_fd)), socket.socket(fileno=int(life_fd))
    gc.freeze()  # NumPy and the model, loaded once: no jail's garbage collection walks them
    Server(lambda request, fds: _jail(mode, request, fds), fds_per_request=2).serve(listener=listener, life=life)
    os._exit(0)


def _jail(mode: str, request: dict, fds: list[int]):
    """What a forked child runs to become the jail a judge asked for, confined
    in the zygote's own mode (a request that names another is refused, as is
    a uid below the jails' range); its confinement is worked out here, in
    the zygote, before the fork."""
    from grader.jail import confine

    channel, log = fds
    how = request["confine"]
    if how.get("mode", mode) != mode:
        raise ValueError(f"this zygote forks {mode}-mode jails only, not {how.get('mode')!r} ones")
    uid = how["uid"]
    if type(uid) is not int or uid < confine.UID_BASE:
        raise ValueError(f"a jail's uid is {confine.UID_BASE} or more, not {uid!r}")
    limits = confine.preexec(mode, how["jaildir"], how["workdir"], uid, how["view"], how["extra"])
    return lambda: _forked(request, channel, log, limits)


def _forked(request: dict, channel: int, log: int, limits) -> None:
    """In the forked child: become the jail the request describes, as
    subprocess would have started it, then run main()."""
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, channel)  # nothing inherited but the channel: not the zygote's sockets
        os.closerange(channel + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        limits()  # namespaces, root, uid, parent-death signal: as subprocess's preexec_fn
        sys.path[:] = request["paths"]
        config = dict(request["config"], fd=channel)
        main(json.dumps(config))
    except BaseException:  # noqa: BLE001 - say why in the log the judge reads
        import traceback

        traceback.print_exc()
    finally:
        os._exit(1)
