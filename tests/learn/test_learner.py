"""The learner's loop through the CLI: live rows, the next step, figures
against their bars, state in the work directory, kata init and the folder it
marks, hints, the version, colour, registry errors and BLAS threads."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader import ONE_BLAS_THREAD
from grader.cli.commands import main
from grader.kata.registry import load_registry
from grader.kata.stubs import stub_for
from grader.kata.target import ROOT
from grader.output import report
from grader.run import runner

from helpers import SUBS, TOY, hanging_grade, write_registry


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A toy work directory holding the stub, with no KATA_STATE_DIR: state goes next to the files."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(SUBS / "stub" / "toy.py", work / "toy.py")
    text = (  # the toy's, with the functions each task writes
        (TOY / "kata.toml")
        .read_text()
        .replace(
            '"Which numpy function adds every element?"]\n',
            '"Which numpy function adds every element?"]\n  functions = ["mean_of"]\n',
        )
        .replace(
            'suite = "test_toy.py"',
            f'suite = "{TOY / "test_toy.py"}"\nrecap = "Your mean took {{ratio:.2f}}x np.mean\'s time; {{nothing}} '
            'else."',
        )
    )
    monkeypatch.setenv("KATA_REGISTRY", str(write_registry(tmp_path / "katas", {"toy": text})))
    monkeypatch.setenv("KATA_WORKDIR", str(work))
    monkeypatch.delenv("KATA_STATE_DIR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return work


def test_rows_arrive_while_the_kata_is_still_being_graded(workdir):
    toy = load_registry()[0]
    seen = []
    result = runner.grade(
        [toy],
        str(SUBS / "correct"),
        progress=lambda kata, task: seen.append((task.name, task.status.value, runner.default_grader().running())),
    )
    assert [s[:2] for s in seen] == [("mean", "pass"), ("scale", "pass"), ("fast", "pass")]
    assert seen[0][2] == 1, "the first task's row should come while the judge is still running"
    assert [t.status.value for t in result.katas[0].tasks] == ["pass", "pass", "pass"]


def test_live_grading_prints_each_row_then_the_total_and_the_next_step(workdir):
    result = CliRunner().invoke(main, ["grade", "--live"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    rows = [line for line in lines if line.startswith("toy ")]
    assert [r.split()[1:3] for r in rows] == [["mean", "todo"], ["scale", "todo"], ["fast", "todo"]]
    assert lines.index(rows[-1]) < next(i for i, line in enumerate(lines) if line.startswith("total: 0/4"))
    assert f"next: toy / mean (todo): write mean_of in {workdir / 'toy.py'}:" in result.output


def test_the_next_step_names_the_function_and_its_line_and_passing_says_so(workdir):
    text = (SUBS / "stub" / "toy.py").read_text()
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith("def mean_of"))
    result = CliRunner().invoke(main, ["grade", "--no-live"])
    assert f"next: toy / mean (todo): write mean_of in {workdir / 'toy.py'}:{line}" in result.output
    shutil.copy(SUBS / "correct" / "toy.py", workdir / "toy.py")
    result = CliRunner().invoke(main, ["grade", "--no-live"])
    assert result.exit_code == 0 and "every graded task passes (3 of 3)" in result.output


def test_the_next_step_of_a_file_with_a_syntax_error_points_at_the_error(workdir):
    lines = (SUBS / "correct" / "toy.py").read_text().splitlines()
    broken = next(i for i, s in enumerate(lines) if s.startswith("def mean_of")) + 1
    lines[broken] += " ("  # the first line of mean_of's body, unclosed
    (workdir / "toy.py").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["grade", "--no-live"])
    assert f"next: toy / mean (error): fix the syntax error at {workdir / 'toy.py'}:{broken + 1}" in result.output


def test_the_next_step_of_an_interrupted_task_is_to_grade_it_again_not_to_write_it(workdir):
    registered = load_registry()[0]
    line = report.next_line("toy", "mean", "interrupted", registered, str(workdir))
    assert line == "next: toy / mean (interrupted): its grading was stopped before a verdict: kata grade toy:mean"


def test_a_passing_speed_task_shows_its_figure_against_the_bar(workdir):
    shutil.copy(SUBS / "correct" / "toy.py", workdir / "toy.py")
    result = CliRunner().invoke(main, ["grade", "--no-live"])
    fast = next(line for line in result.output.splitlines() if line.startswith("toy") and " fast " in line)
    assert "x (bar <= 5x)" in fast
    data = json.loads(CliRunner().invoke(main, ["grade", "--json"]).output)
    figure = data["katas"][0]["tasks"][2]["figures"][0]
    assert figure["bar"] == 5 and figure["better"] == "lower" and 0 < figure["value"] < 5


def test_figure_text_shows_the_direction_of_the_bar():
    assert report.figure_text({"value": 9.61, "bar": 5, "unit": "x", "better": "higher"}) == "9.61x (bar >= 5x)"
    assert (
        report.figure_text({"value": 3.05, "bar": 2.78, "unit": "tokens/call", "better": "higher"})
        == "3.05 tokens/call (bar >= 2.78 tokens/call)"
    )
    assert report.figure_text({"value": 0.9, "bar": 4, "unit": "x", "better": "lower"}) == "0.9x (bar <= 4x)"


def test_state_lives_next_to_the_learners_files(workdir):
    CliRunner().invoke(main, ["grade", "--no-live"])
    CliRunner().invoke(main, ["hint", "toy"])
    assert json.loads((workdir / ".kata" / "last_grade.json").read_text())["toy"]["mean"] == "todo"
    assert (workdir / ".kata" / "hints.json").is_file()
    listed = CliRunner().invoke(main, ["list"])
    assert "todo" in listed.output


def test_grading_one_task_keeps_the_other_tasks_statuses(workdir):
    shutil.copy(SUBS / "correct" / "toy.py", workdir / "toy.py")
    CliRunner().invoke(main, ["grade", "--no-live"])
    shutil.copy(SUBS / "stub" / "toy.py", workdir / "toy.py")
    CliRunner().invoke(main, ["grade", "toy:scale", "--no-live"])
    assert json.loads((workdir / ".kata" / "last_grade.json").read_text())["toy"] == {
        "mean": "pass",
        "scale": "todo",
        "fast": "pass",
    }
    listed = CliRunner().invoke(main, ["list"]).output.splitlines()
    assert listed[0] == "3/4 points  [##################......]  75%"
    assert listed[1].startswith("next: toy / scale (todo): ")
    assert [ln.split()[:2] for ln in listed if ln.startswith(" >")] == [[">", "scale"]]  # you are here
    assert "1. toy: Toy (nothing for testing), 3/4 pts" == listed[3]


@pytest.mark.slow  # a real `kata` process (or script) and its signals: the slow tests
def test_ctrl_c_keeps_the_previous_grade_and_kata_list_says_it_was_interrupted(workdir, tmp_path):
    """Ctrl-C at a terminal (SIGINT to the whole foreground group) in the middle of a grade: the
    table says `interrupted` for what it did not finish, no verdict is recorded for it, and `kata
    list` shows the grade before with the word interrupted, until a grade of the task finishes."""
    shutil.copy(SUBS / "correct" / "toy.py", workdir / "toy.py")
    assert CliRunner().invoke(main, ["grade", "--no-live"]).exit_code == 0
    shutil.copy(SUBS / "loop" / "toy.py", workdir / "toy.py")
    env = {"KATA_REGISTRY": os.environ["KATA_REGISTRY"], "KATA_WORKDIR": str(workdir), "KATA_STATE_DIR": ""}
    proc, _ = hanging_grade(
        tmp_path, ("toy",), env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in [row.split()[2] for row in out.decode().splitlines() if row.startswith("toy ")]
    state = json.loads((workdir / ".kata" / "last_grade.json").read_text())["toy"]
    assert state == {"mean": "pass", "scale": "pass", "fast": "pass"}
    listed = CliRunner().invoke(main, ["list"]).output
    assert "mean           2 pts  pass, then interrupted" in listed, listed
    shutil.copy(SUBS / "correct" / "toy.py", workdir / "toy.py")
    CliRunner().invoke(main, ["grade", "toy:mean", "--no-live"])
    listed = CliRunner().invoke(main, ["list"]).output
    assert "mean           2 pts  pass " in listed and "scale          1 pt   pass, then interrupted" in listed
    CliRunner().invoke(main, ["grade", "--no-live"])
    assert "interrupted" not in CliRunner().invoke(main, ["list"]).output


def test_reset_forgets_the_katas_grade_and_hint_position(tmp_path, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", "")  # the real katas, whose stubs reset restores
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path))
    monkeypatch.delenv("KATA_STATE_DIR", raising=False)
    state = tmp_path / ".kata"
    state.mkdir()
    (state / "last_grade.json").write_text(json.dumps({"kv_cache": {"cache": "pass"}, "moe": {"router": "fail"}}))
    for _ in range(2):
        CliRunner().invoke(main, ["hint", "kv_cache", "forward"])
    reset = CliRunner().invoke(main, ["reset", "kv_cache", "--yes"])
    assert reset.exit_code == 0 and "its grades and hints are forgotten" in reset.output, reset.output
    assert json.loads((state / "last_grade.json").read_text()) == {"moe": {"router": "fail"}}  # other katas kept
    assert "cache          3 pts  not graded yet" in CliRunner().invoke(main, ["list"]).output
    assert "hint 1/" in CliRunner().invoke(main, ["hint", "kv_cache", "forward"]).output


def test_kata_init_copies_the_stubs_and_checklist_and_never_overwrites(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    monkeypatch.delenv("KATA_WORKDIR", raising=False)
    dest = tmp_path / "mine"
    result = CliRunner().invoke(main, ["init", str(dest)])
    assert result.exit_code == 0, result.output
    assert f"copied 5 kata stubs and CHECKLIST.md to {dest}\n" in result.output
    assert "no KATA_WORKDIR needed" in result.output and "export" not in result.output
    assert (dest / "kv_cache.py").read_text() == stub_for("kv_cache")
    assert (dest / "CHECKLIST.md").read_text() == (ROOT / "CHECKLIST.md").read_text()
    assert (dest / "kata.toml").is_file()
    (dest / "moe.py").write_text("my work")
    again = CliRunner().invoke(main, ["init", str(dest)])
    assert again.exit_code == 1 and "already exists" in again.output
    assert (dest / "moe.py").read_text() == "my work"


def test_kata_init_keeps_a_checklist_already_there_and_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    monkeypatch.delenv("KATA_WORKDIR", raising=False)
    (tmp_path / "CHECKLIST.md").write_text("my notes")
    result = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "copied 5 kata stubs (CHECKLIST.md was there already: kept as it is)" in result.output
    assert (tmp_path / "CHECKLIST.md").read_text() == "my notes"


def test_commands_inside_an_initd_folder_keep_their_state_there_without_kata_workdir(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    monkeypatch.delenv("KATA_WORKDIR", raising=False)
    monkeypatch.delenv("KATA_STATE_DIR", raising=False)
    dest = tmp_path / "mine"
    assert CliRunner().invoke(main, ["init", str(dest)]).exit_code == 0
    (dest / "notes").mkdir()
    monkeypatch.chdir(dest / "notes")
    hint = CliRunner().invoke(main, ["hint", "moe", "router"])
    assert hint.exit_code == 0 and "moe / router, hint 1/" in hint.output
    assert json.loads((dest / ".kata" / "hints.json").read_text()) == {"moe/router": 1}
    (dest / "moe.py").write_text("my work")
    reset = CliRunner().invoke(main, ["reset", "moe", "--yes"])
    assert reset.exit_code == 0, reset.output
    assert (dest / "moe.py").read_text() == stub_for("moe")
    (backup,) = (dest / ".kata" / "backups").iterdir()
    assert backup.read_text() == "my work"


def test_kata_init_says_when_kata_workdir_wins_over_the_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("KATA_REGISTRY", raising=False)
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path))
    result = CliRunner().invoke(main, ["init", str(tmp_path / "mine")])
    assert result.exit_code == 0, result.output
    assert f"(KATA_WORKDIR is set, to {tmp_path}: it wins over the folder you are in" in result.output


def test_the_last_hint_says_it_was_the_last(workdir):
    outs = [CliRunner().invoke(main, ["hint", "toy", "mean"]).output for _ in range(3)]
    assert "hint 1/2" in outs[0] and "last hint" not in outs[0]
    assert "hint 2/2" in outs[1] and "(that was the last hint of this task)" in outs[1]
    assert "hint 2/2" in outs[2] and "--all" in outs[2]


def test_version_and_a_broken_registry_is_one_line(tmp_path, monkeypatch):
    version = CliRunner().invoke(main, ["--version"])
    assert version.exit_code == 0 and version.output.startswith("kata ")
    monkeypatch.setenv("KATA_REGISTRY", str(write_registry(tmp_path, {"toy": "[[kata]\nname = "})))
    for args in (["list"], ["grade"], ["hint", "toy"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "not valid TOML" in result.output and "Traceback" not in result.output
    monkeypatch.setenv("KATA_REGISTRY", str(tmp_path / "missing.toml"))
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 2 and "cannot read" in result.output


def test_colour_on_a_terminal_only_and_never_under_no_color(workdir, monkeypatch):
    coloured = CliRunner().invoke(main, ["grade", "--live"], color=True)
    assert "\x1b[" in coloured.output
    monkeypatch.setenv("NO_COLOR", "1")
    plain = CliRunner().invoke(main, ["grade", "--live"], color=True)
    assert "\x1b[" not in plain.output
    piped = CliRunner().invoke(main, ["grade", "--live"])
    assert "\x1b[" not in piped.output


def test_every_kata_command_runs_numpy_on_one_blas_thread():
    env = {k: v for k, v in os.environ.items() if k not in ONE_BLAS_THREAD}
    code = "import grader.cli.commands, os; print([os.environ[k] for k in sorted(grader.ONE_BLAS_THREAD)])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT).stdout
    assert out.strip() == "['1', '1', '1']"
    env["OMP_NUM_THREADS"] = "3"  # a caller's own choice is kept
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT).stdout
    assert out.strip() == "['1', '3', '1']"  # MKL, OMP, OPENBLAS


def test_the_benchmark_scripts_run_numpy_on_one_blas_thread(tmp_path):
    """NumPy reads the variables when it loads, before a script imports grader.measure.bench: so
    that module starts the script again with them set (each start logs what NumPy saw)."""
    script, log = tmp_path / "bench_probe.py", tmp_path / "starts.log"
    script.write_text(  # a benchmark as they all begin: numpy first, then the shared module
        "import os, sys\nimport numpy\n"
        f"open({str(log)!r}, 'a').write(repr([os.environ.get(k) for k in sorted({sorted(ONE_BLAS_THREAD)!r})]))\n"
        f"sys.path[:0] = [{str(ROOT)!r}]\n"
        "import grader.measure.bench\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ONE_BLAS_THREAD}
    env["MKL_NUM_THREADS"] = "2"  # a caller's own choice is kept
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    # MKL, OMP, OPENBLAS: first as called, then as NumPy loaded in the script's second start
    assert log.read_text() == "['2', None, None]['2', '1', '1']"


def test_a_kata_that_turns_fully_green_gets_its_recap_once_with_the_learners_figures(workdir):
    first = CliRunner().invoke(main, ["grade", "--no-live"])
    assert "is done" not in first.output
    shutil.copy(SUBS / "correct" / "toy.py", workdir / "toy.py")
    green = CliRunner().invoke(main, ["grade", "--no-live"])
    line = next(line for line in green.output.splitlines() if line.startswith("toy is done."))
    ratio = line.split("took ")[1].split("x")[0]
    assert 0 < float(ratio) < 20 and line.endswith("; ? else.")  # a key no check recorded shows as ?
    again = CliRunner().invoke(main, ["grade", "--no-live"])
    assert "is done" not in again.output


CHECK_HINT = "What should the mean of no numbers at all be: a number, or an error?"


@pytest.fixture
def hinted(workdir, tmp_path, monkeypatch):
    """The toy registry with a hint of its own on the empty-input check of task mean."""
    text = (Path(os.environ["KATA_REGISTRY"]) / "toy" / "kata.toml").read_text()
    second_task = text.index("  [[kata.task]]", text.index("  [[kata.task]]") + 1)
    text = (
        text[:second_task] + '  [[kata.task.check]]\n  tests = ["test_mean_of_empty_raises_value_error"]\n'
        f'  hint = "{CHECK_HINT}"\n\n' + text[second_task:]
    )
    monkeypatch.setenv("KATA_REGISTRY", str(write_registry(tmp_path / "hinted", {"toy": text})))
    return workdir


def mean_hint(output: str) -> str:
    data = json.loads(output)
    return next(t["hint"] for t in data["katas"][0]["tasks"] if t["name"] == "mean")


def test_a_failing_check_with_a_hint_of_its_own_shows_that_hint(hinted):
    shutil.copy(SUBS / "no_raise" / "toy.py", hinted / "toy.py")
    result = CliRunner().invoke(main, ["grade", "--json"])
    assert mean_hint(result.output) == CHECK_HINT


def test_otherwise_the_task_hint_shown_is_the_next_one_kata_hint_would_give(hinted):
    task_hints = load_registry()[0].task("mean").hints
    shutil.copy(SUBS / "nan" / "toy.py", hinted / "toy.py")  # fails the mean check, which has no hint of its own
    assert mean_hint(CliRunner().invoke(main, ["grade", "--json"]).output) == task_hints[0]
    CliRunner().invoke(main, ["hint", "toy", "mean"])
    assert mean_hint(CliRunner().invoke(main, ["grade", "--json"]).output) == task_hints[1]


def test_the_registry_refuses_a_check_hint_for_another_tasks_test(hinted):
    from grader.kata.registry import RegistryError

    path = Path(os.environ["KATA_REGISTRY"]) / "toy" / "kata.toml"
    path.write_text(
        path.read_text().replace(
            'tests = ["test_mean_of_empty_raises_value_error"]\n  hint',
            'tests = ["test_scale_multiplies_every_element"]\n  hint',
        )
    )
    with pytest.raises(RegistryError, match="must name one or more of the task's own tests"):
        load_registry()


def test_kata_bench_runs_your_code_by_default_and_says_in_one_line_it_is_unfinished(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "moe.py").write_text(stub_for("moe"))
    # It runs as `python -m grader.suites.moe.bench` in the folder kata ran in: nothing there is imported.
    (tmp_path / "numpy.py").write_text("raise SystemExit('the numpy.py of the start folder was imported')\n")
    env = {k: v for k, v in os.environ.items() if k != "KATA_REGISTRY"}
    env["KATA_WORKDIR"] = str(work)
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "bench", "moe"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "not written yet" in done.stderr and "--target reference" in done.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_kata_bench_kata_help_is_the_benchmarks_own_and_kata_bench_help_is_the_commands(flag):
    # as its help says ("--help lists the rest"): click took --help for its own, after the kata's name too
    def bench(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "grader.cli", "bench", *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    kata_help = bench("moe", flag)
    assert "--native-blas" in kata_help and "bench [OPTIONS] KATA [ARGS]" not in kata_help
    assert "bench [OPTIONS] KATA [ARGS]" in bench(flag)


@pytest.mark.slow  # a real `kata` process (or script) and its signals: the slow tests
def test_kata_bench_draws_its_figures_with_plot_and_refuses_other_kinds_of_file(tmp_path):
    def bench(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "grader.cli", "bench", "distillation", "--target", "reference", *args]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)

    drawn = bench("--steps", "3", "--plot", "students.svg")  # relative to the caller's folder
    assert drawn.returncode == 0, drawn.stderr
    picture = (tmp_path / "students.svg").read_text()
    assert picture.lstrip().startswith("<?xml") and "soft targets" in picture and "hard labels" in picture
    refused = bench("--plot", "students.pdf")
    assert refused.returncode == 2 and "must be a .png or .svg file" in refused.stderr
    nowhere = bench("--plot", str(tmp_path / "no such folder" / "students.svg"))
    assert nowhere.returncode == 2 and "no such folder does not exist; create it first" in nowhere.stderr
    assert not (tmp_path / "no such folder").exists()


def test_plot_without_matplotlib_is_refused_before_any_work(tmp_path):
    """--plot is checked as the options are read, not after a minute of measuring: without matplotlib the
    script stops at once (exit 2) saying what to install. (The script runs with matplotlib hidden from it,
    on one BLAS thread already, so that it does not start itself again.)"""
    hide = (
        "import importlib.util, runpy, sys; real = importlib.util.find_spec; "
        "importlib.util.find_spec = lambda name, *a: None if name == 'matplotlib' else real(name, *a); "
        f"sys.argv = ['bench.py', '--target', 'reference', '--plot', 'x.png']; "
        f"runpy.run_path({str(ROOT / 'grader' / 'suites' / 'distillation' / 'bench.py')!r}, run_name='__main__')"
    )
    env = {**os.environ, **ONE_BLAS_THREAD}
    ran = subprocess.run(
        [sys.executable, "-c", hide], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60
    )
    assert ran.returncode == 2 and "drawing needs matplotlib, which is not installed" in ran.stderr, ran.stderr
    assert not (tmp_path / "x.png").exists()
