"""`kata watch [KATA]`: re-grade a kata each time its file is saved and
redraw one compact screen, like rustlings' watch mode.

The loop: a thread runs watchfiles on the learner's work directory
(grader.kata.target.workdir()) and queues the names of the kata files that
changed; the calling thread grades (grader.run.runner.grade, so Ctrl-C there
stops every judge and jail) and draws. Only `<kata>.py` files of registered
katas, directly in the work directory, count: editor temp files,
__pycache__ and .kata/ never trigger a grade. A burst of saves is one
grade: watchfiles groups events until the directory has been quiet for
STEP_MS, the queue is drained before each grade, and a file whose stat and
digest are those it was last graded with is not graded again.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import signal
import sys
import textwrap
import threading
from datetime import datetime
from pathlib import Path
from typing import Callable

import click

from grader.kata import target as _target
from grader.kata.registry import Kata, load_registry
from grader.kata.text import printable
from grader.learn import progress as state
from grader.learn.progress import all_pass
from grader.output.report import shown_path
from grader.run.results import GradeResult, KataResult, Limits, TaskResult
from grader.run.runner import grade

STEP_MS = 150  # quiet time that ends a burst of file events (watchfiles' step)
HEARTBEAT_MS = 250  # the watcher thread wakes this often with no events, to report it is ready
MESSAGE_LINES, EXAMPLE_LINES, HINT_LINES = 3, 3, 2  # how much of a failure the screen shows
CHANGED_LINES = 2  # lines of "changed since last run", the last ending in "..." when more changed


# ------------------------------------------------------------------ grade state


def last_grades() -> dict[str, dict[str, str]]:
    """kata -> task -> status of the last grade (`kata grade`'s or `kata watch`'s)."""
    return state.read(state.LAST_GRADE)


def save_last_grade(kata: Kata, result: GradeResult) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Merge a grade of the learner's kata into the grade state, and show each
    failing task's next hint, as `kata grade` does (state.after_grade). Returns
    the new state, and the kata's recap if this grade turned it fully green."""
    return state.after_grade([kata], result)


def first_unfinished(katas: tuple[Kata, ...], state: dict, after: Kata | None = None) -> Kata | None:
    """The first kata in registry order that does not fully pass (those after
    `after` first, then from the start), or None when every one passes."""
    order = list(katas)
    if after is not None and after in order:
        i = order.index(after)
        order = order[i + 1 :] + order[:i]
    return next((k for k in order if not all_pass(k, state.get(k.name, {}))), None)


# ------------------------------------------------------------------ the screen


def _trim(text: str, lines: int, width: int, indent: str) -> list[str]:
    """text wrapped to width under indent, at most `lines` lines, the last one
    marked when something was cut."""
    out: list[str] = []
    for para in text.strip().splitlines() or [""]:
        if para.strip():
            out.extend(
                textwrap.wrap(
                    para, width=width, initial_indent=indent, subsequent_indent=indent + "  ", drop_whitespace=True
                )
                or [indent]
            )
        else:
            out.append(indent.rstrip())
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: max(len(indent) + 1, width - 4)].rstrip() + " ..."
    return out


def _printed(text: str, width: int) -> list[str]:
    """What the learner's code printed during the check, on one line: its first line, escaped, and how many more."""
    said = [printable(ln.rstrip()) for ln in text.rstrip("\n").split("\n")] if text.strip() else []
    if not said:
        return []
    more = f" (+{len(said) - 1} more lines: kata grade -v)" if len(said) > 1 else ""
    room = width - len("  your code printed: ") - len(more)
    first = said[0] if len(said[0]) <= room else said[0][: max(room - 3, 0)] + "..."
    return [f"  your code printed: {first}{more}"]


