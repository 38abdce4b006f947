"""grader.output.files, the one writer of the files the grader keeps: whole or not at
all, strict JSON, and never through a name someone could have planted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.output import files

from helpers import SUBS, TOY_KATAS


def planted_links(folder: Path, name: str, victim: Path) -> list[Path]:
    """Links to victim at every temporary name a writer of folder/name could
    predict: its name with this process's id and its neighbours' (what the old
    writer used), and the bare `.name.tmp`."""
    pid = os.getpid()
    names = [f".{name}.{p}.tmp" for p in range(pid - 50, pid + 50)] + [f".{name}.tmp"]
    links = [folder / n for n in names]
    for link in links:
        link.symlink_to(victim)
    return links


def test_a_link_planted_at_the_destination_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    dest = tmp_path / "results.json"
    dest.symlink_to(victim)
    files.write_json(dest, {"score": 1})
    assert victim.read_text() == "precious"
    assert not dest.is_symlink() and json.loads(dest.read_text()) == {"score": 1}


def test_links_planted_at_predictable_temporary_names_are_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    links = planted_links(tmp_path, "results.json", victim)
    files.write_atomically(tmp_path / "results.json", "new")
    assert victim.read_text() == "precious"
    assert (tmp_path / "results.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["results.json", "victim.txt", *(p.name for p in links)]
    )


def test_a_write_that_fails_leaves_neither_the_destination_nor_a_temporary_file(tmp_path):
    with pytest.raises(TypeError):
        files.write_atomically(tmp_path / "out.txt", 12)  # not text or bytes
    assert list(tmp_path.iterdir()) == []


def test_json_is_strict_with_nan_and_infinity_written_as_null(tmp_path):
    path = files.write_json(
        tmp_path / "r.json", {"a": float("nan"), "b": [1.5, float("inf")], "c": {"d": -float("inf")}}
    )
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text and text.endswith("\n")
    assert json.loads(text) == {"a": None, "b": [1.5, None], "c": {"d": None}}


def test_a_written_file_is_readable_by_its_group_as_a_plain_write_would_leave_it(tmp_path):
    path = files.write_atomically(tmp_path / "gradebook.csv", "student\n")
    assert path.stat().st_mode & 0o777 == files.MODE


def test_kata_grade_gradescope_never_writes_through_a_planted_link(tmp_path, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "results.json"
    out.symlink_to(victim)
    planted_links(tmp_path, "results.json", victim)
    result = CliRunner().invoke(main, ["grade", "--target", str(SUBS / "wrong_shape"), "--gradescope", str(out)])
    assert result.exit_code == 1, result.output
    assert victim.read_text() == "precious"
    assert not out.is_symlink() and json.loads(out.read_text())["score"] == 3
