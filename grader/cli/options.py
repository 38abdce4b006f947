"""What several commands take: kata and task words and their shell completion, a --target, the
limits, --seed and --jobs of a grading, and whether to colour what they print."""

from __future__ import annotations

import math
import os
import sys

import click

from grader.kata import target as _target
from grader.kata import writable
from grader.kata.lookup import did_you_mean, no_kata
from grader.kata.registry import Kata, RegistryError, load_registry
from grader.run.results import MAX_MEMORY_MB, MAX_SECONDS, Limits


def pick_tasks(words: tuple[str, ...]) -> tuple[list[Kata], dict[str, list[str]]]:
    """The katas `kata grade` words name, and the only tasks to grade of
    those that name some: KATA (every task), KATA:TASK, or KATA followed by
    task names of it (`kata grade kv_cache cache generate`). Every kata when
    there are no words."""
    katas = load_registry()
    if not words:
        return list(katas), {}
    known = {k.name: k for k in katas}
    chosen: dict[str, Kata] = {}
    tasks: dict[str, list[str]] = {}
    last: Kata | None = None
    for word in words:
        name, colon, task = word.partition(":")
        if name in known:
            kata = last = chosen.setdefault(name, known[name])
            if not colon:
                continue
            if not task:
                raise click.UsageError(
                    f"{word!r} names no task after the colon; write KATA:TASK, e.g. {name}:{kata.tasks[0].name}"
                )
        elif not colon and last is not None:
            kata, task = last, word  # a task of the kata named before it
        else:
            raise no_kata(name, known)
        names = [t.name for t in kata.tasks]
        if task not in names:
            nor = "" if colon else " (nor is it a kata)"
            raise click.UsageError(
                f"kata {kata.name!r} has no task {task!r}{did_you_mean(task, names)}{nor}; "
                f"its tasks are: {', '.join(names)}"
            )
        tasks.setdefault(kata.name, [])
        if task not in tasks[kata.name]:
            tasks[kata.name].append(task)
    return list(chosen.values()), tasks


def check_target(target: str) -> None:
    """A usage error naming --target unless target is 'katas', 'reference' or a folder of kata modules."""
    try:
        _target.resolve(target)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None


class UnwritableOutput(click.ClickException):
    """An output file or folder a command cannot write: exit 2, like a usage error, in one line."""

    exit_code = 2


def check_output(path, option: str, *, folder: bool = False) -> None:
    """UnwritableOutput unless the file (or, with folder, the folder) path can be written, as the option
    or argument `option` names it; asked before any work, so nothing is graded for a path that fails."""
    if not str(path):  # "" would be the current folder (or no file at all), which nobody named
        raise UnwritableOutput(f"{option} is empty: name a {'folder' if folder else 'file'}")
    why = writable.why_not_folder(path) if folder else writable.why_not_writable(path)
    if why:
        raise UnwritableOutput(f"{option} {path} cannot be written: {why}")


def colour() -> bool | None:
    """Colour on a terminal (click's default), never under NO_COLOR."""
    return False if os.environ.get("NO_COLOR") else None


def live_terminal() -> bool:
    """Whether a command may redraw its line as it goes: standard output is a terminal."""
    return sys.stdout.isatty()


# ------------------------------------------------------------------ shell completion


def _katas_or_none() -> tuple[Kata, ...]:
    """The registry's katas for a shell completion, which never ends in an error: none if it is broken."""
    try:
        return load_registry()
    except RegistryError:
        return ()


def complete_kata(ctx, param, incomplete: str) -> list[str]:
    """The kata names that start with what was typed (a KATA argument's shell completion)."""
    return [k.name for k in _katas_or_none() if k.name.startswith(incomplete)]


def _task_names(kata: str | None) -> list[str]:
    found = next((k for k in _katas_or_none() if k.name == kata), None)
    return [t.name for t in found.tasks] if found else []


def complete_task(ctx, param, incomplete: str) -> list[str]:
    """The names of the tasks of the kata named before, that start with what was typed."""
    return [t for t in _task_names(ctx.params.get("kata")) if t.startswith(incomplete)]


def complete_grade_word(ctx, param, incomplete: str) -> list[str]:
    """`kata grade`'s words: KATA, KATA:TASK, or a task of the kata named last before it."""
    kata, colon, task = incomplete.partition(":")
    if colon:
        return [f"{kata}:{t}" for t in _task_names(kata) if t.startswith(task)]
    known = {k.name for k in _katas_or_none()}
    last = next((w for w in reversed(ctx.params.get("katas") or ()) if w in known), None)
    return complete_kata(ctx, param, incomplete) + [t for t in _task_names(last) if t.startswith(incomplete)]


# ------------------------------------------------------------------ a grading's options


def _limit(name: str, default: float, kind: click.ParamType, help: str):
    """One option of a grading's limits, its default from grader.run.results.Limits."""
    return click.option(name, default=default, show_default=True, type=kind, help=help)


class Finite(click.FloatRange):
    """A FloatRange that refuses nan, which no comparison with its bounds does, and inf."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


TEST_TIMEOUT = _limit(
    "--test-timeout",
    Limits.test_seconds,
    Finite(min=1, max=MAX_SECONDS),
    "Seconds one check may take before it is graded 'timeout'.",
)
_KATA_TIMEOUT = _limit(
    "--kata-timeout", Limits.kata_seconds, Finite(min=1, max=MAX_SECONDS), "Seconds one kata's whole suite may take."
)
_MEMORY_MB = _limit(
    "--memory-mb",
    Limits.memory_mb,
    click.IntRange(min=256, max=MAX_MEMORY_MB),
    "Memory (address space) a grading process may use, in MiB.",
)


def limit_options(fn):
    """--test-timeout, --kata-timeout and --memory-mb: the limits of a grading."""
    return TEST_TIMEOUT(_KATA_TIMEOUT(_MEMORY_MB(fn)))


def seed_option(
    help: str = "0 grades on the standard examples; another N draws a different, equally deterministic set.",
):
    """--seed: which deterministic set of examples a grading draws."""
    return click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help=help)


def jobs_option(default: int, shown: bool | str, help: str):
    """--jobs/-j: how many katas grade at once."""
    return click.option("--jobs", "-j", default=default, show_default=shown, type=click.IntRange(min=1), help=help)
