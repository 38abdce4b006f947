"""`kata`: grade the katas, see hints, reset a kata, run its suite raw, play with the model.

A thin shell over grader.grading.runner, grader.output.report and grader.kata.registry: all the
printing happens here.
"""

from __future__ import annotations

import os

from grader import ONE_BLAS_THREAD

# Every `kata` command runs NumPy on one BLAS thread, set before NumPy loads; a value the caller set is kept.
for _name, _value in ONE_BLAS_THREAD.items():
    os.environ.setdefault(_name, _value)

import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from importlib import metadata  # noqa: E402
from pathlib import Path  # noqa: E402

import click  # noqa: E402

from grader.grading.runner import Limits, grade  # noqa: E402
from grader.interview import session as interview  # noqa: E402
from grader.kata import target as _target  # noqa: E402
from grader.kata.lookup import did_you_mean as _did_you_mean  # noqa: E402
from grader.kata.lookup import kata_named as _kata  # noqa: E402
from grader.kata.lookup import no_kata as _no_kata  # noqa: E402
from grader.kata.registry import Kata, RegistryError, load_presets, load_registry  # noqa: E402
from grader.kata.stubs import stub_for  # noqa: E402
from grader.learn import progress as state  # noqa: E402
from grader.output import files, report  # noqa: E402


def _pick_tasks(words: tuple[str, ...]) -> tuple[list[Kata], dict[str, list[str]]]:
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
            raise _no_kata(name, known)
        names = [t.name for t in kata.tasks]
        if task not in names:
            nor = "" if colon else " (nor is it a kata)"
            raise click.UsageError(
                f"kata {kata.name!r} has no task {task!r}{_did_you_mean(task, names)}{nor}; "
                f"its tasks are: {', '.join(names)}"
            )
        tasks.setdefault(kata.name, [])
        if task not in tasks[kata.name]:
            tasks[kata.name].append(task)
    return list(chosen.values()), tasks


def _check_target(target: str) -> None:
    try:
        _target.resolve(target)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target") from None


class BrokenRegistry(click.ClickException):
    """katas.toml does not load: exit 2, like a usage error (exit 1 is a grade that did not pass)."""

    exit_code = 2


# `kata --help` lists the commands by who runs them, each section in the order a newcomer needs them.
SECTIONS = {
    "Learner commands": ("grade", "watch", "list", "hint", "reset", "init", "play", "bench"),
    "Instructor commands (classes and interviews)": ("release", "grade-all", "gradescope", "classroom", "interview"),
    "Contributor commands": ("new", "test"),
}


class _Kata(click.Group):
    """The command group: `--help` lists the commands in SECTIONS; a broken registry ends
    a command with one line, not a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RegistryError as exc:
            raise BrokenRegistry(f"the kata registry is broken: {exc}") from None

    def format_commands(self, ctx, formatter):
        commands = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        shown = {name for name, command in commands.items() if command is not None and not command.hidden}
        unlisted = sorted(shown - {name for names in SECTIONS.values() for name in names})
        widest = max(map(len, shown), default=0)  # one column for the names of every section
        for title, names in [*SECTIONS.items(), ("Other commands", unlisted)]:
            rows = [
                (name.ljust(widest), commands[name].get_short_help_str(formatter.width - 6 - widest))
                for name in names
                if name in shown
            ]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _katas_or_none() -> tuple[Kata, ...]:
    """The registry's katas for a shell completion, which never ends in an error: none if it is broken."""
    try:
        return load_registry()
    except RegistryError:
        return ()


def _complete_kata(ctx, param, incomplete: str) -> list[str]:
    """The kata names that start with what was typed (a KATA argument's shell completion)."""
    return [k.name for k in _katas_or_none() if k.name.startswith(incomplete)]


def _task_names(kata: str | None) -> list[str]:
    found = next((k for k in _katas_or_none() if k.name == kata), None)
    return [t.name for t in found.tasks] if found else []


def _complete_task(ctx, param, incomplete: str) -> list[str]:
    """The names of the tasks of the kata named before, that start with what was typed."""
    return [t for t in _task_names(ctx.params.get("kata")) if t.startswith(incomplete)]


def _complete_grade_word(ctx, param, incomplete: str) -> list[str]:
    """`kata grade`'s words: KATA, KATA:TASK, or a task of the kata named last before it."""
    kata, colon, task = incomplete.partition(":")
    if colon:
        return [f"{kata}:{t}" for t in _task_names(kata) if t.startswith(task)]
    known = {k.name for k in _katas_or_none()}
    last = next((w for w in reversed(ctx.params.get("katas") or ()) if w in known), None)
    return _complete_kata(ctx, param, incomplete) + [t for t in _task_names(last) if t.startswith(incomplete)]


def _version() -> str:
    try:
        return metadata.version("llm-speed-katas")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


@click.group(cls=_Kata, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="kata", message="%(prog)s %(version)s")
def main():
    """LLM speed katas: learn by doing why a language model types fast and runs cheap.

    Edit the files in katas/, then run `kata grade`. `kata list` shows where
    you are; `kata hint KATA` nudges you when a task does not pass.
    """


def _limit(name: str, default: float, kind: click.ParamType, help: str):
    """One option of a grading's limits, its default from grader.grading.runner.Limits."""
    return click.option(name, default=default, show_default=True, type=kind, help=help)


_TEST_TIMEOUT = _limit(
    "--test-timeout",
    Limits.test_seconds,
    click.FloatRange(min=1),
    "Seconds one check may take before it is graded 'timeout'.",
)
_KATA_TIMEOUT = _limit(
    "--kata-timeout", Limits.kata_seconds, click.FloatRange(min=1), "Seconds one kata's whole suite may take."
)
_MEMORY_MB = _limit(
    "--memory-mb",
    Limits.memory_mb,
    click.IntRange(min=256),
    "Memory (address space) a grading process may use, in MiB.",
)


def _seed_option(
    help: str = "0 grades on the standard examples; another N draws a different, equally deterministic set.",
):
    """--seed: which deterministic set of examples a grading draws."""
    return click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help=help)


def _jobs_option(default: int, shown: bool | str, help: str):
    """--jobs/-j: how many katas grade at once."""
    return click.option("--jobs", "-j", default=default, show_default=shown, type=click.IntRange(min=1), help=help)


def _limit_options(fn):
    """--test-timeout, --kata-timeout and --memory-mb: the limits of a grading."""
    return _TEST_TIMEOUT(_KATA_TIMEOUT(_MEMORY_MB(fn)))


