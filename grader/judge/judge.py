"""The judge: runs one kata's suite under pytest and streams one event per
line to a pipe the runner created. It never imports learner code: the suite
reaches the learner's module through grader.jailer.jail_client, which holds it in a jail
process, and every timing, count and comparison happens here.

    python -m grader.judge.judge --kata NAME --suite PATH --target T --fd N [--seed S]
        [--tasks NAME ...] [--checks NAME ...] [--fail-fast] [--test-seconds S] [--memory-mb M]
        [--output-mb O] [--batch JSON] [--modules PATH ...]

Each check grades the task its `@pytest.mark.task("...")` mark names, or its
`task` parameter (one check for several tasks, case by case); --tasks keeps the checks of those
tasks only, and --checks only the checks of those names (test functions:
every case of a parametrized one); --modules, when the runner knows which of the suite's test modules
hold those checks, collects only them. After one check of a task times out, the task's other checks are
reported without running (the same code would most likely hang them too);
with --fail-fast, so are they after any check of the task that does not
pass, each with that check's outcome.

--batch grades several targets of the kata one after another in this one
pytest session: a JSON list of {"target", "tasks", "checks"}, each graded as
its own judge would grade it (--target and --tasks and --checks its own, its
jails and fixtures started afresh and stopped after it), with the suite
collected once and one seed for all; each grading's events end with its own
done event. The project's tests grade their hundreds of mutants this way.

Events are grader.judge.events.Event lines. The runner reads them as they come,
so if this process dies, only the running check is lost. A check's result carries
the figures it measured (grader.suites.common.figure), which reach the judge as
the check's pytest user_properties.
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import functools
import json
import os
import re
import resource
import sys
import time

import pluggy

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # pragma: no cover - Hypothesis brings the backport on Python 3.10
    from exceptiongroup import BaseExceptionGroup

from grader.jail import confine
from grader.jailer import failing_calls, jail_client, jail_log
from grader.judge import bytecode
from grader.judge.events import Event, EventKind, Status
from grader.suites import common

_hookimpl = pluggy.HookimplMarker("pytest")


class Channel:
    """Event lines written straight to the runner's pipe."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, event: Event) -> None:
        data = event.to_line()
        while data:
            data = data[os.write(self.fd, data) :]


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


def _falsifying_example(exc: BaseException, test: str) -> str:
    """Hypothesis's notes on exc about test `test`. (An exception raised again
    by every check, a module that failed to load, carries the notes of
    every test it failed: only this test's own count.)"""
    notes = []
    for leaf in [exc, *_leaves(exc)]:
        notes.extend(n for n in getattr(leaf, "__notes__", []) if n not in notes)
    # Hypothesis words it "Falsifying example: ..." (older) or "Failing test case: ..." (newer).
    prefixes = ("Falsifying example", "Falsifying explicit example", "Failing test case", "Failing explicit")
    found = [n for n in notes if n.startswith(prefixes) and f" {test}(" in n.split("\n", 1)[0] or n.startswith("Draw ")]
    return "\n".join(found)


# Exceptions Hypothesis raises inside a test to steer it (assume(), a draw past the data), not failures.
def _hypothesis_control() -> tuple[type, ...]:
    from hypothesis.errors import HypothesisException, StopTest

    return (HypothesisException, StopTest)


def _fail_message(text: str) -> str:
    """pytest.fail's text, in one wording whatever pytest's version: pytest.raises
    that saw no exception says "DID NOT RAISE <class 'ValueError'>" in some
    versions and "DID NOT RAISE ValueError" in others."""
    missed = re.fullmatch(r"DID NOT RAISE (?:<class '(?:[\w.]*\.)?(\w+)'>|(\w+))", text)
    if missed:
        return f"expected {missed.group(1) or missed.group(2)}, but the call returned without raising it"
    return text or "a check failed"


WORDS_CHARS = 6000  # of pytest's words for one failed check


def _pytest_words(excinfo) -> str:
    """The exception as pytest words it under a failing test (its `E` lines):
    the assertion with pytest's explanation, and the notes Hypothesis adds
    (the failing test case, its @reproduce_failure line). Verbatim; the report
    escapes control characters."""
    try:
        return excinfo.exconly(tryshort=True)
    except Exception as err:  # noqa: BLE001 - a courtesy; it never changes a verdict
        return f"(the grader could not show pytest's words: {type(err).__name__})"


