"""`kata interview`, and `kata grade` inside an interview's workspace: a timed, logged attempt at a kata."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader.cli.options import check_output, complete_kata, complete_task
from grader.interview import session as interview
from grader.kata.registry import load_presets
from grader.output import report
from grader.run.results import Limits


def workspace_here() -> Path | None:
    """The interview workspace a command run here acts on (the current directory, else $KATA_WORKDIR), or
    None: the one place the CLI looks for one. `kata grade`, `list` and `hint` hand a workspace found here
    to the functions below instead of their learner's work; `kata watch` hands it to the watch, which refuses it."""
    return interview.find_workspace()


def _clock() -> interview.Clock:
    """The clock the interview commands read: the system's, unless the caller passed one as the context object."""
    return click.get_current_context().find_object(interview.Clock) or interview.Clock()


def grade_in_workspace(workspace: Path, katas: tuple[str, ...], verbose: bool, limits: Limits) -> int:
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


def list_in_workspace(workspace: Path) -> None:
    """kata list inside an interview workspace: the interview, its tasks, the time left, the attempts and hints."""
    try:
        click.echo(interview.listing(interview.load(workspace), _clock().now()))
    except interview.InterviewError as exc:
        raise click.ClickException(str(exc)) from None


def hint_in_workspace(workspace: Path, kata: str, task: str | None, show_all: bool) -> None:
    """kata hint inside an interview workspace: the next hint of one of its tasks (or all of them), logged."""
    try:
        shown = interview.hint(workspace, kata, task, _clock(), every=show_all)
    except interview.InterviewError as exc:
        raise click.UsageError(str(exc)) from None
    for h in shown:
        click.echo(f"{kata} / {h.task}, hint {h.number}/{h.of}: {h.text}")
    click.echo("(logged, with the time, for the interview's report)")


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
    found = workspace_here()
    if found is None:
        raise click.UsageError(
            "no interview here: run this inside an interview workspace, set KATA_WORKDIR to one, or name it with --dir"
        )
    return found


@click.command("interview")
@click.argument("kata", required=False, shell_complete=complete_kata)
@click.argument("tasks", nargs=-1, shell_complete=complete_task)
@click.option(
    "--minutes",
    type=click.IntRange(1, interview.MAX_MINUTES),
    help=f"Time allowed, in minutes (default {interview.DEFAULT_MINUTES}, or the preset's).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(),
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
        check_output(directory or f"interview-{name}", "--dir", folder=True)
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
    check_output(workspace / interview.STATE_DIR, "--dir", folder=True)  # the report goes there, after the final grade
    try:
        graded = interview.finish(workspace, _clock())
    except interview.InterviewError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        click.echo("interrupted (Ctrl-C): the interview is not finished; run kata interview --finish again", err=True)
        sys.exit(130)
    _echo_interview_grade(graded, verbose=False)
    sys.exit(0 if graded.result.passed else 1)