@main.command("grade")
@click.argument("katas", nargs=-1, metavar="[KATA | KATA:TASK | KATA TASK...]...", shell_complete=_complete_grade_word)
@click.option(
    "--target",
    default="katas",
    show_default=True,
    help="What to grade: 'katas' (your code), 'reference' (the reference solutions) or a directory of kata modules.",
)
@_seed_option()
@_jobs_option(1, True, "Grade this many katas in parallel, each in its own process.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout instead of a table.")
@click.option(
    "--gradescope",
    "gradescope_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write Gradescope's results.json to this path.",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Show every failing check: its message, your function's failing call (as Hypothesis shrank it) and "
    "a hint aimed at that check.",
)
@_limit_options
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

    Exit code 0 when every graded task passes, 1 when any does not, 2 for a
    usage error, 130 after Ctrl-C (which prints what was graded so far).
    """
    limits = Limits(test_seconds=test_timeout, kata_seconds=kata_timeout, memory_mb=memory_mb)
    workspace = interview.find_workspace() if target == "katas" else None
    if workspace is not None:
        sys.exit(_grade_interview(workspace, katas, verbose, limits))
    chosen, only = _pick_tasks(katas)
    _check_target_for(target, gradescope_path, seed)
    live = (not as_json) and (sys.stdout.isatty() if live is None else live)
    rows, lock = report.LiveRows(chosen), threading.Lock()

    def show_row(kata, task):
        with lock:
            click.echo(rows.row(kata.name, task), color=_colour())

    if live:
        click.echo(report.header_line(target, seed) + "\n", color=_colour())
        click.echo(rows.head(), color=_colour())
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
    """_check_target, and on a bad target a Gradescope file that says why there
    is no grade (Gradescope reads the file whatever happened)."""
    try:
        _check_target(target)
    except click.BadParameter as exc:
        if gradescope_path:
            from grader.output.gradescope_results import error_results

            files.write_json(
                gradescope_path, error_results(f"Not graded: {exc.message}", seed=seed, execution_time=0.0)
            )
        raise


def _print_grade(result, chosen, recaps: list[str], *, live: bool, verbose: bool) -> None:
    """A grade as text: the table (or, after live rows, the total), the next step,
    the recaps, then each failing check (-v) or one line per failing task."""
    click.echo("\n" + report.total_line(result) if live else report.table(result), color=_colour())
    click.echo(report.next_step(result, chosen))
    for text in recaps:
        click.echo("\n" + click.style(text, fg="green"), color=_colour())
    if verbose:
        text = report.details(result)
        if text:
            click.echo("\n" + text)
    else:
        summary = report.failing_summary(result)
        if summary:
            click.echo("\n" + summary + "\n\n(kata grade -v shows each failing check and a hint)")


def _live_terminal() -> bool:
    """Whether a demo may redraw its line as it goes: standard output is a terminal."""
    return sys.stdout.isatty()


def _colour() -> bool | None:
    """Colour on a terminal (click's default), never under NO_COLOR."""
    return False if os.environ.get("NO_COLOR") else None


@main.command("list")
def list_cmd():
    """List the katas and their tasks, with the status from your last grade.

    Inside an interview workspace: the interview, its tasks, the time left and the attempts so far.
    """
    workspace = interview.find_workspace()
    if workspace is not None:
        try:
            click.echo(interview.listing(interview.load(workspace), _clock().now()))
        except interview.InterviewError as exc:
            raise click.ClickException(str(exc)) from None
        return
    last = state.read(state.LAST_GRADE)
    for kata in load_registry():
        click.echo(f"{kata.order}. {kata.name}: {kata.title} ({kata.trade})")
        for task in kata.tasks:
            status = last.get(kata.name, {}).get(task.name, "not graded yet")
            points = f"{task.points} pt" + ("s" if task.points != 1 else " ")
            click.echo(f"   {task.name:<14} {points}  {status:<15} {task.title}")


@main.command("hint")
@click.argument("kata", shell_complete=_complete_kata)
@click.argument("task", required=False, shell_complete=_complete_task)
@click.option("--all", "show_all", is_flag=True, help="Show every hint of the task at once.")
def hint_cmd(kata, task, show_all):
    """Show the next hint for TASK of KATA (by default the first task that does not pass yet).

    Each call shows one more hint; hints are questions, not answers. Inside an
    interview workspace each hint shown is logged, with its time, for the report.
    """
    workspace = interview.find_workspace()
    if workspace is not None:
        try:
            shown = interview.hint(workspace, kata, task, _clock(), every=show_all)
        except interview.InterviewError as exc:
            raise click.UsageError(str(exc)) from None
        for h in shown:
            click.echo(f"{kata} / {h.task}, hint {h.number}/{h.of}: {h.text}")
        click.echo("(logged, with the time, for the interview's report)")
        return
    k = _kata(kata)
    if task is None:
        last = state.read(state.LAST_GRADE).get(k.name, {})
        pending = [t for t in k.tasks if last.get(t.name) != "pass"]
        t = pending[0] if pending else k.tasks[0]
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


@main.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
def init_cmd(directory):
    """Copy the untouched stubs and CHECKLIST.md into DIRECTORY to work there.

    For an installed (not editable) copy of the katas, whose own files sit
    inside site-packages. Prints the KATA_WORKDIR line that points `kata`
    at DIRECTORY; the grade state and reset backups then live in
    DIRECTORY/.kata/.
    """
    dest = Path(directory).expanduser().resolve()
    katas = load_registry()
    taken = [dest / f"{k.name}.py" for k in katas if (dest / f"{k.name}.py").exists()]
    if taken:
        raise click.ClickException(
            f"{taken[0]} already exists; nothing was copied (pick a new folder, or `kata reset` a kata there)"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for k in katas:
        (dest / f"{k.name}.py").write_text(stub_for(k.name), encoding="utf-8")
    checklist = _target.ROOT / "CHECKLIST.md"
    if checklist.is_file() and not (dest / "CHECKLIST.md").exists():
        shutil.copy2(checklist, dest / "CHECKLIST.md")
    click.echo(f"copied {len(katas)} kata stubs and CHECKLIST.md to {dest}")
    click.echo("point kata at them (add it to your shell's profile to keep it):")
    click.echo(f"  export KATA_WORKDIR={dest}")


@main.command("reset")
@click.argument("kata", shell_complete=_complete_kata)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset_cmd(kata, yes):
    """Restore KATA's stub in katas/ (or $KATA_WORKDIR), keeping a backup of your file under .kata/backups/."""
    k = _kata(kata)
    path = _target.workdir() / f"{k.name}.py"
    if not yes:
        click.confirm(f"Replace {path} with the untouched stub? (a backup is kept)", abort=True)
    if path.exists():
        click.echo(f"backed up your {path.name} to {state.back_up(path, k.name)}")
    path.write_text(stub_for(k.name), encoding="utf-8")
    click.echo(f"restored the stub of {k.name} at {path}")


@main.command("test", context_settings={"ignore_unknown_options": True})
@click.argument("kata", shell_complete=_complete_kata)
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--target",
    default="katas",
    show_default=True,
    help="What to test: 'katas', 'reference' or a directory of kata modules.",
)
def test_cmd(kata, pytest_args, target):
    """Run KATA's grading suite under plain pytest: kata test KATA -- PYTEST_ARGS.

    No table and no per-check time limit: pytest's own output, for
    debugging. Your module still runs in its jail.
    """
    k = _kata(kata)
    _check_target(target)
    if target not in ("katas", "reference"):
        target = str(_target.resolve(target))  # the caller's directory, not the suite's
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(k.suite),
        f"--target={target}",
        "-c",
        os.devnull,
        "-p",
        "no:cacheprovider",
        *pytest_args,
    ]
    sys.exit(subprocess.call(cmd, cwd=str(_target.ROOT)))


