"""What an instructor runs: the student edition, class grading, grading one
task, and finding a student's katas (GitHub Classroom's files: test_classroom.py)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.instructor import gradebook, held_back, release, submissions
from grader.judge.events import Status
from grader.kata.registry import find_kata, load_registry
from grader.kata.stubs import stub_for
from grader.kata.target import ROOT, SOLUTIONS_DIR
from grader.run.results import KataResult, TaskResult

from helpers import SUBS, TOY_KATAS, copy_registry, edition_cli


@pytest.fixture
def toy_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    return CliRunner()


def zip_of(folder: Path, archive: Path, prefix: str = "") -> Path:
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, prefix + path.relative_to(folder).as_posix())
    return archive


@pytest.fixture
def a_class(tmp_path) -> Path:
    """Five students: a nested repository, a zip, a syntax error, nothing, a broken zip."""
    root = tmp_path / "submissions"
    (root / "alice" / "repo" / "katas").mkdir(parents=True)
    shutil.copy(SUBS / "correct" / "toy.py", root / "alice" / "repo" / "katas" / "toy.py")
    (root / "alice" / "repo" / "README.md").write_text("my work")
    zip_of(SUBS / "stub", root / "bob.zip", prefix="bob-main/katas/")
    shutil.copytree(SUBS / "syntax", root / "carol")
    (root / "dave").mkdir()
    (root / "dave" / "notes.txt").write_text("I forgot")
    (root / "eve.zip").write_bytes(b"not a zip at all")
    (root / ".DS_Store").write_text("")
    return root


# ---------------------------------------------------------------- finding the katas


def test_the_kata_modules_are_found_at_any_depth_and_the_fullest_folder_wins(tmp_path):
    (tmp_path / "a" / "b" / "katas").mkdir(parents=True)
    (tmp_path / "a" / "b" / "katas" / "kv_cache.py").write_text("")
    (tmp_path / "a" / "b" / "katas" / "moe.py").write_text("")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "moe.py").write_text("")
    assert submissions.find_katas_dir(tmp_path, ["kv_cache", "moe"]) == tmp_path / "a" / "b" / "katas"
    with pytest.raises(submissions.SubmissionError, match="no kata modules"):
        submissions.find_katas_dir(tmp_path / "a", ["speculative"])


def test_a_zip_that_reaches_outside_its_folder_or_holds_a_link_is_refused(tmp_path):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../escape.py", "x = 1")
    with pytest.raises(submissions.SubmissionError, match="outside"):
        submissions.unpack_zip(bad, tmp_path / "out")
    assert not (tmp_path / "escape.py").exists()
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("katas/moe.py")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(submissions.SubmissionError, match="link"):
        submissions.unpack_zip(link, tmp_path / "out2")


# ---------------------------------------------------------------- grade-all


def test_a_roster_carries_its_columns_into_the_gradebook_and_lists_who_sent_nothing(toy_cli, tmp_path):
    root = tmp_path / "class"
    shutil.copytree(SUBS / "correct", root / "alice")
    shutil.copytree(SUBS / "stub", root / "bob")
    roster = tmp_path / "roster.csv"
    roster.write_text("email,student,lms_id\nalice@x.org,alice,17\nzoe@x.org,zoe,=CMD()\n")
    book = tmp_path / "book"
    result = toy_cli.invoke(main, ["grade-all", str(root), "--out", str(book), "--roster", str(roster)])
    assert result.exit_code == 0, result.output
    rows = list(csv.reader((book / "gradebook.csv").open()))
    assert rows[0][:6] == ["student", "email", "lms_id", "score", "max_score", "seed"]
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["alice"][1:4] == ["alice@x.org", "17", "4"]
    assert by_name["bob"][1:3] == ["", ""] and by_name["bob"][6] == "not on the roster"
    assert by_name["zoe"][1:4] == ["zoe@x.org", "'=CMD()", "0"] and by_name["zoe"][6] == "no submission"


@pytest.mark.parametrize(
    "text, words",
    [("email,name\na@x,alice\n", "a column named 'student'"), ("student\nalice\nalice\n", "student 'alice' again")],
)
def test_a_roster_without_a_student_column_or_with_a_student_twice_is_a_usage_error(toy_cli, tmp_path, text, words):
    shutil.copytree(SUBS / "correct", tmp_path / "class" / "alice")
    roster = tmp_path / "roster.csv"
    roster.write_text(text)
    result = toy_cli.invoke(main, ["grade-all", str(tmp_path / "class"), "--roster", str(roster)])
    assert result.exit_code == 2 and words in result.output, result.output


def test_the_summary_is_a_line_per_student_and_kata_then_one_per_kata(toy_cli, tmp_path):
    root = tmp_path / "class"
    for i in range(3):
        shutil.copytree(SUBS / "stub", root / f"s{i:02d}")
    result = toy_cli.invoke(main, ["grade-all", str(root), "--out", str(tmp_path / "book"), "--kata", "toy:mean"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1:4] == [f"s{i:02d}  toy      0/2  todo: mean" for i in range(3)]
    assert lines[4:6] == ["", "toy: 0/3 students pass every task; not passing: mean (3)"]


def test_a_class_is_never_graded_unconfined_unless_told_and_then_every_row_says_so(toy_cli, tmp_path, monkeypatch):
    """Where jails can only run plain (no root, no bubblewrap; KATA_JAIL=plain stands in for such a machine),
    one student's module could read and overwrite another's: grade-all refuses before grading anyone, and
    with --unisolated grades, says so in the summary, on every gradebook row and in each student's file."""
    root = tmp_path / "class"
    for name in ("ann", "ben"):
        shutil.copytree(SUBS / "correct", root / name)
    monkeypatch.setenv("KATA_JAIL", "plain")
    out = tmp_path / "book"
    refused = toy_cli.invoke(main, ["grade-all", str(root), "--out", str(out), "--kata", "toy:mean"])
    assert refused.exit_code == 2 and "--unisolated" in refused.output and not out.exists(), refused.output
    graded = toy_cli.invoke(main, ["grade-all", str(root), "--out", str(out), "--kata", "toy:mean", "--unisolated"])
    assert graded.exit_code == 0 and "warning: graded unisolated" in graded.output, graded.output
    rows = list(csv.DictReader((out / "gradebook.csv").open()))
    assert [r["score"] for r in rows] == ["2", "2"] and all(r["note"].startswith("graded unisolated") for r in rows)
    assert json.loads((out / "students" / "ann.json").read_text())["isolation"] == "plain"


