"""The judge's side of objects that live in a jail: a proxy per learner object
(its attributes, calls, len() and [] go over the channel), the codec that
turns them and the model's types into the protocol's values and back, and the
exceptions a jail's answer raises in the judge. grader.jailer.jail_client
drives the jails they talk to."""

from __future__ import annotations

import dataclasses
import weakref
from typing import Protocol

import numpy as np

from grader.wire import protocol as p
from grader.wire import views
from reference.lm import BigramLM, CachedLM, PlainLM
from reference.model import Config, Model
from reference.ngram import NGramLM

# Judge objects the jail may call back, and the methods it may call on them.
EXPORTS = {PlainLM: ("logits",), CachedLM: ("logits",)}
# Attributes Hypothesis and pytest look up on any object: answered here, never asked of the jail.
LOCAL_MISSES = frozenset(
    {"hypothesis_internal_is_this_a_mock_check", "execute_example", "setup_example", "teardown_example"}
)


class JailCrash(BaseException):
    """The jail died (or broke the protocol) during this check."""


class JailTimeout(BaseException):
    """The jail did not answer before the check's deadline."""


class KataLoadError(Exception):
    """The kata module could not be loaded; the message says why."""


class BadResult(AssertionError):
    """The learner's code returned something that cannot be data (an object
    array, a malformed Model): a wrong answer, in the learner's words."""


def checked_batch(result, calls: int) -> list:
    """A batch's answer: one result per call. Every suite reads a batch so, and a shorter list (a jail
    server patched from the kata's module) would leave calls unchecked."""
    if type(result) is list and len(result) == calls:
        return result
    got = f"{len(result)} results" if type(result) is list else f"a {type(result).__name__}"
    raise BadResult(f"the kata process answered {calls} calls with {got}")


class LearnerBaseException(Exception):
    """Base of mirrored learner exceptions that were not Exceptions in the jail
    (SystemExit, KeyboardInterrupt, pytest's skip): here they are plain errors."""


_MIRRORS: dict[tuple, type] = {}


def mirror_class(name: str, module: str, qualname: str, bases: tuple[str, ...]) -> type:
    """One judge-side class per learner exception class, with its built-in bases."""
    found = p.builtin_exceptions(bases)
    if not found or not all(issubclass(b, Exception) for b in found):
        found = (LearnerBaseException,)
    key = (module, qualname, found)
    if key not in _MIRRORS:
        _MIRRORS[key] = type(name, found, {"__module__": f"kata.{module}", "__qualname__": qualname})
    return _MIRRORS[key]


def raise_remote(err: p.RemoteError):
    if err.name == "KataImportError":
        raise KataLoadError(err.message)
    cls = mirror_class(err.name, err.module, err.qualname, err.bases)
    text = err.message + "".join(f"\n    at {f}" for f in err.frames)
    try:
        exc = cls(text)
    except Exception:  # a built-in base whose constructor wants other arguments
        exc = mirror_class(err.name, err.module, err.qualname, ())(text)
    if err.errno is not None and isinstance(exc, OSError):
        exc.errno = err.errno
    raise exc


class Jail(Protocol):
    """What a proxy and the codec need of the jail they belong to (grader.jailer.jail_client.Jail is the one)."""

    generation: int  # how many times the jail started: a proxy of an earlier start is dead
    peer: p.Peer | None  # the channel, while the jail runs

    def request(self, op: p.Op, **fields): ...

    def call(self, obj: "Remote", method: str | None, args, kwargs): ...


class Remote:
    """A learner object in the jail: attributes, calls, len() and [] go over the channel."""

    __slots__ = ("_jail", "_ref", "_gen", "__weakref__")

    def __init__(self, jail: Jail, ref: dict):
        object.__setattr__(self, "_jail", jail)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_gen", jail.generation)

    def __getattr__(self, name):
        if name.startswith("__") or name in LOCAL_MISSES or name == "_repr_pretty_":
            raise AttributeError(name)
        if name in self._ref.get("methods", ()):
            return RemoteMethod(self, name)
        return self._jail.request(p.Op.GETATTR, obj=self, name=name)

    def __setattr__(self, name, value):
        raise AttributeError("the grader does not set attributes of kata objects")

    def __call__(self, *args, **kwargs):
        return self._jail.call(self, None, args, kwargs)

    def __len__(self):
        n = self._jail.call(self, "__len__", (), {})
        if type(n) is not int:
            raise BadResult(f"len() of a {self._ref.get('type')} returned {n!r}, not an int")
        return n

    def __getitem__(self, key):
        return self._jail.call(self, "__getitem__", (key,), {})

    def __bool__(self):
        return True

    def __repr__(self):
        return f"<kata {self._ref.get('kind')} {self._ref.get('type')}>"

    def __del__(self):
        try:
            if self._gen == self._jail.generation and self._jail.peer is not None:
                self._jail.peer.pending_release.append(self._ref["id"])
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class RemoteMethod:
    """obj.name of a learner object: calling it is one round trip."""

    __slots__ = ("owner", "name")

    def __init__(self, owner: Remote, name: str):
        self.owner, self.name = owner, name

    def __call__(self, *args, **kwargs):
        return self.owner._jail.call(self.owner, self.name, args, kwargs)

    def __repr__(self):
        return f"<kata method {self.owner._ref.get('type')}.{self.name}>"


class SecretModel(Model):
    """A reference Model whose weights never reach a jail: it crosses as a handle whether or not the suite counts
    its work (its pieces run here, in the judge), and the judge hands no jail its weights. Drawn from entropy the
    grading keeps to itself (grader.suites.common.secret_model), it is one the jail cannot rebuild either, so the
    rows a counted check sees pushed through its pieces are the only way to its answers."""


