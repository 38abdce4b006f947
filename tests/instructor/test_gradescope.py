"""The Gradescope kit (grader.instructor.gradescope_kit, grader.output.gradescope_results): results.json as Gradescope's
specification describes it (checked against a JSON Schema of it), the
autograder run against a fake /autograder tree, the run_autograder script
itself, and the zip `kata gradescope build` writes. Grading uses the toy
kata, so every test takes a second or two at most."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.instructor import gradescope_kit as gradescope
from grader.judge.events import Status
from grader.kata.registry import load_registry
from grader.output import gradescope_results, report, versions
from grader.run.results import GradeResult, KataResult, TaskResult
from grader.run.runner import grade

from helpers import FAST, SUBS, TOY, TOY_KATAS, write_registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

jsonschema = pytest.importorskip("jsonschema")

HERE = Path(__file__).parent.parent
CHECKOUT = HERE.parent
SCHEMA = json.loads((HERE / "gradescope_results.schema.json").read_text())
ALICE = {"id": 101, "users": [{"email": "alice@example.edu", "id": 7, "name": "Alice"}]}
BOB = {"id": 102, "users": [{"email": "bob@example.edu", "id": 8, "name": "Bob"}]}


def valid(data: dict) -> dict:
    jsonschema.validate(data, SCHEMA)
    json.dumps(data, allow_nan=False)  # strict JSON, as Gradescope parses it
    return data


@pytest.fixture(autouse=True)
def toy_registry(monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))


# One xdist worker runs the whole module, so its module-scoped grades are made once.
pytestmark = pytest.mark.xdist_group("test_gradescope")


@pytest.fixture(scope="module")
def graded():
    """The toy kata graded once per fixture submission this file looks at."""
    katas = list(load_registry(TOY_KATAS))
    return {sub: grade(katas, str(SUBS / sub), seed=0, limits=FAST) for sub in ("correct", "stub", "nan")}


def by_task(data: dict) -> dict[str, dict]:
    return {t["extra_data"]["task"]: t for t in data["tests"]}


# ------------------------------------------------------------------ the schema


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(score="4"),
        lambda d: d.update(visibility="sometimes"),
        lambda d: d.update(unknown_field=1),
        lambda d: (d.pop("score"), d["tests"][0].pop("score")),  # a score at the top or on every test
        lambda d: d["tests"][0].update(status="ok"),
        lambda d: d["tests"][0].update(number=1.1),
        lambda d: d["tests"][0].update(visibility="after_deadline"),
        lambda d: d["tests"][0].update(output_format="markdown"),
        lambda d: d.update(leaderboard=[{"name": "x", "value": 1, "order": "up"}]),
        lambda d: d.update(leaderboard=[{"name": "x"}]),
    ],
)
def test_the_schema_rejects_a_wrong_type_an_unknown_value_and_an_unknown_field(change):
    data = {
        "score": 1,
        "tests": [
            {
                "name": "a",
                "score": 1,
                "max_score": 1,
                "status": "passed",
                "number": "1.1",
                "visibility": "visible",
                "output_format": "md",
            }
        ],
        "leaderboard": [],
    }
    valid(copy.deepcopy(data))
    change(data)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)


# ------------------------------------------------------------------ results()


def test_a_correct_submission_scores_every_point_with_one_passed_test_per_task(graded):
    data = valid(gradescope_results.results(graded["correct"], seed=0))
    assert data["score"] == 4 and data["extra_data"] == {
        "seed": 0,
        "score": 4,
        "max_score": 4,
        "version": 1,
        "versions": versions.installed(),
    }
    assert set(versions.installed()) == {"python", "numpy", "pytest", "hypothesis"}
    assert [(t["name"], t["number"], t["score"], t["max_score"], t["status"]) for t in data["tests"]] == [
        ("toy / mean: mean_of: the mean of an array", "1.1", 2, 2, "passed"),
        ("toy / scale: scale: multiply by a number", "1.2", 1, 1, "passed"),
        ("toy / fast: mean_of is vectorized", "1.3", 1, 1, "passed"),
    ]
    mean = by_task(data)["mean"]
    assert mean["output"] == "**pass**: 2 of 2 checks passed" and mean["output_format"] == "md"
    assert mean["extra_data"] == {
        "kata": "toy",
        "task": "mean",
        "status": "pass",
        "checks_passed": 2,
        "checks_total": 2,
        "because_of": "",
        "seed": 0,
    }
    assert {t["visibility"] for t in data["tests"]} == {"visible"}
    assert data["output"].startswith("**4/4 points**: 3 of 3 tasks pass (graded with seed 0).")
    (entry,) = data["leaderboard"]  # the figure the toy speed check records: its time over np.mean
    assert entry["name"] == "toy: mean_of time over np.mean" and entry["order"] == "asc"
    assert entry["value"] == round(entry["value"], 2) > 0


def test_the_stub_scores_nothing_and_every_task_gives_its_hint(graded):
    data = valid(gradescope_results.results(graded["stub"], seed=5))
    assert data["score"] == 0 and [t["status"] for t in data["tests"]] == ["failed"] * 3
    scale = by_task(data)["scale"]
    assert scale["extra_data"]["status"] == "todo" and scale["extra_data"]["seed"] == 5
    assert "not implemented yet (raises NotImplementedError)" in scale["output"]
    assert scale["output"].endswith("**Hint:** What shape should come back?")
    assert "(graded with seed 5)" in data["output"]


def test_a_failing_check_shows_its_message_its_minimal_example_and_the_hint(graded):
    data = valid(gradescope_results.results(graded["nan"], seed=0))
    assert data["score"] == 1
    assert [t["status"] for t in data["tests"]] == ["failed", "passed", "failed"]
    out = by_task(data)["mean"]["output"]
    assert out.startswith("**fail**: 1 of 2 checks passed")
    assert "First failing check: `test_mean_matches_a_float64_sum` (fail)" in out
    assert "```text\nmean_of returned nan for finite input\n```" in out
    assert (
        "The failing example:\n\n```text\ntoy.mean_of(array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=float32))\n```"
        in out
    )
    assert out.endswith("**Hint:** What does the mean divide by?")


def test_kata_grade_gradescope_writes_the_same_richer_file(graded):
    assert report.gradescope(graded["nan"]) == gradescope_results.results(graded["nan"], seed=graded["nan"].seed)


def test_a_hidden_task_shows_after_the_due_date_and_stays_out_of_the_visible_total(tmp_path, monkeypatch):
    text = (TOY / "kata.toml").read_text().replace('suite = "test_toy.py"', f'suite = "{TOY / "test_toy.py"}"')
    text = text.replace('name = "scale"\n', 'name = "scale"\n  visibility = "hidden"\n')
    monkeypatch.setenv("KATA_REGISTRY", str(write_registry(tmp_path, {"toy": text})))
    result = grade(list(load_registry()), str(SUBS / "nan"), limits=FAST)
    data = valid(gradescope_results.results(result, seed=0))
    assert {k: t["visibility"] for k, t in by_task(data).items()} == {
        "mean": "visible",
        "scale": "after_due_date",
        "fast": "visible",
    }
    assert data["score"] == 1  # the hidden task counts; only its display waits
    assert data["output"].startswith("**0/3 points on the tasks shown now**: 0 of 2 pass")
    assert "1 more task is graded too and shown after the due date." in data["output"]


def toy_result(tasks: list[TaskResult]) -> GradeResult:
    score, top = sum(t.score for t in tasks), sum(t.max_score for t in tasks)
    return GradeResult("sub", 0, score, top, 1.5, [KataResult("toy", "Toy", score, top, 1.5, tasks)])


def task(name: str, status: Status, **fields) -> TaskResult:
    passed = status is Status.PASS
    return TaskResult(
        name=name,
        title=name,
        status=status,
        score=1 if passed else 0,
        max_score=1,
        checks_passed=1 if passed else 0,
        checks_total=1,
        message=fields.pop("message", ""),
        hint="" if passed else "a hint",
        **fields,
    )


def test_the_leaderboard_ranks_the_figures_of_passing_shown_tasks_only():
    speedup = {"name": "speed-up over np.mean", "value": 12.3456, "bar": 5.0, "unit": "x", "better": "higher"}
    ratio = {"name": "bytes per weight", "value": 0.5312, "bar": 1.0, "unit": "B", "better": "lower"}
    result = toy_result(
        [
            task("fast", Status.PASS, figures=[speedup, ratio, dict(speedup, name="nan", value=float("nan"))]),
            task("slow", Status.SLOW, figures=[dict(speedup, name="failing", value=2.0)]),
            task("secret", Status.PASS, figures=[dict(speedup, name="hidden")], visibility="hidden"),
        ]
    )
    data = valid(gradescope_results.results(result, seed=0))
    assert data["leaderboard"] == [
        {"name": "toy: speed-up over np.mean", "value": 12.35, "order": "desc"},
        {"name": "toy: bytes per weight", "value": 0.53, "order": "asc"},
    ]


def test_long_messages_are_cut_and_say_so_and_backticks_cannot_close_the_block():
    failures = [
        {"test": f"test_{i}", "outcome": "fail", "message": "m" * 10_000, "example": "x = ```"}
        for i in range(gradescope_results.MAX_FAILURES_SHOWN + 2)
    ]
    data = valid(gradescope_results.results(toy_result([task("long", Status.FAIL, failures=failures)]), seed=0))
    out = data["tests"][0]["output"]
    assert f"... ({10_000 - gradescope_results.MAX_TEXT} more characters cut)" in out
    assert "... and 2 more checks that did not pass, not shown." in out
    assert "````text\nx = ```\n````" in out
    assert len(out) < (gradescope_results.MAX_FAILURES_SHOWN + 1) * (gradescope_results.MAX_TEXT + 200)


def test_error_results_score_0_out_of_every_point_with_the_message():
    data = valid(gradescope_results.error_results("no kata modules here", seed=None, execution_time=0.25))
    assert data["score"] == 0 and data["execution_time"] == 0.25
    assert "no kata modules here" in data["output"]
    (test,) = data["tests"]
    assert (test["name"], test["score"], test["max_score"], test["status"]) == ("submission", 0, 4, "failed")
    assert data["extra_data"]["versions"] == versions.installed()  # what would have graded it


# ------------------------------------------------------------------ run()


def fake_root(
    tmp_path: Path, sub: str | None = "correct", *, metadata: dict | None = None, config: dict | None = None
) -> Path:
    """An /autograder tree: the submission's toy.py two folders down, metadata, and the build's settings."""
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "source").mkdir()
    if sub:
        (root / "submission" / "repo" / "katas").mkdir(parents=True)
        (root / "submission" / "repo" / "katas" / "toy.py").write_text((SUBS / sub / "toy.py").read_text())
    else:
        (root / "submission" / "notes.txt").write_text("my answers are in my head\n")
    (root / "submission_metadata.json").write_text(json.dumps(metadata or ALICE))
    if config is not None:
        (root / "source" / gradescope.CONFIG_NAME).write_text(json.dumps(config))
    return root


def written(root: Path) -> dict:
    return valid(json.loads((root / "results" / "results.json").read_text()))


def test_run_finds_the_katas_folder_anywhere_and_writes_valid_results(tmp_path):
    root = fake_root(tmp_path)
    assert gradescope.run(root) == 0
    data = written(root)
    assert data["score"] == 4 and [t["status"] for t in data["tests"]] == ["passed"] * 3
    assert "Graded the kata modules in `repo/katas/` of your submission." in data["output"]
    assert data["extra_data"]["seed"] == 0 and data["extra_data"]["seed_from"] == "the autograder's fixed seed"
    assert not list((root / "results").glob(".*.tmp"))


def test_run_without_kata_modules_writes_score_0_saying_what_to_submit(tmp_path):
    root = fake_root(tmp_path, sub=None)
    assert gradescope.run(root) == 0
    data = written(root)
    assert data["score"] == 0 and data["tests"][0]["max_score"] == 4
    assert "no kata modules (toy.py) anywhere in" in data["output"]
    assert "Submit your kata modules (`toy.py`)" in data["output"]


def test_run_writes_score_0_when_grading_itself_crashes(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("the judge would not start")

    monkeypatch.setattr(gradescope, "grade", broken)
    root = fake_root(tmp_path)
    assert gradescope.run(root) == 0
    data = written(root)
    assert data["score"] == 0 and data["tests"][0]["status"] == "failed"
    assert "The autograder itself failed: RuntimeError: the judge would not start" in data["output"]
    assert "This is not your fault: tell your instructor." in data["output"]
    assert "Traceback" in capsys.readouterr().err


def seeds_of_runs(tmp_path, monkeypatch, runs: list[tuple[dict, dict]]) -> list[tuple[int, str]]:
    """(seed graded with, extra_data's seed_from) of run() on each (metadata, config), grading faked."""
    seeds = []

    def fake_grade(katas, target, *, seed, jobs):
        seeds.append(seed)
        return toy_result([task("mean", Status.PASS)])

    monkeypatch.setattr(gradescope, "grade", fake_grade)
    out = []
    for i, (metadata, config) in enumerate(runs):
        root = fake_root(tmp_path / str(i), metadata=metadata, config=config)
        gradescope.run(root)
        data = written(root)
        assert data["extra_data"]["seed"] == seeds[-1] == data["tests"][0]["extra_data"]["seed"]
        out.append((seeds[-1], data["extra_data"]["seed_from"]))
    return out


def test_a_seed_from_the_metadata_is_the_students_own_and_the_same_on_every_resubmission(tmp_path, monkeypatch):
    own = {"seed": 0, "seed_from_metadata": True}
    alice, again, bob, salted, group, anonymous = seeds_of_runs(
        tmp_path,
        monkeypatch,
        [
            (ALICE, own),
            (dict(ALICE, id=999), own),
            (BOB, own),
            (ALICE, {"seed": 1, "seed_from_metadata": True}),
            ({"users": BOB["users"] + ALICE["users"]}, own),
            ({"id": 555, "users": []}, own),
        ],
    )
    assert alice[0] == again[0] != bob[0]
    assert salted[0] != alice[0]
    assert (
        group[0] == seeds_of_runs(tmp_path / "b", monkeypatch, [({"users": ALICE["users"] + BOB["users"]}, own)])[0][0]
    )  # the order Gradescope lists a group in is no matter
    assert all(0 <= s < 2**31 for s, _ in (alice, bob, salted, group, anonymous))
    assert alice[1] == "the submitters in submission_metadata.json"
    assert anonymous[1] == "the submission id in submission_metadata.json"


def test_a_fixed_seed_is_used_as_given(tmp_path, monkeypatch):
    (fixed,) = seeds_of_runs(tmp_path, monkeypatch, [(ALICE, {"seed": 42})])
    assert fixed == (42, "the autograder's fixed seed")


def test_kata_gradescope_run_takes_its_root_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(gradescope, "grade", lambda katas, target, *, seed, jobs: toy_result([task("m", Status.PASS)]))
    root = fake_root(tmp_path)
    monkeypatch.setenv("KATA_AUTOGRADER_ROOT", str(root))
    result = CliRunner().invoke(main, ["gradescope", "run"])
    assert result.exit_code == 0, result.output
    assert written(root)["score"] == 1


# ------------------------------------------------------------------ the zip and its scripts


def fake_edition(out: Path, *, held_back: bool = False) -> list[Path]:
    """Stands in for grader.instructor.release.write_edition, which ships only grader/suites/ (not the toy's)."""
    assert held_back
    out.mkdir(parents=True)
    (out / "pyproject.toml").write_text("[project]\n")
    return [out / "pyproject.toml"]


@pytest.fixture
def toy_zip(tmp_path, monkeypatch) -> zipfile.ZipFile:
    monkeypatch.setattr(gradescope.release, "write_edition", fake_edition)
    gradescope.build(tmp_path / "toy-autograder.zip", seed=3)
    return zipfile.ZipFile(tmp_path / "toy-autograder.zip")


def run_autograder(tmp_path: Path, toy_zip: zipfile.ZipFile, root: Path, python: str) -> subprocess.CompletedProcess:
    script = tmp_path / "run_autograder"
    script.write_bytes(toy_zip.read("run_autograder"))
    script.chmod(0o755)
    env = dict(os.environ, KATA_AUTOGRADER_ROOT=str(root), KATA_AUTOGRADER_SOURCE=str(CHECKOUT), KATA_PYTHON=python)
    return subprocess.run([str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # a real `kata` process (or script) and its signals: the slow tests
def test_run_autograder_grades_the_submission_with_the_checkouts_grader(tmp_path, toy_zip):
    root = fake_root(tmp_path)
    done = run_autograder(tmp_path, toy_zip, root, sys.executable)
    assert done.returncode == 0, done.stderr
    data = written(root)
    assert data["score"] == 4 and "repo/katas/" in data["output"]


def test_run_autograder_writes_score_0_when_python_cannot_start(tmp_path, toy_zip):
    root = fake_root(tmp_path)
    done = run_autograder(tmp_path, toy_zip, root, "/nonexistent/python")
    assert done.returncode == 0
    data = written(root)
    assert data["score"] == 0 and data["tests"][0]["max_score"] == 4  # the toy's total, fixed at build time
    assert "The autograder could not start (exit status 127)." in data["output"]
    assert "without writing" in done.stderr


def test_both_scripts_are_valid_bash(toy_zip, tmp_path):
    for name in ("setup.sh", "run_autograder"):
        (tmp_path / name).write_bytes(toy_zip.read(name))
        done = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True)
        assert done.returncode == 0, f"{name}: {done.stderr}"


def test_build_writes_the_scripts_and_the_grading_edition_without_answers_at_the_zip_root(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY")  # the real katas: the real edition
    out = tmp_path / "autograder.zip"
    gradescope.build(out, seed=7, seed_from_metadata=True)
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        modes = {i.filename: stat.S_IMODE(i.external_attr >> 16) for i in zf.infolist()}
        assert {
            "setup.sh",
            "run_autograder",
            "pyproject.toml",
            "grader/cli/commands.py",
            "grader/instructor/gradescope_kit.py",
            "grader/output/gradescope_results.py",
            "grader/suites/kv_cache/kata.toml",
            "grader/suites/presets.toml",
            gradescope.CONFIG_NAME,
        } <= names
        assert modes["run_autograder"] == modes["setup.sh"] == 0o755
        assert stat.S_ISREG(zf.getinfo("run_autograder").external_attr >> 16)
        assert not [n for n in names if n.startswith(("reference/solutions/", "tests/", "source/"))]
        assert json.loads(zf.read(gradescope.CONFIG_NAME)) == {"seed": 7, "seed_from_metadata": True}
        total = sum(k.max_score for k in load_registry())
        assert f'"max_score": {total},' in zf.read("run_autograder").decode()
        setup = zf.read("setup.sh").decode()
        requirements = zf.read("requirements.txt").decode()
        constraints = zf.read("grader/instructor/constraints.txt").decode()
    assert "apt-get install -y --no-install-recommends python3 python3-pip python3-venv bubblewrap" in setup
    assert 'root="${KATA_AUTOGRADER_ROOT:-/autograder}"' in setup and 'python3 -I -m venv "$root/venv"' in setup
    # The dependencies at the pinned versions, the grader not installed (it runs from the source folder, root's alone).
    pinned = 'pip install -c "$root/source/grader/instructor/constraints.txt"'
    install = f'{pinned} \\\n    -r "$root/source/requirements.txt"'
    assert install in setup and "pip install $root/source" not in setup
    assert 'chmod -R go-rwx "$root/source"\n' in setup and "sys.version_info < (3, 11)" in setup
    assert (
        requirements.splitlines() == tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["dependencies"]
    )
    assert constraints == (CHECKOUT / "grader" / "instructor" / "constraints.txt").read_text()


@pytest.mark.parametrize(
    "out, seed, problem",
    [
        ("autograder.tar", 0, "does not end with .zip"),
        ("missing/autograder.zip", 0, "is not an existing folder"),
        ("autograder.zip", -1, "seed must be a whole number >= 0"),
    ],
)
def test_build_refuses_bad_arguments_naming_the_problem(tmp_path, out, seed, problem):
    with pytest.raises(ValueError, match=problem):
        gradescope.build(tmp_path / out, seed=seed)
    assert not list(tmp_path.iterdir())


def test_kata_gradescope_build_writes_the_zip_or_says_what_is_wrong(tmp_path, monkeypatch):
    monkeypatch.setattr(gradescope.release, "write_edition", fake_edition)
    out = tmp_path / "autograder.zip"
    result = CliRunner().invoke(main, ["gradescope", "build", str(out), "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert json.loads(zipfile.ZipFile(out).read(gradescope.CONFIG_NAME)) == {"seed": 2, "seed_from_metadata": False}
    bad = CliRunner().invoke(main, ["gradescope", "build", str(tmp_path / "autograder.txt")])
    assert bad.exit_code == 1 and "does not end with .zip" in bad.output
    negative = CliRunner().invoke(main, ["gradescope", "build", str(out), "--seed", "-1"])
    assert negative.exit_code == 2 and "--seed" in negative.output