def classify(exc: BaseException, limits: dict) -> tuple[Status, str]:
    """(outcome, message) for an exception a check raised."""
    import pytest

    leaves = _leaves(exc)
    for e in leaves:
        if isinstance(e, jail_client.JailTimeout):
            return Status.TIMEOUT, str(e)
        if isinstance(e, jail_client.JailCrash):
            return Status.CRASH, str(e)
    if all(isinstance(e, NotImplementedError) for e in leaves):
        return Status.TODO, "not implemented yet (raises NotImplementedError)"
    for e in leaves:
        if isinstance(e, jail_client.KataLoadError):
            return Status.ERROR, str(e)
    for e in leaves:
        limit = _past_a_limit(e, limits)
        if limit:
            return Status.ERROR, limit
    for e in leaves:
        if isinstance(e, AssertionError):
            return Status.FAIL, _assertion_message(e)
        if isinstance(e, pytest.fail.Exception):  # e.g. pytest.raises saw no exception
            return Status.FAIL, _fail_message(str(e).strip())
    e = next((x for x in leaves if not isinstance(x, NotImplementedError)), leaves[0])
    text = str(e)
    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        text = e.args[0]  # str() of a KeyError is its key's repr: the learner's frames would print as "\n"
    return Status.ERROR, f"{type(e).__name__}: {text}"


def _past_a_limit(e: BaseException, limits: dict) -> str:
    """What a check's exception says of a limit the learner's code hit (memory,
    output, exiting or raising what is not an Exception), or ''."""
    if isinstance(e, MemoryError):
        return f"ran out of memory (the grader allows {limits['memory_mb']} MiB)"
    if isinstance(e, OSError) and e.errno == errno.EFBIG:  # past RLIMIT_FSIZE: its output, or a file it wrote
        if jail_log.one_is_full(limits["output_mb"] << 20):
            return f"printed more than the grader allows ({limits['output_mb']} MiB of output)"
        return (
            f"wrote a file larger than the grader allows ({limits['output_mb']} MiB a file, "
            f"{confine.WORK_MB} MiB for all the files your code writes)"
        )
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):  # the root mode's tmpfs is full
        return f"wrote more than the grader allows ({confine.WORK_MB} MiB for all the files your code writes)"
    if isinstance(e, jail_client.LearnerBaseException):
        if type(e).__name__ == "SystemExit":
            return f"called sys.exit() inside a check; a kata must return, not exit ({e})"
        return f"raised {type(e).__name__}, which is not an Exception: {e}"
    return ""


def _load_failure(exc: BaseException) -> bool:
    """Whether a check's exception is the kata module failing to load (its import or syntax error, a crash
    or hang while loading), which every check meets again."""
    return any(jail_client.is_load_failure(e) or isinstance(e, jail_client.KataLoadError) for e in [exc, *_leaves(exc)])


def task_of(item) -> str:
    """The task a collected check grades: its `task` mark's name, or its
    `task` parameter (grader.kata.registry.suite_tasks reads the same two); ''
    when it has neither."""
    mark = item.get_closest_marker("task")
    if mark is not None and mark.args:
        return str(mark.args[0])
    callspec = getattr(item, "callspec", None)
    return str(callspec.params.get("task", "")) if callspec is not None else ""