class _PlayGroup(click.Group):
    """`kata play DEMO ...` runs a demo; without a demo's name, `kata play [PROMPT]` is `kata play write`."""

    def parse_args(self, ctx, args):
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["write", *args]
        return super().parse_args(ctx, args)


@main.group("play", cls=_PlayGroup)
def play():
    """Watch a trick work on the shipped teacher: on your own code once its
    task passes (`kata grade`), on the model's own code before that.

    \b
    kata play [PROMPT]           the teacher (or --model draft) continues your text
    kata play cache [PROMPT]     the same sentence written twice: re-reading everything, then with a KV cache
    kata play moe [PROMPT]       which experts the router sends each character to, and each expert's load
    kata play speculate [PROMPT] the draft guesses, the teacher checks them all in one call
    kata play quantize           one weight snapping to the nearest allowed level as the bits go down
    kata play distill [TEXT]     what the teacher thinks comes next, beside its students
    kata play stack [PROMPT]     the deployed model: one bargain at a time, each measured
    """


def _play_source(kata: str, functions: tuple[str, ...], target: str):
    """Whose code a demo of kata runs (grader.learn.play.kata_source), or a one-line error."""
    from grader.learn import play as demos

    try:
        return demos.kata_source(kata, functions, target)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _shipped_teacher():
    from reference.model import Model

    try:
        return Model.pretrained("teacher")
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None


def _play_tokens(default: int):
    """--tokens/-n: how many characters a demo writes."""
    return click.option(
        "--tokens",
        "-n",
        default=default,
        show_default=True,
        type=click.IntRange(min=1),
        help="How many characters to write.",
    )


_PLAY_K = click.option(
    "--k", "k", default=4, show_default=True, type=click.IntRange(min=1), help="Draft guesses per round."
)


def _drafting(tokens: int):
    """PROMPT, --tokens, --k and --target: what the demos with a draft take."""

    def options(fn):
        return click.argument("prompt", default="Return the ")(_play_tokens(tokens)(_PLAY_K(_PLAY_TARGET(fn))))

    return options


def _prompt_ids(prompt: str, tokens: int, model) -> list[int]:
    """The prompt's token ids, or a one-line error when it and `tokens` more do not fit the model."""
    from reference.tokenizer import encode

    try:
        ids = encode(prompt)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if not ids or len(ids) + tokens > model.config.max_seq_len:
        room = model.config.max_seq_len - tokens
        raise click.ClickException(f"the prompt needs 1 to {room} characters for {tokens} new ones")
    return ids


_PLAY_TARGET = click.option(
    "--target",
    default="katas",
    show_default=True,
    help="Whose code: 'katas' (yours, once its task passes), 'reference' or a directory of kata modules.",
)


@play.command("cache")
@click.argument("prompt", default="R")
@_play_tokens(9)
@_PLAY_TARGET
def play_cache(prompt, tokens, target):
    """Write the same sentence twice: re-reading the whole text for every
    character, then remembering it with a KV cache; count the work of each."""
    from grader.learn import play as demos
    from reference.tokenizer import decode

    model = _shipped_teacher()
    ids = _prompt_ids(prompt, tokens, model)
    source = _play_source("kv_cache", ("KVCache", "forward_cached"), target)
    click.echo(f"The teacher writes {tokens} characters after {prompt!r}, twice; code: {source.says}.")
    click.echo(f"{_blas_line()}\n")
    ways = (
        ("1. re-reading everything: the whole text through every layer, for every character", None),
        ("2. remembering: each character through each layer once (a KV cache)", source),
    )
    last = []
    live = _live_terminal()
    for title, way in ways:
        click.echo(title)
        steps = demos.naive_steps(model, ids, tokens) if way is None else demos.cached_steps(model, ids, tokens, way)
        try:
            done = []
            for step in steps:  # on a terminal the line is redrawn with its meter after every character
                done.append(step)
                if live:
                    meter = f"   [{step.positions:,} token passes per layer, {step.macs:,} MACs]"
                    click.echo(f"\r{prompt}{decode([s.token for s in done])}{meter}", nl=False)
        except Exception as exc:  # the learner's code: say what it raised, in one line
            raise click.ClickException(f"{source.says} raised {type(exc).__name__}: {exc}") from None
        end = done[-1]
        text = f"{prompt}{decode([s.token for s in done])}"
        click.echo(f"\r{text}\x1b[K" if live else text)
        click.echo(f"   {end.positions:,} token passes per layer, {end.macs:,} multiply-accumulates\n")
        last.append(done)
    naive, cached = last
    same = [s.token for s in naive] == [s.token for s in cached]
    ratio = demos.work_ratio(naive[-1], cached[-1])
    macs = cached[-1].macs / naive[-1].macs
    verdict = "same sentence" if same else "a DIFFERENT sentence (the cache changed what the model writes)"
    click.echo(f"{verdict}, {ratio} of the work ({macs:.2f}x the multiply-accumulates)")


@play.command("speculate")
@_drafting(40)
def play_speculate(prompt, tokens, k, target):
    """The distilled draft guesses K characters a round, the teacher checks
    them all in one call and keeps what it would have written itself."""
    from grader.learn import play as demos
    from reference.lm import CachedLM, generate
    from reference.model import Model
    from reference.tokenizer import decode

    teacher = _shipped_teacher()
    draft = Model.pretrained("draft")
    source = _play_source("speculative", ("greedy_accept",), target)
    ids = _prompt_ids(prompt, tokens, teacher)
    try:
        rounds = []
        click.echo(
            f"The draft guesses {k} characters a round, the teacher checks them in one call; code: {source.says}."
        )
        click.echo(f"{_blas_line()}\n")
        click.echo(f"{'round':>5}  {'guessed':<{k + 2}}  kept  {'teacher wrote':<16}  so far")
        for r in demos.speculative_rounds(teacher, draft, ids, tokens, k, source):
            rounds.append(r)
            fix = decode(r.emitted[-1:])
            why = f" (not {decode(r.drafted[r.accepted : r.accepted + 1])!r})" if r.accepted < len(r.drafted) else ""
            guessed = f"{decode(r.drafted)!r:<{k + 2}}"
            if _live_terminal():  # kept guesses green, the first refused red, the ones after it grey
                kept, refused = decode(r.drafted[: r.accepted]), decode(r.drafted[r.accepted : r.accepted + 1])
                rest, pad = decode(r.drafted[r.accepted + 1 :]), " " * (len(guessed) - len(repr(decode(r.drafted))))
                paint = click.style(kept, fg="green") + click.style(refused, fg="red")
                guessed = f"'{paint}{click.style(rest, fg='bright_black')}'{pad}"
            so_far = sum(len(x.emitted) for x in rounds)
            counts = f"{so_far} chars in {len(rounds)} teacher calls, {so_far / len(rounds):.2f} a call"
            wrote = f"{fix!r}{why}"
            click.echo(f"{len(rounds):>5}  {guessed}  {r.accepted:>4}  {wrote:<16}  {counts}", color=_colour())
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # the learner's code
        raise click.ClickException(f"{source.says} raised {type(exc).__name__}: {exc}") from None
    written = [t for r in rounds for t in r.emitted][:tokens]
    kept = "".join(
        click.style(decode(r.emitted[:-1]), fg="green") + click.style(decode(r.emitted[-1:]), fg="yellow")
        for r in rounds
    )
    click.echo(f"\n{prompt}{kept}", color=_colour())
    own = generate(CachedLM(teacher), ids, tokens)
    click.echo(
        f"\n{len(rounds)} teacher calls for {len(written)} characters: {len(written) / len(rounds):.2f} per call "
        f"(plain decoding: 1); {sum(r.accepted for r in rounds)} of {sum(len(r.drafted) for r in rounds)} guesses kept"
    )
    same = "yes" if written == own else "NO: the rounds changed what the teacher writes"
    click.echo(f"the same text as the teacher's own greedy decoding: {same}")


