"""Cheating submissions against the judge and its jail (issue 12, "Done means").

Every cheat in tests/fixtures/cheats/<cheat>/<kata>.py is one of the ways a
learner might write their own grade. Its submission is put together here: the
untouched stub of its kata (no line of real work; slow_memo, upload_precompute, lazy_picks and lazy_timed
start from a correct but slow solution, the reference solution with its loop over experts made a loop
over tokens, its gradient made row by row, or its cache's update made to copy the past; and local_copy from
the reference solution as it is),
then tests/fixtures/cheats/_wrap.py (with which a cheat runs itself in every
kata function before the stub's own body), then the cheat. Each run grades one
or two cheats and an honest kata (the reference solution of
quantization) together, `-j 2`, with the real CLI in a throwaway copy of this
checkout, exactly as a course would (`python -m grader.cli grade ... --json
--gradescope FILE`). Then it asserts that

- no cheat earns a point it did not deserve;
- the honest kata keeps its full marks;
- the grader exits normally (1: not everything passes), with its JSON report
  and no traceback, and does not hang;
- the --gradescope file says what stdout says, task by task;
- nothing persisted: the checkout's files are byte for byte as they were, no
  jail directory, marker file or process is left behind, and a re-grade of
  the untouched stubs afterwards is still all `todo`.

Cheats that only a confined jail can stop (reading the checkout, writing into
it, signalling or outliving other processes) run only when the grader runs as
root (grader.jail.confine.mode() == "root"), as it does in CI and on Gradescope;
a plain user account does not promise that (see grader/jail/confine.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.jail import confine
from grader.kata.stubs import stub_for

from helpers import spawn

# slow; and one xdist worker runs the whole module, so its module-scoped grades are made once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_cheating")]

ROOT = Path(__file__).resolve().parents[2]
CHEATS = Path(__file__).parent.parent / "fixtures" / "cheats"
WRAP = CHEATS / "_wrap.py"  # put between the kata's base text and the cheat
HONEST = "quantization"  # graded beside every pair of cheats from its reference solution: it must keep full marks
SYMLINK = "symlink"  # the kata's file is a symlink to the reference solution (made here: its target is per copy)
SIBLINGS = {"solution_paths": "sol.py"}  # a symlink to the solution placed beside the cheat in the submission
# Cheats that start from their kata's reference solution, made slow: (the code to replace, its slow version).
# slow_memo: moe_forward's loop over experts (a gathered matmul each) becomes a loop over tokens.
_SLOW_MOE = (
    re.compile(r"^    for e in range\(E\):\n(?:        .*\n)+", re.MULTILINE),
    "    for t, e, g in zip(tokens, experts[order], gates):  # the slow part: one token at a time\n"
    "        h = x[t:t + 1]\n"
    "        y[t] += g * ((_silu(h @ w_gate[e]) * (h @ w_up[e])) @ w_down[e])[0]\n",
)
# upload_precompute: distillation_grad computed row by row (the speed task's mutant in
# grader/suites/distillation/mutants.toml).
_SLOW_GRAD = (
    re.compile(r"^    rows = np\.flatnonzero\(y != ignore_index\)  # the kept rows\n", re.MULTILINE),
    "    rows = np.flatnonzero(y != ignore_index)  # the kept rows\n"
    "    if rows.size > 1:  # the slow part: one row at a time\n"
    "        for i in rows:\n"
    "            one = distillation_grad(s[i:i + 1], t[i:i + 1], y[i:i + 1], T, alpha, ignore_index)\n"
    "            grad[i] = one[0] / rows.size\n"
    "        return grad\n",
)
# lazy_picks and lazy_timed: update returns a copy of all a layer holds (the speed task's mutant in
# grader/suites/kv_cache/mutants.toml), so each update costs the whole past again.
_COPYING_UPDATE = (
    re.compile(r"^        return self\._k\[layer, :, :end\], self\._v\[layer, :, :end\]\n", re.MULTILINE),
    "        return self._k[layer, :, :end].copy(), self._v[layer, :, :end].copy()  # the slow part: the past copied\n",
)
SLOWED = {
    "slow_memo": _SLOW_MOE,
    "upload_precompute": _SLOW_GRAD,
    "lazy_picks": _COPYING_UPDATE,
    "lazy_timed": _COPYING_UPDATE,
}
# Cheats that start from their kata's reference solution as it is (they cheat on some of its functions only).
SOLVED = {"local_copy"}
GRADE_SECONDS = 300  # a grade that takes longer hangs
TEST_SECONDS = 30  # --test-timeout: a check stopped by a cheat would wait this long plus the runner's grace
LINGER = 4.0  # seconds to watch for a daemon after a grade ended (the daemon cheat rewrites every 0.2 s)

MODE = confine.mode()
CONFINED_ONLY = (
    None
    if MODE == "root"
    else (
        f"the grader runs in {MODE!r} mode here: only a root-mode jail (its own root without the checkout, its own "
        "uid, no /proc, no fork) is promised to stop cheats that read or write the checkout or signal or outlive "
        "other processes"
    )
)
ROOT_WITHOUT_JAIL = (
    None
    if not (MODE != "root" and os.geteuid() == 0)
    else (f"the grader runs as root in {MODE!r} mode: an unconfined root jail may raise its own hard limits")
)


@dataclass(frozen=True)
class Run:
    """One grading run: a cheat per kata, graded together with the honest kata."""

    cheats: dict[str, str]  # kata -> cheat (a folder of tests/fixtures/cheats, or SYMLINK)
    deserved: dict[str, tuple[str, ...]] = field(default_factory=dict)  # kata -> tasks its code really earns
    skip: str | None = None  # why this run cannot be graded in this mode
    linger: bool = False  # watch the --gradescope file for LINGER seconds after the grade


RUNS = {
    "events_and_gc": Run({"distillation": "gc_tamper", "moe": "fd_events"}),
    "comparisons_and_skips": Run({"distillation": "skip", "moe": "patch_compare"}),
    "solution_by_name_and_by_symlink": Run({"distillation": SYMLINK, "moe": "solution_import"}),
    "solution_paths_and_persisting": Run({"distillation": "persist", "moe": "solution_paths"}, skip=CONFINED_ONLY),
    "daemons_and_signals": Run({"distillation": "kill", "moe": "daemon"}, skip=CONFINED_ONLY, linger=True),
    "memory_and_speed": Run(
        {"distillation": "rlimit", "moe": "slow_memo"},
        skip=ROOT_WITHOUT_JAIL,
        deserved={"moe": ("router", "top_k", "capacity", "layer", "losses")},
    ),
    "answers_ready_before_the_clock": Run(
        {"distillation": "upload_precompute"}, deserved={"distillation": ("softmax", "kl", "loss", "grad", "distill")}
    ),
    "lazy_results_read_where_the_judge_draws": Run(
        {"kv_cache": "lazy_picks"}, deserved={"kv_cache": ("cache", "forward", "generate", "paged", "quantized")}
    ),
    "lazy_answers_to_the_timed_calls_only": Run(
        {"kv_cache": "lazy_timed"}, deserved={"kv_cache": ("cache", "forward", "generate", "paged", "quantized")}
    ),
    "work_on_a_local_copy": Run(
        {"kv_cache": "local_copy"}, deserved={"kv_cache": ("cache", "paged", "quantized", "speed")}
    ),
}


# ------------------------------------------------------------------ grading


@dataclass
class Graded:
    """What one run produced, and what it left behind."""

    run: Run
    checkout: Path
    code: int | None  # the CLI's exit code; None if it hung and was killed
    stdout: str
    stderr: str
    seconds: float
    gradescope: str | None  # the --gradescope file when the CLI exited
    gradescope_later: str | None  # ... and LINGER seconds later (when the run lingers)
    listing_before: dict[str, str]
    listing_after: dict[str, str]  # after the cheats' grade
    listing_final: dict[str, str]  # after the re-grade of the stubs too
    leftovers: list[str]  # what the grade left in its own TMPDIR (jail directories, cheat files)
    markers: list[str]  # files the cheats left outside the checkout (found, then removed)
    survivors: list[str]  # processes of the grade (judges, jails, their children) alive after it
    stubs_code: int | None
    stubs_stdout: str
    stubs_stderr: str

    @property
    def report(self) -> dict:
        return json.loads(self.stdout)

    def kata(self, name: str) -> dict:
        return next(k for k in self.report["katas"] if k["name"] == name)

    def tasks(self, kata: str) -> dict[str, dict]:
        return {t["name"]: t for t in self.kata(kata)["tasks"]}


def _copy_checkout(dest: Path) -> None:
    """The tracked files of this checkout, as they are in the work tree, but katas/: the untouched stubs
    (made from the solutions), whatever a learner wrote there."""
    try:
        names = (
            subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True, timeout=60)
            .stdout.decode()
            .split("\0")
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs git to list the checkout's files: {exc}")
    for name in filter(None, names):
        src = ROOT / name
        if not os.path.lexists(src):  # deleted in the work tree
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name, follow_symlinks=False)
    for stub in (dest / "katas").glob("[!_]*.py"):
        stub.write_text(stub_for(stub.stem), encoding="utf-8")


def _listing(root: Path) -> dict[str, str]:
    """Every file, link and folder under root, with a hash of its content."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "link -> " + os.readlink(path)
            elif path.is_dir():
                out[rel] = "folder"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return (
        [f"new {p}" for p in sorted(set(after) - set(before))]
        + [f"gone {p}" for p in sorted(set(before) - set(after))]
        + [f"changed {p}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    )


def _run(cmd: list[str], cwd: Path, env: dict) -> tuple[int | None, str, str]:
    """Run the CLI; kill it (its own session, which this test started) if it hangs."""
    proc = spawn(cmd, cwd, env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=GRADE_SECONDS)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err


def _home() -> str:
    return os.path.expanduser("~")


def _python_dirs() -> list[str]:
    dirs = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return sorted(d for d in dirs if d and os.path.isdir(d))


def _markers(token: str) -> list[str]:
    """Files a cheat left where it should not reach: named after, or holding, this run's token. Removed."""
    found = []
    for where in sorted({"/tmp", "/var/tmp", "/dev/shm", "/root", _home()}):
        if os.path.isdir(where):
            found += [str(p) for p in Path(where).glob(f"*{token}*")]
    for where in _python_dirs() + [_home(), "/root"]:
        for name in ("sitecustomize.py", "usercustomize.py"):
            path = Path(where, name)
            try:
                if token in path.read_text(errors="replace"):
                    found.append(str(path))
            except OSError:
                pass
    for path in found:  # a cheat that worked still must not disturb anything after this test
        try:
            os.remove(path)
        except OSError:
            pass
    return found


def _uptime_ticks() -> int:
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _survivors(since_ticks: int, base: Path) -> list[str]:
    """Live processes of this run, started after `since_ticks` (clock ticks since boot): their command line
    names a path under `base`, as a judge's, a jail's (its folder is in the run's TMPDIR), anything forked
    from them and the daemon cheat's shell do; another grader running on this machine meanwhile does not."""
    if not os.path.isdir("/proc/self"):
        return []
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            state, started = fields[0], int(fields[19])
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if started >= since_ticks and str(base) in cmdline and state != "Z" and int(stat.parent.name) != os.getpid():
            found.append(f"pid {stat.parent.name} ({state}): {cmdline[:300]}")
    return found


def _end(survivors: list[str]) -> None:
    """Kill what this run left running (processes it started, by their ids), so a cheat that
    escaped, or a hung judge, disturbs nothing after this test."""
    for line in survivors:
        try:
            os.kill(int(line.split()[1]), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _submission(kata: str, cheat: str, checkout: Path, fill: dict[str, str]) -> str:
    """The cheat's module for kata: its base (the copy's stub, for a SLOWED cheat its reference solution made
    slow, for a SOLVED one the solution as it is), then _wrap.py, then the cheat with fill's values written in."""
    solution = (checkout / "reference" / "solutions" / f"{kata}.py").read_text(encoding="utf-8")
    if cheat in SLOWED:
        loop, slow = SLOWED[cheat]
        base, found = loop.subn(slow, solution)
        assert found == 1, f"{cheat}: the loop to make slow is not in the reference solution of {kata} (once)"
    elif cheat in SOLVED:
        base = solution
    else:
        base = (checkout / "katas" / f"{kata}.py").read_text(encoding="utf-8")
    text = (CHEATS / cheat / f"{kata}.py").read_text(encoding="utf-8")
    for key, value in fill.items():
        text = text.replace(key, value)
    return base + "\n\n" + WRAP.read_text(encoding="utf-8") + "\n\n" + text


def _grade(name: str, run: Run, base: Path) -> Graded:
    checkout, sub, tmp, state = base / "checkout", base / "submission", base / "tmp", base / "state"
    for d in (checkout, sub, tmp, state):
        d.mkdir()
    _copy_checkout(checkout)
    gradescope = base / "results.json"
    token = f"{name}-{uuid.uuid4().hex[:10]}"
    fill = {
        "@CHECKOUT@": str(checkout),
        "@SUBMISSION@": str(sub),
        "@GRADESCOPE@": str(gradescope),
        "@TOKEN@": token,
        "@HOME@": _home(),
    }
    solutions = checkout / "reference" / "solutions"
    for kata, cheat in run.cheats.items():
        if cheat == SYMLINK:
            (sub / f"{kata}.py").symlink_to(solutions / f"{kata}.py")
            continue
        (sub / f"{kata}.py").write_text(_submission(kata, cheat, checkout, fill), encoding="utf-8")
        if cheat in SIBLINGS:
            (sub / SIBLINGS[cheat]).symlink_to(solutions / f"{kata}.py")
    (sub / f"{HONEST}.py").write_text((solutions / f"{HONEST}.py").read_text(encoding="utf-8"), encoding="utf-8")

    env = {k: v for k, v in os.environ.items() if not k.startswith("KATA_") or k == "KATA_JAIL"}
    env.update(PYTHONPATH=str(checkout), PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(tmp), KATA_STATE_DIR=str(state))
    where = subprocess.run(
        [sys.executable, "-c", "import grader; print(grader.__file__)"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    assert Path(where).resolve() == (checkout / "grader" / "__init__.py").resolve(), (
        f"the copy's grader is not the one that runs: {where}"
    )

    listing_before = _listing(checkout)
    katas = [*run.cheats, HONEST]
    cmd = [
        sys.executable,
        "-m",
        "grader.cli",
        "grade",
        *katas,
        "--target",
        str(sub),
        "--json",
        "--gradescope",
        str(gradescope),
        "-j",
        "2",
        "--test-timeout",
        str(TEST_SECONDS),
    ]
    since = _uptime_ticks()
    started = time.monotonic()
    code, out, err = _run(cmd, checkout, env)
    seconds = time.monotonic() - started
    text = gradescope.read_text() if gradescope.exists() else None
    later = text
    if run.linger:
        time.sleep(LINGER)
        later = gradescope.read_text() if gradescope.exists() else None
    survivors = _survivors(since, base)
    _end(survivors)
    leftovers = sorted(str(p.relative_to(tmp)) for p in tmp.iterdir())
    markers = _markers(token)
    listing_after = _listing(checkout)

    # The untouched stubs of the cheated katas (katas/ of the copy), graded after the cheats.
    stubs_code, stubs_out, stubs_err = _run(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "grade",
            *run.cheats,
            "--json",
            "-j",
            "2",
            "--test-timeout",
            str(TEST_SECONDS),
        ],
        checkout,
        env,
    )
    _end(_survivors(since, base))
    return Graded(
        run,
        checkout,
        code,
        out,
        err,
        seconds,
        text,
        later,
        listing_before,
        listing_after,
        _listing(checkout),
        leftovers,
        markers,
        survivors,
        stubs_code,
        stubs_out,
        stubs_err,
    )


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """graded(run name) -> Graded, each run graded once per module."""
    done: dict[str, Graded | BaseException] = {}

    def get(name: str) -> Graded:
        run = RUNS[name]
        if run.skip:
            pytest.skip(run.skip)
        if name not in done:
            try:
                done[name] = _grade(name, run, tmp_path_factory.mktemp(name))
            except Exception as exc:  # noqa: BLE001 - every test of the run reports it, none re-grades
                done[name] = exc
        if isinstance(done[name], BaseException):
            raise done[name]
        return done[name]

    return get


def _graded_report(g: Graded) -> dict:
    assert g.code is not None, f"the grade hung: killed after {GRADE_SECONDS} s\n{g.stderr[-3000:]}"
    try:
        return g.report
    except ValueError:
        raise AssertionError(
            f"no JSON report on stdout (exit code {g.code}):\n{g.stdout[-2000:]}\n{g.stderr[-3000:]}"
        ) from None


def assert_no_undeserved_point(g: Graded, kata: str) -> None:
    _graded_report(g)
    deserved = g.run.deserved.get(kata, ())
    undeserved = {
        t: (task["status"], task["score"]) for t, task in g.tasks(kata).items() if task["score"] and t not in deserved
    }
    assert not undeserved, f"the {g.run.cheats[kata]} cheat earned points on {kata}: {undeserved}"


def assert_no_check_passed(g: Graded, kata: str) -> None:
    passed = {t: task["checks_passed"] for t, task in g.tasks(kata).items()}
    assert sum(passed.values()) == 0, passed


def statuses(g: Graded, kata: str) -> dict[str, str]:
    return {t: task["status"] for t, task in g.tasks(kata).items()}


def assert_earns_no_point(
    g: Graded, kata: str, allowed: set[str], *, subset: bool = False, no_check_passed: bool = False
) -> None:
    """The cheat on kata earned nothing it did not deserve, and its tasks' statuses
    are `allowed` (or some of them, with subset); with no_check_passed, not one check passed."""
    assert_no_undeserved_point(g, kata)
    if no_check_passed:
        assert_no_check_passed(g, kata)
    got = set(statuses(g, kata).values())
    assert got <= allowed if subset else got == allowed, statuses(g, kata)


# ------------------------------------------------------------- one cheat each


# (run, kata, statuses its tasks may get, whether some may be among them only, whether no check may pass)
CHEATS_THAT_EARN_NOTHING = {
    # Writing into the channel breaks the protocol: the check crashes, it does not pass.
    "result events forged into every descriptor": ("events_and_gc", "moe", {"crash", "todo", "error"}, True, True),
    # The zeros it answers are judged wrong by the suite's own, untouched comparisons.
    "code rewritten and hooks registered through gc": ("events_and_gc", "distillation", {"fail"}, False, False),
    "patched and self-restoring comparisons": ("comparisons_and_skips", "moe", {"fail"}, False, False),
    "pytest.skip called from every kata function": ("comparisons_and_skips", "distillation", {"error"}, False, True),
    # The stub's own functions were graded: neither the solution nor the module put in sys.modules.
    "the solution imported by a computed name, or put in sys.modules": (
        "solution_by_name_and_by_symlink",
        "moe",
        {"todo"},
        False,
        False,
    ),
    "the solution executed from any path a learner knows or finds": (
        "solution_paths_and_persisting",
        "moe",
        {"todo"},
        False,
        False,
    ),
}


@pytest.mark.parametrize("cheat", list(CHEATS_THAT_EARN_NOTHING))
def test_the_cheat_earns_no_point(graded, cheat):
    run, kata, allowed, subset, no_check_passed = CHEATS_THAT_EARN_NOTHING[cheat]
    assert_earns_no_point(graded(run), kata, allowed, subset=subset, no_check_passed=no_check_passed)


def test_a_submission_file_that_is_a_symlink_to_the_solution_is_refused(graded):
    g = graded("solution_by_name_and_by_symlink")
    assert_no_undeserved_point(g, "distillation")
    tasks = g.tasks("distillation")
    assert {t["status"] for t in tasks.values()} == {"error"}, statuses(g, "distillation")
    assert all("symlink" in t["message"] for t in tasks.values()), [t["message"] for t in tasks.values()]


def test_files_written_into_the_checkout_cwd_home_and_tmp_change_nothing_later(graded):
    g = graded("solution_paths_and_persisting")
    assert_earns_no_point(g, "distillation", {"todo"})
    assert not _changes(g.listing_before, g.listing_after), _changes(g.listing_before, g.listing_after)
    assert not g.markers, f"the cheat left files outside the checkout: {g.markers}"
    assert not g.leftovers, f"the grade left its jail folders (the cheat's cwd and $HOME) behind: {g.leftovers}"
    stubs = json.loads(g.stubs_stdout)
    assert {t["status"] for k in stubs["katas"] for t in k["tasks"]} == {"todo"}


def test_a_setsid_daemon_cannot_outlive_the_grade_or_rewrite_its_results(graded):
    g = graded("daemons_and_signals")
    assert_earns_no_point(g, "moe", {"todo"})
    assert g.gradescope is not None and g.gradescope == g.gradescope_later, (
        f"the --gradescope file changed within {LINGER} s after the grade ended:\n{g.gradescope_later}"
    )
    assert not g.survivors, f"processes of a jail outlived the grade: {g.survivors}"
    assert not g.markers, f"a daemon wrote its marker: {g.markers}"


def test_stopping_or_killing_the_grading_processes_neither_stops_the_grade_nor_earns_a_point(graded):
    g = graded("daemons_and_signals")
    report = _graded_report(g)
    assert_no_undeserved_point(g, "distillation")
    # The judge was never stopped or killed: every check came back, none waited out its time limit.
    messages = [t["message"] for k in report["katas"] for t in k["tasks"]]
    assert not [m for m in messages if "judge process" in m or "took longer" in m], messages
    # Nor did the grade wait outside its checks: a wait for a stopped process lasts a check's time limit, so
    # the whole grade took less than its katas' own durations (their sum: no overlap assumed) plus that limit.
    # A bound relative to the katas' own times, which a busy machine stretches alike.
    busy = sum(k["duration"] for k in report["katas"])
    assert g.seconds < busy + TEST_SECONDS, (
        f"the grade took {g.seconds:.0f} s, its katas {busy:.0f} s: something waited for a stopped process"
    )


def test_raising_the_memory_limit_gains_nothing(graded):
    g = graded("memory_and_speed")
    assert_no_undeserved_point(g, "distillation")
    tasks = g.tasks("distillation")
    assert all("out of memory" in t["message"] for t in tasks.values()), [t["message"] for t in tasks.values()]


def test_stopped_clocks_and_memoized_answers_leave_a_slow_implementation_slow(graded):
    g = graded("memory_and_speed")
    assert_no_undeserved_point(g, "moe")
    assert statuses(g, "moe") == {
        "router": "pass",
        "top_k": "pass",
        "capacity": "pass",
        "layer": "pass",
        "losses": "pass",
        "speed": "slow",
    }


@pytest.mark.parametrize("run", ["lazy_results_read_where_the_judge_draws", "lazy_answers_to_the_timed_calls_only"])
def test_lazy_stand_ins_for_timed_results_leave_a_copying_cache_slow(graded, run):
    """A cache that copies its past on every update answers the timed updates with stand-ins, and
    works out only what the judge reads afterwards (or replays the updates then): every timed result
    now comes back whole inside the timed round trip, so the stand-ins must become the copies on the
    clock, and speed is graded slow, however the reading code in the jail is replaced."""
    g = graded(run)
    assert_no_undeserved_point(g, "kv_cache")
    tasks = g.tasks("kv_cache")
    assert tasks["speed"]["status"] == "slow", (tasks["speed"]["status"], tasks["speed"]["message"])
    failed = {f["test"].split("[")[0] for f in tasks["speed"]["failures"]}
    assert failed == {
        "test_an_update_at_4096_cached_tokens_costs_at_most_4x_one_at_16",
        "test_an_update_at_4096_cached_tokens_costs_at_most_8x_a_preallocated_buffers",
    }, failed


def test_answers_from_a_local_copy_with_the_counted_rows_pushed_for_show_fail_the_counted_checks(graded):
    """forward_cached and generate answer from a copy of the counted model made in the jail (from its
    weights, or the suite's public seeds) and push exactly the rows the checks expect through its pieces:
    the counted model is one the jail can neither read nor rebuild, and its answers are checked."""
    g = graded("work_on_a_local_copy")
    assert_no_undeserved_point(g, "kv_cache")
    tasks = g.tasks("kv_cache")
    assert {t: tasks[t]["status"] for t in ("forward", "generate")} == {"forward": "fail", "generate": "fail"}
    failed = {f["test"].split("[")[0] for t in ("forward", "generate") for f in tasks[t]["failures"]}
    assert failed == {
        "test_forward_cached_pushes_only_the_new_tokens_through_each_layer",
        "test_generate_pushes_prompt_plus_n_minus_one_positions_through_each_layer",
    }, failed


# --------------------------------------------------------- every run, alike


@pytest.mark.parametrize("name", RUNS)
def test_the_honest_kata_graded_beside_the_cheats_keeps_full_marks(graded, name):
    g = graded(name)
    _graded_report(g)
    honest = g.kata(HONEST)
    assert honest["score"] == honest["max_score"], statuses(g, HONEST)


@pytest.mark.parametrize("name", RUNS)
def test_the_grader_exits_1_with_its_whole_report_and_no_traceback(graded, name):
    g = graded(name)
    report = _graded_report(g)
    assert g.code == 1, f"exit code {g.code}\n{g.stderr[-3000:]}"
    assert "Traceback" not in g.stderr, g.stderr[-3000:]
    assert [k["name"] for k in report["katas"]] == [*g.run.cheats, HONEST]
    for kata in report["katas"]:
        assert kata["tasks"] and all(t["checks_total"] > 0 for t in kata["tasks"]), kata["name"]


@pytest.mark.parametrize("name", RUNS)
def test_the_gradescope_file_agrees_with_stdout(graded, name):
    g = graded(name)
    report = _graded_report(g)
    assert g.gradescope is not None, "no --gradescope file was written"
    scope = json.loads(g.gradescope)
    assert scope["score"] == report["score"]
    want = {(k["name"], t["name"]): (t["score"], t["max_score"]) for k in report["katas"] for t in k["tasks"]}
    got = {(t["extra_data"]["kata"], t["extra_data"]["task"]): (t["score"], t["max_score"]) for t in scope["tests"]}
    assert got == want
    assert len(scope["tests"]) == len(want)


@pytest.mark.parametrize("name", RUNS)
def test_a_regrade_of_the_untouched_stubs_afterwards_is_still_all_todo(graded, name):
    g = graded(name)
    assert g.stubs_code == 1, f"exit code {g.stubs_code}\n{g.stubs_stderr[-3000:]}"
    stubs = json.loads(g.stubs_stdout)
    assert [k["name"] for k in stubs["katas"]] == list(g.run.cheats)
    found = {(k["name"], t["name"]): t["status"] for k in stubs["katas"] for t in k["tasks"]}
    assert set(found.values()) == {"todo"}, found


@pytest.mark.parametrize("name", RUNS)
def test_the_checkout_is_byte_for_byte_as_it_was(graded, name):
    g = graded(name)
    assert not _changes(g.listing_before, g.listing_after), _changes(g.listing_before, g.listing_after)
    assert not _changes(g.listing_before, g.listing_final), _changes(g.listing_before, g.listing_final)


@pytest.mark.parametrize("name", RUNS)
def test_no_jail_folder_marker_file_or_jail_process_is_left_behind(graded, name):
    g = graded(name)
    assert not g.leftovers, f"left in the grade's TMPDIR: {g.leftovers}"
    assert not g.markers, f"left outside the checkout: {g.markers}"
    assert not g.survivors, f"still running: {g.survivors}"
