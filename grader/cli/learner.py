"""The learner's commands: grade, watch, list, hint, reset, init and bench (play has a module of its own)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import click

from grader.cli.interview import grade_in_workspace, hint_in_workspace, list_in_workspace, workspace_here
from grader.cli.options import (
    TEST_TIMEOUT,
    check_output,
    check_target,
    colour,
    complete_grade_word,
    complete_kata,
    complete_task,
    jobs_option,
    limit_options,
    pick_tasks,
    seed_option,
)
from grader.judge.events import DONE_HERE
from grader.kata import target as _target
from grader.kata.lookup import kata_named
from grader.kata.registry import SUITES_DIR, load_registry
from grader.kata.stubs import stub_for
from grader.learn import progress as state
from grader.output import files, report
from grader.run.results import Limits
from grader.run.runner import grade


@click.command("grade")
@click.argument("katas", nargs=-1, metavar="[KATA | KATA:TASK | KATA TASK...]...", shell_complete=complete_grade_word)
@click.option(
    "--target",
    default="katas",
    show_default=True,
    help="What to grade: 'katas' (your code), 'reference' (the reference solutions) or a directory of kata modules.",
)
@seed_option()
@jobs_option(1, True, "Grade this many katas in parallel, each in its own process.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout instead of a table.")
@click.option(
    "--gradescope",
    "gradescope_path",
    type=click.Path(),
    help="Also write Gradescope's results.json to this path (its folder must exist).",
)
@click.option(
    "--verbose",
    "-v",
    count=True,
    help="Show every failing check: its message, your function's failing call (as Hypothesis shrank it), what "
    "your code printed during it and a hint aimed at that check. -vv adds pytest's own words for each failure "
    "(the assertion, Hypothesis's failing case, and the command that shows that case again).",
)
@limit_options
@click.option(
    "--live/--no-live", default=None, help="Print each task's row as soon as it is graded (the default on a terminal)."
)
@click.option(
    "--fail-fast",
    "-x",
    is_flag=True,
    help="Stop each task at its first check that does not pass: quicker feedback, the same pass or not per task "
    "(the status shown is that first check's).",
)
def grade_cmd(
    katas, target, seed, jobs, as_json, gradescope_path, verbose, test_timeout, kata_timeout, memory_mb, live, fail_fast
):
    """Grade katas (all of them by default) and print one row per task.

    Name a kata to grade all its tasks, KATA:TASK or KATA TASK... to grade
    only those tasks (kata grade kv_cache:cache, kata grade kv_cache cache
    generate).

    Inside an interview workspace (the current directory or $KATA_WORKDIR;
    see kata interview) it grades what the interview covers, with the
    interview's seed, logs the attempt and shows the time left.

    Exit code 0 when every graded task passes (in a student edition: or is
    on submission, and a check of each graded kata ran here), 1 when any
    does not, 2 for a usage error, 130 after Ctrl-C (which prints what was
    graded so far).
    """
    limits = Limits(test_seconds=test_timeout, kata_seconds=kata_timeout, memory_mb=memory_mb)
    workspace = workspace_here() if target == "katas" else None
    if workspace is not None:
        sys.exit(grade_in_workspace(workspace, katas, verbose, limits))
    chosen, only = pick_tasks(katas)
    _check_target_for(target, gradescope_path, seed)
    live = (not as_json) and (sys.stdout.isatty() if live is None else live)
    rows, lock = report.LiveRows(chosen), threading.Lock()

    def show_row(kata, task):
        with lock:
            click.echo(rows.row(kata.name, task), color=colour())

    if live:
        click.echo(report.header_line(target, seed) + "\n", color=colour())
        click.echo(rows.head(), color=colour())
    result = grade(
        chosen,
        target,
        seed=seed,
        jobs=jobs,
        limits=limits,
        tasks=only,
        progress=show_row if live else None,
        fail_fast=fail_fast,
    )
    recaps = []
    if target == "katas":
        _, recaps = state.after_grade(chosen, result)
    # Every judge and jail has ended by now: nothing of the learner's can touch what follows.
    if gradescope_path:
        files.write_json(gradescope_path, report.gradescope(result))
    if as_json:
        click.echo(json.dumps(report.as_json(result), indent=1))
    else:
        _print_grade(result, chosen, recaps, live=live, verbose=verbose)
    if result.interrupted:
        click.echo("\ninterrupted (Ctrl-C): the table shows what was graded so far", err=True)
        sys.exit(130)
    sys.exit(0 if result.passed else 1)


def _check_target_for(target: str, gradescope_path: str | None, seed: int) -> None:
    """check_target, and on a bad target a Gradescope file that says why there
    is no grade (Gradescope reads the file whatever happened). A Gradescope
    path that cannot be written is refused first, before any grading."""
    if gradescope_path:
        check_output(gradescope_path, "--gradescope")
    try:
        check_target(target)
    except click.BadParameter as exc:
        if gradescope_path:
            from grader.output.gradescope_results import error_results

            files.write_json(
                gradescope_path, error_results(f"Not graded: {exc.message}", seed=seed, execution_time=0.0)
            )
        raise


def _print_grade(result, chosen, recaps: list[str], *, live: bool, verbose: int) -> None:
    """A grade as text: the table (or, after live rows, the total), the next step,
    the recaps, then each failing check (-v) or one line per failing task."""
    click.echo("\n" + report.total_line(result) if live else report.table(result), color=colour())
    click.echo(report.next_step(result, chosen))
    for text in recaps:
        click.echo("\n" + click.style(text, fg="green"), color=colour())
    if verbose:
        text = report.details(result, words=verbose > 1)
        if text:
            click.echo("\n" + text)
    else:
        summary = report.failing_summary(result)
        if summary:
            click.echo("\n" + summary + "\n\n(kata grade -v shows each failing check and a hint)")


@click.command("list")
def list_cmd():
    """List the katas and their tasks, with the status from your last grade.

    First the points so far, a progress bar and the next task (marked > in
    the list). A task whose latest grade Ctrl-C stopped keeps the status of
    the grade before, and says it was interrupted.

    Inside an interview workspace: the interview, its tasks, the time left and the attempts so far.
    """
    workspace = workspace_here()
    if workspace is not None:
        return list_in_workspace(workspace)
    click.echo("\n".join(state.listing(load_registry())))


@click.command("hint")
@click.argument("kata", shell_complete=complete_kata)
@click.argument("task", required=False, shell_complete=complete_task)
@click.option("--all", "show_all", is_flag=True, help="Show every hint of the task at once.")
def hint_cmd(kata, task, show_all):
    """Show the next hint for TASK of KATA (by default the first task that does not pass yet, or the task it
    fails because of).

    Each call shows one more hint; hints are questions, not answers. Inside an
    interview workspace each hint shown is logged, with its time, for the report.
    """
    workspace = workspace_here()
    if workspace is not None:
        return hint_in_workspace(workspace, kata, task, show_all)
    k = kata_named(kata)
    if task is None:
        last = state.read(state.LAST_GRADE).get(k.name, {})
        pending = [t for t in k.tasks if last.get(t.name) not in DONE_HERE]
        t = state.to_fix_first(k, pending[0], last) if pending else k.tasks[0]
    else:
        try:
            t = k.task(task)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    if show_all:
        for i, h in enumerate(t.hints, 1):
            click.echo(f"{k.name} / {t.name}, hint {i}/{len(t.hints)}: {h}")
        return
    number, hint = state.next_hint(k.name, t)
    click.echo(f"{k.name} / {t.name}, hint {number}/{len(t.hints)}: {hint}")
    if state.hints_shown(k.name, t.name) >= len(t.hints):
        click.echo(
            f"(that was the last hint of {k.name} / {t.name} again; `kata hint {k.name} {t.name} --all` lists "
            "them all, and CHECKLIST.md says what done means)"
        )
    elif number == len(t.hints):
        click.echo("(that was the last hint of this task)")
    state.mark_hint_shown(k.name, t)


# What `kata init` writes as its marker (grader.kata.target.MARKER): TOML, for now comments alone.
MARKER_TEXT = """\
# `kata init` made this folder a kata folder: every kata command run in it, or in a folder below it,
# works on the kata files here (unless KATA_WORKDIR names another folder). Its state is in .kata/.
"""


@click.command("init")
@click.argument("directory", type=click.Path())
def init_cmd(directory):
    """Copy the untouched stubs and CHECKLIST.md into DIRECTORY and make it your kata folder.

    Every kata command run inside DIRECTORY, or in a folder below it, then
    works on the files there, with no KATA_WORKDIR to set: it finds the
    folder by the kata.toml this writes. The grade state and reset backups
    live in DIRECTORY/.kata/. The way to work from an installed (not
    editable) copy of the katas, whose own files sit inside site-packages.
    """
    check_output(directory, "DIRECTORY", folder=True)
    dest = Path(directory).expanduser().resolve()
    katas = load_registry()
    taken = [dest / f"{k.name}.py" for k in katas if (dest / f"{k.name}.py").exists()]
    if taken:
        raise click.ClickException(
            f"{taken[0]} already exists; nothing was copied (pick a new folder, or `kata reset` a kata there)"
        )
    dest.mkdir(exist_ok=True)
    for k in katas:
        (dest / f"{k.name}.py").write_text(stub_for(k.name), encoding="utf-8")
    if not (dest / _target.MARKER).exists():
        (dest / _target.MARKER).write_text(MARKER_TEXT, encoding="utf-8")
    click.echo(f"copied {len(katas)} kata stubs{_copy_checklist(dest)} to {dest}")
    click.echo(
        f"kata commands run inside {dest} (or a folder below it) work on these files: {_target.MARKER} there "
        "marks the folder, no KATA_WORKDIR needed. Start with:"
    )
    click.echo(f"  cd {dest} && kata grade")
    named = os.environ.get("KATA_WORKDIR")
    if named and Path(named).expanduser().resolve() != dest:
        click.echo(f"(KATA_WORKDIR is set, to {named}: it wins over the folder you are in; unset it to work here)")


def _copy_checklist(dest: Path) -> str:
    """Copy CHECKLIST.md into dest unless one is there; returns what to add to the line saying what was copied."""
    checklist = _target.checklist()
    if checklist is None:
        return " (this copy of the katas has no CHECKLIST.md to copy)"
    if (dest / "CHECKLIST.md").exists():
        return " (CHECKLIST.md was there already: kept as it is)"
    shutil.copy2(checklist, dest / "CHECKLIST.md")
    return " and CHECKLIST.md"


def _has_terminal() -> bool:
    """Whether a question can be asked: standard input is a terminal."""
    return sys.stdin.isatty()


@click.command("reset")
@click.argument("kata", shell_complete=complete_kata)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset_cmd(kata, yes):
    """Restore KATA's stub in your kata folder, keeping a backup of your file under .kata/backups/ there.

    What was remembered of KATA's grades and hints goes too: `kata list`
    shows its tasks not graded yet, and `kata hint` starts at the first hint."""
    k = kata_named(kata)
    path = _target.workdir() / f"{k.name}.py"
    if not yes:
        if not _has_terminal():
            raise click.UsageError(f"no terminal to confirm on: to replace {path}, run kata reset {k.name} --yes")
        click.confirm(f"Replace {path} with the untouched stub? (a backup is kept)", abort=True)
    if path.exists():
        click.echo(f"backed up your {path.name} to {state.back_up(path, k.name)}")
    path.write_text(stub_for(k.name), encoding="utf-8")
    state.forget(k.name)
    click.echo(f"restored the stub of {k.name} at {path}; its grades and hints are forgotten")


class _BenchCommand(click.Command):
    """kata bench KATA --help is the benchmark's help: after a kata's name, -h and --help go to its benchmark
    (click would take them for this command's own, which `kata bench --help` shows)."""

    def parse_args(self, ctx, args):
        if args and not args[0].startswith("-") and any(a in ("-h", "--help") for a in args[1:]):
            args = [args[0], "--", *args[1:]]  # after --, click reads every argument as one of ARGS
        return super().parse_args(ctx, args)


@click.command("bench", cls=_BenchCommand, context_settings={"ignore_unknown_options": True})
@click.argument("kata", shell_complete=complete_kata)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench_cmd(kata, args):
    """Run KATA's benchmark (python -m grader.suites.KATA.bench) on your code and print its table.

    ARGS go to the benchmark: --target reference (or a folder of kata modules)
    runs other code than yours; --help lists the rest. One BLAS thread.
    """
    k = kata_named(kata)
    if not (SUITES_DIR / k.name / "bench.py").is_file():
        raise click.ClickException(f"no benchmark for {k.name}: its folder {SUITES_DIR / k.name} has no bench.py")
    target = _bench_target(args)
    if target is None:
        _target.workdir()  # no kata folder: a usage error here, before the benchmark starts
        target, args = "katas", ("--target", "katas", *args)  # your code, unless you say otherwise
    # This checkout first on the path: the benchmark runs this checkout's grader, which an older install maps not.
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(_target.ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    )
    from grader.learn import table_draft  # numpy and the models: loaded only when a benchmark runs

    with tempfile.TemporaryDirectory(prefix="kata-bench-") as folder:
        # What the benchmark needs of the learner's other katas (the speculative one: their own table draft).
        try:
            helps = any(a in ("-h", "--help") for a in args)
            own = any(a == "--table" or a.startswith("--table=") for a in args)  # the learner's table, not ours
            extra = [] if helps or own else table_draft.bench_args(k.name, target, Path(folder))
        except ValueError:  # a --target none of whose forms fits: the benchmark refuses it, saying what is allowed
            extra = []
        # From the current folder, as the learner ran kata: a relative --target, and the kata folder, are found there.
        code = subprocess.call([sys.executable, "-m", f"grader.suites.{k.name}.bench", *args, *extra], env=env)
    sys.exit(code)


def _bench_target(args: tuple[str, ...]) -> str | None:
    """The value of --target among a benchmark's arguments (the last one given, as argparse reads them; "" for
    a --target with no value, which the benchmark refuses), or None when none is given."""
    found = None
    for i, a in enumerate(args):
        if a == "--target":
            found = args[i + 1] if i + 1 < len(args) else ""
        elif a.startswith("--target="):
            found = a.split("=", 1)[1]
    return found


@click.command("watch")
@click.argument("kata", required=False, shell_complete=complete_kata)
@seed_option()
@TEST_TIMEOUT
def watch_cmd(kata, seed, test_timeout):
    """Re-grade KATA every time you save its file, on one compact screen.

    Without KATA it starts on the first kata that does not pass yet and
    re-grades whichever kata's file you save in your kata folder.
    The screen shows each task, what changed since the last run, and the
    first failing check with its example and a hint. Ctrl-C stops watching.
    """
    from grader.learn import watch as _watch

    _watch.watch(kata, seed=seed, limits=Limits(test_seconds=test_timeout), interview_workspace=workspace_here())
