"""The grading child process: runs one kata's suite under pytest and streams
one JSON line per event to a pipe the parent created.

    python -m grader.worker --kata NAME --suite PATH --target T --fd N [--seed S]
        [--only NAME ...] [--skip ID ...] [--memory-mb M] [--output-mb O]

--only keeps the test functions of those names; --skip drops node ids
already graded (the parent restarts a run after a crash or a hang).

Events: {"event": "collected", "tests": [...]}, {"event": "imported"},
{"event": "start", "id": ...}, {"event": "result", ...}, {"event": "done"}.
The parent reads them as they come, so a crash or a hang loses only the
test that was running.
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import json
import math
import os
import resource
import signal
import sys
import types

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # pragma: no cover - Hypothesis brings the backport on Python 3.10
    from exceptiongroup import BaseExceptionGroup

MIB = 1024 * 1024


class Channel:
    """JSON lines written straight to the parent's pipe."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, **event) -> None:
        data = (json.dumps(event) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data):]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _assertion_message(exc: AssertionError) -> str:
    """The suite's own words: pytest appends its 'assert ...' explanation after them."""
    text = str(exc)
    for marker in ("\nassert ", "\n+  where", "\nAssertionError"):
        cut = text.find(marker)
        if cut > 0:
            text = text[:cut]
    return text.strip() or "an assertion failed"


def _falsifying_example(exc: BaseException) -> str:
    notes = []
    for leaf in [exc, *_leaves(exc)]:
        notes.extend(n for n in getattr(leaf, "__notes__", []) if n not in notes)
    # Hypothesis words it "Falsifying example: ..." (older) or "Failing test case: ..." (newer).
    prefixes = ("Falsifying example", "Falsifying explicit example", "Failing test case", "Failing explicit", "Draw ")
    found = [n for n in notes if n.startswith(prefixes)]
    return "\n".join(found)


def classify(exc: BaseException, limits: dict) -> tuple[str, str]:
    """(outcome, message) for an exception a test raised."""
    from grader.target import KataLoadError

    leaves = _leaves(exc)
    if all(isinstance(e, NotImplementedError) for e in leaves):
        return "todo", "not implemented yet (raises NotImplementedError)"
    for e in leaves:
        if isinstance(e, KataLoadError):
            return "error", str(e)
    for e in leaves:
        if isinstance(e, MemoryError):
            return "error", f"ran out of memory (the grader allows {limits['memory_mb']} MiB)"
        if isinstance(e, OSError) and e.errno == errno.EFBIG:
            return "error", f"printed more than the grader allows ({limits['output_mb']} MiB of output)"
        if isinstance(e, SystemExit):
            return "error", f"called sys.exit({e.code!r}) inside a test; a kata must return, not exit"
    import pytest

    for e in leaves:
        if isinstance(e, AssertionError):
            return "fail", _assertion_message(e)
        if isinstance(e, pytest.fail.Exception):  # e.g. pytest.raises saw no exception
            return "fail", str(e).strip() or "a check failed"
    e = next((x for x in leaves if not isinstance(x, NotImplementedError)), leaves[0])
    return "error", f"{type(e).__name__}: {e}"


def _watched_namespaces(suites: list[types.ModuleType]) -> dict[str, dict]:
    """The namespaces whose functions a learner could swap to fool a suite."""
    import builtins

    import numpy
    import numpy.testing

    spaces = {"numpy": vars(numpy), "numpy.testing": vars(numpy.testing), "math": vars(math), "builtins": vars(builtins)}
    for name, mod in list(sys.modules.items()):
        if name.startswith(("grader.", "reference.model", "reference.sampling", "hypothesis.strategies")) and isinstance(mod, types.ModuleType):
            spaces[name] = vars(mod)
    for mod in suites:
        spaces[mod.__name__] = vars(mod)
    return spaces


class Tamper:
    """Remembers what every watched name pointed to, and spots a replacement."""

    def __init__(self, suites: list[types.ModuleType]):
        self.spaces = _watched_namespaces(suites)
        self.snapshot = {
            name: {k: id(v) for k, v in list(ns.items()) if callable(v)} for name, ns in self.spaces.items()
        }

    def check(self) -> str | None:
        for name, ids in self.snapshot.items():
            ns = self.spaces[name]
            for key, ident in ids.items():
                if id(ns.get(key)) != ident:
                    return f"the kata code replaced {name}.{key}; grading refuses to trust this run"
        return None


