"""What a grade says when a kata's file is not what a learner meant it to be, or its code writes too much:
a message that names the real problem (a folder, a binary file, a file past the cap on files), never a
message about something else ("does not exist", "line None", "printed")."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest

from grader.jail import confine
from grader.kata.registry import load_registry
from grader.run.runner import grade_kata

from helpers import FAST, SUBS, TOY_KATAS

CORRECT = (SUBS / "correct" / "toy.py").read_text()
SMALL = dataclasses.replace(FAST, output_mb=4)  # a low cap on each file, so that passing it is quick


@pytest.fixture(scope="module")
def toy():
    return load_registry(TOY_KATAS)[0]


def messages(toy, folder, limits=FAST) -> dict[str, tuple[str, str]]:
    result = grade_kata(toy, str(folder), limits=limits)
    return {t.name: (t.status.value, t.message) for t in result.tasks}


def test_a_folder_named_like_the_kata_file_is_said_to_be_a_folder(toy, tmp_path):
    (tmp_path / "toy.py").mkdir()
    said = messages(toy, tmp_path)
    assert set(said.values()) == {
        ("error", f"toy.py in {tmp_path} is a folder, not a file: the kata's module is one Python file of that name")
    }


def test_a_binary_kata_file_is_said_to_be_no_python_source_with_no_line_none(toy, tmp_path):
    (tmp_path / "toy.py").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    said = messages(toy, tmp_path)
    assert set(said.values()) == {
        (
            "error",
            f"toy.py in {tmp_path} is not a text file of Python source: it holds NUL bytes, as a binary file does",
        )
    }


def test_a_kata_file_that_is_not_utf8_text_says_so(toy, tmp_path):
    (tmp_path / "toy.py").write_bytes(CORRECT.encode() + b"\n# caf\xe9\n")
    said = messages(toy, tmp_path)
    assert set(said.values()) == {
        (
            "error",
            f"toy.py in {tmp_path} is not a text file of Python source: its bytes are not UTF-8 text "
            "(nor text of an encoding its first lines declare)",
        )
    }


def test_a_kata_file_that_declares_its_encoding_is_read_in_it(toy, tmp_path):
    (tmp_path / "toy.py").write_bytes(b"# -*- coding: latin-1 -*-\n" + CORRECT.encode() + b"\n# caf\xe9\n")
    assert {status for status, _ in messages(toy, tmp_path).values()} == {"pass"}


def _writes(body: str) -> str:
    """The correct toy module whose scale first runs body (with os imported)."""
    return CORRECT.replace("def scale(x, s):\n", f"def scale(x, s):\n    import os\n{body}")


def test_a_kata_that_writes_a_file_past_the_cap_is_told_it_wrote_not_printed(toy, tmp_path):
    (tmp_path / "toy.py").write_text(
        _writes(
            "    with open('big.bin', 'wb') as f:\n        for _ in range(50):\n            f.write(bytes(1 << 20))\n"
        )
    )
    status, message = messages(toy, tmp_path, SMALL)["scale"]
    assert (status, message) == (
        "error",
        f"wrote a file larger than the grader allows (4 MiB a file, {confine.WORK_MB} MiB for all the files your "
        "code writes)",
    )


def test_a_kata_that_prints_past_the_cap_is_still_told_it_printed(toy, tmp_path):
    (tmp_path / "toy.py").write_text(_writes("    for _ in range(50):\n        print('x' * (1 << 20))\n"))
    assert messages(toy, tmp_path, SMALL)["scale"] == ("error", "printed more than the grader allows (4 MiB of output)")


@pytest.mark.skipif(confine.mode() != "root", reason="only the root mode's jail writes into a tmpfs of its own")
def test_a_kata_that_fills_the_root_modes_folder_is_told_it_wrote_past_the_cap_on_all_files(toy, tmp_path):
    files = confine.WORK_MB // 3 + 2  # 3 MiB each, under the 4 MiB cap on one file: together past WORK_MB
    body = f"    for i in range({files}):\n        with open(f'part{{i}}', 'wb') as f:\n"
    body += "            f.write(bytes(3 << 20))\n"
    (tmp_path / "toy.py").write_text(_writes(body))
    assert messages(toy, tmp_path, SMALL)["scale"] == (
        "error",
        f"wrote more than the grader allows ({confine.WORK_MB} MiB for all the files your code writes)",
    )


def test_a_missing_kata_file_is_still_said_not_to_exist(toy, tmp_path):
    assert set(messages(toy, tmp_path).values()) == {("error", f"no module toy.py in {tmp_path} (does not exist)")}


def test_the_jail_words_a_syntax_error_that_has_no_line_without_line_none(tmp_path):
    # The judge refuses such a file before a jail loads it (above); the jail's own words, should one reach it:
    from grader.jail.server import KataImportError, Server

    (tmp_path / "nul_bytes_kata.py").write_bytes(b"x = 1\0\n")
    try:
        with pytest.raises(KataImportError) as raised:
            Server.load(types.SimpleNamespace(sub=str(tmp_path)), "nul_bytes_kata")
    finally:
        sys.modules.pop("nul_bytes_kata", None)
    assert str(raised.value).startswith("nul_bytes_kata.py has a syntax error: "), str(raised.value)
