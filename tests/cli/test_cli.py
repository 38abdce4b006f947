"""The `kata` command itself: `python -m grader`, help by role, shell completion of kata and task names."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.run.results import Limits

from helpers import TOY_KATAS, write_registry

# A module a submission folder might hold to be imported by the grader: it leaves a mark and stops the process.
HOSTILE = "import pathlib, sys\npathlib.Path(__file__).with_suffix('.ran').write_text('imported')\nsys.exit(3)\n"


@pytest.mark.parametrize("module", ["grader", "grader.cli"])
def test_python_m_grader_imports_nothing_from_the_folder_it_starts_in(tmp_path, module):
    for name in ("tabulate", "numpy", "click"):
        (tmp_path / f"{name}.py").write_text(HOSTILE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    result = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert sorted(p.stem for p in tmp_path.glob("*.ran")) == [], "the grader imported the folder's own modules"
    assert result.returncode == 0, result.stderr
    assert f"Usage: python -m {module} " in result.stdout and "Learner commands:" in result.stdout


def sections(help_text: str) -> dict[str, list[str]]:
    """Each 'X commands:' heading of a help text -> the command names listed under it."""
    out: dict[str, list[str]] = {}
    heading = None
    for line in help_text.splitlines():
        if line and not line.startswith(" "):
            heading = line.rstrip(":") if "ommands" in line else None
            if heading:
                out[heading] = []
        elif heading and line.strip():
            out[heading].append(line.split()[0])
    return out


def test_kata_help_lists_every_command_once_under_the_role_that_runs_it():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = sections(result.output)
    assert list(listed) == ["Learner commands", "Instructor commands (classes and interviews)", "Contributor commands"]
    assert sorted(n for names in listed.values() for n in names) == sorted(main.commands)
    assert {"grade", "watch", "hint", "reset", "play"} <= set(listed["Learner commands"])
    assert {"release", "grade-all", "gradescope", "classroom"} <= set(
        listed["Instructor commands (classes and interviews)"]
    )
    assert listed["Contributor commands"] == ["new", "test"]


def complete(line: str, registry=TOY_KATAS) -> list[str]:
    """What bash's completion of `line` offers, through click's own completion protocol, in process."""
    words = line.split(" ")
    env = {
        "_KATA_COMPLETE": "bash_complete",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
        "KATA_REGISTRY": str(registry),
    }
    result = CliRunner().invoke(main, [], prog_name="kata", env=env)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    return [row.split(",", 1)[1] for row in result.output.splitlines() if row]  # "type,value" rows


@pytest.mark.parametrize(
    "line,offers",
    [
        ("kata hint t", ["toy"]),
        ("kata hint nope", []),
        ("kata hint toy ", ["mean", "scale", "fast"]),
        ("kata hint toy s", ["scale"]),
        ("kata reset ", ["toy"]),
        ("kata bench t", ["toy"]),
        ("kata test t", ["toy"]),
        ("kata watch ", ["toy"]),
        ("kata interview toy ", ["mean", "scale", "fast"]),
        ("kata interview toy mean f", ["fast"]),
        ("kata grade ", ["toy"]),
        ("kata grade toy ", ["toy", "mean", "scale", "fast"]),
        ("kata grade toy m", ["mean"]),
        ("kata grade toy:", ["toy:mean", "toy:scale", "toy:fast"]),
        ("kata grade toy:f", ["toy:fast"]),
    ],
)
def test_the_shell_completes_kata_and_task_names_from_the_registry(line, offers):
    assert complete(line) == offers


def test_a_broken_registry_completes_nothing_and_raises_nothing(tmp_path):
    broken = write_registry(tmp_path, {"toy": "[[kata]\nname = "})
    assert complete("kata hint ", broken) == [] and complete("kata grade toy:", broken) == []


@pytest.mark.parametrize(
    "option, value",
    [
        ("--kata-timeout", "nan"),  # int(nan) in the judge's argv: a traceback
        ("--kata-timeout", "inf"),
        ("--kata-timeout", "1e300"),  # the judge crashed, and the task was graded 'crash'
        ("--test-timeout", "nan"),  # every check 'did not run', graded as the learner's
        ("--memory-mb", "99999999999999999"),  # the judge crashed: the learner was told to fix correct code
    ],
)
def test_a_limit_no_grading_can_keep_is_a_usage_error_naming_the_option(option, value):
    result = CliRunner().invoke(main, ["grade", "moe:router", "--target", "reference", option, value])
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, result.output


@pytest.mark.parametrize(
    "fields",
    [
        dict(test_seconds=math.nan),
        dict(kata_seconds=0),
        dict(kata_seconds=10**6),
        dict(memory_mb=1 << 40),
        dict(output_mb=0),
    ],
)
def test_limits_refuse_what_no_grading_can_keep(fields):
    with pytest.raises(ValueError, match="Limits."):
        Limits(**fields)
    assert Limits(test_seconds=0.75).test_seconds == 0.75  # the tests' own short limits are fine