def test_grade_all_writes_a_row_per_student_and_never_aborts(toy_cli, a_class, tmp_path):
    out = tmp_path / "book"
    result = toy_cli.invoke(main, ["grade-all", str(a_class), "--out", str(out), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    rows = {r["student"]: r for r in csv.DictReader((out / "gradebook.csv").open())}
    assert sorted(rows) == ["alice", "bob", "carol", "dave", "eve"]
    assert list(rows["alice"])[:6] == ["student", "score", "max_score", "seed", "note", "toy"]
    assert (rows["alice"]["score"], rows["alice"]["max_score"], rows["alice"]["toy:mean"]) == ("4", "4", "2")
    assert rows["bob"]["score"] == "0" and rows["bob"]["note"] == ""
    assert rows["carol"]["score"] == "0"
    assert rows["carol"]["note"] == "toy did not load: toy.py has a syntax error at line 13: invalid syntax"
    assert "no kata modules" in rows["dave"]["note"] and "zip" in rows["eve"]["note"]
    alice = json.loads((out / "students" / "alice.json").read_text())
    assert alice["student"] == "alice" and alice["score"] == 4
    assert {t["name"]: t["status"] for t in alice["katas"][0]["tasks"]} == {
        "mean": "pass",
        "scale": "pass",
        "fast": "pass",
    }
    bob = json.loads((out / "students" / "bob.json").read_text())
    assert {t["status"] for t in bob["katas"][0]["tasks"]} == {"todo"}
    summary = result.stdout.splitlines()
    assert summary[1:4] == [
        "alice  toy      4/4  pass",
        "bob    toy      0/4  todo: mean, scale, fast",  # who has not started: the tasks, on one line
        "carol  toy      0/4  did not load: toy.py has a syntax error at line 13: invalid syntax",
    ]
    assert summary[4].startswith("dave   not graded: no kata modules (toy.py) anywhere in ")
    assert summary[5].startswith("eve    not graded: eve.zip is not a readable zip file")
    assert summary[6:8] == ["", "toy: 1/5 students pass every task; not passing: mean (4), scale (4), fast (4)"]


def test_seed_per_student_is_reproducible_differs_between_students_and_needs_the_secret():
    a, b = gradebook.student_seed("s3cret", "alice"), gradebook.student_seed("s3cret", "bob")
    assert a == gradebook.student_seed("s3cret", "alice") and a != b and a != 0
    assert gradebook.student_seed("other", "alice") != a


def test_grade_all_with_a_secret_records_each_students_seed(toy_cli, a_class, tmp_path):
    out = tmp_path / "book"
    result = toy_cli.invoke(
        main, ["grade-all", str(a_class), "--out", str(out), "--kata", "toy:scale", "--seed-per-student", "s3cret"]
    )
    assert result.exit_code == 0, result.output
    rows = {r["student"]: r for r in csv.DictReader((out / "gradebook.csv").open())}
    assert int(rows["alice"]["seed"]) == gradebook.student_seed("s3cret", "alice")
    assert [c for c in rows["alice"] if ":" in c] == ["toy:scale"] and rows["alice"]["max_score"] == "1"
    assert json.loads((out / "students" / "alice.json").read_text())["seed"] == int(rows["alice"]["seed"])


def test_grade_all_refuses_what_is_not_a_class(toy_cli, tmp_path):
    (tmp_path / "empty").mkdir()
    result = toy_cli.invoke(main, ["grade-all", str(tmp_path / "empty")])
    assert result.exit_code == 1 and "no submissions" in result.output
    result = toy_cli.invoke(main, ["grade-all", str(tmp_path / "empty"), "--kata", "toy:nope"])
    assert result.exit_code == 2 and "has no task 'nope'" in result.output


# ---------------------------------------------------------------- one task


def test_kata_grade_grades_one_task_by_kata_colon_task_or_kata_task(toy_cli):
    for words in (["toy:scale"], ["toy", "scale"]):
        result = toy_cli.invoke(main, ["grade", *words, "--target", str(SUBS / "correct"), "--json"])
        assert result.exit_code == 0, result.output
        assert [t["name"] for t in json.loads(result.output)["katas"][0]["tasks"]] == ["scale"]
    failing = toy_cli.invoke(main, ["grade", "toy:mean", "--target", str(SUBS / "stub")])
    assert failing.exit_code == 1


def test_a_mistyped_kata_or_task_gets_a_did_you_mean(toy_cli):
    result = toy_cli.invoke(main, ["grade", "tyo"])
    assert result.exit_code == 2 and "did you mean 'toy'" in result.output
    result = toy_cli.invoke(main, ["grade", "toy", "scal"])
    assert result.exit_code == 2 and "did you mean 'scale'" in result.output
    result = toy_cli.invoke(main, ["grade", "toy:"])
    assert result.exit_code == 2 and "names no task" in result.output


# ---------------------------------------------------------------- the student edition


WINDOW = 3  # consecutive lines of a solution's code that count as holding it


def stripped(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def solution_windows() -> set[str]:
    """Every WINDOW consecutive code lines of the reference solutions that
    neither their stubs nor the reference model (which every learner gets)
    have: a file holding one holds part of an answer."""

    given = "\n".join("\n".join(stripped(p.read_text())) for p in (ROOT / "reference").glob("*.py"))
    out = set()
    for path in SOLUTIONS_DIR.glob("[!_]*.py"):
        stub = set(stripped(stub_for(path.stem)))
        lines = stripped(path.read_text())
        for i in range(len(lines) - WINDOW + 1):
            window = lines[i : i + WINDOW]
            if not all(line in stub for line in window) and "\n".join(window) not in given:
                out.add("\n".join(window))
    return out


def test_the_edition_refuses_to_hold_back_a_task_whose_check_also_grades_a_released_one(tmp_path):
    # test_per_tensor_quantizers_reject_bits_out_of_range grades symmetric and affine case by case.
    registry = copy_registry(
        tmp_path / "katas", lambda t: t.replace('name = "affine"', 'name = "affine"\n  release = false')
    )
    with pytest.raises(ValueError, match="test_per_tensor_quantizers_reject_bits_out_of_range grades the held-back"):
        release.write_edition(tmp_path / "edition", registry=registry)
    assert not (tmp_path / "edition").exists() or not any((tmp_path / "edition").iterdir())


def test_the_student_edition_holds_no_solutions_and_drops_held_back_tasks(tmp_path):
    registry = copy_registry(
        tmp_path / "katas", lambda t: t.replace('name = "paged"', 'name = "paged"\n  release = false')
    )
    out = tmp_path / "edition"
    written = release.write_edition(out, registry=registry)
    rel = {p.relative_to(out).as_posix() for p in written}
    assert {"katas/kv_cache.py", "grader/suites/kv_cache/test_1_cache.py", "reference/model.py"} <= rel
    assert "grader/suites/kv_cache/test_4_paged.py" not in rel, "a module of held-back checks alone ships nothing"
    assert "reference/weights/teacher.npz" in rel and "grader/suites/moe/bench.py" in rel
    assert not any(r.startswith(("reference/solutions", "tests/", "tools/", ".git/")) for r in rel)
    answers = solution_windows()
    assert len(answers) > 100, "the solutions should differ from the stubs"
    for path in written:
        if path.suffix in (".py", ".md", ".toml"):
            text = "\n".join(stripped(path.read_text(encoding="utf-8")))
            leaked = [w for w in answers if w in text]
            assert not leaked, f"{path} holds {len(leaked)} runs of solution lines, e.g. {leaked[0]!r}"
    assert any(w in "\n".join(stripped((SOLUTIONS_DIR / "moe.py").read_text())) for w in answers)  # the check can fire
    edition = load_registry(out / "grader" / "suites")
    shipped = {k.name: [t.name for t in k.tasks] for k in edition}
    assert "paged" not in shipped["kv_cache"] and "cache" in shipped["kv_cache"]
    paged_tests = find_kata("kv_cache", load_registry(registry)).task("paged").tests
    suite = "".join(p.read_text() for p in (out / "grader" / "suites" / "kv_cache").glob("*.py"))
    assert not any(f"def {t}(" in suite for t in paged_tests)
    assert "test_update_returns_everything_written_so_far" in suite
    assert "**paged**" not in (out / "CHECKLIST.md").read_text() and "**cache**" in (out / "CHECKLIST.md").read_text()
    assert (out / "katas" / "kv_cache.py").read_text() == stub_for("kv_cache")
    stored = out / "grader" / "kata" / "stub_files" / "kv_cache.py"
    assert stored.read_text() == stub_for("kv_cache")


def test_kata_reset_in_the_edition_restores_the_stub_it_stored_having_no_solutions(tmp_path):
    out, work = tmp_path / "edition", tmp_path / "work"
    release.write_edition(out)
    stored = out / "grader" / "kata" / "stub_files" / "moe.py"
    stored.write_text(stored.read_text() + "# the edition's stored stub\n")  # to tell it from one made here
    work.mkdir()
    (work / "moe.py").write_text("my work")
    reset = edition_cli(out, work, tmp_path / "state", "reset", "moe", "--yes", timeout=120)
    assert reset.returncode == 0, reset.stderr
    assert (work / "moe.py").read_text() == stored.read_text()


def test_the_edition_refuses_a_folder_that_is_not_new_and_empty(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ValueError, match="not an empty folder"):
        release.write_edition(tmp_path / "full")
    with pytest.raises(ValueError, match="outside this checkout"):
        release.write_edition(ROOT / "edition")


def test_kata_release_says_what_it_wrote(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    result = CliRunner().invoke(main, ["release", str(tmp_path / "ed")])
    assert result.exit_code == 0, result.output
    assert "no reference solutions" in result.output and (tmp_path / "ed" / "pyproject.toml").is_file()
    moe = len(held_back.hidden_checks(find_kata("moe").suite))
    assert "hidden checks (left out: they need an oracle or a baseline" in result.output
    assert f"moe {moe}" in result.output and moe > 0
    again = CliRunner().invoke(main, ["release", str(tmp_path / "ed")])
    assert again.exit_code == 1 and "not an empty folder" in again.output


@pytest.mark.slow
def test_the_student_edition_installs_grades_todo_resets_and_benches_without_solutions(tmp_path):
    """Installed into a fresh venv as the README says, it grades every task
    todo and exits 1, resets a kata from its stored stub, and its benchmarks
    say the kata is unfinished."""
    out = tmp_path / "edition"
    release.write_edition(out)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KATA_", "PYTHONPATH", "VIRTUAL_ENV"))}
    subprocess.run(  # as the README says, dependencies and all (pip's cache makes it quick)
        [str(py), "-m", "pip", "install", "-q", "-e", str(out)], check=True, env=env, cwd=tmp_path, timeout=600
    )
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(out / "katas", work / "katas")
    env["KATA_WORKDIR"] = str(work / "katas")
    where = subprocess.run(
        [str(py), "-c", "import grader, reference; print(grader.__file__, reference.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        check=True,
    ).stdout
    assert str(out) in where and str(ROOT) not in where  # the installed edition, not this checkout
    graded = subprocess.run(
        [str(py), "-m", "grader.cli", "grade", "--json"], capture_output=True, text=True, env=env, cwd=work, timeout=300
    )
    assert graded.returncode == 1, graded.stderr[-2000:]
    data = json.loads(graded.stdout)
    statuses = {t["status"] for k in data["katas"] for t in k["tasks"]}
    assert statuses == {"todo"}, statuses
    assert len(data["katas"]) == 5
    (work / "katas" / "moe.py").write_text("broken")
    reset = subprocess.run(
        [str(py), "-m", "grader.cli", "reset", "moe", "--yes"], capture_output=True, text=True, env=env, cwd=work
    )
    assert reset.returncode == 0 and (work / "katas" / "moe.py").read_text() == (out / "katas" / "moe.py").read_text()
    bench = subprocess.run(
        [str(py), "-m", "grader.cli", "bench", "moe"], capture_output=True, text=True, env=env, cwd=work, timeout=120
    )
    assert "not written yet" in bench.stderr and "Traceback" not in bench.stderr
    play = subprocess.run(
        [str(py), "-m", "grader.cli", "play", "def ", "-n", "8"],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        timeout=120,
    )
    assert play.returncode == 0 and play.stdout.startswith("def ") and "8 characters" in play.stderr
    assert not (out / "reference" / "solutions").exists()


def test_without_the_solutions_an_interview_covers_whole_katas_only(tmp_path, monkeypatch):
    from grader.interview import plan as interview

    monkeypatch.setattr(interview, "SOLUTIONS_DIR", tmp_path)
    whole = interview.plan("moe")
    assert "def moe_forward(" in interview.module_text(whole) and "moe_forward" in whole.functions
    with pytest.raises(interview.InterviewError, match="interview the whole kata instead"):
        interview.module_text(interview.plan("moe", ("router",)))


def test_kata_bench_resolves_a_relative_target_against_the_callers_folder(tmp_path, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "moe.py").write_text(stub_for("moe"))  # an unfinished kata: the script stops early
    monkeypatch.chdir(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "bench", "moe", "--target", "mine"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert "not written yet" in done.stderr, done.stderr[-1000:]
    assert done.returncode == 1 and "Traceback" not in done.stderr


def test_a_bad_target_still_writes_a_gradescope_file_that_says_why(toy_cli, tmp_path):
    out = tmp_path / "results.json"
    result = toy_cli.invoke(main, ["grade", "--target", str(tmp_path / "missing"), "--gradescope", str(out)])
    assert result.exit_code == 2
    data = json.loads(out.read_text())
    assert data["score"] == 0 and "missing" in data["output"] and data["tests"][0]["status"] == "failed"


def _graded(kata, statuses: dict[str, Status]) -> KataResult:
    """kata's result with each task's status (every task not named passes), points for the passing ones."""
    tasks = [
        TaskResult(t.name, t.title, s, t.points if s is Status.PASS else 0, t.points, 1, 2, "", "")
        for t in kata.tasks
        for s in [statuses.get(t.name, Status.PASS)]
    ]
    return KataResult(kata.name, kata.title, sum(t.score for t in tasks), kata.max_score, 1.0, tasks)


def test_five_students_with_five_katas_read_in_one_screen_a_line_each():
    katas = list(load_registry())
    first = [k.tasks[0].name for k in katas]
    ways = {
        "ann": lambda k: _graded(k, {}),
        "ben": lambda k: gradebook._not_graded(k, [t.name for t in k.tasks], "not implemented yet", Status.TODO),
        "cat": lambda k: gradebook._not_graded(
            k, [t.name for t in k.tasks], f"no module {k.name}.py in /x (does not exist)"
        ),
        "dan": lambda k: _graded(k, {k.tasks[0].name: Status.FAIL, k.tasks[-1].name: Status.SLOW}),
        "eva": lambda k: gradebook._not_graded(
            k, [t.name for t in k.tasks], f"{k.name}.py has a syntax error at line 3: x"
        ),
    }
    students = [gradebook.Student(name, Path(name), 0) for name in ways]
    for s in students:
        s.results = {k.name: ways[s.name](k) for k in katas}
    text = gradebook.summary(gradebook.ClassResult(students, katas, {}, 12.0))
    lines = text.splitlines()
    assert len(lines) == 1 + 5 * 5 + 1 + 5  # the head, a line per student and kata, a blank one, a line per kata
    width = max(len(k.name) for k in katas)
    for i, k in enumerate(katas):
        assert lines[1 + i] == f"ann  {k.name:<{width}}  {f'{k.max_score}/{k.max_score}':>7}  pass"
        assert lines[6 + i].endswith(f"0/{k.max_score}  todo: {', '.join(t.name for t in k.tasks)}")
        assert lines[11 + i].endswith(f"0/{k.max_score}  missing: the submission has no {k.name}.py")
        assert lines[16 + i].endswith(f"  fail: {first[i]}; slow: {k.tasks[-1].name}")
        assert lines[21 + i].endswith(f"did not load: {k.name}.py has a syntax error at line 3: x")
        assert lines[27 + i].startswith(f"{k.name}: 1/5 students pass every task; not passing: {first[i]} (4), ")
    assert all(line.startswith(tuple(ways)) for line in lines[1:26])
