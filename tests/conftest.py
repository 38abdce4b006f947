"""Shared test settings: a deterministic Hypothesis profile, loaded for every test run, the longest test
scheduled first, xdist groups that hold under pytest 9.2, Ctrl-C not ignored, bytecode cached, temporary files in
memory, a grade key of the run's own, and a garbage collector that does not walk the whole heap again and again."""

import atexit
import gc
import os
import shutil
import signal
import stat
import sys
import tempfile

import pytest
from hypothesis import settings
from threadpoolctl import threadpool_limits

from grader import ONE_BLAS_THREAD

# A shell without job control starts a command put in the background (`pytest &`) with SIGINT ignored,
# and an ignored signal stays ignored across exec: every `kata` these tests start would then ignore
# the Ctrl-C that the Ctrl-C tests send it, and hang. A handler here is reset to the default in each
# process the tests start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Some hosts set PYTHONDONTWRITEBYTECODE=1 (these machines do). Under it every xdist worker rewrites the asserts of
# every test module again and every process the tests start compiles the grader from source, each run; a
# contributor's own machine caches both in __pycache__ (which .gitignore and `kata release` leave out). The tests
# cache them as Python does by default; the judges' private bytecode cache (grader.judge.bytecode) is unaffected.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def _scratch_in_memory() -> str | None:
    """A folder of this account's own on /dev/shm (a tmpfs) for the run's temporary files, or None where there is
    none to trust (not Linux, no room, mounted noexec, or the name taken by another owner or not a folder)."""
    shm = "/dev/shm"
    if sys.platform != "linux":
        return None
    try:
        fs = os.statvfs(shm)
    except OSError:
        return None
    if fs.f_flag & os.ST_NOEXEC or fs.f_bavail * fs.f_frsize < 2 << 30 or not os.access(shm, os.W_OK | os.X_OK):
        return None  # the slow tests run what they install there; they and the judges may need a gigabyte
    folder = os.path.join(shm, f"llm-speed-katas-tests-{os.getuid()}")
    try:
        os.mkdir(folder, 0o711)
    except FileExistsError:
        pass
    except OSError:
        return None
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return None
    os.chmod(folder, 0o711)  # others' jails pass through to their own folders, as in /tmp; nobody else lists or writes
    return folder


# The run's temporary files in memory: pytest's tmp_path, and the folders and files of every judge, jail and
# `kata` process the tests start (through TMPDIR). A quick run makes and removes some 13,000 files and folders; on
# a disk like this machine's (ext4 without a journal, where each new file is first checked against every one
# removed in the last minutes) the quick run took 20-26 s of system CPU against 16-17 s in memory (five pairs, in
# turns). A TMPDIR of the user's own is kept.
if not os.environ.get("TMPDIR"):
    _SCRATCH = _scratch_in_memory()
    if _SCRATCH:
        os.environ["TMPDIR"] = tempfile.tempdir = _SCRATCH

# NumPy in the test processes on one BLAS thread, as every `kata` command and judge runs it: with two xdist
# workers on two cores, a second BLAS thread per worker only waits for a core (a model's forward pass over 256
# tokens took 1.7 s beside the other worker, 0.06 s alone). Set before any test module loads NumPy; the tests of
# the variables themselves start their processes without them.
for _name, _value in ONE_BLAS_THREAD.items():
    os.environ.setdefault(_name, _value)
if "numpy" in sys.modules:  # loaded already (by a plugin): limit the threads it started with
    threadpool_limits(1)

# The key the grader seals recorded grades with (grader.learn.vouch): one of this run's own, in a folder removed at
# its end, never the account's real one; the processes the tests start inherit it.
if not os.environ.get("KATA_GRADE_KEY"):
    _KEYS = tempfile.mkdtemp(prefix="kata-test-keys-")
    atexit.register(shutil.rmtree, _KEYS, True)
    os.environ["KATA_GRADE_KEY"] = os.path.join(_KEYS, "grades.key")

