"""`kata play WORD`: a demo's name runs the demo, a kata's name runs its kata's demo (saying so), a near miss
of a demo's name gets a "did you mean", and any other text is a prompt for the teacher."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.cli.play import KATA_DEMOS, play
from grader.kata.registry import load_registry

from helpers import TOY_KATAS


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    return CliRunner()


def test_every_kata_with_a_demo_names_a_demo_there_is():
    assert set(KATA_DEMOS.values()) <= set(play.commands) - {"write"}
    assert set(KATA_DEMOS) <= {k.name for k in load_registry()}


@pytest.mark.parametrize("kata", sorted(KATA_DEMOS))
def test_a_katas_name_runs_its_demo_and_says_which(cli, kata):
    result = cli.invoke(main, ["play", kata, "--help"])
    assert result.exit_code == 0, result.output
    demo = KATA_DEMOS[kata]
    assert f"Usage: main play {demo} [OPTIONS]" in result.stdout
    assert result.stderr == (
        f"{kata} is a kata: its demo is kata play {demo} (to continue the text {kata!r}, say: kata play write {kata})\n"
    )


def test_a_kata_whose_name_is_its_demos_runs_it_without_a_word(cli):
    result = cli.invoke(main, ["play", "moe", "--help"])
    assert result.exit_code == 0 and "Usage: main play moe [OPTIONS]" in result.stdout and result.stderr == ""


def test_a_kata_without_a_demo_is_a_usage_error_that_lists_the_demos(cli, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    result = cli.invoke(main, ["play", "toy"])
    assert result.exit_code == 2
    assert "Error: the kata toy has no demo (to continue the text 'toy', say: kata play write toy); the demos are:" in (
        result.output
    )


def test_a_near_miss_of_a_demo_still_gets_a_did_you_mean(cli):
    result = cli.invoke(main, ["play", "speculat"])
    assert result.exit_code == 2 and "there is no demo 'speculat'; did you mean speculate?" in result.output


def test_text_that_is_no_name_goes_to_the_teacher_as_a_prompt(cli):
    result = cli.invoke(main, ["play", "Return the number", "--help"])
    assert result.exit_code == 0 and "Usage: main play write [OPTIONS] [PROMPT]" in result.stdout