def _example_text(example: str) -> str:
    """A failure's example (grader.jailer.failing_calls already left out the kata module
    argument) on as few lines as the screen allows: without the "Falsifying
    example" heading, the call's arguments on one line."""
    lines = example.strip().splitlines()
    if lines:
        lines[0] = lines[0].removeprefix("Falsifying example: ")
    if len(lines) >= 2 and lines[0].rstrip().endswith("(") and ")" in (line.strip() for line in lines):
        end = [line.strip() for line in lines].index(")")
        args = [line.strip().removesuffix(",") for line in lines[1:end]]
        lines = ([", ".join(args)] if args else []) + lines[end + 1 :]
    return "\n".join(lines)


def _joined(head: str, items: list[str], width: int) -> list[str]:
    """head followed by items separated by "; ", broken between items (never inside one) to fit width."""
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (";" if i < len(items) - 1 else "")
        if line.strip() and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = "  " + piece
        else:
            line = f"{line} {piece}" if line.strip() else line + piece
    return lines + [line]


def changes(result: KataResult, before: dict[str, str] | None) -> list[str]:
    """["mean: todo -> pass", "scale: fail -> pass"]: the tasks whose status moved since `before`."""
    before = before or {}
    return [
        f"{t.name}: {before.get(t.name, 'not graded')} -> {t.status.value}"
        for t in result.tasks
        if before.get(t.name) != t.status.value
    ]


def _message_lines(failing: TaskResult) -> int:
    """How many lines the failing check's message gets: fewer when the known mistake it looks like needs some."""
    return MESSAGE_LINES - (HINT_LINES if failing.looks_like else 0)


def _advice(failing: TaskResult, width: int, room: int = HINT_LINES) -> list[str]:
    """The known mistake the failing task looks like (if any) on at most `room` lines, then its hint on at
    most HINT_LINES."""
    said = _trim(failing.looks_like, room, width, "  ") if failing.looks_like else []
    return said + (_trim("hint: " + failing.hint, HINT_LINES, width, "  ") if failing.hint else [])


def screen(
    kata: Kata,
    result: KataResult,
    before: dict[str, str] | None,
    *,
    file: Path,
    when: datetime,
    next_kata: Kata | None,
    watching_all: bool,
    width: int = 80,
) -> str:
    """The watch screen for one grade of `kata`, as one string of at most about 24 lines."""
    lines = [
        f"kata watch: {kata.name} ({shown_path(file)}) — graded {when.strftime('%H:%M:%S')}, "
        f"{result.score}/{result.max_score} points",
        "",
    ]
    name_width = max([len(t.name) for t in result.tasks] + [8])
    for t in result.tasks:
        checks = f"{t.checks_passed}/{t.checks_total}"
        because = f"  because {t.root} fails" if t.because_of else ""
        lines.append(
            f"  {t.status.value:<7}{t.name:<{name_width}} {checks:>7} checks  {t.score}/{t.max_score} pts{because}"
        )
    lines.append("")
    moved = changes(result, before)
    if not before:
        lines.append("changed since last run: nothing to compare with (first grade of this kata)")
    elif not moved:
        lines.append("changed since last run: nothing changed")
    else:
        said = _joined("changed since last run:", moved, width)
        shown = said[:CHANGED_LINES]
        if len(said) > CHANGED_LINES:
            shown[-1] += " ..."
        lines += shown
    failing: TaskResult | None = next((t for t in result.tasks if not t.status.done_here), None)
    if failing is not None and failing.because_of:  # the task it fails because of is the one to show
        failing = next((t for t in result.tasks if t.name == failing.root), failing)
    if failing is None:
        lines.append(f"every task of {kata.name} passes.")
        if next_kata is None:
            lines.append("every kata passes: well done.")
        elif watching_all:
            lines.append(
                f"next: {next_kata.name} — save {shown_path(file.with_name(next_kata.name + '.py'))} to grade it"
            )
        else:
            lines.append(f"next: {next_kata.name} — run `kata watch {next_kata.name}`")
    else:
        lines += _failure_lines(failing, width)
    lines.append("")
    where = f"every kata's file in {shown_path(file.parent)}{os.sep}" if watching_all else shown_path(file)
    lines.append(f"watching {where} — save to re-grade, Ctrl-C to stop")
    return "\n".join(lines)


