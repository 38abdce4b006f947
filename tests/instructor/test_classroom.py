"""The GitHub Classroom kit: a workflow that grades with the instructor's pinned,
hash-checked grader in bubblewrap's jail, or not at all."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.instructor import classroom, release
from grader.kata.registry import load_registry
from grader.kata.target import ROOT, SOLUTIONS_DIR

from helpers import TOY, plant, planted_ran, write_registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

URL = "https://example.edu/katas/llm_speed_katas-0.1.0-py3-none-any.whl"
SHA = "0123456789abcdef" * 4
GRADER = ["--grader-url", URL, "--grader-sha256", SHA]


@pytest.fixture
def template(tmp_path, monkeypatch) -> Path:
    """A template repository, with the toy registry's `fast` task held back; the kit written into it."""
    text = (TOY / "kata.toml").read_text().replace('suite = "test_toy.py"', f'suite = "{TOY / "test_toy.py"}"')
    registry = write_registry(
        tmp_path / "katas", {"toy": text.replace('name = "fast"', 'name = "fast"\n  release = false')}
    )
    monkeypatch.setenv("KATA_REGISTRY", str(registry))
    repo = tmp_path / "repo"
    repo.mkdir()
    result = CliRunner().invoke(main, ["classroom", str(repo), *GRADER])
    assert result.exit_code == 0, result.output
    return repo


def kit_files(repo: Path) -> dict[str, str]:
    return {p.relative_to(repo).as_posix(): p.read_text() for p in (repo / ".github").rglob("*") if p.is_file()}


def test_kata_classroom_writes_one_jailed_test_per_released_task_worth_its_points(template):
    yaml = pytest.importorskip("yaml")
    flow = yaml.safe_load((template / ".github" / "workflows" / "classroom.yml").read_text())
    steps = flow["jobs"]["run-autograding-tests"]["steps"]
    graders = [s for s in steps if s.get("uses", "").startswith("classroom-resources/autograding-command-grader")]
    commands = [
        ("KATA_JAIL=bwrap kata grade toy:mean --target ./katas", 2),
        ("KATA_JAIL=bwrap kata grade toy:scale --target ./katas", 1),
    ]
    assert [(s["with"]["command"], s["with"]["max-score"]) for s in graders] == commands
    install = next(i for i, s in enumerate(steps) if s.get("run") == f"bash {classroom.INSTALL}")
    assert install < steps.index(graders[0])  # the grader is installed before any test runs
    reporter = steps[-1]
    assert reporter["with"]["runners"] == ",".join(s["id"] for s in graders)
    assert set(reporter["env"]) == {f"{s['id'].upper()}_RESULTS" for s in graders}
    legacy = json.loads((template / ".github" / "classroom" / "autograding.json").read_text())
    assert [(t["run"], t["points"]) for t in legacy["tests"]] == commands
    assert [t["setup"] for t in legacy["tests"]] == [f"bash {classroom.INSTALL}", ""]
    again = CliRunner().invoke(main, ["classroom", str(template), *GRADER])
    assert again.exit_code == 1 and "--force" in again.output


def test_the_kit_installs_the_instructors_hash_checked_wheel_never_the_students_repository(template):
    files = kit_files(template)
    script = files[classroom.INSTALL]
    assert f'grader_url="{URL}"' in script and f'grader_sha256="{SHA}"' in script
    assert "pip download --no-deps --require-hashes" in script and "--hash=sha256:%s" in script
    assert 'pip install -c "$work/constraints.txt" "$wheel"' in script
    for name, text in files.items():
        assert "|| true" not in text, name
        assert "pip install -e" not in text and "pip install ." not in text, name
    assert os.access(template / classroom.INSTALL, os.X_OK)


def test_the_kit_updates_apt_first_and_stops_where_bubblewrap_cannot_isolate(template):
    lines = kit_files(template)[classroom.INSTALL].splitlines()
    assert lines.index("sudo apt-get update") < lines.index(
        "sudo apt-get install -y --no-install-recommends bubblewrap"
    )
    assert "    sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in lines
    check = next(i for i, line in enumerate(lines) if line.startswith("if ! bwrap "))
    assert "cannot be graded in isolation" in lines[check + 1] and lines[check + 2].strip() == "exit 1"


def test_the_package_the_kit_installs_is_the_one_pyproject_names():
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"] == classroom.PACKAGE