@play.command("quantize")
@click.option(
    "--weight", "name", default="layers.0.wq", show_default=True, help="Which of the teacher's weight matrices."
)
@click.option(
    "--index",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    help="Which weight of it, counted along its input axis (where its groups of 32 run).",
)
@click.option("--prompt", default="Return the ", show_default=True, help="What the quantized teacher continues.")
@_PLAY_TARGET
def play_quantize(name, index, prompt, target):
    """Step one of the teacher's weights down from 8 bits to 2 and watch it
    snap to the nearest allowed level: the error, the teacher's bytes, and
    what the quantized teacher writes, per group of 32 and per tensor."""
    from grader.learn import play as demos
    from reference.tokenizer import encode

    model = _shipped_teacher()
    source = _play_source("quantization", ("quantize_symmetric", "quantize_grouped", "quantize_model"), target)
    try:
        rows = demos.snaps(model, name, index, (8, 6, 4, 3, 2), encode(prompt), 24, source)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # the learner's code
        raise click.ClickException(f"{source.says} raised {type(exc).__name__}: {exc}") from None
    first = rows[0]
    span = float(first.levels[-1])
    click.echo(
        f"Weight {index} of {name} is {first.value:+.5f}; its group of 32 spans +-{span:.5f}; code: {source.says}.\n"
    )
    width = 57
    col = lambda v: int(round((v + span) / (2 * span) * (width - 1))) if span > 0 else width // 2  # noqa: E731
    for r in rows:
        line = ["-"] * width
        for level in r.levels:
            line[col(level)] = "|"
        line[col(r.snapped)] = "O"
        mark = [" "] * width
        mark[col(r.value)] = "v"
        click.echo(f"{'':>8}{''.join(mark)}")
        click.echo(f"{r.bits:>2} bits {''.join(line)}  {len(r.levels)} levels")
    click.echo(f"\n{'bits':>4}  {'grouped':>9}  {'error':>9}  {'per tensor':>10}  {'error':>9}  {'teacher bytes':>13}")
    for r in rows:
        click.echo(
            f"{r.bits:>4}  {r.snapped:>+9.5f}  {r.snapped - r.value:>+9.5f}  {r.per_tensor:>+10.5f}  "
            f"{r.per_tensor - r.value:>+9.5f}  {r.model_bytes:>13,}"
        )
    width = len(prompt) + len(rows[0].text) + 2
    click.echo(f"\nwhat the quantized teacher writes\n{'bits':>4}  {'grouped':<{width}}  per tensor")
    for r in rows:
        click.echo(f"{r.bits:>4}  {prompt + r.text!r:<{width}}  {prompt + r.text_per_tensor!r}")
    _play_spent(model, encode(prompt), target)


def _play_spent(model, prompt_ids: list[int], target: str) -> None:
    """`kata play quantize`'s last rows: the bytes of uniform 4- and 3-bit weights spent by a mixed plan
    and by activation-aware scales, once the sensitive and salient tasks pass."""
    from grader.learn import play as demos
    from reference.tokenizer import decode, encode

    source = _play_source("quantization", demos.ART_FUNCTIONS, target)
    if source.module is None:
        why = source.says.split("since ", 1)[-1]
        click.echo(f"\n(no mixed-precision or activation-aware rows: they run only your code, and {why})")
        return
    calib = encode(demos.training_text(256))
    held_out = encode(demos.held_out_text(256))
    try:
        rows = demos.spent(model, (4, 3), calib, held_out, prompt_ids, 24, source)
    except Exception as exc:  # the learner's code
        raise click.ClickException(f"{source.says} raised {type(exc).__name__}: {exc}") from None
    click.echo(
        f"\nthe bytes of uniform weights spent where they matter, code: {source.says}\n"
        "mean KL from the float teacher on held-out text (mixed: a plan from each matrix's sensitivity; "
        "AWQ: activation-aware scales)"
    )
    click.echo(f"{'bits':>4}  {'uniform':>8}  {'mixed':>8}  {'AWQ':>8}")
    for r in rows:
        click.echo(f"{r.bits:>4}  {r.kl['uniform']:>8.4f}  {r.kl['mixed']:>8.4f}  {r.kl['awq']:>8.4f}")
    prompt = decode(prompt_ids)
    width = len(prompt) + len(rows[0].text["mixed"]) + 2
    click.echo(f"\n{'bits':>4}  {'mixed':<{width}}  AWQ")
    for r in rows:
        click.echo(f"{r.bits:>4}  {prompt + r.text['mixed']!r:<{width}}  {prompt + r.text['awq']!r}")
    for r in rows:
        shown = ", ".join(f"{name} {b} bits ({kl:.4f})" for name, b, kl in r.protected[:6])
        more = f" and {len(r.protected) - 6} more" if len(r.protected) > 6 else ""
        click.echo(f"the {r.bits}-bit plan protects (sensitivity at {r.bits} bits, nats): {shown}{more}")


@play.command("distill")
@click.argument("text", default="Return the number of items in the queue.")
@click.option(
    "--at", "at", default="7,11,14", show_default=True, help="Positions of TEXT to show (the characters after them)."
)
@_PLAY_TARGET
def play_distill(text, at, target):
    """What the teacher thinks comes next in TEXT, beside its distilled draft
    and two bigram students your distill_bigram trains on the teacher's soft
    targets and on hard labels alone; how far each student is (KL)."""
    from grader.learn import play as demos
    from reference.model import Model
    from reference.tokenizer import decode, encode

    teacher, draft = _shipped_teacher(), Model.pretrained("draft")
    source = _play_source("distillation", ("distill_bigram",), target)
    try:
        where = [int(i) for i in at.split(",")]
        ids = encode(text)
        train = encode(demos.training_text(teacher.config.max_seq_len))
        positions, mean_kl = demos.distill_positions(teacher, draft, train, ids, where, source)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # the learner's code
        raise click.ClickException(f"{source.says} raised {type(exc).__name__}: {exc}") from None
    click.echo(f"What comes next, by the teacher and its students; bigram students by: {source.says}.")
    for pos in positions:
        click.echo(f"\n...{pos.context[-24:]!r} -> next came {pos.next_char!r}")
        for name, probs in pos.probs.items():
            cells = "  ".join(
                f"{decode([t])!r} {probs[t]:>4.0%} {'#' * int(round(probs[t] * 20)):<20}" for t in pos.top
            )
            kl = f"  KL {pos.kl[name]:.2f}" if name in pos.kl else ""
            click.echo(f"  {name:<13} {cells}{kl}")
    means = ", ".join(f"{name} {kl:.2f}" for name, kl in mean_kl.items())
    click.echo(f"\nmean KL(teacher || student) over the text, in nats: {means}")
    if source.module is None:
        click.echo("(the bigram students join once your distillation task distill passes)")


