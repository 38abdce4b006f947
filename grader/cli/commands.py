"""`kata`: the command group, its help by role, and the commands of every role added to it.

Each command parses its arguments, calls the library below and prints; the learner's commands are in
grader.cli.learner (and grader.cli.play), the instructor's in grader.cli.instructor and
grader.cli.interview, the contributor's in grader.cli.contributor.
"""

from __future__ import annotations

import click

from grader.cli import contributor, instructor, interview, learner, play
from grader.kata.registry import RegistryError
from grader.kata.target import NoKataFolder


class BrokenRegistry(click.ClickException):
    """The registry (a kata.toml or presets.toml) does not load: exit 2, like a usage error (exit 1 is a grade
    that did not pass)."""

    exit_code = 2


# `kata --help` lists the commands by who runs them, each section in the order a newcomer needs them.
SECTIONS = {
    "Learner commands": ("grade", "watch", "list", "hint", "reset", "init", "play", "bench"),
    "Instructor commands (classes and interviews)": ("release", "grade-all", "gradescope", "classroom", "interview"),
    "Contributor commands": ("new", "test"),
}


class _Kata(click.Group):
    """The command group: `--help` lists the commands in SECTIONS; a broken registry ends
    a command with one line, not a traceback, and so does a missing work folder (a usage
    error, whose line says to run `kata init`)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RegistryError as exc:
            raise BrokenRegistry(f"the kata registry is broken: {exc}") from None
        except NoKataFolder as exc:
            raise click.UsageError(str(exc)) from None

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


def _version() -> str:
    from importlib import metadata  # only for --version: the lookup scans the installed packages

    try:
        return metadata.version("llm-speed-katas")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"kata {_version()}")
        ctx.exit()


@click.group(cls=_Kata, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main():
    """LLM speed katas: learn by doing why a language model types fast and runs cheap.

    Edit the files in katas/ (or in the folder `kata init DIR` made), then run
    `kata grade` there. `kata list` shows where you are; `kata hint KATA`
    nudges you when a task does not pass.
    """


for _command in (
    learner.grade_cmd,
    learner.watch_cmd,
    learner.list_cmd,
    learner.hint_cmd,
    learner.reset_cmd,
    learner.init_cmd,
    play.play,
    learner.bench_cmd,
    instructor.release_cmd,
    instructor.grade_all_cmd,
    instructor.gradescope_group,
    instructor.classroom_cmd,
    interview.interview_cmd,
    contributor.new_cmd,
    contributor.test_cmd,
):
    main.add_command(_command)


if __name__ == "__main__":
    main()