@pytest.mark.parametrize(
    "args, words",
    [
        (["--grader-sha256", SHA], "Missing option '--grader-url'"),
        (["--grader-url", URL], "Missing option '--grader-sha256'"),
        (["--grader-url", URL.replace("https", "http"), "--grader-sha256", SHA], "https:// address of a wheel"),
        (["--grader-url", URL[: -len(".whl")], "--grader-sha256", SHA], "https:// address of a wheel"),
        (["--grader-url", URL, "--grader-sha256", SHA[:-1]], "64 hexadecimal digits"),
    ],
)
def test_kata_classroom_without_a_pinned_grader_is_a_usage_error(tmp_path, args, words):
    result = CliRunner().invoke(main, ["classroom", str(tmp_path), *args])
    assert result.exit_code == 2 and words in result.output, result.output
    assert not (tmp_path / ".github").exists()


# ---------------------------------------------------------------- the install script, run


def fake_runner(tmp_path: Path, python_dir: Path | None, bwrap_status: int) -> dict[str, str]:
    """The environment of a GitHub runner, but for sudo (it logs what it would run) and bwrap (it exits
    bwrap_status): the install script runs here as it would there, with python_dir's python first on the
    PATH (a virtual environment's bin/), or, without one, a python that fails if anything runs it; its
    temporary folder is tmp_path/tmp, empty."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "tmp").mkdir()
    tools = {"sudo": f'echo "$*" >> {tmp_path / "sudo.log"}', "bwrap": f"exit {bwrap_status}"}
    if python_dir is None:
        tools["python"] = "echo 'python ran' >&2; exit 99"
    for tool, body in tools.items():
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KATA_", "PYTHONPATH", "VIRTUAL_ENV"))}
    path = [str(bin_dir)] + ([str(python_dir)] if python_dir else []) + [env["PATH"]]
    return dict(env, PATH=":".join(path), TMPDIR=str(tmp_path / "tmp"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The grader's wheel as an instructor builds it: from the student edition."""
    tmp = tmp_path_factory.mktemp("wheel")
    release.write_edition(tmp / "edition")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp),
            str(tmp / "edition"),
        ],
        check=True,
        timeout=300,
    )
    (built,) = tmp.glob("*.whl")
    return built


def run_install(
    tmp_path: Path, wheel: Path, sha256: str, bwrap_status: int = 0, repo: Path | None = None
) -> tuple[subprocess.CompletedProcess, Path]:
    """The install script for wheel, run as the workflow runs it: from the student's repository (repo,
    or tmp_path), with a fresh virtual environment's python first on the PATH."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    script = tmp_path / "install-grader.sh"
    script.write_text(classroom.install_script(wheel.as_uri(), sha256))
    env = fake_runner(tmp_path, venv / "bin", bwrap_status)
    cwd = repo or tmp_path
    done = subprocess.run(["bash", str(script)], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    return done, venv


@pytest.mark.slow
def test_the_install_script_installs_the_wheel_it_was_given_with_the_pinned_versions(tmp_path, wheel):
    done, venv = run_install(tmp_path, wheel, hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert done.returncode == 0, done.stderr[-3000:]
    assert not any((tmp_path / "tmp").iterdir()), "the script left its temporary folder behind"
    assert (tmp_path / "sudo.log").read_text().splitlines()[:2] == [
        "apt-get update",
        "apt-get install -y --no-install-recommends bubblewrap",
    ]
    shown = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import grader, numpy; print(grader.__file__, numpy.__version__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout.split()
    assert (
        shown[0].startswith(str(venv))
        and shown[1]
        == release.ROOT.joinpath("grader/instructor/constraints.txt").read_text().split("numpy==")[1].split()[0]
    )


@pytest.mark.slow
def test_the_install_script_refuses_a_wheel_whose_hash_is_not_the_given_one(tmp_path, wheel):
    done, venv = run_install(tmp_path, wheel, "0" * 64)
    assert done.returncode != 0 and "HASHES" in done.stderr.upper(), done.stderr[-2000:]
    assert not list((venv / "lib").glob("python*/site-packages/grader"))


def test_the_install_script_stops_saying_why_where_bubblewrap_cannot_isolate(tmp_path):
    script = tmp_path / "install-grader.sh"
    script.write_text(classroom.install_script(URL, SHA))
    env = fake_runner(tmp_path, None, bwrap_status=1)
    done = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot be graded in isolation" in done.stderr
    assert "python ran" not in done.stderr  # nothing installed, nothing graded
    assert not any((tmp_path / "tmp").iterdir()), "the script left its temporary folder behind"


# ---------------------------------------------------------------- a student's repository, graded as Classroom grades it


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel) -> SimpleNamespace:
    """The student edition as a student's repository, every file of helpers.PLANTED at its top (a line
    leading its own grader/'s), and the install script run from it as the workflow runs it: the script's
    run (done), the virtual environment it installed into (venv), the repository (repo), the plants' marks."""
    tmp = tmp_path_factory.mktemp("classroom")
    repo = tmp / "repo"
    shutil.copytree(wheel.parent / "edition", repo)
    plant(repo, tmp / "marks")
    done, venv = run_install(tmp, wheel, hashlib.sha256(wheel.read_bytes()).hexdigest(), repo=repo)
    return SimpleNamespace(done=done, venv=venv, repo=repo, marks=tmp / "marks")