@play.command("stack")
@_drafting(48)
@click.option(
    "--rounds",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rounds behind each row's speed, taking turns with the row before; the median is shown.",
)
def play_stack(prompt, tokens, k, target, rounds):
    """The deployed model the katas end on: the MoE teacher, its weights in
    8 bits, served with a KV cache and speculative decoding from the distilled
    draft. One bargain at a time, each measured in this run."""
    from grader.learn import play as demos
    from reference.model import Model
    from reference.tokenizer import decode

    teacher, draft = _shipped_teacher(), Model.pretrained("draft")
    sources = {
        "kv_cache": _play_source("kv_cache", ("KVCache", "forward_cached"), target),
        "quantization": _play_source("quantization", ("quantize_grouped", "quantize_model"), target),
        "speculative": _play_source("speculative", ("greedy_accept",), target),
    }
    ids = _prompt_ids(prompt, tokens, teacher)
    for kata, source in sources.items():
        click.echo(f"{kata}: {source.says}")
    click.echo(f"\n{tokens} characters after {prompt!r}, greedy; {_blas_line()}")
    click.echo(f"each row: the median of at least {rounds} rounds, taking turns with the row before\n")
    click.echo(f"{'':<32}{'chars/s':>8}{'x before':>9}{'weights':>12}{'cache':>10}{'MACs/char':>12}  text as float32")
    rows = []
    try:
        for row in demos.stack(teacher, draft, ids, tokens, k, sources, rounds=rounds):
            rows.append(row)
            _stack_row(rows)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # the learner's code
        raise click.ClickException(f"the kata code raised {type(exc).__name__}: {exc}") from None
    kept = "yes" if rows[-1].tokens == rows[-2].tokens else "NO"
    click.echo(f"\nspeculative decoding wrote exactly what the int8 teacher writes on its own: {kept}")
    click.echo(f"{prompt}{decode(rows[-1].tokens)}")
    click.echo("\n(weights: bytes the model holds, 8.5 bits per linear weight once quantized, an fp16 scale per 32)")


def _stack_row(rows) -> None:
    """Print the newest row of `kata play stack`, and why, when it is slower than the row before."""
    row, before = rows[-1], rows[-2] if len(rows) > 1 else None
    same = "same" if row.tokens == rows[0].tokens else "differs"
    speedup = "" if row.speedup is None else f"{row.speedup:.2f}x"
    click.echo(
        f"{row.name:<32}{len(row.tokens) / row.seconds:>8.0f}{speedup:>9}{row.weight_bytes:>12,}"
        f"{row.cache_bytes:>10,}{row.macs_per_token:>12,.0f}  {same}"
    )
    if row.name.startswith("+ int8"):
        from grader.learn.play import BANDWIDTH

        projected = [BANDWIDTH / r.bytes_per_token for r in (before, row)]
        _note(
            "here the int8 weights are kept dequantized in float32: they buy size, not speed. Projection from "
            f"the byte counts: a device bound by a {BANDWIDTH / 1e9:.0f} GB/s memory bus reads "
            f"{row.bytes_per_token:,.0f} bytes a character instead of {before.bytes_per_token:,.0f}, "
            f"about {projected[1]:,.0f} chars/s instead of {projected[0]:,.0f} (a projection, not a measurement)"
        )
    elif row.speedup is not None and row.speedup < 1:
        why = _SLOWER.get(row.name.split(" (")[0], "the trick's own bookkeeping costs more than it saves here")
        _note(f"slower than the row before: {why}")


def _note(text: str) -> None:
    """An indented note under a table row, wrapped to the terminal's width."""
    import shutil
    import textwrap

    width = max(40, min(100, shutil.get_terminal_size().columns))
    click.echo(textwrap.fill(text, width=width, initial_indent="    ", subsequent_indent="    "))


_SLOWER = {
    "+ KV cache": "this text is short, so re-reading it is cheap; try more characters (-n 200)",
    "+ speculative": "each round pays k draft calls and a verify call that scores k + 1 characters at once, "
    "and on this MoE teacher those characters wake more experts than one does; kata bench speculative "
    "prints what each costs",
}


def _blas_line() -> str:
    """The BLAS kernel the timings ran on, and a word when a host forces an older one."""
    from grader.grading import blas

    return blas.header("unset both to time on this CPU's own kernel")


_EXPERT_COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red", "white", "bright_black")


@play.command("moe")
@click.argument("prompt", default="Return the number of items in the queue.")
@click.option("--layer", default=0, show_default=True, type=click.IntRange(min=0), help="Whose router: layer 0, 1, ...")
@_PLAY_TARGET
def play_moe(prompt, layer, target):
    """Colour each character of PROMPT by the experts one layer's router
    sends it to, and set each expert's load against an even split."""
    from grader.learn import play as demos
    from reference.tokenizer import encode

    model = _shipped_teacher()
    source = _play_source("moe", ("router_probs", "top_k_gating"), target)
    try:
        ids = encode(prompt)
        if not 1 <= len(ids) <= model.config.max_seq_len:
            raise ValueError(f"the prompt needs 1 to {model.config.max_seq_len} characters")
        routed = demos.routing(model, ids, layer, source)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # the learner's code
        raise click.ClickException(f"{source.says} raised {type(exc).__name__}: {exc}") from None
    c = model.config
    click.echo(f"Layer {layer} routes each character to {c.top_k} of {c.n_experts} experts; code: {source.says}.\n")
    shown = "".join(ch if ch.isprintable() else " " for ch in prompt)
    painted = "".join(
        click.style(ch, fg=_EXPERT_COLOURS[e % len(_EXPERT_COLOURS)]) for ch, e in zip(shown, routed.experts[:, 0])
    )
    click.echo(f"{'text':<8}{painted}", color=_colour())
    for rank in range(c.top_k):
        label = ("first", "second", "third", "fourth")[rank] if rank < 4 else f"#{rank + 1}"
        click.echo(f"{label:<8}{''.join(str(e) if e < 10 else '+' for e in routed.experts[:, rank])}")
    click.echo(f"\nload per expert (an even split is {routed.even:g} each):")
    for e, n in enumerate(routed.load):
        bar = click.style("#" * int(n), fg=_EXPERT_COLOURS[e % len(_EXPERT_COLOURS)])
        click.echo(f"  expert {e}: {int(n):>3} ({n / routed.even:.2f}x)  {bar}", color=_colour())