def _failure_lines(failing: TaskResult, width: int) -> list[str]:
    """The first failing check of the screen's task: its message, example, what the code printed, the hint."""
    f = (
        failing.failures[0]
        if failing.failures
        else {"test": "", "outcome": failing.status.value, "message": failing.message, "example": ""}
    )
    check = f" / {f['test']}" if f["test"] else ""
    lines = [f"first failing check: {failing.name}{check} [{f['outcome']}]"]
    printed = _printed(f.get("printed") or "", width)
    message = printable(f["message"] or failing.message or "(no message)")
    lines += _trim(message, max(1, _message_lines(failing) - len(printed)), width, "  ")  # the screen keeps its size
    example = _example_text(printable(f.get("example") or ""))
    if example:
        lines += _trim("example: " + example, EXAMPLE_LINES, width, "  ")
    return lines + printed + _advice(failing, width, HINT_LINES - len(printed))


# ------------------------------------------------------------------ the files


def _signature(path: Path) -> tuple | None:
    """What a file was graded as: its stat and a digest of its bytes; None when it is gone."""
    try:
        st = path.stat()
        data = path.read_bytes()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, hashlib.sha256(data).hexdigest()


def _watch_files(
    directory: Path, names: set[str], out: queue.Queue, halt: threading.Event, ready: threading.Event
) -> None:
    """Queue the set of watched file names that changed, batch by batch, until halt is set."""
    import watchfiles

    def keep(change, path: str) -> bool:
        p = Path(path)
        return p.name in names and p.parent == directory

    try:
        for batch in watchfiles.watch(
            directory,
            watch_filter=keep,
            step=STEP_MS,
            stop_event=halt,
            rust_timeout=HEARTBEAT_MS,
            yield_on_timeout=True,
            recursive=False,
            raise_interrupt=False,
        ):
            ready.set()
            if batch:
                out.put({Path(p).name for _, p in batch})
    except Exception as exc:  # the directory went away, the OS ran out of watches...
        out.put(exc)
    finally:
        ready.set()


# ------------------------------------------------------------------ the loop


def _hang_ups_interrupt() -> Callable[[], None]:
    """Make SIGTERM and SIGHUP (a closed terminal) stop the watch as Ctrl-C does, so that a grade
    in progress is stopped too; returns what puts the old handlers back. Only the main thread
    may set handlers: elsewhere (a test driving watch()) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def restore() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)

    return restore


class _Stopped(Exception):
    """The watch is over: Ctrl-C, or the caller's stop event."""


def watch(
    kata_name: str | None = None,
    *,
    seed: int = 0,
    limits: Limits = Limits(),
    stop: threading.Event | None = None,
    out: Callable[[str], None] = click.echo,
    clock: Callable[[], datetime] = datetime.now,
    interview_workspace: Path | None = None,
) -> None:
    """Grade KATA (by default the first kata that does not pass yet), draw
    its screen, then re-grade and redraw each time a kata file is saved,
    until Ctrl-C or `stop` is set. With kata_name only that kata's file is
    watched. The screen is cleared between draws only when `out` is
    click.echo and stdout is a terminal. interview_workspace: the interview
    workspace the caller found here, if any (the CLI looks for one), which
    watching refuses with a usage error: `kata grade` grades it."""
    _Watch(kata_name, seed, limits, stop or threading.Event(), out, clock, interview_workspace).run()


