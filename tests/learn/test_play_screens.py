"""`kata play`'s screens on a terminal, which the command's tests (CliRunner: no terminal) never
draw: the cache's line redrawn after every character, the speculate rows coloured, and the notes
under a `kata play stack` row wrapped to the terminal's width."""

from __future__ import annotations

import re

import click
import pytest

from grader.learn import play_screens
from grader.learn.play import Round
from grader.learn.play_stack import Bargain
from reference.lm import shipped_model
from reference.sampling import generate_naive
from reference.tokenizer import decode, encode

TEACHER = shipped_model("teacher")
pytestmark = pytest.mark.skipif(TEACHER is None, reason="the shipped teacher's weights are missing")
GREEN = click.style("x", fg="green").split("x")[0]  # the escape that starts green text


@pytest.fixture(autouse=True)
def _own_state(tmp_path, monkeypatch):
    """A grade state in which no task passes: the demos run the model package's own code."""
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path / "katas"))


def test_on_a_terminal_the_cache_redraws_its_line_after_every_character_with_a_growing_meter():
    lines = list(play_screens.cache("R", 4, "katas", live=True))
    redrawn = [line.text for line in lines if not line.nl]
    text = decode(generate_naive(TEACHER, encode("R"), 4))
    assert [r.split("   [")[0] for r in redrawn] == [f"\rR{text[:i]}" for i in range(1, 5)] * 2
    naive = [int(n.replace(",", "")) for n in re.findall(r"\[([\d,]+) token passes", "".join(redrawn[:4]))]
    assert naive == [1, 3, 6, 10]  # each new character re-reads the whole text
    assert [line.text for line in lines if line.text.startswith("\r\x1b[K") and line.nl] == [f"\r\x1b[KR{text}"] * 2


def test_the_live_meter_stays_on_one_line_of_the_terminal_however_long_the_text_grows():
    """A carriage return redraws one line only: the meter shows the newest end of the text, newlines
    escaped, within the terminal's width (a wrapped line would leave a trail of half-meters)."""
    prompt = "def f(x):\n    return "
    for line in [x for x in play_screens.cache(prompt, 30, "katas", live=True, columns=70) if not x.nl]:
        shown = line.text.removeprefix("\r").removesuffix("\x1b[K")
        assert "\n" not in shown and "\r" not in shown and len(shown) <= 69, repr(line.text)
    last = line.text
    assert last.startswith("\r...") and "token passes per layer" in last


def test_a_guess_holding_a_newline_stays_on_its_row():
    row = play_screens._round_row([Round(encode("a\nb\\"), encode("a\nc"))], 4, live=False)
    assert "\n" not in row and "'a\\nb\\\\'" in row and "'c' (not 'b')" in row
    live = play_screens._round_row([Round(encode("a\nb\\"), encode("a\nc"))], 4, live=True)
    assert "\n" not in live and click.unstyle(live) == row


def test_off_a_terminal_the_cache_writes_each_sentence_once_without_escapes():
    lines = list(play_screens.cache("R", 4, "katas", live=False))
    assert all(line.nl and "\x1b" not in line.text and "\r" not in line.text for line in lines)


def test_on_a_terminal_the_speculate_rows_colour_the_kept_guesses_and_say_the_same_as_without():
    live = [line for line in play_screens.speculate("Return the ", 12, 4, "katas", live=True) if line.painted]
    plain = [line for line in play_screens.speculate("Return the ", 12, 4, "katas", live=False) if line.painted]
    assert [click.unstyle(line.text) for line in live] == [click.unstyle(line.text) for line in plain]
    rows = [line.text for line in live[:-1]]  # the last painted line is the text, kept guesses in green
    kept = [int(re.match(r"^\s*\d+  '.*?'\s+(\d+)  ", click.unstyle(row))[1]) for row in rows]
    assert any(kept) and all(GREEN in row for row, n in zip(rows, kept) if n > 0)
    assert not any(GREEN in line.text for line in plain[:-1])


def _bargain(name: str, speedup: float | None) -> Bargain:
    return Bargain(name, 1.0, speedup, [1, 2], 1000, 100, 10.0, 4000.0)


@pytest.mark.parametrize("columns, width", [(60, 60), (300, 100), (10, 40)])
def test_a_slower_rows_note_wraps_to_the_terminal_between_40_and_100_columns(columns, width):
    rows = [_bargain("float32, re-reading", None), _bargain("+ KV cache", 0.5)]
    row, note = list(play_screens.stack_row(rows, columns))
    assert row.text.startswith("+ KV cache")
    lines = note.text.splitlines()
    assert len(lines) > 1 and all(line.startswith("    ") and len(line) <= width for line in lines)
    assert "slower than the row before: this text is short" in " ".join(x.strip() for x in lines)