@play.command("write")
@click.argument("prompt", default="def ")
@click.option(
    "--model",
    "model_name",
    type=click.Choice(["teacher", "draft"]),
    default="teacher",
    show_default=True,
    help="Which shipped model writes.",
)
@click.option(
    "--tokens", "-n", default=120, show_default=True, type=click.IntRange(min=0), help="How many characters to write."
)
@click.option(
    "--temperature",
    "-t",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="0 writes greedily; higher is more adventurous.",
)
@click.option("--seed", default=0, show_default=True, help="Seed for sampling at temperature > 0.")
@click.option(
    "--no-cache",
    is_flag=True,
    help="Generate the naive way, re-reading the whole text for every character, to feel the difference.",
)
def play_write(prompt, model_name, tokens, temperature, seed, no_cache):
    """Let a shipped model continue PROMPT, and say how fast it wrote (`kata play PROMPT` does this too)."""
    import numpy as np

    from reference.lm import CachedLM
    from reference.lm import generate as generate_cached
    from reference.model import Model
    from reference.sampling import generate_naive
    from reference.tokenizer import decode, encode

    try:
        model = Model.pretrained(model_name)
        ids = encode(prompt)
        room = model.config.max_seq_len - len(ids)
        if tokens > room:
            raise ValueError(
                f"the prompt leaves room for {room} new characters (max_seq_len "
                f"{model.config.max_seq_len}); ask for at most that many with -n"
            )
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        if no_cache:
            new = generate_naive(model, ids, tokens, temperature=temperature, rng=rng)
        else:
            new = generate_cached(CachedLM(model), ids, tokens, temperature=temperature, rng=rng)
        seconds = time.perf_counter() - t0
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(prompt + decode(new))
    how = "without a KV cache" if no_cache else "with a KV cache"
    click.echo(
        f"\n[{len(new)} characters in {seconds:.2f} s {how}: {len(new) / max(seconds, 1e-9):.0f} chars/s]", err=True
    )


@main.command("bench", context_settings={"ignore_unknown_options": True})
@click.argument("kata", shell_complete=_complete_kata)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench_cmd(kata, args):
    """Run KATA's benchmark script (benchmarks/bench_KATA.py) on your code and print its table.

    ARGS go to the script: --target reference (or a folder of kata modules)
    runs other code than yours; --help lists the rest. One BLAS thread.
    """
    k = _kata(kata)
    script = _target.ROOT / "benchmarks" / f"bench_{k.name}.py"
    if not script.is_file():
        raise click.ClickException(f"no benchmark script at {script}")
    if not any(a == "--target" or a.startswith("--target=") for a in args):
        args = ("--target", "katas", *args)  # your code, unless you say otherwise
    sys.exit(subprocess.call([sys.executable, str(script), *args]))  # from here: a relative --target is yours


@main.command("watch")
@click.argument("kata", required=False, shell_complete=_complete_kata)
@_seed_option()
@_TEST_TIMEOUT
def watch_cmd(kata, seed, test_timeout):
    """Re-grade KATA every time you save its file, on one compact screen.

    Without KATA it starts on the first kata that does not pass yet and
    re-grades whichever kata's file you save in katas/ (or $KATA_WORKDIR).
    The screen shows each task, what changed since the last run, and the
    first failing check with its example and a hint. Ctrl-C stops watching.
    """
    from grader.learn import watch as _watch

    _watch.watch(kata, seed=seed, limits=Limits(test_seconds=test_timeout))


@main.command("new")
@click.argument("name")
@click.option("--title", default=None, help="The kata's title (default: NAME in words).")
@click.option("--trade", required=True, help='What the technique trades, e.g. "memory for time".')
def new_cmd(name, title, trade):
    """Scaffold a new kata NAME in every place it lives: reference solution,
    its stub, grading suite, registry entry, CHECKLIST section, README row
    and benchmark script, all around two placeholder functions to replace.

    Refuses a name that is not a lowercase Python identifier, is a keyword, a
    kata or a module already, and writes nothing if any of its files exists.
    CONTRIBUTING.md says what to fill in next.
    """
    from grader.dev import scaffold

    try:
        written = scaffold.new_kata(
            name, title=title or name.replace("_", " ").capitalize(), trade=trade, root=_target.ROOT
        )
    except scaffold.ScaffoldError as exc:
        raise click.ClickException(str(exc)) from None
    for path in written:
        click.echo(f"wrote {path.relative_to(_target.ROOT)}")
    click.echo(
        f"next: `kata grade {name} --target reference` passes and `kata grade {name}` is todo; replace the "
        f"placeholders `{scaffold.CHECK}` and `{scaffold.FUNCTION}` with the kata's own (see CONTRIBUTING.md)"
    )


# ------------------------------------------------------------------ instructors


@main.command("release")
@click.argument("out", type=click.Path(file_okay=False))
def release_cmd(out):
    """Write the student edition of the katas into the new folder OUT.

    Stubs, suites, the reference model with its weights and corpus, the
    grader, the benchmarks, README, CHECKLIST and packaging; no reference
    solutions, no project tests (alternative implementations, mutants), and
    no task the registry marks release = false. Students install it with
    pip install -e OUT (or push it as the template of a GitHub Classroom
    assignment; see kata classroom).
    """
    from grader.instructor import release

    try:
        written = release.write_edition(Path(out))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    held = {k: sorted(t) for k, t in release.held_back_tasks(load_registry()).items() if t}
    click.echo(f"wrote the student edition to {Path(out).resolve()} ({len(written)} files, no reference solutions)")
    if held:
        click.echo("held back (graded by you only): " + "; ".join(f"{k}: {', '.join(t)}" for k, t in held.items()))
    click.echo(
        f"try it: python -m venv /tmp/edition-venv && /tmp/edition-venv/bin/pip install -e {out} "
        f"&& (cd {out} && /tmp/edition-venv/bin/kata grade)"
    )


