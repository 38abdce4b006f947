"""`kata watch`: re-grades a kata when its file is saved, on the toy kata in a temporary work directory.

Every wait has a timeout: a watch that misses a save fails the test instead of hanging it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.judge.events import Status
from grader.kata.registry import load_registry
from grader.learn.watch import STEP_MS, first_unfinished, screen, watch
from grader.run.results import KataResult, TaskResult

from helpers import SETTLE, SUBS, TOY_KATAS, spawn, wait_for_processes

ROOT = Path(__file__).resolve().parents[2]
WAIT = SETTLE  # seconds any one wait may take before the test fails (a toy grade takes about 1 s on a quiet machine)


@pytest.fixture
def work(tmp_path, monkeypatch):
    """The toy registry, a work directory holding the toy stub, and a state directory of its own."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(SUBS / "stub" / "toy.py", workdir / "toy.py")
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    monkeypatch.setenv("KATA_WORKDIR", str(workdir))
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    return workdir


class Output:
    """What a watch printed, gathered from another thread, with waits that time out."""

    def __init__(self):
        self.chunks: list[str] = []
        self.cond = threading.Condition()

    def add(self, text: str) -> None:
        with self.cond:
            self.chunks.append(text)
            self.cond.notify_all()

    def screens(self) -> list[str]:
        with self.cond:
            return [c for c in self.chunks if c.startswith("kata watch:")]

    def gradings(self) -> int:
        with self.cond:
            return sum(c.startswith("grading ") for c in self.chunks)

    def wait_for_screens(self, n: int, timeout: float = WAIT) -> list[str]:
        with self.cond:
            if not self.cond.wait_for(
                lambda: len([c for c in self.chunks if c.startswith("kata watch:")]) >= n, timeout
            ):
                raise AssertionError(f"no screen {n} within {timeout} s; the watch printed: {self.chunks}")
        return self.screens()


def _start(kata="toy"):
    out, stop = Output(), threading.Event()
    thread = threading.Thread(
        target=watch,
        args=(kata,),
        kwargs=dict(stop=stop, out=out.add, clock=lambda: datetime(2026, 1, 2, 12, 34, 56)),
        daemon=True,
    )
    thread.start()
    return out, stop, thread


def _end(out, stop, thread):
    stop.set()
    thread.join(10)
    assert not thread.is_alive(), "the watch did not stop within 10 s of its stop event"
    assert out.chunks[-1] == "stopped watching"


def test_watch_regrades_on_save_shows_what_changed_and_stops_on_its_event(work, tmp_path):
    out, stop, thread = _start()
    first = out.wait_for_screens(1)[0]
    assert first.startswith("kata watch: toy (work/toy.py) — graded 12:34:56, 0/4 points")
    assert first.count("todo ") == 3 and "first failing check: mean / test_mean_matches_a_float64_sum [todo]" in first
    assert "hint: What does the mean divide by?" in first
    assert first.splitlines()[-1] == "watching work/toy.py — save to re-grade, Ctrl-C to stop"
    assert len(first.splitlines()) <= 24

    shutil.copy(SUBS / "correct" / "toy.py", work / "toy.py")
    second = out.wait_for_screens(2)[1]
    assert "4/4 points" in second
    said = " ".join(second.split())  # however the line was wrapped
    assert "changed since last run: mean: todo -> pass; scale: todo -> pass; fast: todo -> pass" in said
    assert "every task of toy passes." in second and "first failing check" not in second
    _end(out, stop, thread)
    assert out.gradings() == 2
    state = json.loads((tmp_path / "state" / "last_grade.json").read_text())
    assert state == {"toy": {"mean": "pass", "scale": "pass", "fast": "pass"}}, "the grade state was not written"


def test_the_screen_shows_the_hint_kata_hint_would_give_next(work, tmp_path):
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "hints.json").write_text(json.dumps({"toy/mean": 1}))  # `kata hint toy mean` once
    out, stop, thread = _start()
    first = out.wait_for_screens(1)[0]
    assert "hint: Which numpy function adds every element?" in first
    _end(out, stop, thread)


def test_editor_temp_files_and_other_paths_do_not_trigger_a_grade_but_a_touch_does(work):
    out, stop, thread = _start()
    out.wait_for_screens(1)
    (work / ".toy.py.swp").write_text("swap")
    (work / "toy.py~").write_text("backup")
    (work / ".#toy.py").write_text("lock")
    (work / "4913").write_text("")  # vim's probe file
    (work / "notes.py").write_text("x = 1\n")
    (work / "__pycache__").mkdir()
    (work / "__pycache__" / "toy.cpython-311.pyc").write_bytes(b"\0")
    (work / ".kata").mkdir()
    (work / ".kata" / "toy.py").write_text("")
    (work / "sub").mkdir()
    (work / "sub" / "toy.py").write_text("")
    time.sleep(0.75)  # five of the watch's quiet steps: time for any grade a stray event would start
    assert len(out.screens()) == 1 and out.gradings() == 1, f"a file that is no kata's was graded: {out.chunks}"

    (work / "toy.py").touch()  # the watch was listening all along: a save of the kata's file grades
    second = out.wait_for_screens(2)[1]
    assert "changed since last run: nothing changed" in second
    _end(out, stop, thread)


