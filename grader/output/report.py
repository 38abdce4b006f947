"""Turn a GradeResult into text, JSON and Gradescope's results.json. Returns
strings and dicts; the CLI does the printing and writing."""

from __future__ import annotations

import ast
import re
import shlex
import string
from pathlib import Path

import click
from tabulate import tabulate

from grader.judge.events import Status
from grader.kata import target as _target
from grader.kata.registry import Kata
from grader.kata.text import printable
from grader.output import versions
from grader.run.results import GradeResult, TaskResult

# The version of as_json's shape: bumped when a field is renamed or removed, not when one is added.
JSON_VERSION = 2

COLUMNS = ["kata", "task", "status", "checks", "points", "measured", ""]  # the last: why a task fails, if not its own
COLOURS = {
    Status.PASS: "green",
    Status.FAIL: "red",
    Status.ERROR: "red",
    Status.CRASH: "red",
    Status.TIMEOUT: "yellow",
    Status.INTERRUPTED: "yellow",
    Status.SLOW: "yellow",
    Status.TODO: "bright_black",
    Status.SUBMIT: "cyan",
}


def styled(status: Status) -> str:
    """The status word in its colour (click.echo drops colours when not writing to a terminal)."""
    return click.style(status.value, fg=COLOURS.get(status))


def figure_text(figure: dict) -> str:
    """A measured figure against its bar: '8.2x (bar >= 5x)', or just '2048 B/token' without one."""
    unit = figure["unit"]
    sep = "" if unit == "x" else " "
    if figure.get("bar") is None:
        return f"{figure['value']:.4g}{sep}{unit}"
    sign = ">=" if figure["better"] == "higher" else "<="
    return f"{figure['value']:.3g}{sep}{unit} (bar {sign} {figure['bar']:.3g}{sep}{unit})"


def task_row(kata: str, task: TaskResult) -> list[str]:
    """A task's row: kata, task, status, checks, points, what it measured against its bar, and the
    task it fails because of ("because greedy fails"), if any."""
    measured = figure_text(task.figures[0]) if task.figures else ""
    if len(task.figures) > 1:
        measured += f" +{len(task.figures) - 1} more"
    return [
        kata,
        task.name,
        styled(task.status),
        f"{task.checks_passed}/{task.checks_total}" + (f" +{task.checks_hidden} hidden" if task.checks_hidden else ""),
        f"{task.score}/{task.max_score}",
        measured,
        f"because {task.root} fails" if task.because_of else "",
    ]


def header_line(result_target: str, seed: int) -> str:
    return f"grading {_target.describe(result_target)}, seed {seed}"


def total_line(result: GradeResult) -> str:
    pending = result.on_submission
    later = f" ({pending} more whose hidden checks are graded on submission)" if pending else ""
    return f"total: {result.score}/{result.max_score} points{later} in {result.duration:.1f} s"


def table(result: GradeResult, header: str = "") -> str:
    """One row per task, then a total line, under `header` (by default: what was graded, and the seed).
    A speed or work task shows the figure it measured against its bar; a task that fails because a
    task it needs fails says which."""
    rows = [task_row(kata.name, task) for kata in result.katas for task in kata.tasks]
    kept = [i for i, name in enumerate(COLUMNS) if i < 5 or any(r[i] for r in rows)]
    body = tabulate([[r[i] for i in kept] for r in rows], headers=[COLUMNS[i] for i in kept], tablefmt="simple")
    header = header or header_line(result.target, result.seed)
    return f"{header}\n\n{body}\n\n{total_line(result)}"


class LiveRows:
    """The table, a row at a time as tasks finish (`kata grade` on a terminal)."""

    def __init__(self, katas: list[Kata]):
        self.widths = [
            max([4] + [len(k.name) for k in katas]),
            max([4] + [len(t.name) for k in katas for t in k.tasks]),
            7,
            7,
            6,
        ]

    def _line(self, cells: list[str]) -> str:
        out = []
        for cell, width in zip(cells, self.widths):
            out.append(cell + " " * max(0, width - len(click.unstyle(cell))))
        out.extend(cells[len(self.widths) :])
        return "  ".join(out).rstrip()

    def head(self) -> str:
        return self._line(COLUMNS[:-1]) + "\n" + self._line(["-" * w for w in self.widths] + ["-" * 8])

    def row(self, kata: str, task: TaskResult) -> str:
        cells = task_row(kata, task)
        return self._line(cells[:-2] + [" ".join(c for c in cells[-2:] if c)])