@main.command("grade-all")
@click.argument("submissions", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out",
    default="gradebook",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for gradebook.csv and students/STUDENT.json.",
)
@click.option(
    "--kata",
    "only",
    multiple=True,
    metavar="KATA[:TASK]",
    help="Grade only this kata or task (repeat for more); every kata by default.",
)
@_jobs_option(os.cpu_count() or 1, "all cores", "Katas graded at once, across students.")
@_seed_option("The seed every student is graded with.")
@click.option(
    "--seed-per-student",
    "secret",
    metavar="SECRET",
    help="Give each student a seed of their own, derived from SECRET and their name (reproducible).",
)
@click.option(
    "--roster",
    type=click.Path(exists=True, dir_okay=False),
    help="A CSV class list with a 'student' column (the submissions' names) and others, such as an LMS id or an "
    "email, that the gradebook carries; a listed student without a submission gets a row too.",
)
@_limit_options
def grade_all_cmd(submissions, out, only, jobs, seed, secret, roster, test_timeout, kata_timeout, memory_mb):
    """Grade a class: one folder or .zip per student in SUBMISSIONS.

    The kata modules may sit at any depth of a submission (a repository's
    katas/ folder, or the files at the top). Writes OUT/gradebook.csv (a row
    per student: total, then the points of each kata and task) and
    OUT/students/STUDENT.json, then prints per task how many students passed
    and the most common failures. A broken submission is a row with a note,
    never an abort. Ctrl-C writes what was graded so far and exits 130.
    """
    from grader.instructor import gradebook
    from grader.instructor.submissions import SubmissionError

    if secret is not None and not secret:
        raise click.BadParameter("give a non-empty secret", param_hint="--seed-per-student")
    try:
        class_list = gradebook.read_roster(Path(roster)) if roster else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--roster") from None
    katas, tasks = _pick_tasks(only)
    limits = Limits(test_seconds=test_timeout, kata_seconds=kata_timeout, memory_mb=memory_mb)
    try:
        n = len(gradebook.list_students(Path(submissions)))
    except SubmissionError as exc:
        raise click.ClickException(str(exc)) from None
    if n == 0:
        raise click.ClickException(f"{submissions} holds no submissions (one folder or .zip per student)")
    click.echo(f"grading {n} students x {len(katas)} katas, {jobs} at a time", err=True)
    with click.progressbar(
        length=n * len(katas), label="grading", file=sys.stderr, item_show_func=lambda item: item
    ) as bar:
        result = gradebook.grade_class(
            Path(submissions),
            katas,
            tasks=tasks,
            jobs=jobs,
            seed=seed,
            secret=secret,
            limits=limits,
            progress=lambda s, k: bar.update(1, f"{s.name}/{k.name}"),
        )
    # Every judge and jail has ended by now.
    written = gradebook.write(result, Path(out), class_list)
    click.echo(gradebook.summary(result))
    click.echo(f"\nwrote {written[0]} and {len(written) - 1} student files in {Path(out) / 'students'}")
    if result.interrupted:
        click.echo("interrupted (Ctrl-C): the gradebook holds what was graded so far", err=True)
        sys.exit(130)


@main.command("classroom")
@click.argument("dest", default=".", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Overwrite the files if they exist.")
def classroom_cmd(dest, force):
    """Write GitHub Classroom's autograding files into DEST (default: here).

    DEST is the student repository's template, such as a student edition
    from kata release. Writes .github/workflows/classroom.yml (one test per
    released task, `kata grade KATA:TASK`, worth the task's points) and
    .github/classroom/autograding.json (the same tests in the older format).
    """
    from grader.instructor import classroom

    katas = load_registry()
    try:
        written = classroom.write(Path(dest), katas, force=force)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    n = len(classroom.tests(katas))
    points = sum(t["points"] for t in classroom.tests(katas))
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"{n} tests worth {points} points; commit them to the assignment's template repository")


# ------------------------------------------------------------------ interview


def _clock() -> interview.Clock:
    """The clock the interview commands read: the system's, unless the caller passed one as the context object."""
    return click.get_current_context().find_object(interview.Clock) or interview.Clock()


def _grade_interview(workspace: Path, katas: tuple[str, ...], verbose: bool, limits: Limits) -> int:
    """kata grade inside an interview workspace: grade, log, show the time left. Returns the exit code."""
    ctx = click.get_current_context()
    explicit = [
        f"--{name.replace('_', '-')}"
        for name in ("seed", "jobs")
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    ]
    explicit += [opt for opt, name in (("--json", "as_json"), ("--gradescope", "gradescope_path")) if ctx.params[name]]
    if explicit:
        raise click.UsageError(
            f"{workspace} is an interview workspace: kata grade grades it with the interview's "
            f"own seed and prints its table; leave out {', '.join(explicit)}"
        )
    try:
        session = interview.load(workspace)
        if katas and set(katas) != {session.state.kata}:
            raise click.UsageError(
                f"{workspace} is an interview on {session.state.kata}: kata grade grades only {session.state.kata} here"
            )
        graded = interview.grade(workspace, _clock(), limits)
    except interview.InterviewError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted (Ctrl-C): this attempt was not graded or logged", err=True)
        return 130
    _echo_interview_grade(graded, verbose)
    return 0 if graded.result.passed else 1


def _echo_interview_grade(graded: interview.Graded, verbose: bool) -> None:
    s = graded.session.state
    header = f"interview: {s.kata} / {', '.join(s.tasks)} (graded with the interview's own seed)"
    click.echo(report.table(graded.result, header=header))
    text = report.details(graded.result) if verbose else report.failing_summary(graded.result)
    if text:
        click.echo("\n" + text)
    allowed = interview.duration(s.minutes * 60)
    if graded.report is None:
        click.echo(
            f"\ntime left: {interview.duration(graded.seconds_left)} of {allowed} "
            f"(attempt {len(graded.session.attempts)} is in the log)"
        )
        return
    if graded.entry.reason is interview.EndReason.TIME_UP:
        click.echo(
            f"\ntime is up ({allowed} allowed, this grade came at {interview.duration(graded.entry.elapsed)}): "
            "this was the final grade."
        )
    else:
        click.echo(f"\nthe interview is over after {interview.duration(graded.entry.elapsed)} of {allowed}.")
    click.echo(
        f"{graded.session.module.name} is frozen (a copy is in {graded.session.final_copy}); "
        f"the report is {graded.report}"
    )
    if s.practice:
        _echo_questions(graded.session, answers=False)


def _echo_questions(session: interview.Session, answers: bool) -> None:
    try:
        _, questions = interview.follow_up_questions(session.directory)
    except interview.InterviewError as exc:
        raise click.ClickException(str(exc)) from None
    if not answers:
        click.echo("\nfollow-up questions (think them through, then kata interview --answers shows answer sketches):")
    for task in session.state.tasks:
        mine = [q for t, q in questions if t == task]
        if mine:
            click.echo(f"\n{session.state.kata} / {task}")
        for n, q in enumerate(mine, 1):
            click.echo(f"  {n}. {q.ask}")
            if answers:
                click.echo(f"     answer sketch: {q.answer}\n")


def _interview_workspace(directory: str | None) -> Path:
    if directory:
        return Path(directory)
    found = interview.find_workspace()
    if found is None:
        raise click.UsageError(
            "no interview here: run this inside an interview workspace, set KATA_WORKDIR to one, or name it with --dir"
        )
    return found