class _Watch:
    """One `kata watch`: what it watches, its threads, and what each screen's changes are measured from."""

    def __init__(self, kata_name, seed: int, limits: Limits, stop: threading.Event, out, clock, workspace):
        from grader.kata.lookup import kata_named

        self.katas = load_registry()
        if kata_name is not None:
            self.current = kata_named(kata_name)  # a UsageError with a "did you mean" for a typo
            self.watched = (self.current,)
        else:
            self.current = first_unfinished(self.katas, last_grades()) or self.katas[0]
            self.watched = self.katas
        if workspace is not None:
            raise click.UsageError(
                f"{workspace} is an interview workspace: grade it with `kata grade`, which "
                "logs every attempt and shows the time left"
            )
        self.directory = _target.workdir()  # an existing folder, or NoKataFolder (a usage error) saying what to run
        self.all, self.seed, self.limits, self.stop, self.out, self.clock = (
            kata_name is None,
            seed,
            limits,
            stop,
            out,
            clock,
        )
        self.tty = out is click.echo and sys.stdout.isatty()
        self.width = max(40, min(100, shutil.get_terminal_size((80, 24)).columns)) if self.tty else 80
        self.halt, self.ready = threading.Event(), threading.Event()
        self.changed: queue.Queue = queue.Queue()
        files = {f"{k.name}.py" for k in self.watched}
        self.watcher = threading.Thread(
            target=_watch_files,
            args=(self.directory, files, self.changed, self.halt, self.ready),
            name="kata-watch-files",
            daemon=True,
        )
        self.before = last_grades()  # kata -> task -> status, what each screen's changes are measured from
        self.graded_as: dict[str, tuple | None] = {}

    def run(self) -> None:
        restore = _hang_ups_interrupt()
        try:
            self.watcher.start()
            self.ready.wait(5)  # events from here on are queued, even those of saves during the first grade
            self._grade(self.current)
            while not self.stop.is_set():
                saved = self._saved()
                if saved:
                    self._regrade(saved)
        except (KeyboardInterrupt, _Stopped):
            pass
        finally:
            self.halt.set()
            self.watcher.join(timeout=2)
            restore()
        self.out("stopped watching")

    def _saved(self) -> set[str]:
        """The file names saved since the last look (everything saved meanwhile is one more
        grade, not one per save); empty after a tenth of a second without a save."""
        try:
            names = [self.changed.get(timeout=0.1)]
        except queue.Empty:
            return set()
        while True:
            try:
                names.append(self.changed.get_nowait())
            except queue.Empty:
                break
        for item in names:
            if isinstance(item, Exception):
                raise click.ClickException(f"cannot watch {self.directory}: {item}")
        return set().union(*names)

    def _regrade(self, saved: set[str]) -> None:
        for kata in [k for k in self.watched if f"{k.name}.py" in saved]:
            file = self.directory / f"{kata.name}.py"
            signature = _signature(file)
            if signature is None:
                self.out(f"{shown_path(file)} is gone; save it again to grade it")
                self.graded_as[kata.name] = None
            elif signature != self.graded_as.get(kata.name):
                self._grade(kata)
            if self.stop.is_set():
                break

    def _grade(self, kata: Kata) -> None:
        file = self.directory / f"{kata.name}.py"
        self.graded_as[kata.name] = _signature(file)
        self.out(f"grading {kata.name} ({shown_path(file)}) ...")
        # The caller's stop event ends a grade in progress too (Ctrl-C does that inside grade()).
        result = grade([kata], "katas", seed=self.seed, limits=self.limits, cancel=self.stop)
        if result.interrupted or self.stop.is_set():
            raise _Stopped
        grades, recaps = save_last_grade(kata, result)
        k = result.katas[0]
        text = screen(
            kata,
            k,
            self.before.get(kata.name),
            file=file,
            when=self.clock(),
            next_kata=first_unfinished(self.katas, grades, after=kata),
            watching_all=self.all,
            width=self.width,
        )
        self.before[kata.name] = {t.name: t.status.value for t in k.tasks}
        if self.tty:
            click.clear()
        self.out("\n\n".join([text, *recaps]))