class _Missing:
    """A figure the recap names but no check measured: shown as '?' whatever its format."""

    def __format__(self, spec: str) -> str:
        return "?"


def recap(kata: Kata, result) -> str:
    """The kata's recap (the registry's `recap`, quoting the figures its
    checks measured by key), for when it has just turned fully green."""
    if not kata.recap:
        return ""
    figures = {f["key"]: f["value"] for t in result.tasks for f in t.figures if f.get("key")}
    values = {name: figures.get(name, _Missing()) for _, name, _, _ in string.Formatter().parse(kata.recap) if name}
    return f"{kata.name} is done. " + kata.recap.format_map(values)


def next_step(result: GradeResult, katas: list[Kata]) -> str:
    """One line naming the first graded task that does not pass (or, when it fails because a task it
    needs fails, that task), and where to work on it; or that everything graded passes."""
    known = {k.name: k for k in katas}
    for kata in result.katas:
        for task in kata.tasks:
            if not task.status.done_here:
                task = next((t for t in kata.tasks if t.name == task.root), task)
                return next_line(kata.name, task.name, task.status.value, known.get(kata.name), result.target)
    for kata in result.katas:
        if not result.interrupted and not any(t.checks_total for t in kata.tasks):
            names = ", ".join(t.name for t in kata.tasks)
            return (
                f"next: nothing here checks {kata.name} / {names}: this edition holds none of its checks "
                f"(graded on submission); `kata grade {kata.name}` grades it beside the tasks it times"
            )
    n = sum(len(k.tasks) for k in result.katas)
    later = sum(t.status is Status.SUBMIT for k in result.katas for t in k.tasks)
    if later:
        return f"every graded task passes here ({n} of {n}); {later} have hidden checks, graded on submission"
    return f"every graded task passes ({n} of {n})"


def next_line(kata: str, task: str, status: str, registered: Kata | None, target: str = "katas") -> str:
    """'next: KATA / TASK (STATUS): where to work on it' (the file and line of its first function,
    or of the syntax error that stops the file from loading; a task whose grading Ctrl-C stopped
    has no verdict, so the step is to grade it again). The file is parsed, never run."""
    functions = registered.task(task).functions if registered else ()
    path = _target.kata_path(target, kata)
    tree, broken = _parsed(path)
    if status == Status.INTERRUPTED.value:
        where = f"its grading was stopped before a verdict: kata grade {kata}:{task}"
    elif broken:
        where = f"fix the syntax error at {broken}"
    elif functions:
        where = f"write {', '.join(functions)} in {_where(path, tree, functions[0])}"
    else:
        where = f"see `kata grade -v {kata}:{task}` and `kata hint {kata} {task}`"
    return f"next: {kata} / {task} ({status}): {where}"