class Reporter:
    """The pytest plugin that turns a suite run into events, and gives each
    check its deadline."""

    def __init__(
        self,
        channel: Channel,
        kata: str,
        only: set[str],
        limits: dict,
        fail_fast: bool = False,
        checks: set[str] = frozenset(),
        batch: list[dict] | None = None,
    ):
        """only: the tasks whose checks run (every marked check when empty);
        checks: the names of the only checks that run (all when empty);
        batch: the gradings of --batch, which choose their own."""
        self.channel, self.kata, self.only, self.limits, self.fail_fast = channel, kata, only, limits, fail_fast
        self.checks, self.batch = checks, batch
        self.collected: list = []  # with batch: every marked check, for each grading to choose from
        self.verdicts: dict[str, tuple[Status, str, str]] = {}
        self.unloaded: set[str] = set()  # the node ids of the checks that failed because the kata did not load
        self.stopped: dict[str, tuple[Status, str]] = {}  # task -> what its remaining checks are reported as
        self.failing_calls: tuple[list, int] | None = None  # the learner calls of the last example that failed
        self.failing_printed: str | None = None  # what the learner's code printed during that example
        self.words: dict[str, tuple[str, str]] = {}  # a failed check's (printed, pytest's words), by node id
        self.figures: list[dict] = []  # what the running check measured (its user_properties named common.FIGURE)

    def pytest_collection_modifyitems(self, session, config, items):
        # A check without a task mark grades nothing (the registry refuses a suite that has one).
        if self.batch is not None:
            items[:] = self.collected = [i for i in items if task_of(i)]
            return
        items[:] = self._chosen(items)
        self._announce(items)

    def _chosen(self, items) -> list:
        return [
            i
            for i in items
            if task_of(i)
            and (not self.only or task_of(i) in self.only)
            and (not self.checks or i.originalname in self.checks)
        ]

    def _announce(self, items) -> None:
        self.channel.send(
            Event(
                EventKind.COLLECTED,
                tests=[{"id": i.nodeid, "name": i.originalname, "task": task_of(i)} for i in items],
            )
        )

    def pytest_collection_finish(self, session):
        if self.batch is None:
            self._load_kata()

    def _load_kata(self) -> None:
        # Import the learner's module once, before any check, so that an import
        # that fails, hangs or crashes costs one check's time limit, not one per check.
        jail_client.SETTINGS.deadline = time.monotonic() + self.limits["test_seconds"]
        try:
            jail_client.load(self.kata)
        except (jail_client.KataLoadError, jail_client.JailCrash, jail_client.JailTimeout):
            pass  # every check's fixture meets it again and reports it

    @_hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        if self.batch is None:
            return None  # pytest's own loop
        for grading in self.batch:
            self._grade(grading)
        return True

    def _grade(self, grading: dict) -> None:
        """One grading of --batch: its target, its checks, fresh jails and fixtures, then its done event."""
        jail_client.stop_all()
        jail_client.SETTINGS.target = str(grading["target"])
        self.only, self.checks = set(grading.get("tasks", ())), set(grading.get("checks", ()))
        self.verdicts.clear()
        self.unloaded.clear()
        self.stopped.clear()
        items = self._chosen(self.collected)
        self._announce(items)
        self._load_kata()
        for n, item in enumerate(items):
            # The last check, run or not run, tears every fixture down (nextitem None): the next grading's are fresh.
            item.ihook.pytest_runtest_protocol(item=item, nextitem=items[n + 1] if n + 1 < len(items) else None)
        jail_client.stop_all()
        self.channel.send(Event(EventKind.DONE))

    def pytest_runtest_protocol(self, item, nextitem):
        if task_of(item) in self.stopped:
            outcome, message = self.stopped[task_of(item)]
            self.channel.send(Event(EventKind.RESULT, id=item.nodeid, outcome=outcome, message=message))
            # Tear down what the next check does not share, as pytest's runtestprotocol would: the check before
            # kept its module's fixtures for this one, and the next check's setup fails if they are still up
            # ("previous item was not torn down properly") when it lies in another module.
            item.session._setupstate.teardown_exact(nextitem)
            return True
        self.channel.send(Event(EventKind.START, id=item.nodeid))
        # A check's figures are its own: --batch runs it once per grading, each time with the same item.
        item.user_properties[:] = [p for p in item.user_properties if p[0] != common.FIGURE]
        self.figures = []
        jail_client.forget_calls()
        jail_client.printed()  # what was printed before this check (at import, by the last one) is not its own
        self.failing_calls = self.failing_printed = None
        self._track_examples(item)
        jail_client.SETTINGS.deadline = time.monotonic() + self.limits["test_seconds"]
        return None

    def _track_examples(self, item) -> None:
        """Make a Hypothesis test forget the learner calls recorded so far each
        time it runs one example, and keep those of an example that fails.

        This relies on Hypothesis's public `test.hypothesis.inner_test`
        (HypothesisHandle: "downstream users can reassign its attributes to
        insert custom logic into the execution of each case"; pytest-trio
        does the same): Hypothesis reads it when the test starts and calls it
        once per example, explicit, generated, shrunk or replayed. The final
        replay of the minimal failing example is the last example that
        fails, so the calls kept are the ones it made. (An explicit example
        that fails is followed by the other explicit ones, which may pass:
        keeping the calls of the last failing example, not of the last
        example, covers that too.) Wrapped with functools.wraps, the test
        keeps its source and signature, so the derandomized draws, which
        Hypothesis seeds from them, do not change."""
        handle = getattr(item.obj, "hypothesis", None)
        inner = getattr(handle, "inner_test", None)
        if inner is None or getattr(inner, "_kata_tracks_calls", False):
            return
        control = _hypothesis_control()

        @functools.wraps(inner)
        def one_example(*args, **kwargs):
            jail_client.forget_calls()
            jail_client.printed()
            try:
                return inner(*args, **kwargs)
            except control:
                raise
            except BaseException:
                self.failing_calls, self.failing_printed = jail_client.recorded_calls(), jail_client.printed()
                raise

        one_example._kata_tracks_calls = True
        handle.inner_test = one_example

    def _example(self, item, exc: BaseException, outcome: Status) -> str:
        """The failing check's example: the last calls of the learner's code
        that its failing execution made, else Hypothesis's own example."""
        if outcome is Status.TODO:
            return ""
        if _load_failure(exc):
            return ""  # every check says the same; the report shows it once
        calls, total = self.failing_calls if self.failing_calls is not None else jail_client.recorded_calls()
        try:
            if calls:
                return failing_calls.calls_text(calls, total)
            return failing_calls.hypothesis_text(_falsifying_example(exc, item.originalname))
        except Exception as err:  # noqa: BLE001 - an example is a courtesy; it never changes a verdict
            return f"(the grader could not show the example: {type(err).__name__})"

    def pytest_runtest_makereport(self, item, call):
        import pytest

        if item.nodeid in self.verdicts:
            return
        if call.excinfo is None:
            return
        if call.excinfo.errisinstance((pytest.skip.Exception, pytest.xfail.Exception)):
            self.verdicts[item.nodeid] = (
                Status.ERROR,
                f"the check was skipped ({call.excinfo.value}); a check that does not finish scores nothing",
                "",
            )
            return
        outcome, message = classify(call.excinfo.value, self.limits)
        if (
            outcome is Status.FAIL
            and item.get_closest_marker("speed") is not None
            and not call.excinfo.errisinstance((common.WrongWhileTimed, jail_client.BadResult))
        ):
            # correct (other checks say so) but not fast enough; a wrong or malformed answer fails
            outcome = Status.SLOW
        if outcome is Status.TIMEOUT:
            self.stopped.setdefault(task_of(item), (outcome, f"not run: {item.originalname} of this task timed out"))
        elif self.fail_fast:
            self.stopped.setdefault(
                task_of(item), (outcome, f"not run (--fail-fast): {item.originalname} of this task did not pass")
            )
        self.verdicts[item.nodeid] = (outcome, message, self._example(item, call.excinfo.value, outcome))
        if outcome is not Status.TODO and _load_failure(call.excinfo.value):
            self.unloaded.add(item.nodeid)
        if outcome is not Status.TODO:
            printed = self.failing_printed if self.failing_printed is not None else jail_client.printed()
            self.words[item.nodeid] = (printed, _pytest_words(call.excinfo))

    def pytest_runtest_logreport(self, report):
        # What the check measured (grader.suites.common.figure), as its item held it when this phase ended.
        self.figures = [value for name, value in report.user_properties if name == common.FIGURE]
        if report.when == "call" and report.passed and report.nodeid not in self.verdicts:
            self.verdicts[report.nodeid] = (Status.PASS, "", "")

    def pytest_runtest_logfinish(self, nodeid, location):
        jail_client.SETTINGS.deadline = None
        outcome, message, example = self.verdicts.get(
            nodeid, (Status.ERROR, "the check did not finish (it was neither passed nor failed)", "")
        )
        printed, words = self.words.pop(nodeid, ("", ""))
        self.channel.send(
            Event(
                EventKind.RESULT,
                id=nodeid,
                outcome=outcome,
                message=message[:2000],
                example=example[:2000],
                printed=printed[: 2 * jail_client.PRINTED_BYTES],
                pytest=words[:WORDS_CHARS],
                figures=self.figures[:8],
                load=nodeid in self.unloaded,
            )
        )


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grader.judge.judge")
    parser.add_argument("--kata", required=True)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="*", default=[], help="run only the checks of these tasks")
    parser.add_argument("--checks", nargs="*", default=[], help="run only the checks of these names")
    parser.add_argument("--batch", help="grade several targets one after another: a JSON list of gradings")
    parser.add_argument("--modules", nargs="*", default=[], help="collect only these test modules of the suite")
    parser.add_argument("--fail-fast", action="store_true", help="stop each task at its first check that fails")
    parser.add_argument("--test-seconds", type=float, default=60.0)
    parser.add_argument("--memory-mb", type=int, default=4096)
    parser.add_argument("--output-mb", type=int, default=64)
    parser.add_argument("--cpu-seconds", type=int, default=600)
    return parser.parse_args(argv)