@main.command("interview")
@click.argument("kata", required=False, shell_complete=_complete_kata)
@click.argument("tasks", nargs=-1, shell_complete=_complete_task)
@click.option(
    "--minutes",
    type=click.IntRange(1, interview.MAX_MINUTES),
    help=f"Time allowed, in minutes (default {interview.DEFAULT_MINUTES}, or the preset's).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    help="The workspace: a new or empty folder to create (default ./interview-NAME); with --finish "
    "or --answers, the interview's folder (default: this one, or $KATA_WORKDIR).",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    help="The grading seed (default: drawn at random). It is kept in the workspace, never printed to the "
    "candidate, and shown in the report.",
)
@click.option(
    "--practice",
    is_flag=True,
    help="Practise alone: the report is your debrief, the follow-up questions show at the end and "
    "--answers shows their answer sketches.",
)
@click.option("--candidate", metavar="NAME", help="The candidate's name, for the report.")
@click.option("--preset", "preset_name", metavar="NAME", help="Start a ready-made interview (see --list).")
@click.option("--list", "list_presets", is_flag=True, help="List the ready-made interviews and exit.")
@click.option(
    "--finish",
    is_flag=True,
    help="End the interview now: grade the final code once more, freeze it and write the report.",
)
@click.option(
    "--answers", is_flag=True, help="After the end: print the follow-up questions with their answer sketches."
)
def interview_cmd(
    kata, tasks, minutes, directory, seed, practice, candidate, preset_name, list_presets, finish, answers
):
    """Start a timed interview on KATA (its TASKS, or the whole kata) in a fresh workspace.

    The workspace holds only the kata's module, with the functions of the
    chosen tasks left to write and the rest of the kata written, its
    CHECKLIST section and the interview's state. Inside it, `kata grade`
    grades only those tasks with a seed the candidate does not see, logs
    every attempt (time, score, first failing check, digest of the code) and
    shows the time left. `kata interview --finish`, or the first grade after
    time is up, grades the code once more, freezes it and writes
    .interview/interview-report.md (and .json) for the interviewer.
    """
    modes = [
        name
        for name, on in (
            ("KATA", kata),
            ("--preset", preset_name),
            ("--list", list_presets),
            ("--finish", finish),
            ("--answers", answers),
        )
        if on
    ]
    if len(modes) != 1:
        what = f"got {' and '.join(modes)}" if modes else "got none of them"
        raise click.UsageError("give one of: KATA [TASK...], --preset NAME, --list, --finish or --answers; " + what)
    if not (kata or preset_name):
        stray = [
            opt
            for opt, on in (
                ("--minutes", minutes),
                ("--seed", seed is not None),
                ("--practice", practice),
                ("--candidate", candidate is not None),
            )
            if on
        ] + (["--dir"] if directory and list_presets else [])
        if stray:
            verb = "applies" if len(stray) == 1 else "apply"
            raise click.UsageError(f"{', '.join(stray)} {verb} only when starting an interview")
    if list_presets:
        _list_presets()
    elif finish:
        _finish_interview(_interview_workspace(directory))
    elif answers:
        workspace = _interview_workspace(directory)
        try:
            _echo_questions(interview.load(workspace), answers=True)
        except interview.InterviewError as exc:
            raise click.ClickException(str(exc)) from None
    else:
        _start_interview(kata, tasks, minutes, directory, seed, practice, preset_name, candidate)


def _list_presets() -> None:
    from tabulate import tabulate

    rows = [[p.name, p.title, p.kata, " ".join(p.tasks) or "(all)", p.minutes, p.difficulty] for p in load_presets()]
    click.echo(
        tabulate(rows, headers=["preset", "interview", "kata", "tasks", "minutes", "difficulty"], tablefmt="simple")
    )
    click.echo("\nstart one with: kata interview --preset NAME [--dir DIR] [--practice]")


def _start_interview(kata, tasks, minutes, directory, seed, practice, preset_name, candidate) -> None:
    try:
        if preset_name:
            if tasks:
                raise click.UsageError("--preset names its own kata and tasks; leave out KATA and TASK")
            plan = interview.plan_preset(preset_name, minutes)
        else:
            plan = interview.plan(kata, tuple(tasks), interview.DEFAULT_MINUTES if minutes is None else minutes)
        name = plan.preset or "-".join([plan.kata.name] + ([] if plan.whole_kata else [t.name for t in plan.tasks]))
        session = interview.start(
            plan,
            Path(directory or f"interview-{name}"),
            seed=seed,
            practice=practice,
            clock=_clock(),
            candidate=candidate,
        )
    except ValueError as exc:  # InterviewError, or an unknown kata or task
        raise click.UsageError(str(exc)) from None
    s, ws = session.state, session.directory
    points = sum(t.points for t in plan.tasks)
    click.echo(f"interview workspace: {ws}")
    click.echo(
        f"  {s.title}{' (practice)' if s.practice else ''}" + (f", candidate {s.candidate}" if s.candidate else "")
    )
    click.echo(
        f"  write: {', '.join(s.functions)} in {s.kata}.py"
        + ("" if plan.whole_kata else " (the rest of the kata is written)")
    )
    click.echo(
        f"  graded: {s.kata} / {', '.join(s.tasks)}, {points} point{'s' if points != 1 else ''}; "
        "CHECKLIST.md says what done means"
    )
    click.echo(f"  time: {interview.minutes_text(s.minutes)}, until {s.deadline.astimezone().strftime('%H:%M')}")
    click.echo(
        f"\ngrade with `kata grade` inside {ws} (or with KATA_WORKDIR={ws}): every grade is logged and shows "
        "the time left."
    )
    click.echo(
        f"end with `kata interview --finish --dir {ws}`; otherwise the first grade after time is up is the final one."
    )


def _finish_interview(workspace: Path) -> None:
    try:
        graded = interview.finish(workspace, _clock())
    except interview.InterviewError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted (Ctrl-C): the interview is not finished; run kata interview --finish again", err=True)
        sys.exit(130)
    _echo_interview_grade(graded, verbose=False)
    sys.exit(0 if graded.result.passed else 1)


# ------------------------------------------------------------------ gradescope


@main.group("gradescope")
def gradescope_group():
    """Grade on Gradescope: build the autograder zip, and run it (what the autograder does per submission)."""


@gradescope_group.command("build")
@click.argument("out", type=click.Path(dir_okay=False))
@_seed_option("The grading seed; with --seed-from-metadata, the salt of every student's own seed.")
@click.option(
    "--seed-from-metadata",
    is_flag=True,
    help="Give every student a seed of their own, the same on each resubmission, derived from "
    "Gradescope's submission_metadata.json (their email or id).",
)
def gradescope_build_cmd(out, seed, seed_from_metadata):
    """Write OUT (.zip): the autograder to upload to a Gradescope programming assignment.

    It holds setup.sh (installs Python, bubblewrap and this package), run_autograder
    and the grading edition of this project: every task, never the reference solutions.
    """
    from grader.instructor import gradescope_kit as gradescope

    try:
        gradescope.build(Path(out), seed=seed, seed_from_metadata=seed_from_metadata)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"wrote {out}: upload it in the assignment's Configure Autograder page (Ubuntu base image, Python >= 3.10)"
    )


@gradescope_group.command("run")
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    default=lambda: os.environ.get("KATA_AUTOGRADER_ROOT") or "/autograder",
    show_default="$KATA_AUTOGRADER_ROOT or /autograder",
    help="The autograder's folder: submission/ and submission_metadata.json in, results/results.json out.",
)
def gradescope_run_cmd(root):
    """Grade ROOT/submission and write ROOT/results/results.json, even when grading fails (run_autograder runs this)."""
    from grader.instructor import gradescope_kit as gradescope

    sys.exit(gradescope.run(Path(root)))


if __name__ == "__main__":
    main()
