"""Every option or argument that names a file or folder a command writes is checked before any work:
a path that cannot be written ends the command with exit 2 and one line saying why, no traceback,
nothing graded, and no folder made that the command was not asked to make."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.kata import writable

from helpers import SUBS, TOY_KATAS

SHA = "a" * 64

# Each command that writes, as (its words before the path, the option that names it or "", its words after,
# whether the path is a folder the command makes). Each would grade, build or write for a while if it went on.
WRITERS = {
    "grade --gradescope": (["grade", "--target", str(SUBS / "loop")], "--gradescope", [], False),
    "grade-all --out": (["grade-all", str(SUBS)], "--out", [], True),
    "release OUT": (["release"], "", [], True),
    "gradescope build OUT": (["gradescope", "build"], "", [], False),
    "classroom DEST": (["classroom"], "", ["--grader-url", "https://example.org/g.whl", "--grader-sha256", SHA], True),
    "init DIRECTORY": (["init"], "", [], True),
    "interview --dir": (["interview", "toy"], "--dir", [], True),
}


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KATA_WORKDIR", raising=False)
    monkeypatch.chdir(tmp_path)
    return CliRunner()


def run(cli, writer: str, path) -> tuple[int, str]:
    before, option, after, _ = WRITERS[writer]
    named = [option, str(path)] if option else [str(path)]
    result = cli.invoke(main, [*before, *named, *after])
    return result.exit_code, result.output


def refused_in_one_line(code: int, output: str, *why: str) -> None:
    assert code == 2, output
    assert output.count("\n") == 1 and output.startswith("Error: "), output
    assert "Traceback" not in output and "grading" not in output
    for words in why:
        assert words in output, output


def target(writer: str, folder: Path, name: str) -> Path:
    """Where in folder a writer is pointed: a file name for a file, a folder name for a folder."""
    return folder / (name if WRITERS[writer][3] else f"{name}.zip" if "build" in writer else f"{name}.json")


@pytest.mark.parametrize("writer", WRITERS)
def test_a_path_the_kernel_refuses_is_refused_before_any_work(cli, writer):
    code, output = run(cli, writer, target(writer, Path("/proc"), "nope"))
    refused_in_one_line(code, output, "cannot be written", "no file can be made in /proc")


@pytest.mark.parametrize("writer", WRITERS)
def test_a_missing_folder_is_never_made_but_named_with_what_to_do(cli, writer, tmp_path):
    missing = tmp_path / "missing" / "deeper"
    code, output = run(cli, writer, target(writer, missing, "out"))
    refused_in_one_line(code, output, f"the folder {missing} does not exist; create it first")
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("writer", WRITERS)
def test_a_file_where_a_folder_should_be_is_named(cli, writer, tmp_path):
    (tmp_path / "a file").write_text("mine")
    code, output = run(cli, writer, target(writer, tmp_path / "a file", "out"))
    refused_in_one_line(code, output, f"{tmp_path / 'a file'} is a file, not a folder")
    assert (tmp_path / "a file").read_text() == "mine"


@pytest.mark.parametrize("writer", [w for w, (*_, folder) in WRITERS.items() if folder])
def test_a_file_given_as_the_folder_to_write_is_refused(cli, writer, tmp_path):
    (tmp_path / "taken").write_text("mine")
    code, output = run(cli, writer, tmp_path / "taken")
    refused_in_one_line(code, output, f"{tmp_path / 'taken'} is a file, not a folder")
    assert (tmp_path / "taken").read_text() == "mine"


@pytest.mark.parametrize("writer", [w for w, (*_, folder) in WRITERS.items() if not folder])
def test_a_folder_given_as_the_file_to_write_is_refused(cli, writer, tmp_path):
    code, output = run(cli, writer, tmp_path)
    refused_in_one_line(code, output, f"{tmp_path} is a folder; give the path of a file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder whatever its mode")
@pytest.mark.parametrize("writer", WRITERS)
def test_a_folder_without_write_permission_is_refused(cli, writer, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        code, output = run(cli, writer, target(writer, locked, "out"))
    finally:
        locked.chmod(0o700)
    refused_in_one_line(code, output, f"no file can be made in {locked}")


def test_grade_all_refuses_a_gradebook_folder_whose_students_folder_is_a_file(cli, tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "students").write_text("mine")
    code, output = run(cli, "grade-all --out", tmp_path / "book")
    refused_in_one_line(code, output, f"{tmp_path / 'book' / 'students'} is a file, not a folder")


def test_a_device_is_never_replaced_by_a_written_file():
    assert writable.why_not_writable("/dev/null") == "/dev/null is not a regular file"


def test_a_writable_place_passes_and_the_check_leaves_nothing_behind(tmp_path):
    assert writable.why_not_writable(tmp_path / "r.json") == ""
    assert writable.why_not_folder(tmp_path / "new") == ""
    assert writable.why_not_folder(tmp_path) == ""
    assert list(tmp_path.iterdir()) == []


def test_a_bench_plot_that_cannot_be_written_is_refused_before_the_benchmark_runs(capsys):
    from grader.measure.bench import bench_parser

    pytest.importorskip("matplotlib")
    with pytest.raises(SystemExit) as ended:
        bench_parser("A benchmark.", "moe").parse_args(["--plot", "/proc/nope.png"])
    assert ended.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.endswith("'/proc/nope.png' cannot be written: no file can be made in /proc (No such file or directory)")