def _bwrap_works() -> bool:
    exe = shutil.which("bwrap")
    return exe is not None and subprocess.run([exe, "--unshare-all", "--ro-bind", "/", "/", "true"]).returncode == 0


def as_classroom_runs(command: str, installed: SimpleNamespace, repo: Path) -> subprocess.CompletedProcess:
    """A test's command as its autograding step runs it: by a shell, in the student's repository, with the
    grader the install script installed first on the PATH. KATA_JAIL=bwrap stays where bubblewrap works
    here; elsewhere the grader takes the jail this machine has (root's, as these tests mostly run)."""
    if not _bwrap_works():
        command = command.replace("KATA_JAIL=bwrap ", "")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KATA_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(PATH=f"{installed.venv / 'bin'}:{env['PATH']}", KATA_GRADE_KEY=os.environ["KATA_GRADE_KEY"])
    return subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True, timeout=900)


WHERE = "import grader, pip; print(grader.__file__, pip.__file__)"  # where the installed grader and pip are


@pytest.mark.slow  # a virtual environment the wheel is installed into, and a grading
def test_the_install_script_and_a_test_run_no_python_of_the_students_repository(installed):
    assert installed.done.returncode == 0, installed.done.stderr[-3000:]
    assert planted_ran(installed.marks) == [], "the install script ran a file the student planted"
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-I", "-c", WHERE],
        capture_output=True,
        text=True,
        cwd="/",
        check=True,
    ).stdout.split()
    assert all(w.startswith(str(installed.venv)) for w in where), where  # the wheel's grader, by the real pip
    first = classroom.tests(load_registry())[0]
    graded = as_classroom_runs(first["command"], installed, installed.repo)
    assert planted_ran(installed.marks) == [], "a test's command ran a file the student planted"
    assert graded.returncode == 1 and "todo" in graded.stdout, graded.stdout + graded.stderr[-2000:]


@pytest.mark.slow  # every task graded alone, twice
def test_classroom_pays_nothing_for_untouched_stubs_and_every_point_for_the_reference(installed, tmp_path):
    """Classroom's sum: a test's points when its command exits 0, none otherwise."""
    yaml = pytest.importorskip("yaml")
    katas = load_registry()
    classroom.write(tmp_path, katas, grader_url=URL, grader_sha256=SHA)
    steps = yaml.safe_load((tmp_path / ".github" / "workflows" / "classroom.yml").read_text())
    tests = [
        (s["with"]["command"], s["with"]["max-score"])
        for s in steps["jobs"]["run-autograding-tests"]["steps"]
        if s.get("uses", "").startswith("classroom-resources/autograding-command-grader")
    ]
    solved = tmp_path / "solved"
    shutil.copytree(installed.repo, solved)
    for k in katas:
        shutil.copy(SOLUTIONS_DIR / f"{k.name}.py", solved / "katas" / f"{k.name}.py")
    left_out = [
        f"kata grade {k.name}:{t.name} --target ./katas"
        for k in katas
        for t in k.tasks
        if t.release and t not in classroom.gradable(katas)[k.name]
    ]
    runs = [(command, repo) for repo in (installed.repo, solved) for command, _ in tests]
    runs += [(command, solved) for command in left_out]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda run: as_classroom_runs(run[0], installed, run[1]), runs))
    codes = {(command, repo): d.returncode for (command, repo), d in zip(runs, done)}
    failed = [f"{c}: {d.stdout[-1500:]}" for (c, r), d in zip(runs, done) if r == solved and d.returncode]
    stubs = sum(points for command, points in tests if codes[command, installed.repo] == 0)
    reference = sum(points for command, points in tests if codes[command, solved] == 0)
    total = sum(points for _, points in tests)
    assert stubs == 0, [c for c, _ in tests if codes[c, installed.repo] == 0]
    assert reference == total, failed
    # A task the edition holds no check of has no test, and graded alone it is no pass, solved or not.
    assert left_out and all(codes[command, solved] == 1 for command in left_out), left_out
    assert total == sum(t.points for tasks in classroom.gradable(katas).values() for t in tasks)