def shown_path(path: Path) -> str:
    """path, relative to the current folder when it lies below it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _parsed(path: Path) -> tuple[ast.Module | None, str]:
    """(the learner's file parsed, or None; path:line of its syntax error, or "")."""
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace")), ""
    except SyntaxError as exc:
        return None, f"{shown_path(path)}:{exc.lineno}" if exc.lineno else shown_path(path)
    except (OSError, ValueError):
        return None, ""


def _where(path: Path, tree: ast.Module | None, name: str) -> str:
    """path:line of the definition of `name` in the parsed file, or just path."""
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return f"{shown_path(path)}:{node.lineno}"
    return shown_path(path)


_TODO_LINE = "todo (not started: its functions raise NotImplementedError)"


def details(result: GradeResult, words: bool = False) -> str:
    """Every check that did not pass: its message, the example that broke it,
    what the learner's code printed during it, the task's first hint (with
    `words`, `kata grade -vv`, pytest's own words for each failure too). Said once where once says it all: a task not
    started is one line and its hint, a kata whose every check failed the
    same way (a module that does not load) gives the message once, and
    consecutive checks of a task that failed alike are one entry with a count.
    Detailed tasks are set apart by blank lines; one-line tasks are not."""
    blocks: list[tuple[bool, list[str]]] = []  # (detailed, lines)
    for kata in result.katas:
        shared = _shared_failure(kata)
        first = True
        for task in kata.tasks:
            if task.status is Status.PASS:
                continue
            if task.status is Status.SUBMIT:
                blocks.append((False, [f"{kata.name} / {task.name}: {task.status}: {task.message}"]))
                continue
            head = f"{kata.name} / {task.name}: {task.status}"
            if shared is not None:
                if first:
                    lines = [head, f"  every check of {kata.name} failed the same way:"]
                    blocks.append((True, lines + _block(shared, "    ", "    ")))
                else:
                    blocks.append((False, [f"{head} (see above)"]))
                first = False
                continue
            if task.failures and all(f["outcome"] == "todo" for f in task.failures):
                blocks.append((False, [f"{kata.name} / {task.name}: {_TODO_LINE}", f"  hint: {task.hint}"]))
                continue
            if task.because_of:
                own = f"`kata grade -v {kata.name}:{task.name}` shows its own failing checks"
                blocks.append((False, [f"{head}, because {task.root} fails: fix {task.root} first ({own})"]))
                continue
            lines = [head]
            for group in _runs(task.failures):
                f = group[0]
                lines += _block(f["message"], f"  {f['test']} [{f['outcome']}]: ", "      ")
                lines += _example_lines(f["example"])
                lines += printed_lines(f.get("printed", ""), "      ")
                if words:
                    again = f"kata grade {kata.name}:{task.name} -vv --seed {result.seed}" + (
                        "" if result.target == "katas" else f" --target {shlex.quote(result.target)}"
                    )
                    lines += _labelled("pytest says:", _for_the_learner(f.get("pytest", ""), again), "      ")
                if len(group) > 1:
                    more = len(group) - 1
                    lines.append(f"  ... and {more} more check{'s' if more > 1 else ''} failed the same way")
            lines += [f"  {task.looks_like}"] if task.looks_like else []
            lines += [f"  hint: {task.hint}"] if task.hint else []
            blocks.append((True, lines))
    out: list[str] = []
    for i, (detailed, lines) in enumerate(blocks):
        if i and (detailed or blocks[i - 1][0]):
            out.append("")
        out += lines
    return "\n".join(out)


def failing_summary(result: GradeResult) -> str:
    """One line per task that did not pass, for the default (not -v) output:
    one for the whole kata when its every check failed the same way."""
    lines = []
    for kata in result.katas:
        shared = _shared_failure(kata)
        if shared is not None:
            lines.append(f"{kata.name}: every check failed the same way: {_one_line(shared)}")
            continue
        for task in kata.tasks:
            if not task.status.done_here and task.status not in (Status.TODO, Status.INTERRUPTED):
                lines.append(f"{kata.name} / {task.name}: {task.because or _one_line(task.message)}")
    return "\n".join(lines)


def _shared_failure(kata) -> str | None:
    """The message every failing check of the kata gave, when it graded two
    tasks or more and all their checks failed and gave one message (an import
    or syntax error, a module that hangs or dies while loading); else None. A check not run because an
    earlier check of its task timed out does not count against it."""
    if len(kata.tasks) < 2:
        return None  # one task: its checks that failed alike are counted there
    messages = set()
    failures = 0
    for task in kata.tasks:
        if task.status.done_here or task.checks_passed or task.status == "todo":
            return None
        for f in task.failures:
            if f["outcome"] == "todo":
                return None
            if f["outcome"] == "timeout" and f["message"].startswith("not run: "):
                continue
            messages.add(f["message"])
            failures += 1
    if failures < 2 or len(messages) != 1:
        return None
    return messages.pop()


def _runs(failures: list[dict]) -> list[list[dict]]:
    """Consecutive failures with the same outcome and message, grouped."""
    groups: list[list[dict]] = []
    for f in failures:
        if groups and (groups[-1][0]["outcome"], groups[-1][0]["message"]) == (f["outcome"], f["message"]):
            groups[-1].append(f)
        else:
            groups.append([f])
    return groups


def _block(text: str, first: str, rest: str) -> list[str]:
    """text's first line after `first`, its other lines (a learner's frames) stripped and after `rest`."""
    lines = [printable(ln.strip()) for ln in text.splitlines() if ln.strip()] or [""]
    return [first + lines[0]] + [rest + ln for ln in lines[1:]]


def _example_lines(example: str) -> list[str]:
    lines = [printable(ln.rstrip()) for ln in example.splitlines() if ln.strip()]
    if not lines:
        return []
    if len(lines) == 1:
        return [f"      example: {lines[0]}"]
    return ["      example:"] + [f"        {ln}" for ln in lines]


def printed_lines(text: str, indent: str) -> list[str]:
    """What a failing check's run of the learner's code printed, under a heading, every line escaped."""
    return _labelled("your code printed:", text, indent)


# Hypothesis's advice under a failing case, meant for whoever wrote the check (the suite's author, not the learner).
_REPRODUCE = re.compile(
    r"You can reproduce this (?:test case|example) by temporarily adding @reproduce_failure\(.*?\) "
    r"as a decorator on your test function\.?"
)


def _for_the_learner(words: str, again: str) -> str:
    """pytest's words with Hypothesis's @reproduce_failure advice (a decorator for a check of the suite,
    which is not the learner's to edit) replaced by what the learner can run instead: `again`."""
    return _REPRODUCE.sub(
        f"To see this test case again: {again} (the same code and seed draw the same examples)",
        words,
    )


def _labelled(label: str, text: str, indent: str) -> list[str]:
    lines = [printable(ln.rstrip()) for ln in text.rstrip("\n").split("\n")] if text.strip() else []
    return [f"{indent}{label}"] + [f"{indent}  | {ln}" for ln in lines] if lines else []


def _one_line(message: str) -> str:
    """A message on one line: its first line, and the last frame it names (the learner's line)."""
    lines = [printable(ln.strip()) for ln in message.splitlines() if ln.strip()]
    if not lines:
        return ""
    frames = [ln for ln in lines[1:] if ln.startswith("at ")]
    return lines[0] + (f" ({frames[-1]})" if frames else "")


def as_json(result: GradeResult) -> dict:
    """The documented JSON shape (extra fields are additions, never renames)."""
    return {
        "version": JSON_VERSION,
        "score": result.score,
        "max_score": result.max_score,
        "seed": result.seed,
        "target": result.target,
        "duration": result.duration,
        "interrupted": result.interrupted,
        "versions": versions.installed(),  # Python, numpy, pytest and Hypothesis: what a grade may depend on
        "katas": [
            {
                "name": k.name,
                "title": k.title,
                "score": k.score,
                "max_score": k.max_score,
                "duration": k.duration,
                "tasks": [
                    {
                        "name": t.name,
                        "title": t.title,
                        "status": t.status.value,
                        "score": t.score,
                        "max_score": t.max_score,
                        "checks_passed": t.checks_passed,
                        "checks_total": t.checks_total,
                        "checks_hidden": t.checks_hidden,
                        "message": t.message,
                        "hint": t.hint,
                        "failures": t.failures,
                        "visibility": t.visibility,
                        "figures": t.figures,
                        "diagnosis": t.diagnosis,
                        "diagnosis_why": t.diagnosis_why,
                        "because_of": t.because_of,
                    }
                    for t in k.tasks
                ],
            }
            for k in result.katas
        ],
    }


def gradescope(result: GradeResult) -> dict:
    """Gradescope's autograder results.json (grader.output.gradescope_results.results, with the grade's own seed)."""
    from grader.output import gradescope_results as _gradescope  # loads only when its file is asked for

    return _gradescope.results(result, seed=result.seed)
