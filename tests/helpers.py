"""What several of the project's test files share: the toy kata's paths,
short grading limits, finding a grading's leftover processes, and small
model configs of each kind, and Python sources parsed once."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
import time
from pathlib import Path

from grader.kata.registry import SUITES_DIR
from grader.run.results import Limits
from reference.model import Config

TOY_KATAS = Path(__file__).parent / "fixtures" / "toy"  # a registry of one tiny kata, for the grader's own tests
TOY = TOY_KATAS / "toy"  # that kata's folder: its kata.toml, its suite (test_toy.py) and baseline
SUBS = TOY / "subs"  # its fixture submissions, one folder each
FAST = Limits(test_seconds=2, kata_seconds=60)  # short, so the hang and loop fixtures finish quickly
HANG = Limits(test_seconds=0.75, kata_seconds=60)  # shorter still, for gradings that wait for a check to time out
# How long a test waits for processes to start or end before it says they did not: a loaded machine (other
# test workers, other users) can take seconds to schedule, kill and reap them; the waits return as soon as they may.
SETTLE = 30.0

# Small random models of each kind the reference model runs (tests/reference): dense, grouped-query attention,
# and a mixture of experts.
DENSE = Config(vocab_size=32, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=24, max_seq_len=16)
GQA = Config(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=24, max_seq_len=16)
MOE = Config(
    vocab_size=32, d_model=16, n_layers=2, n_heads=4, n_kv_heads=1, d_ff=16, max_seq_len=16, n_experts=4, top_k=2
)


def write_registry(folder: Path, katas: dict[str, str], presets: str = "") -> Path:
    """A registry folder written at folder: each kata's kata.toml text (by name) in its own folder, and presets.toml
    when presets are given. Returns folder, for load_registry or KATA_REGISTRY."""
    for name, text in katas.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "kata.toml").write_text(text)
    if presets:
        (folder / "presets.toml").write_text(presets)
    return folder


def copy_registry(folder: Path, edit=lambda text: text) -> Path:
    """The project's registry copied into folder, each kata.toml through edit and naming its suite in the
    project (a `suite` key), presets.toml as it is. Returns folder."""
    katas = {}
    for kata in sorted(SUITES_DIR.glob("*/kata.toml")):
        text = edit(kata.read_text()).replace("[[kata]]\n", f'[[kata]]\nsuite = "{kata.parent}"\n', 1)
        katas[kata.parent.name] = text
    return write_registry(folder, katas, (SUITES_DIR / "presets.toml").read_text())


def processes_under(folder) -> list[int]:
    """Processes whose command line or working directory lies in folder (a
    grading's TMPDIR: its judges run there and its jails' sys.path names it)."""
    found, mark = [], str(folder).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            cwd = os.readlink(f"/proc/{pid}/cwd").encode()
        except OSError:
            continue
        if mark in cmd or cwd.startswith(mark):
            found.append(int(pid))
    return found


def wait_for_processes(folder, *, present: bool, seconds: float) -> list[int]:
    """processes_under(folder) once some are there (present) or none are
    (not present), or when `seconds` have passed, whichever comes first."""
    deadline = time.monotonic() + seconds
    while bool(processes_under(folder)) != present and time.monotonic() < deadline:
        time.sleep(0.05)
    return processes_under(folder)


def hanging_grade(tmp_path: Path, args: tuple[str, ...] = (), env: dict | None = None, **popen):
    """`kata grade` of the toy's looping submission (or `kata grade ARGS` with env added), started with a
    TMPDIR of its own and returned once its judge is inside the hanging check: (the process, that TMPDIR)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "KATA_REGISTRY": str(TOY_KATAS), "KATA_STATE_DIR": str(tmp_path), **(env or {})}
    env["TMPDIR"] = str(scratch)
    args = args or ("--target", str(SUBS / "loop"))
    cmd = [sys.executable, "-m", "grader.cli", "grade", *args, "--test-timeout", "120"]
    proc = subprocess.Popen(cmd, env=env, **popen)
    assert wait_for_processes(scratch, present=True, seconds=20), "the grading had no judge or jail running"
    # Inside the hanging check (where the judge writes nothing that would fail on a closed pipe) once
    # the jail spins: a third of a second of CPU time, far more than a jail spends starting.
    deadline = time.monotonic() + 30
    while not any(_cpu_seconds(pid) >= 0.3 for pid in _jails_under(scratch)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, scratch


def _jails_under(folder) -> list[int]:
    """The jail processes among processes_under(folder)."""
    found = []
    for pid in processes_under(folder):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"grader.jail.server" in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time process pid has used, or 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15


def spawn(cmd: list[str], cwd, env: dict, **popen) -> subprocess.Popen:
    """cmd started with no input and its output and errors piped back as text."""
    out = dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.Popen(cmd, cwd=cwd, env=env, **out, **popen)


def edition_cli(
    edition: Path, work: Path, state: Path, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`kata ARGS` run by an edition's own grader (it is in the folder Python starts in), on the
    kata modules in `work`, with its state in `state`, and no KATA_ or PYTHONPATH setting of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KATA_", "PYTHONPATH"))}
    env.update(KATA_WORKDIR=str(work), KATA_STATE_DIR=str(state))
    return subprocess.run(
        [sys.executable, "-c", "from grader.cli.commands import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=edition,
        timeout=timeout,
    )


# What a student's repository (or submission folder) can hold at its top to run its own code in a tool
# that starts Python there: Python's -m and -c put the start folder first on sys.path, so a package or
# module named like the one the tool imports runs instead; sitecustomize and usercustomize run at start
# when they are on sys.path, and a .pth file's `import` line when it lies in a site-packages folder.
PLANTED = (
    "pip/__init__.py",
    "pip/__main__.py",
    "zipfile.py",
    "sitecustomize.py",
    "usercustomize.py",
    "kata_planted.pth",
    "grader/__init__.py",
    "grader/__main__.py",
    "grader/cli/__init__.py",
    "grader/cli/__main__.py",
    "numpy.py",
    "click.py",
)


def plant(folder: Path, markers: Path) -> None:
    """Each of PLANTED at folder's top, written (or, for a file already there, such as a student
    edition's own grader/, led by a line) so that running it leaves a file named after it in markers."""
    markers.mkdir(parents=True, exist_ok=True)
    for rel in PLANTED:
        path = folder / rel
        mark = os.path.join(str(markers), rel.replace("/", "."))
        line = f"import os; open({mark!r}, 'a').close()\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(line + (path.read_text() if path.exists() else ""))


def planted_ran(markers: Path) -> list[str]:
    """The planted files (plant) that ran: the marks they left."""
    return sorted(os.listdir(markers)) if markers.is_dir() else []


@functools.lru_cache(maxsize=256)  # a quick run parses about 120 texts; their trees take some 40 MB
def parsed(source: str) -> ast.Module:
    """source's syntax tree, parsed once per text in a test process: the katas', interviews' and task tests read the
    same solutions, stubs and suite modules again and again. Read it, never change it: the next caller gets the
    same tree."""
    return ast.parse(source)
