"""The contributor's commands: scaffold a new kata, run a kata's suite under plain pytest."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from grader.cli.options import check_target, complete_kata
from grader.kata import target as _target
from grader.kata.lookup import kata_named


@click.command("new")
@click.argument("name")
@click.option("--title", default=None, help="The kata's title (default: NAME in words).")
@click.option("--trade", required=True, help='What the technique trades, e.g. "memory for time".')
def new_cmd(name, title, trade):
    """Scaffold a new kata NAME: its reference solution, its stub, and its
    folder grader/suites/NAME/ (grading suite, kata.toml, checklist section,
    benchmark script), with a preset, its CHECKLIST.md section and a README
    row, all around two placeholder functions to replace.

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


@click.command("test", context_settings={"ignore_unknown_options": True})
@click.argument("kata", shell_complete=complete_kata)
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
    k = kata_named(kata)
    check_target(target)
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
        "--confcutdir",  # as the judge runs it: no conftest.py above the suite's folder, no walk down from /
        os.path.dirname(os.path.abspath(k.suite)),
        "-p",
        "no:cacheprovider",
        *pytest_args,
    ]
    sys.exit(subprocess.call(cmd, cwd=str(_target.ROOT)))
