"""The README's sample of a first grade is what that grade prints today: the command its `$` line
gives, run on the untouched stubs (made from the solutions, in a folder of their own) as a terminal
shows it, equal line for line but for the time it took and the kata folder's place on this machine;
and its Layout names the rooms grader/ holds."""

from __future__ import annotations

import re
import shlex

from click.testing import CliRunner

from grader.cli.commands import main
from grader.kata.registry import load_registry
from grader.kata.stubs import stub_for
from grader.kata.target import ROOT

# The sample: the fenced block under this line of the README.
INTRO = "One kata, as it starts:"
HEADER = re.compile(r"^(grading the learner's katas \().*(\), seed \d+)$")  # the folder between the brackets
TIME = re.compile(r"( in )\d+(?:\.\d+)? s$")
# The kata folder the sample shows: a clone in a learner's home folder, not the folder of any machine's run.
SAMPLE_FOLDER = "/home/you/llm-speed-katas/katas"


def sample() -> tuple[list[str], list[str]]:
    """(the words of the sample's `$ kata ...` line after `kata`, the lines the README shows it print)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert INTRO in text, f"README.md has no line {INTRO!r} before its sample grade"
    block = text.split(INTRO, 1)[1].split("```\n", 2)[1]
    command, *printed = block.rstrip("\n").split("\n")
    assert command.startswith("$ kata "), f"the sample starts with {command!r}, not a `$ kata ...` line"
    return shlex.split(command)[2:], printed


def as_in_the_sample(lines: list[str]) -> list[str]:
    """lines with the kata folder of the header written as the sample's, and the time left out."""
    return [TIME.sub(r"\1<seconds> s", HEADER.sub(rf"\g<1>{SAMPLE_FOLDER}\2", line)) for line in lines]


def test_the_readmes_first_grade_is_what_a_first_grade_prints(tmp_path, monkeypatch):
    words, shown = sample()
    (tmp_path / "katas").mkdir()
    for kata in load_registry():
        (tmp_path / "katas" / f"{kata.name}.py").write_text(stub_for(kata.name), encoding="utf-8")
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path / "katas"))
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    monkeypatch.chdir(tmp_path)  # where a clone's katas/ is, as the README's learner runs it
    result = CliRunner().invoke(main, [*words, "--live"])  # a terminal's output: the rows as they come
    assert result.exit_code == 1, result.output  # as the README says: not everything passes
    printed = result.stdout.rstrip("\n").split("\n")
    assert TIME.sub(r"\1<seconds> s", shown[-2]) != shown[-2], "the sample's total line names no time"
    assert [TIME.sub(r"\1<seconds> s", line) for line in shown] == as_in_the_sample(printed), (
        "README.md's sample grade differs from what the grade prints today; the block should read:\n"
        + "\n".join(as_in_the_sample(printed))
    )


def test_the_readmes_layout_names_every_room_of_grader_and_no_other():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1].split("```\n", 2)[1]
    entry = layout.split("grader/", 1)[1].split("\ndocs/", 1)[0]  # the grader/ entry, over its lines
    words = " ".join(entry.split())
    listed = words.split("by role: ", 1)[1].split(" (CONTRIBUTING", 1)[0]  # "cli, kata (the registry), ..., dev"
    named = {part.strip() for part in re.sub(r"\(.*?\)", "", listed).split(",")}
    rooms = {p.name for p in (ROOT / "grader").iterdir() if (p / "__init__.py").is_file()}
    assert named == rooms, (
        f"README's Layout names {sorted(named - rooms)} that grader/ lacks and misses {sorted(rooms - named)}"
    )
