"""Text from a submission (an exception's message, a folder's name) reaches a
terminal, Gradescope's Markdown and a gradebook's CSV: none of them may be
driven or forged by it. Each writer is fed hostile names and messages through
the real CLI."""

from __future__ import annotations

import csv
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.instructor import gradescope_kit as gradescope

from helpers import SUBS, TOY_KATAS

# Clear the screen, write the clipboard (OSC 52), ring the bell, go back to the start of the line and
# print a fake total, then turn the text around (RLO): everything a message could do to a terminal.
HOSTILE = "\x1b[2J\x1b]52;c;ZXZpbA==\x07\rtotal: 4/4 points\u202egnissap\x9b"


@pytest.fixture
def toy_cli(tmp_path, monkeypatch) -> CliRunner:
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    return CliRunner()


def hostile_submission(folder: Path, message: str = HOSTILE) -> Path:
    """The toy kata with a mean_of that raises message."""
    folder.mkdir(parents=True)
    text = (SUBS / "correct" / "toy.py").read_text()
    text = text.replace(
        "    x = np.asarray(x)\n    if x.size == 0:", f"    raise ValueError({message!r})\n    if x.size == 0:"
    )
    (folder / "toy.py").write_text(text)
    return folder


def assert_inert(text: str) -> None:
    for c in ("\x1b", "\x07", "\r", "\u202e", "\x9b"):
        assert c not in text, repr(c)


def test_a_hostile_message_reaches_the_terminal_escaped(toy_cli, tmp_path):
    sub = hostile_submission(tmp_path / "sub")
    for flags in ([], ["-v"]):
        result = toy_cli.invoke(main, ["grade", "--target", str(sub), *flags])
        assert result.exit_code == 1, result.output
        assert_inert(result.output)
        assert "\\x1b[2J" in result.output  # shown, as text
        assert not any(line.startswith("total: 4/4") for line in result.output.splitlines())


def test_unicode_line_separators_in_a_message_or_a_print_start_no_line_of_the_report(toy_cli, tmp_path):
    forged = "x\u2028total: 4/4 points\u2029"
    sub = hostile_submission(tmp_path / "sub", forged)
    text = (sub / "toy.py").read_text()
    printing = text.replace("    raise ValueError(", f"    print({forged!r})\n    raise ValueError(", 1)
    (sub / "toy.py").write_text(printing)
    result = toy_cli.invoke(main, ["grade", "--target", str(sub), "-v"])
    assert result.exit_code == 1, result.output
    assert "| x\\u2028total: 4/4 points" in result.output  # the print, shown as text
    assert not any(line.startswith("total: 4/4") for line in result.output.splitlines())


def test_a_hostile_message_and_folder_name_stay_inside_gradescope_code(toy_cli, tmp_path):
    root = tmp_path / "gs"
    (root / "source").mkdir(parents=True)
    (root / "source" / gradescope.CONFIG_NAME).write_text(json.dumps({"seed": 0, "seed_from_metadata": False}))
    where = root / "submission" / "my`` **bold** `x\x1b[2J"
    hostile_submission(where)
    gradescope.run(root)
    data = json.loads((root / "results" / "results.json").read_text())
    texts = [data["output"], *(t["output"] for t in data["tests"])]
    for text in texts:
        assert_inert(text)
    note = next(t for t in texts if "Graded the kata modules in" in t)
    span = note.split("Graded the kata modules in ", 1)[1].split(" of your submission", 1)[0]
    fence = span[: len(span) - len(span.lstrip("`"))]
    assert len(fence) > 2 and span.endswith(fence) and fence not in span[len(fence) : -len(fence)]


def test_gradebook_cells_never_start_a_formula_or_hold_control_characters(toy_cli, tmp_path):
    root = tmp_path / "class"
    for name in ("=HYPERLINK(evil)", "+1", "-2", "@SUM(A1)", "bell\x07name"):
        shutil.copytree(SUBS / "stub", root / name)
    (root / "@broken.zip").write_bytes(b"not a zip")  # its note starts with its name
    out = tmp_path / "book"
    result = toy_cli.invoke(main, ["grade-all", str(root), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = list(csv.reader((out / "gradebook.csv").open()))
    for row in rows[1:]:
        for cell in (row[0], row[4]):  # the student and the note
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
            assert_inert(cell)
    assert sorted(r[0] for r in rows[1:]) == sorted(
        ["'=HYPERLINK(evil)", "'+1", "'-2", "'@SUM(A1)", "bell\\x07name", "'@broken"]
    )


def zip_with(members: list[tuple[str, str]], path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members:
            zf.writestr(name, text)
    return path


def test_a_zip_that_cannot_be_unpacked_is_a_row_with_a_note_and_the_class_goes_on(toy_cli, tmp_path):
    root = tmp_path / "class"
    shutil.copytree(SUBS / "correct", root / "alice")
    toy = (SUBS / "correct" / "toy.py").read_text()
    zip_with([("katas/toy.py", toy), ("katas/toy.py/inner.py", "x = 1")], root / "both.zip")  # a file and a folder
    zip_with([("katas/" + "n" * 300 + ".py", "x = 1"), ("katas/toy.py", toy)], root / "long.zip")  # name too long
    out = tmp_path / "book"
    result = toy_cli.invoke(main, ["grade-all", str(root), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = {r["student"]: r for r in csv.DictReader((out / "gradebook.csv").open())}
    assert sorted(rows) == ["alice", "both", "long"]
    assert rows["alice"]["score"] == "4"
    assert "cannot be unpacked" in rows["both"]["note"] and "inner.py" in rows["both"]["note"]
    assert "cannot be unpacked" in rows["long"]["note"] and "nnnn" in rows["long"]["note"]