# The user's cache (grader.kata.registry.user_cache: the suites' marks, the judges' bytecode) of this run's own,
# shared by its workers and the processes they start and removed at its end: the tests grade suites copied to
# folders that do not outlive them, whose bytecode would otherwise pile up in the account's real cache.
if not os.environ.get("KATA_TEST_CACHE"):
    _CACHE = tempfile.mkdtemp(prefix="kata-test-cache-")
    atexit.register(shutil.rmtree, _CACHE, True)
    os.environ["KATA_TEST_CACHE"] = os.environ["XDG_CACHE_HOME"] = _CACHE

# A test process holds a large heap that lives to its end: the modules it imported, and the source trees the tests
# parse once and keep (helpers.parsed, grader.kata.stubs). CPython walks every tracked object in a full collection,
# which it starts each time the heap has grown by a quarter: as the heap grew, it was walked again and again, 24 full
# collections of up to 600,000 objects, 6 s of the two workers' CPU in the quick run (0.3-0.8 s each). So full
# collections wait for a thousand young ones (seven million allocations), not ten; the heap as collection leaves it
# is frozen (gc.freeze: left out of every later walk), after the one full collection Hypothesis makes as it
# registers its Random, made here on the small heap; and it is frozen again at the end, where pytest collects twice
# to report an exception raised in a finalizer then (one raised during a test is reported with that test, as
# before). The young generations are collected as before: the workers' peak memory is the same (486 and 374 MB).
gc.set_threshold(700, 10, 1000)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    try:
        from hypothesis.internal.entropy import deterministic_PRNG
    except ImportError:
        pass
    else:
        with deterministic_PRNG():
            pass
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
    gc.freeze()


# Same code, same examples: no randomness between runs, no example database,
# no per-example deadline (a shared CI machine has noisy timing).
settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=25)
settings.load_profile("ci")


# The test files whose tests take longest, the file with the longest test first: started in this order, before
# the rest, so that neither worker is left alone with a long test at the end (longest first: the fewer long tests
# are left, the more short ones there are to even the workers out). The speed-flake, hidden-check and wheel tests
# hold a worker longest in the whole run; the reference's grade, the mutants' batches, then the files with a test
# of 2-4 s, in the quick run (its --durations, near idle, December 2026). xdist's loadgroup starts its groups
# (test_katas, test_interview, ...) before every test of no group, the largest group first.
LONGEST = (
    "test_speed_flake.py",
    "test_hidden_checks.py",
    "test_wheel.py",
    "test_katas.py",
    "test_mutants.py",
    "test_diagnoses.py",
    "test_instructor.py",
    "test_pretrained.py",
    "test_watch.py",
    "test_readme.py",
    "test_public_share.py",
    "test_grader.py",
    "test_judge.py",
    "test_house.py",
)


def pytest_collection_modifyitems(config, items):
    """Start the longest tests first (LONGEST, in its order), and keep each
    xdist_group on one worker under pytest 9.2 too.

    The speed-flake test holds its worker for 100 s or more. Collected near
    the end, it can start when the other worker has little left to run, which
    then sits idle: twice the wall time less the tests' own seconds came to
    18 s in a run of everything with it first, 70 s in one without.

    With `--dist loadgroup`, pytest-xdist (3.8) tells a worker's groups apart
    by an "@group" suffix it writes into each marked item's `_nodeid`; pytest
    9.2 derives `nodeid` from `_id` instead, so the suffix never shows and the
    tests of a group are spread over the workers. A module whose fixtures
    grade once for all its tests (test_cheating, test_katas, ...) then grades
    once per worker. Where the suffix is missing, this writes it the way
    pytest 9.2 reads it; with versions that agree, it does nothing."""
    rank = {name: n for n, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST)))  # stable: within a file, the order it has
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest before 9.2: xdist's own suffix took
        return
    for item in items:
        groups = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        if groups and "@" not in item.nodeid.rpartition("]")[2]:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")