def _burst(path: Path, text: str, salt: int) -> float:
    """Five saves of path, as an editor that writes, then formats on save, then writes again makes them (each
    the whole text, in two writes, its trailing newlines told apart by salt). Returns the longest time from the
    start of one save to the end of the next: more than the longest quiet between them."""
    starts, ends = [], []
    for n in range(5):
        starts.append(time.monotonic())
        with open(path, "w") as f:
            f.write(text[: len(text) // 2])
            f.flush()
            f.write(text[len(text) // 2 :] + "\n" * (n + 5 * salt))
        ends.append(time.monotonic())
        time.sleep(0.03)
    return max(ends[i + 1] - starts[i] for i in range(4))


def _settled(out: Output) -> int:
    """How many gradings the watch started, once each has drawn its screen and none started for five of its
    quiet steps (time for any grade a stray event would start)."""
    while True:
        n = out.gradings()
        out.wait_for_screens(n)
        time.sleep(5 * STEP_MS / 1000)
        if out.gradings() == n:
            return n


def test_a_burst_of_saves_is_graded_once(work):
    out, stop, thread = _start()
    out.wait_for_screens(1)
    text = (SUBS / "correct" / "toy.py").read_text()
    # A burst is saves closer together than the watch's quiet step. A busy machine can hold this process
    # between two saves for longer, and the watch then rightly grades twice: such a try is not a burst.
    for salt in range(5):
        before = _settled(out)
        longest = _burst(work / "toy.py", text, salt)
        after = _settled(out)
        if longest < STEP_MS / 1000:
            break
    else:
        pytest.skip(f"the machine held every burst of saves apart for more than the watch's {STEP_MS} ms step")
    assert after - before == 1, f"one burst of saves was graded more than once: {out.chunks}"
    assert "4/4 points" in out.screens()[-1]
    _end(out, stop, thread)


class Child:
    """`python -m grader.cli watch toy` in the toy work directory, its stdout read line by line."""

    def __init__(self, work: Path, tmp_path: Path):
        self.scratch = tmp_path / "tmp"
        self.scratch.mkdir()
        env = dict(
            os.environ,
            KATA_REGISTRY=str(TOY_KATAS),
            KATA_WORKDIR=str(work),
            KATA_STATE_DIR=str(tmp_path / "state"),
            TMPDIR=str(self.scratch),
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        )
        self.proc = spawn([sys.executable, "-m", "grader.cli", "watch", "toy"], tmp_path, env)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, what: str, n: int = 1, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while sum(line.startswith(what) for line in list(self.lines)) < n:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                raise AssertionError(
                    f"no {n}x {what!r} within {timeout} s; stdout: {self.lines}; stderr: {self.proc.stderr.read()}"
                )
            time.sleep(0.05)

    def interrupt(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=SETTLE)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the watch did not end within {SETTLE:g} s of Ctrl-C")
        self.reader.join(5)
        return code, self.proc.stderr.read()

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def leftovers(self) -> list[int]:
        return wait_for_processes(self.scratch, present=False, seconds=SETTLE)


@pytest.mark.slow  # a real `kata` process (or script) and its signals: the slow tests
def test_the_command_regrades_on_save_and_ctrl_c_stops_it_cleanly(work, tmp_path):
    child = Child(work, tmp_path)
    child.wait_for("watching ")
    assert any(line.startswith("kata watch: toy") and "0/4 points" in line for line in child.lines)
    shutil.copy(SUBS / "correct" / "toy.py", work / "toy.py")
    child.wait_for("watching ", 2)
    assert any(line.startswith("kata watch: toy") and "4/4 points" in line for line in child.lines)
    code, err = child.interrupt()
    assert code == 0, err
    assert child.lines[-1] == "stopped watching"
    assert "Traceback" not in err, err
    assert not child.leftovers(), "a judge or a jail outlived the watch"


@pytest.mark.slow  # a real `kata` process (or script) and its signals: the slow tests
def test_ctrl_c_during_a_grade_stops_the_grade_and_leaves_no_process_behind(work, tmp_path):
    child = Child(work, tmp_path)
    child.wait_for("watching ")
    shutil.copy(SUBS / "loop" / "toy.py", work / "toy.py")  # mean_of never returns: this grade hangs
    child.wait_for("grading ", 2)
    assert wait_for_processes(child.scratch, present=True, seconds=SETTLE), "the re-grade had no judge running to stop"
    time.sleep(0.5)
    code, err = child.interrupt()
    assert code == 0, err
    assert child.lines[-1] == "stopped watching"
    assert "Traceback" not in err, err
    assert not child.leftovers(), "a judge or a jail outlived the watch"
    assert not any("timeout" in line for line in child.lines), "the hanging grade was drawn"


def test_an_unknown_kata_is_a_usage_error_with_a_suggestion(work):
    result = CliRunner().invoke(main, ["watch", "tyo"])
    assert result.exit_code == 2
    assert "did you mean 'toy'" in result.output


def test_the_screen_of_the_largest_kata_fits_24_lines_and_a_pass_names_the_next_kata(monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", "")
    katas = load_registry()
    kata = max(katas, key=lambda k: len(k.tasks))
    long = "a message that goes on and on " * 20
    tasks = [
        TaskResult(
            t.name,
            t.title,
            Status.FAIL,
            0,
            t.points,
            1,
            26,
            long,
            t.hints[0],
            [
                {
                    "test": f"test_{t.name}",
                    "outcome": "fail",
                    "message": long,
                    "example": "Falsifying example: test_x(\n" + "    x=1,\n" * 10 + ")",
                    "printed": "".join(f"debug {i} \x1b[2J\n" for i in range(10)),
                }
            ],
        )
        for t in kata.tasks
    ]
    result = KataResult(kata.name, kata.title, 0, kata.max_score, 1.0, tasks)
    text = screen(
        kata,
        result,
        {t.name: "todo" for t in kata.tasks},
        file=Path("/w") / f"{kata.name}.py",
        when=datetime(2026, 1, 2, 9, 0, 0),
        next_kata=None,
        watching_all=False,
    )
    assert len(text.splitlines()) <= 24 and max(map(len, text.splitlines())) <= 80, text
    assert f"first failing check: {kata.tasks[0].name} / test_{kata.tasks[0].name} [fail]" in text
    assert "  example: x=1, x=1" in text and "Falsifying" not in text
    # What the learner printed: its first lines, escaped (no screen clear gets through), and how much more there was.
    assert "  your code printed: debug 0 \\x1b[2J (+9 more lines: kata grade -v)\n" in text and "\x1b" not in text
    assert f"  hint: {kata.tasks[0].hints[0][:30]}" in text

    passed = [TaskResult(t.name, t.title, Status.PASS, t.points, t.points, 3, 3, "", "") for t in katas[0].tasks]
    state = {katas[0].name: {t.name: "pass" for t in katas[0].tasks}}
    nxt = first_unfinished(katas, state, after=katas[0])
    assert nxt is katas[1]
    text = screen(
        katas[0],
        KataResult(katas[0].name, "", katas[0].max_score, katas[0].max_score, 1.0, passed),
        None,
        file=Path("/w") / f"{katas[0].name}.py",
        when=datetime(2026, 1, 2, 9, 0, 0),
        next_kata=nxt,
        watching_all=False,
    )
    assert f"next: {katas[1].name} — run `kata watch {katas[1].name}`" in text
    assert "nothing to compare with" in text
    every = {k.name: {t.name: "pass" for t in k.tasks} for k in katas}
    assert first_unfinished(katas, every) is None
    assert first_unfinished(katas, {}) is katas[0]


def test_the_screen_says_what_the_failing_task_looks_like_and_still_fits_24_lines(monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", "")
    kata = max(load_registry(), key=lambda k: len(k.tasks))
    long = "a message that goes on and on " * 20
    failure = {"test": "test_x", "outcome": "fail", "message": long, "example": "Falsifying example: f(\n    x=1,\n)"}
    failure["printed"] = "debug line\n" * 3  # what the code printed takes its line too
    tasks = [
        TaskResult(t.name, t.title, Status.FAIL, 0, t.points, 1, 26, long, t.hints[0], [failure]) for t in kata.tasks
    ]
    tasks[0] = dataclasses.replace(tasks[0], diagnosis="the T^2 factor is missing", diagnosis_why="why " * 60)
    text = screen(
        kata,
        KataResult(kata.name, kata.title, 0, kata.max_score, 1.0, tasks),
        {t.name: "todo" for t in kata.tasks},
        file=Path("/w") / f"{kata.name}.py",
        when=datetime(2026, 1, 2, 9, 0, 0),
        next_kata=None,
        watching_all=False,
    )
    lines = text.splitlines()
    assert "  looks like: the T^2 factor is missing (why: why why" in text
    assert "  your code printed: debug line (+2 more lines: kata grade -v)" in text
    assert len(lines) <= 24 and max(map(len, lines)) <= 80, text
    assert lines.index(next(ln for ln in lines if "looks like: " in ln)) < lines.index(
        next(ln for ln in lines if ln.startswith("  hint: "))
    )