def _pytest_arguments(suite: str, target: str, seed: int, modules: list[str] = ()) -> list[str]:
    """How the judge runs pytest on a suite (on those of its test modules `modules` lists, when it lists any):
    quiet, no tracebacks (the reporter says what failed), only the plugins it needs, no configuration file, and
    Hypothesis seeded by the grading seed.

    The suite's folder (a kata's, or the suites' root) is also where conftest files and collection start: with no
    configuration file pytest would otherwise import a conftest.py from any folder above it, and list each folder
    from / down to it, a hook call for each entry (a suite under /tmp beside 370 others: 106 against 56 ms of CPU
    a judge).

    Nor does it register pytest's plugins for what no suite uses (unittest classes, the tmp_path, monkeypatch,
    recwarn and subtests fixtures, --pdb, pytest's own faulthandler: the judge enables it itself): each plugin
    registered costs pytest a look at every name in it, 10-15 ms of CPU a judge for these eight (moe:router, 113
    against 125-130 ms in all)."""
    unused = ("cacheprovider", "unraisableexception", "threadexception", "logging", "junitxml", "doctest", "pastebin")
    unused += ("unittest", "legacypath", "tmpdir", "monkeypatch", "recwarn", "subtests", "faulthandler", "debugging")
    plugins_off = [arg for name in (*unused, "setuponly", "setupplan", "stepwise") for arg in ("-p", f"no:{name}")]
    out = [*(modules or [suite]), f"--target={target}", f"--seed={seed}", "-q", "--tb=no", *plugins_off]
    out += ["-W", "ignore", "-c", os.devnull]
    root = os.path.dirname(os.path.abspath(suite))
    out += ["--rootdir", root, "--confcutdir", root]
    return out + ([f"--hypothesis-seed={seed}"] if seed else [])


