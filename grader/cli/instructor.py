"""The instructor's commands: release a student edition, grade a class, and the Gradescope and GitHub Classroom kits."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from grader.cli.options import check_output, jobs_option, limit_options, pick_tasks, seed_option
from grader.kata.registry import load_registry
from grader.run.results import Limits


@click.command("release")
@click.argument("out", type=click.Path())
def release_cmd(out):
    """Write the student edition of the katas into the new folder OUT.

    Stubs, suites, the reference model with its weights and corpus, the
    grader, the benchmarks, README, CHECKLIST and packaging; no reference
    solutions, no project tests (alternative implementations, mutants), and
    no task the registry marks release = false, and only the public checks
    (a check that needs an oracle or a baseline is hidden: grade-all and the
    Gradescope kit run it from your copy). Students install it with
    pip install -e OUT (or push it as the template of a GitHub Classroom
    assignment; see kata classroom).
    """
    from grader.instructor import public_share, release

    check_output(out, "OUT", folder=True)
    try:
        written = release.write_edition(Path(out))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    held = {k: sorted(t) for k, t in release.held_back_tasks(load_registry()).items() if t}
    click.echo(f"wrote the student edition to {Path(out).resolve()} ({len(written)} files, no reference solutions)")
    if held:
        click.echo("held back (graded by you only): " + "; ".join(f"{k}: {', '.join(t)}" for k, t in held.items()))
    katas = load_registry()
    hidden = {
        k: sum(map(len, tasks.values()))
        for k, tasks in release.hidden_by_task(katas, release.held_back_tasks(katas)).items()
    }
    click.echo(
        "hidden checks (left out: they need an oracle or a baseline; graded by your own grading only): "
        + ", ".join(f"{k} {n}" for k, n in hidden.items() if n)
    )
    click.echo("mistakes its public checks catch, of those your full suite catches (the hidden checks the rest):")
    for line in public_share.share_lines([k.name for k in katas]):
        click.echo(f"  {line}")
    click.echo(
        f"try it: python -m venv /tmp/edition-venv && /tmp/edition-venv/bin/pip install -e {out} "
        f"&& (cd {out} && /tmp/edition-venv/bin/kata grade)"
    )


@click.command("grade-all")
@click.argument("submissions", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out",
    default="gradebook",
    show_default=True,
    type=click.Path(),
    help="Folder for gradebook.csv and students/STUDENT.json.",
)
@click.option(
    "--kata",
    "only",
    multiple=True,
    metavar="KATA[:TASK]",
    help="Grade only this kata or task (repeat for more); every kata by default.",
)
@jobs_option(os.cpu_count() or 1, "all cores", "Katas graded at once, across students.")
@seed_option("The seed every student is graded with.")
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
@click.option(
    "--resume",
    is_flag=True,
    help="Keep each kata that OUT's earlier grading already graded with the same code, seed and tasks, and "
    "grade only the rest: an interrupted class goes on, a changed submission is graded again.",
)
@click.option(
    "--unisolated",
    is_flag=True,
    help="Grade even where each student's code can only run unconfined (no root, no bubblewrap: one student's "
    "module could read and overwrite another's); every row of the gradebook then says so.",
)
@limit_options
def grade_all_cmd(
    submissions, out, only, jobs, seed, secret, roster, resume, unisolated, test_timeout, kata_timeout, memory_mb
):
    """Grade a class: one folder or .zip per student in SUBMISSIONS.

    The kata modules may sit at any depth of a submission (a repository's
    katas/ folder, or the files at the top). Writes OUT/gradebook.csv (a row
    per student: total, then the points of each kata and task) and
    OUT/students/STUDENT.json, then prints a line per student and kata (the points,
    the tasks not passing) and one per kata. A broken submission is a row with a note,
    never an abort. Ctrl-C writes what was graded so far and exits 130;
    --resume then grades only what is left (and what changed since).
    Without root or bubblewrap it refuses (exit 2) unless told --unisolated.
    """
    from grader.instructor import gradebook
    from grader.instructor.resume import earlier_grades
    from grader.instructor.submissions import SubmissionError

    if secret is not None and not secret:
        raise click.BadParameter("give a non-empty secret", param_hint="--seed-per-student")
    try:
        class_list = gradebook.read_roster(Path(roster)) if roster else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--roster") from None
    katas, tasks = pick_tasks(only)
    _check_gradebook_folder(Path(out))
    try:
        n = len(gradebook.list_students(Path(submissions)))
    except SubmissionError as exc:
        raise click.ClickException(str(exc)) from None
    if n == 0:
        raise click.ClickException(f"{submissions} holds no submissions (one folder or .zip per student)")
    _refuse_unconfined(unisolated)
    click.echo(f"grading {n} students x {len(katas)} katas, {jobs} at a time", err=True)
    _warn_unless_pinned()
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
            limits=Limits(test_seconds=test_timeout, kata_seconds=kata_timeout, memory_mb=memory_mb),
            progress=lambda s, k: bar.update(1, f"{s.name}/{k.name}"),
            earlier=earlier_grades(Path(out)) if resume else None,
            unisolated=unisolated,
        )
    kept = sum(len(s.resumed) for s in result.students)
    if resume:
        click.echo(f"resumed: kept {kept} earlier grades of unchanged katas from {Path(out) / 'students'}", err=True)
    # Every judge and jail has ended by now.
    written = gradebook.write(result, Path(out), class_list)
    click.echo(gradebook.summary(result))
    click.echo(f"\nwrote {written[0]} and {len(written) - 1} student files in {Path(out) / 'students'}")
    if result.interrupted:
        click.echo("interrupted (Ctrl-C): the gradebook holds what was graded so far", err=True)
        sys.exit(130)


def _check_gradebook_folder(out: Path) -> None:
    """An exit 2 unless OUT, and what grade-all writes in it, can be written (asked before any grading)."""
    check_output(out, "--out", folder=True)
    for inside, folder in ((out / "students", True), (out / "gradebook.csv", False)):
        if os.path.lexists(inside):
            check_output(inside, "--out", folder=folder)


def _refuse_unconfined(unisolated: bool) -> None:
    """A usage error where the students' code could only run unconfined, unless told --unisolated."""
    from grader.instructor import gradebook

    try:
        gradebook.isolation(unisolated)
    except gradebook.Unisolated as exc:
        raise click.UsageError(str(exc)) from None