class Reporter:
    """The pytest plugin that turns a suite run into events."""

    def __init__(self, channel: Channel, kata: str, only: set[str], skip: set[str], limits: dict):
        self.channel, self.kata, self.only, self.skip, self.limits = channel, kata, only, skip, limits
        self.verdicts: dict[str, tuple[str, str, str]] = {}
        self.refuse: str | None = None
        self.tamper: Tamper | None = None

    def pytest_collection_modifyitems(self, session, config, items):
        kept = [i for i in items if (not self.only or i.originalname in self.only) and i.nodeid not in self.skip]
        items[:] = kept
        self.channel.send(
            event="collected",
            tests=[{"id": i.nodeid, "name": i.originalname, "speed": i.get_closest_marker("speed") is not None} for i in kept],
        )

    def pytest_collection_finish(self, session):
        # The suites are imported by now, with their comparison functions bound.
        # Import the learner's module before any test, so a crash or exit at
        # import is seen once, not once per test.
        from grader.suites import common
        from grader.target import KataLoadError

        suites = {id(i.module): i.module for i in session.items if getattr(i, "module", None) is not None}
        self.tamper = Tamper(list(suites.values()))
        try:
            common.load_kata(self.kata)
        except KataLoadError:
            pass  # every test's fixture raises it again and reports it as an error
        self.refuse = self.tamper.check()
        self.channel.send(event="imported")

    def pytest_runtest_protocol(self, item, nextitem):
        if self.refuse:
            self.channel.send(event="result", id=item.nodeid, outcome="error", message=self.refuse, example="", duration=0.0)
            return True
        self.channel.send(event="start", id=item.nodeid)
        return None

    def pytest_runtest_makereport(self, item, call):
        import pytest

        if call.when == "call" and self.tamper is not None:
            self.refuse = self.refuse or self.tamper.check()
        if call.excinfo is None or item.nodeid in self.verdicts:
            return
        if call.excinfo.errisinstance(pytest.skip.Exception):
            self.verdicts[item.nodeid] = ("skip", str(call.excinfo.value), "")
            return
        outcome, message = classify(call.excinfo.value, self.limits)
        self.verdicts[item.nodeid] = (outcome, message, _falsifying_example(call.excinfo.value))

    def pytest_runtest_logfinish(self, nodeid, location):
        outcome, message, example = self.verdicts.get(nodeid, ("pass", "", ""))
        if self.refuse and outcome != "error":
            outcome, message, example = "error", self.refuse, ""
        self.channel.send(event="result", id=nodeid, outcome=outcome, message=message[:2000], example=example[:2000])


def _limit(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, hard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.worker")
    parser.add_argument("--kata", required=True)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--skip", nargs="*", default=[])
    parser.add_argument("--memory-mb", type=int, default=4096)
    parser.add_argument("--output-mb", type=int, default=64)
    args = parser.parse_args(argv)

    limits = {"memory_mb": args.memory_mb, "output_mb": args.output_mb}
    _limit(resource.RLIMIT_AS, args.memory_mb * MIB)
    _limit(resource.RLIMIT_FSIZE, args.output_mb * MIB)
    _limit(resource.RLIMIT_CORE, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-long write fails with EFBIG instead of killing us
    faulthandler.enable()

    import pytest

    channel = Channel(args.fd)
    os.set_inheritable(args.fd, False)
    reporter = Reporter(channel, args.kata, set(args.only), set(args.skip), limits)
    pytest_args = [
        args.suite,
        f"--target={args.target}",
        f"--seed={args.seed}",
        "-q", "--tb=no", "-p", "no:cacheprovider", "-p", "_hypothesis_pytestplugin", "-W", "ignore",
        "-c", os.devnull,
    ]
    if args.seed:
        pytest_args.append(f"--hypothesis-seed={args.seed}")
    code = pytest.main(pytest_args, plugins=[reporter])
    channel.send(event="done", exitstatus=int(code))
    return 0


if __name__ == "__main__":
    sys.exit(main())