# The judge's own address space: the jail's allowance (what it may hand back) and room for the suite, the model and
# the interpreter. A jail cannot make the judge grow past it: the judge then fails the check, not the machine.
JUDGE_MEMORY_MB = 4096


def _limit_own_memory(jail_mb: int) -> None:
    cap = (jail_mb + JUDGE_MEMORY_MB) << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft == resource.RLIM_INFINITY or soft > cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    confine.die_with_parent()
    bytecode.use_pycache()  # a judge the server forked uses it already; one started from scratch, from here
    common.draw_timed_entropy()  # this judge's own, not the judge server's (which loaded this module)

    limits = {"memory_mb": args.memory_mb, "output_mb": args.output_mb, "test_seconds": args.test_seconds}
    jail_client.SETTINGS.memory_mb, jail_client.SETTINGS.output_mb = args.memory_mb, args.output_mb
    jail_client.SETTINGS.cpu_seconds, jail_client.SETTINGS.load_seconds = args.cpu_seconds, args.test_seconds
    jail_client.SETTINGS.judged = True
    for name in ("CI", "BUILD_NUMBER"):  # pytest words its assertion diffs in full on CI: the same words everywhere
        os.environ.pop(name, None)
    _limit_own_memory(args.memory_mb)
    faulthandler.enable()

    import _hypothesis_pytestplugin
    import pytest

    channel = Channel(args.fd)
    os.set_inheritable(args.fd, False)
    batch = json.loads(args.batch) if args.batch else None
    reporter = Reporter(channel, args.kata, set(args.tasks), limits, args.fail_fast, set(args.checks), batch)
    jail_client.SETTINGS.target = args.target
    # The speed checks' baselines get their jail now too, unless only some checks run (they may not need it).
    if batch is None:
        jail_client.prestart(args.kata, None if args.tasks or args.checks else common.baseline_path(args.kata))
    try:
        # Hypothesis's plugin as a module, not `-p _hypothesis_pytestplugin`: pytest looks a -p name up among every
        # installed package's entry points first (2-4 ms of CPU a judge), though the judge loads none of them.
        plugins = [reporter, _hypothesis_pytestplugin]
        pytest.main(_pytest_arguments(args.suite, args.target, args.seed, args.modules), plugins=plugins)
    finally:
        jail_client.stop_all()
    if batch is None:
        channel.send(Event(EventKind.DONE))
    return 0


if __name__ == "__main__":
    main()
    # Every jail is stopped and every event written: skip the interpreter's teardown, which frees a
    # suite's worth of objects one by one while the runner waits for this process to end.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