@click.command("classroom")
@click.argument("dest", default=".", type=click.Path())
@click.option(
    "--grader-url",
    required=True,
    metavar="URL",
    help="https:// address of the grader's wheel, one you control (e.g. built with "
    "`pip wheel --no-deps STUDENT_EDITION`); the workflow installs this, never the student's grader/.",
)
@click.option(
    "--grader-sha256", required=True, metavar="HEX", help="The wheel's sha256 (sha256sum's output); pip checks it."
)
@click.option("--force", is_flag=True, help="Overwrite the files if they exist.")
def classroom_cmd(dest, grader_url, grader_sha256, force):
    """Write GitHub Classroom's autograding files into DEST (default: here).

    DEST is the student repository's template, such as a student edition
    from kata release. Writes .github/classroom/install-grader.sh (installs
    the grader from the wheel at --grader-url, hash-checked, with pinned
    dependencies, and bubblewrap, or stops if the runner cannot isolate),
    .github/workflows/classroom.yml (one test per released task, `kata grade
    KATA:TASK` in the jail, worth the task's points) and
    .github/classroom/autograding.json (the same tests in the older format).
    """
    from grader.instructor import classroom

    katas = load_registry()
    check_output(dest, "DEST", folder=True)
    try:
        classroom.check_grader(grader_url, grader_sha256)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--grader-url / --grader-sha256") from None
    try:
        written = classroom.write(Path(dest), katas, grader_url=grader_url, grader_sha256=grader_sha256, force=force)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    cases = classroom.tests(katas)
    points = sum(t["points"] for t in cases)
    graded = {t["name"] for t in cases}
    left = [f"{k.name}:{t.name}" for k in katas for t in k.tasks if t.release and f"{k.name}:{t.name}" not in graded]
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"{len(cases)} tests worth {points} points; commit them to the assignment's template repository")
    if left:
        click.echo(
            f"no test for {', '.join(left)}: the student edition holds none of their checks (all hidden), "
            "so only your own grading (kata grade-all, Gradescope) grades them"
        )


@click.group("gradescope")
def gradescope_group():
    """Grade on Gradescope: build the autograder zip, and run it (what the autograder does per submission)."""


@gradescope_group.command("build")
@click.argument("out", type=click.Path())
@seed_option("The grading seed; with --seed-from-metadata, the salt of every student's own seed.")
@click.option(
    "--seed-from-metadata",
    is_flag=True,
    help="Give every student a seed of their own, the same on each resubmission, derived from "
    "Gradescope's submission_metadata.json (their email or id).",
)
def gradescope_build_cmd(out, seed, seed_from_metadata):
    """Write OUT (.zip): the autograder to upload to a Gradescope programming assignment.

    It holds setup.sh (installs Python, bubblewrap and the pinned dependencies), run_autograder
    and the grading edition of this project: every task, never the reference solutions.
    """
    from grader.instructor import gradescope_kit as gradescope

    check_output(out, "OUT")
    try:
        gradescope.build(Path(out), seed=seed, seed_from_metadata=seed_from_metadata)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    from grader.instructor import pins

    python = pins.pinned()["python"]
    click.echo(f"wrote {out}: upload it in the assignment's Configure Autograder page (Ubuntu, Python >= {python})")


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

    _warn_unless_pinned()
    sys.exit(gradescope.run(Path(root)))


def _warn_unless_pinned() -> None:
    """One line on stderr when this grader runs on other versions than the kits pin."""
    from grader.instructor import pins
    from grader.output import versions

    warning = pins.drift(versions.installed(), pins.pinned())
    if warning:
        click.echo(warning, err=True)