@dataclasses.dataclass(frozen=True)
class JailCachedLM:
    """A CachedLM of `model` made in the jail a call crosses to, so that kata code calls it there, with
    no round trip: the model crosses as any model argument does (a copy, or a handle whose pieces run
    here when it counts work or is a SecretModel). No judge-side object counts its calls. For a demo
    that times a whole run of kata code (kata play stack), never for a check that counts calls."""

    model: Model

    def __post_init__(self):
        if not isinstance(self.model, Model):
            raise ValueError(f"JailCachedLM wraps a reference.model.Model, got {type(self.model).__name__}")


class JudgeCodec(p.Codec):
    side = "judge"

    def __init__(self, jail: Jail):
        super().__init__()
        self.jail = jail
        self.sent_rngs: list[np.random.Generator] = []
        self.proxies: dict[int, weakref.ref] = {}  # jail handle -> its one proxy
        self.sent_local: set[int] = set()  # models this jail already holds a copy of
        self.views_asked = False  # the answer awaited may bring a result whose arrays share memory (views)
        self._in_views = False

    def encode_special(self, value, buffers, depth):
        if isinstance(value, Remote):
            if value._gen != self.jail.generation:
                raise JailCrash("this kata object was made before the kata process restarted")
            return value._ref
        if type(value) is JailCachedLM:
            return {"$": "cached_lm", "model": self.encode(value.model, buffers, depth + 1)}
        if isinstance(value, Model) and (value._counters or isinstance(value, SecretModel)):
            # counted, or never to be copied: a handle, its pieces run here
            ref = self.ref(value, "model")
            ref["config"] = self.encode(dataclasses.asdict(value.config), buffers, depth + 1)
            return ref
        if isinstance(value, Model):  # otherwise a copy runs in the jail, sent once
            key = self.handle(value)  # kept alive here, so the key stays its own
            out = {"$": "model", "key": key}
            if key not in self.sent_local:
                self.sent_local.add(key)
                out["config"] = self.encode(dataclasses.asdict(value.config), buffers, depth + 1)
                out["weights"] = self.encode(value.weights, buffers, depth + 1)
            return out
        if isinstance(value, Config):
            return {"$": "config", "fields": self.encode(dataclasses.asdict(value), buffers, depth + 1)}
        if type(value) is NGramLM:  # a demo's draft: its table crosses once, and a copy runs in the jail
            key = self.handle(value)  # kept alive here, so the key stays its own
            out = {"$": "ngram", "key": key}
            if key not in self.sent_local:
                self.sent_local.add(key)
                out["contexts"] = self.encode(value.contexts.astype(np.int8), buffers, depth + 1)
                out["probs"] = self.encode(value.probs.astype(np.float32), buffers, depth + 1)
            return out
        if type(value) is BigramLM:  # keeps no counts: a copy runs in the jail
            return {"$": "bigram", "table": self.encode(value.table, buffers, depth + 1)}
        if isinstance(value, np.random.Generator):
            for slot, gen in enumerate(self.sent_rngs):
                if gen is value:  # the same generator again in this message: the jail uses one object
                    return {"$": "rng", "slot": slot}
            self.sent_rngs.append(value)
            return {"$": "rng", **p.rng_state(value)}
        api = api_of(value)
        if api:
            return self.ref(value, "object", api)
        return None

    def decode_special(self, tag, data, buffers, depth):
        if tag == "views" and self.views_asked and not self._in_views:
            self._in_views = True
            try:
                return self.decode(data.get("value"), buffers, depth + 1)
            finally:
                self._in_views = False
        if tag == "view" and self._in_views:
            self._frame_memo(buffers)
            self._taken.add(data.get("buf"))  # read by views: an array decoded from it later gets a copy
            return views.decode(data, buffers)
        if tag == "model":
            fields = self.decode(data.get("config"), buffers, depth + 1)
            weights = self.decode(data.get("weights"), buffers, depth + 1)
            try:
                return Model(Config(**fields), weights)
            except (TypeError, ValueError) as exc:
                raise BadResult(f"returned a Model the reference model rejects: {exc}") from None
        if tag == "config":
            try:
                return Config(**self.decode(data.get("fields"), buffers, depth + 1))
            except (TypeError, ValueError) as exc:
                raise BadResult(f"returned a Config the reference model rejects: {exc}") from None
        if tag == "excclass":
            return mirror_class(
                str(data.get("name"))[:200],
                str(data.get("module"))[:200],
                str(data.get("qualname"))[:200],
                tuple(str(b) for b in data.get("bases") or ()),
            )
        raise p.ProtocolError(f"an unknown value tag {tag!r}")

    def remote(self, data):
        """One proxy per live handle: the jail forgets the object when that proxy dies."""
        h = data["id"]
        known = self.proxies.get(h)
        proxy = known() if known is not None else None
        if proxy is None:
            pending = self.jail.peer.pending_release
            if h in pending:  # it died while its handle was on its way back: revive it
                pending.remove(h)
            proxy = Remote(self.jail, {k: data[k] for k in ("$", "side", "id", "kind", "type", "methods") if k in data})
            self.proxies[h] = weakref.ref(proxy)
        return proxy


def api_of(value) -> tuple[str, ...]:
    for cls, methods in EXPORTS.items():
        if type(value) is cls:
            return methods
    api = getattr(type(value), "__jail_api__", None)
    return tuple(api) if isinstance(api, tuple) else ()
