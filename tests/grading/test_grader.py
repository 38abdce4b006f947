"""The grader's own tests, on a toy kata and fixture submissions (as rustlings
tests its tool on fixture exercises): every way learner code can go wrong is
reported with the right status, and the other katas are still graded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from grader.cli import learner
from grader.cli.commands import main
from grader.judge.events import INTERRUPTED_MESSAGE, Event, EventKind
from grader.kata.registry import find_kata, load_registry, suite_modules
from grader.kata.stubs import stub_for
from grader.kata.target import SOLUTIONS_DIR
from grader.output import report
from grader.run import judges, runner
from grader.run.results import Limits
from grader.run.runner import grade, grade_kata

from helpers import FAST, HANG, SETTLE, SUBS, TOY, TOY_KATAS, hanging_grade, wait_for_processes, write_registry

# Short limits so the hang and loop fixtures finish quickly.


@pytest.fixture(scope="module")
def toy():
    return load_registry(TOY_KATAS)[0]


def statuses(toy, sub: str) -> dict[str, str]:
    result = grade_kata(toy, str(SUBS / sub), limits=FAST)
    return {t.name: t.status for t in result.tasks}


def test_a_correct_submission_passes_every_task(toy):
    assert statuses(toy, "correct") == {"mean": "pass", "scale": "pass", "fast": "pass"}


def test_the_untouched_stub_is_todo_everywhere(toy):
    assert statuses(toy, "stub") == {"mean": "todo", "scale": "todo", "fast": "todo"}


def test_a_correct_but_slow_submission_is_slow_only_on_the_speed_task(toy):
    assert statuses(toy, "slow") == {"mean": "pass", "scale": "pass", "fast": "slow"}


def test_a_speed_check_reports_the_figure_it_measured_against_its_bar(toy):
    fast = {t.name: t for t in grade_kata(toy, str(SUBS / "correct"), limits=FAST).tasks}["fast"]
    slow = {t.name: t for t in grade_kata(toy, str(SUBS / "slow"), limits=FAST).tasks}["fast"]
    assert [(f["name"], f["bar"], f["better"]) for f in fast.figures] == [("mean_of time over np.mean", 5.0, "lower")]
    assert 0 < fast.figures[0]["value"] < 5 < slow.figures[0]["value"]


def test_a_result_line_keeps_only_well_formed_figures():
    line = Event(
        EventKind.RESULT,
        id="x",
        figures=[{"name": "a", "value": 2, "bar": 5, "better": "lower"}, {"value": "9"}, "junk"],
    ).to_line()
    assert Event.from_line(line).figures == [
        {"name": "a", "value": 2.0, "bar": 5.0, "unit": "", "better": "lower", "key": ""}
    ]


def test_an_infinite_loop_times_out_names_the_line_it_was_in_and_the_other_tasks_are_still_graded(toy):
    result = grade_kata(toy, str(SUBS / "loop"), limits=HANG)
    assert {t.name: t.status for t in result.tasks} == {"mean": "timeout", "scale": "pass", "fast": "timeout"}
    # The loop is lines 5-6 of the module (`while True: pass`); faulthandler's dump is not shown as printed.
    assert re.search(r"time limit \(it was running toy\.py:[56] in mean_of\)$", result.tasks[0].message)
    assert not any(f["printed"] for t in result.tasks for f in t.failures)


def test_a_check_not_run_after_a_timeout_leaves_the_next_modules_checks_graded_on_their_merits(tmp_path):
    """A task's checks after one that timed out are not run; the check before kept its module's fixtures for
    the one not run, and they must go before a check of the next module starts, or pytest fails that check
    ("previous item was not torn down properly"): here the learner's correct top_k."""
    source = (SOLUTIONS_DIR / "moe.py").read_text(encoding="utf-8")
    head = "def router_probs("
    assert source.count(head) == 1
    body = source.index('"""', source.index('"""', source.index(head)) + 3) + 3  # after its docstring
    (tmp_path / "moe.py").write_text(source[:body] + "\n    while True:\n        pass\n" + source[body:])
    moe = next(k for k in load_registry() if k.name == "moe")
    result = grade_kata(moe, str(tmp_path), tasks=["router", "top_k"], limits=HANG)
    assert {t.name: t.status for t in result.tasks} == {"router": "timeout", "top_k": "pass"}, [
        t.message for t in result.tasks
    ]


def test_a_segfault_crashes_only_the_checks_it_happens_in(toy):
    assert statuses(toy, "segfault") == {"mean": "crash", "scale": "pass", "fast": "crash"}


@pytest.mark.parametrize(
    "submission, says",
    [("exit_at_import", "SystemExit"), ("syntax", "syntax error at line")],
    ids=["sys.exit at import", "a syntax error names its line"],
)
def test_a_module_that_cannot_load_is_an_error_on_every_task_that_says_why(toy, submission, says):
    result = grade_kata(toy, str(SUBS / submission), limits=FAST)
    assert {t.status for t in result.tasks} == {"error"}
    assert says in result.tasks[0].message


def test_os_exit_inside_a_test_is_a_crash_of_that_check(toy):
    assert statuses(toy, "os_exit") == {"mean": "pass", "scale": "crash", "fast": "pass"}


def test_a_huge_allocation_is_an_error_within_the_memory_limit(toy):
    result = grade_kata(toy, str(SUBS / "huge_alloc"), limits=FAST)
    assert {t.name: t.status for t in result.tasks} == {"mean": "error", "scale": "pass", "fast": "error"}
    assert "out of memory" in result.tasks[0].message


def test_flooding_stdout_is_an_error_not_a_hang(toy):
    result = grade_kata(toy, str(SUBS / "flood"), limits=FAST)
    assert {t.name: t.status for t in result.tasks} == {"mean": "pass", "scale": "error", "fast": "pass"}
    assert "printed more than" in result.tasks[1].message


def test_a_wrong_shape_fails_with_the_suites_message(toy):
    result = grade_kata(toy, str(SUBS / "wrong_shape"), limits=FAST)
    assert result.tasks[1].status == "fail"
    assert result.tasks[1].message == "scale returned shape (6,), expected (2, 3)"


def test_nan_output_fails_and_reports_a_minimal_example(toy):
    result = grade_kata(toy, str(SUBS / "nan"), limits=FAST)
    mean = result.tasks[0]
    assert mean.status == "fail"
    assert any(
        f["example"] == "toy.mean_of(array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=float32))" for f in mean.failures
    ), "the failing call of the learner's function, as Hypothesis shrank it"


@pytest.mark.parametrize("sub", ["patch_numpy", "patch_suite"])
def test_patching_the_judges_changes_nothing_the_wrong_answers_fail(toy, sub):
    # The suite and numpy.testing live in the judge; the patch reaches only the jail's copies.
    result = grade_kata(toy, str(SUBS / sub), limits=FAST)
    assert result.score == 0
    assert {t.status for t in result.tasks} == {"fail"}
    assert "while being timed" in result.tasks[2].message


def test_a_conftest_py_above_the_suite_never_runs_in_the_judge(tmp_path):
    # A learner who works in a checkout can write a file above the suites (its root's conftest.py). pytest with no
    # configuration file imports every conftest.py from / down to the suite: into the judge, which decides the points.
    planted = tmp_path / "planted"
    (tmp_path / "conftest.py").write_text(f"open({str(planted)!r}, 'w').close()\n")
    folder = tmp_path / "katas" / "toy"
    folder.mkdir(parents=True)
    for name in ("kata.toml", "test_toy.py", "conftest.py", "baseline_toy.py"):
        (folder / name).write_text((TOY / name).read_text())
    graded = grade_kata(load_registry(folder.parent)[0], str(SUBS / "stub"), tasks=["mean"], limits=FAST)
    assert [(t.name, t.status) for t in graded.tasks] == [("mean", "todo")]
    assert not planted.exists()


def test_the_callers_settings_for_pytest_never_reach_the_judge(toy, tmp_path, monkeypatch):
    # Exported for one's own tests: -x would stop the grading at the toy's first failing check, and a plugin named
    # there would be imported into the judge.
    planted = tmp_path / "planted"
    (tmp_path / "planted_plugin.py").write_text(f"open({str(planted)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PYTEST_PLUGINS", "planted_plugin")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x -p planted_plugin")
    graded = grade_kata(toy, str(SUBS / "nan"), tasks=["mean", "scale"], limits=FAST)
    assert {t.name: t.status for t in graded.tasks} == {"mean": "fail", "scale": "pass"}
    assert not planted.exists()


def test_importing_the_reference_solution_is_an_error(toy):
    result = grade_kata(toy, str(SUBS / "uses_solution"), limits=FAST)
    assert {t.status for t in result.tasks} == {"error"}
    assert "uses the reference solution" in result.tasks[0].message


def test_a_crashing_kata_never_loses_another_katas_results(toy, tmp_path):
    # Two katas graded in parallel: one segfaults, the other must still pass.
    registry = (TOY / "kata.toml").read_text().replace('suite = "test_toy.py"', f'suite = "{TOY / "test_toy.py"}"')
    other = registry.replace('name = "toy"', 'name = "toy2"').replace("order = 1", "order = 2")
    other = other.replace(f'suite = "{TOY / "test_toy.py"}"', 'suite = "test_toy2.py"', 1)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "toy.py").write_text((SUBS / "segfault" / "toy.py").read_text())
    (tmp_path / "sub" / "toy2.py").write_text((SUBS / "correct" / "toy.py").read_text())
    # toy2's suite loads module "toy"; give it a suite file of its own that loads "toy2".
    folder = write_registry(tmp_path / "katas", {"toy": registry, "toy2": other})
    suite2 = folder / "toy2" / "test_toy2.py"
    suite2.write_text((TOY / "test_toy.py").read_text().replace('load_kata("toy")', 'load_kata("toy2")'))
    (folder / "toy2" / "conftest.py").write_text((TOY / "conftest.py").read_text())
    (folder / "toy2" / "baseline_toy.py").write_text((TOY / "baseline_toy.py").read_text())
    katas = load_registry(folder)
    result = grade(list(katas), str(tmp_path / "sub"), jobs=2, limits=FAST)
    by_name = {k.name: k for k in result.katas}
    assert by_name["toy"].tasks[0].status == "crash"
    assert [t.status for t in by_name["toy2"].tasks] == ["pass", "pass", "pass"]


def test_the_same_code_and_seed_give_the_same_json_apart_from_timings(toy):
    def strip(result):
        data = report.as_json(result)
        data.pop("duration")
        for k in data["katas"]:
            k.pop("duration")
        return data

    first = strip(grade([toy], str(SUBS / "nan"), seed=3, limits=FAST))
    again = strip(grade([toy], str(SUBS / "nan"), seed=3, limits=FAST))
    assert first == again


# ------------------------------------------------------------------- the CLI


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", str(TOY_KATAS))
    monkeypatch.setenv("KATA_STATE_DIR", str(tmp_path / "state"))
    return CliRunner()


def test_grade_exits_0_with_full_marks_for_a_correct_submission(cli):
    result = cli.invoke(main, ["grade", "--target", str(SUBS / "correct")])
    assert result.exit_code == 0, result.output
    assert "total: 4/4 points" in result.output


def test_grade_exits_1_when_any_task_does_not_pass(cli):
    result = cli.invoke(main, ["grade", "--target", str(SUBS / "stub")])
    assert result.exit_code == 1
    assert "todo" in result.output


def test_grade_of_an_unknown_kata_exits_2_and_lists_the_valid_ones(cli):
    result = cli.invoke(main, ["grade", "nope"])
    assert result.exit_code == 2
    assert "the katas are: toy" in result.output


def test_grade_json_has_the_documented_shape(cli):
    result = cli.invoke(main, ["grade", "--json", "--target", str(SUBS / "wrong_shape")])
    data = json.loads(result.output)
    assert {"score", "max_score", "seed", "target", "katas"} <= set(data)
    task = data["katas"][0]["tasks"][1]
    assert {"name", "status", "score", "max_score", "checks_passed", "checks_total", "message"} <= set(task)
    assert (task["name"], task["status"], task["score"]) == ("scale", "fail", 0)
    assert data["score"] == 3 and data["max_score"] == 4


def test_grade_writes_gradescope_results(cli, tmp_path):
    out = tmp_path / "results.json"
    cli.invoke(main, ["grade", "--target", str(SUBS / "wrong_shape"), "--gradescope", str(out)])
    data = json.loads(out.read_text())
    assert data["score"] == 3 and "execution_time" in data
    assert all({"name", "score", "max_score", "status", "output", "visibility"} <= set(t) for t in data["tests"])
    assert [t["status"] for t in data["tests"]] == ["passed", "failed", "passed"]


def test_grade_verbose_shows_the_message_and_the_first_hint(cli):
    result = cli.invoke(main, ["grade", "-v", "--target", str(SUBS / "wrong_shape")])
    assert "scale returned shape (6,), expected (2, 3)" in result.output
    assert "hint: What shape should come back?" in result.output


def test_list_shows_not_graded_yet_then_the_last_status(cli):
    assert "not graded yet" in cli.invoke(main, ["list"]).output
    cli.invoke(main, ["grade"])  # the toy kata's stub is not in katas/: every task errors
    listing = cli.invoke(main, ["list"]).output
    assert "not graded yet" not in listing
    assert "error" in listing


def test_hint_gives_the_next_hint_on_each_call_then_stays_on_the_last(cli):
    outputs = [cli.invoke(main, ["hint", "toy", "mean"]).output for _ in range(3)]
    assert "hint 1/2: What does the mean divide by?" in outputs[0]
    assert "hint 2/2" in outputs[1] and "hint 2/2" in outputs[2]


def test_hint_all_shows_every_hint(cli):
    output = cli.invoke(main, ["hint", "toy", "scale", "--all"]).output
    assert "hint 1/2" in output and "hint 2/2" in output


def test_hint_for_an_unknown_task_names_the_tasks(cli):
    result = cli.invoke(main, ["hint", "toy", "nope"])
    assert result.exit_code == 2
    assert "mean, scale, fast" in result.output


def walk(group, path=()):
    yield path, group
    for name, cmd in getattr(group, "commands", {}).items():
        yield from walk(cmd, path + (name,))


def test_every_command_and_option_has_help():
    for path, cmd in walk(main):
        assert cmd.help, f"kata {' '.join(path)} has no help text"
        for param in cmd.params:
            if param.param_type_name == "option":
                assert param.help, f"option {param.opts} of kata {' '.join(path)} has no help text"
        assert CliRunner().invoke(main, [*path, "--help"]).exit_code == 0


def test_reset_asks_first_and_leaves_the_file_alone_when_told_no(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", "")  # the real katas
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path))
    mine = tmp_path / "kv_cache.py"
    mine.write_text("my work\n")
    monkeypatch.setattr(learner, "_has_terminal", lambda: True)
    result = cli.invoke(main, ["reset", "kv_cache"], input="n\n")
    assert result.exit_code == 1
    assert mine.read_text() == "my work\n"


def test_reset_without_a_terminal_to_ask_on_says_to_pass_yes(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("KATA_REGISTRY", "")
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path))
    (tmp_path / "kv_cache.py").write_text("my work\n")
    result = cli.invoke(main, ["reset", "kv_cache"])  # CliRunner's stdin is no terminal
    assert result.exit_code == 2 and "run kata reset kv_cache --yes" in result.output, result.output
    assert "Aborted" not in result.output and (tmp_path / "kv_cache.py").read_text() == "my work\n"


def test_a_demo_name_mistyped_is_a_usage_error_that_names_the_demo(cli):
    result = cli.invoke(main, ["play", "cach"])
    assert result.exit_code == 2 and "did you mean cache?" in result.output, result.output
    assert "kata play write cach" in result.output
    assert cli.invoke(main, ["play", "-n", "3"]).exit_code == 0  # no argument: the default demo, nothing to match


def test_reset_restores_the_stub_and_backs_up_the_learners_file(cli, tmp_path, monkeypatch):
    from grader.kata.stubs import stub_for

    monkeypatch.setenv("KATA_REGISTRY", "")
    monkeypatch.setenv("KATA_WORKDIR", str(tmp_path))
    mine = tmp_path / "kv_cache.py"
    mine.write_text("my work\n")
    result = cli.invoke(main, ["reset", "kv_cache", "--yes"])
    assert result.exit_code == 0, result.output
    assert mine.read_text() == stub_for("kv_cache")
    backups = list((tmp_path / "state" / "backups").glob("kv_cache-*.py"))
    assert [b.read_text() for b in backups] == ["my work\n"]


@pytest.mark.parametrize("text", ["DID NOT RAISE <class 'ValueError'>", "DID NOT RAISE ValueError"])
def test_a_missing_exception_reads_the_same_whatever_pytest_version_wrote_it(text):
    from grader.judge.judge import _fail_message

    assert _fail_message(text) == "expected ValueError, but the call returned without raising it"
    assert _fail_message("something else") == "something else"


def test_a_missing_exception_is_a_failed_check_not_an_error(toy):
    result = grade_kata(toy, str(SUBS / "no_raise"), limits=FAST)
    assert result.tasks[0].status == "fail"
    assert result.tasks[0].message == "expected ValueError, but the call returned without raising it"


def test_play_continues_the_prompt_with_and_without_the_cache_identically():
    runner = CliRunner()
    cached = runner.invoke(main, ["play", "Return the ", "-n", "12"])
    naive = runner.invoke(main, ["play", "Return the ", "-n", "12", "--no-cache"])
    assert cached.exit_code == 0 and naive.exit_code == 0, cached.output + naive.output
    first_line = cached.output.splitlines()[0]
    assert first_line.startswith("Return the ")
    assert first_line == naive.output.splitlines()[0]


def test_play_refuses_more_characters_than_the_model_holds():
    result = CliRunner().invoke(main, ["play", "x", "-n", "100000"])
    assert result.exit_code == 2  # a usage error: what was asked, not what some code did
    assert "100000 new characters do not fit: the model holds 256 in all" in result.output


@pytest.mark.slow  # a real `kata` process (or script) and its signals: the slow tests
def test_kata_test_runs_the_suite_under_plain_pytest_and_passes_its_exit_code_on(cli, tmp_path):
    """...and shows what the kata module printed during a failing check as a section of pytest's report,
    escaped, each line led by '| ', its end (where the replay of the failing example Hypothesis settled on
    prints: x = [1.0] * 7); a passing check's prints are not shown."""
    correct = cli.invoke(main, ["test", "toy", "--target", str(SUBS / "correct"), "--", "-q"])
    env = {**os.environ, "KATA_REGISTRY": str(TOY_KATAS), "KATA_STATE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "grader", "test", "toy", "--target", str(SUBS / "prints"), "--", "-q", "-k", "mean"]
    prints = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert (correct.exit_code, prints.returncode) == (0, 1), prints.stdout + prints.stderr
    out = prints.stdout
    assert "what the kata module printed (call)" in out and "| mean_of got 7 values, the first 1.0\n" in out, out
    assert "\x1b" not in out and "\\x1b[2J\\x1b[Htoy / mean  pass" in out and "scale is right" not in out


def test_an_infinite_loop_at_import_times_out_every_check_without_waiting_for_the_kata_limit(toy):
    result = grade_kata(toy, str(SUBS / "loop_at_import"), limits=HANG)
    assert {t.status for t in result.tasks} == {"timeout"}
    assert "importing the kata module" in result.tasks[0].message
    assert re.search(r"\(it was running toy\.py:[12] in <module>\)$", result.tasks[0].message)
    assert result.duration < HANG.kata_seconds, "waited for the whole kata limit instead of one check limit"


def test_ctrl_c_stops_every_judge_and_jail_prints_what_was_graded_and_exits_130(tmp_path):
    proc, scratch = hanging_grade(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()
    assert b"kata" in out and b"task" in out, "no table of what was graded so far"
    assert b"interrupted" in err
    assert not wait_for_processes(scratch, present=False, seconds=SETTLE), (
        "a judge or a jail outlived the interrupted grading"
    )


def _judge_servers_of(pid: int) -> list[int]:
    """The judge servers process pid started."""
    found = []
    for child in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{child}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and b"grader.judge.judge_server" in cmd:
            found.append(int(child))
    return found


@pytest.mark.slow  # a real `kata` process (or script) and its signals: the slow tests
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_killing_kata_leaves_no_judge_jail_or_judge_server_behind(tmp_path, sig):
    proc, scratch = hanging_grade(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers = _judge_servers_of(proc.pid)
    assert len(servers) == 1, f"kata started {len(servers)} judge servers, not one"
    proc.send_signal(getattr(signal, sig))
    proc.wait(timeout=30)
    assert not wait_for_processes(scratch, present=False, seconds=SETTLE), (
        f"a judge or a jail outlived kata killed by {sig}"
    )
    deadline = time.monotonic() + SETTLE
    while os.path.exists(f"/proc/{servers[0]}") and _state(servers[0]) != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{servers[0]}") or _state(servers[0]) == "Z", (
        f"the judge server outlived kata killed by {sig}"
    )


def _state(pid: int) -> str:
    """The one-letter state of process pid ('Z' for a zombie), or '' once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_one_judge_server_forks_every_judge_and_a_new_one_replaces_it_if_it_dies(toy):
    def grades_correctly() -> bool:
        return {t.status.value for t in grade_kata(toy, str(SUBS / "correct"), limits=FAST).tasks} == {"pass"}

    assert grades_correctly()
    server = runner.default_grader().judge_server().proc
    assert grades_correctly() and runner.default_grader().judge_server().proc is server, (
        "a second grading started another judge server"
    )
    server.kill()
    server.wait(timeout=SETTLE)
    assert grades_correctly(), "grading failed after its judge server died"
    assert runner.default_grader().judge_server().proc.pid != server.pid


def test_stopping_one_grading_leaves_another_in_the_same_process_running(toy):
    """Each grading has its own cancel event: setting one stops that grading
    (its judge killed, its checks not run said to be interrupted) and not a
    grading running beside it on the same Grader."""
    stop_looping, results = threading.Event(), {}

    def looping():
        # Limits far past the waits below: only the cancel event can end this grading in time.
        results["loop"] = runner.grade([toy], str(SUBS / "loop"), limits=Limits(600, 900), cancel=stop_looping)

    thread = threading.Thread(target=looping, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while runner.default_grader().running() == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # its judge is in the looping check
    stop_looping.set()
    assert {t.status.value for t in grade_kata(toy, str(SUBS / "correct"), limits=FAST).tasks} == {"pass"}
    thread.join(timeout=4 * SETTLE)  # a stopped grading ends in seconds; one not stopped would run 600 s
    assert not thread.is_alive(), "setting the cancel event did not stop the grading"
    stopped = results["loop"]
    assert stopped.interrupted
    assert any(INTERRUPTED_MESSAGE in t.message for k in stopped.katas for t in k.tasks)


def test_grade_many_grades_each_job_with_its_own_seed_and_tells_each_as_it_ends(toy):
    jobs = [runner.Job(toy, str(SUBS / "correct"), seed=3), runner.Job(toy, str(SUBS / "stub"), tasks=("mean",))]
    told = []
    graded = runner.grade_many(jobs, workers=2, limits=FAST, on_done=lambda job, result: told.append(job))
    assert not graded.interrupted and sorted(map(id, told)) == sorted(map(id, jobs))
    first, second = graded.results
    assert {t.status.value for t in first.tasks} == {"pass"}
    assert [(t.name, t.status.value) for t in second.tasks] == [("mean", "todo")]
    cancelled = threading.Event()
    cancelled.set()
    nothing = runner.grade_many(jobs, limits=FAST, cancel=cancelled)
    assert nothing.interrupted and nothing.results == [None, None]


def test_the_gradescope_file_appears_whole_and_agrees_with_the_json(cli, tmp_path):
    out = tmp_path / "results.json"
    result = cli.invoke(main, ["grade", "--json", "--target", str(SUBS / "wrong_shape"), "--gradescope", str(out)])
    data, scope = json.loads(result.output), json.loads(out.read_text())
    assert data["version"] >= 2 and scope["score"] == data["score"]
    assert [t["score"] for t in scope["tests"]] == [t["score"] for k in data["katas"] for t in k["tasks"]]
    assert not list(tmp_path.glob(".results.json.*")), "a temporary file was left behind"


def test_a_relative_target_is_the_callers_directory_for_grade_and_test(cli, tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "toy.py").write_text((SUBS / "correct" / "toy.py").read_text())
    monkeypatch.chdir(tmp_path)
    graded = cli.invoke(main, ["grade", "--target", "sub"])
    tested = cli.invoke(main, ["test", "toy", "--target", "sub", "--", "-q"])
    assert graded.exit_code == 0, graded.output
    assert tested.exit_code == 0, tested.output


def test_grading_draws_take_no_constants_from_the_projects_own_modules():
    """The suites' draws depend on the suites alone: not on constants Hypothesis
    would collect from grader/ and reference/ (local in an editable install,
    not in an installed package)."""
    pytest.importorskip("hypothesis.internal.conjecture.providers")
    from hypothesis.internal.conjecture import providers

    from grader.suites import common

    common.draw_from_the_suites_alone()
    constants = providers._get_local_constants()
    assert not any(constants.set_for_type(kind) for kind in ("integer", "float", "string", "bytes"))


def _graded(result) -> list[tuple]:
    return [(t.name, t.status, t.checks_passed, t.checks_total, t.message) for t in result.tasks]


def test_a_batch_grades_each_target_as_a_judge_of_its_own_would(toy):
    # Fail-fast gradings of the mean task alone stop at its first check and never run its last: the
    # grading after each must still get none of their fixtures (the module-scoped `toy` proxy) or jails.
    # (The speed task, the slowest to grade, only where its verdict differs: correct and nan.)
    gradings = [runner.Grading(str(SUBS / "nan"), ("mean",)), runner.Grading(str(SUBS / "correct"))]
    gradings += [
        runner.Grading(str(SUBS / s), ("mean", "scale")) for s in ("wrong_shape", "syntax", "stub", "no_raise")
    ]
    gradings += [runner.Grading(str(SUBS / "nan")), runner.Grading(str(SUBS / "correct"), ("mean",))]
    batch = runner.grade_batch(toy, gradings, limits=FAST, fail_fast=True)
    alone = [grade_kata(toy, g.target, tasks=list(g.tasks) or None, limits=FAST, fail_fast=True) for g in gradings]
    assert [_graded(b) for b in batch] == [_graded(a) for a in alone]
    assert [t.status for t in batch[1].tasks] == ["pass"] * 3 and batch[0].tasks[0].status == "fail"
    assert [t.status for t in batch[-2].tasks] == ["fail", "pass", "fail"] and batch[-1].tasks[0].status == "pass"


def test_a_grading_of_some_tasks_collects_only_the_suite_modules_that_hold_their_checks(monkeypatch, tmp_path):
    """A judge that grades some tasks of a kata (kata grade KATA:TASK, kata watch, an interview) is handed the
    test modules that hold their checks, not the whole suite, and grades the same checks the same."""
    kata = find_kata("moe")
    (tmp_path / "moe.py").write_text(stub_for("moe"))
    argvs = []
    made = runner.judge_argv
    monkeypatch.setattr(runner, "judge_argv", lambda *args: argvs.append(made(*args)) or argvs[-1])
    some = ["capacity", "losses"]
    held = grade_kata(kata, str(tmp_path), tasks=some, limits=FAST)
    monkeypatch.setattr(judges, "_holding", lambda *args: [])  # the whole suite collected, as before --modules
    whole = grade_kata(kata, str(tmp_path), tasks=some, limits=FAST)
    modules = argvs[0][argvs[0].index("--modules") + 1 :]
    assert 0 < len(modules) < len(suite_modules(kata.suite)) and "--modules" not in argvs[1]

    def graded(result):
        return [(t.name, t.status, t.checks_total, sorted(f["test"] for f in t.failures)) for t in result.tasks]

    assert graded(held) == graded(whole) and [t[0] for t in graded(held)] == some
    assert all(t[2] > 1 and t[1] == "todo" for t in graded(held))


def test_a_batch_grades_only_the_checks_it_names(toy):
    graded = runner.grade_batch(
        toy,
        [
            runner.Grading(str(SUBS / "nan"), ("mean",), ("test_mean_matches_a_float64_sum",)),
            runner.Grading(str(SUBS / "nan"), ("mean",), ("test_nope",)),
        ],
        limits=FAST,
    )
    assert [(t.status, t.checks_total) for t in graded[0].tasks] == [("fail", 1)]
    assert [(t.status, t.message) for t in graded[1].tasks] == [("error", "the task has no check named test_nope")]


def test_what_a_failing_check_printed_shows_under_it_escaped_and_pytests_words_on_request(cli):
    """A learner's print() in a function a check fails shows under that check in `kata grade -v`: the prints of
    the failing example Hypothesis settled on, not of every example it tried, stdout and stderr as written,
    control characters escaped so that no print can clear the screen or forge a row. A passing check's prints
    are not shown. -vv adds pytest's own words: its assertion text and Hypothesis's failing case, verbatim,
    and in place of Hypothesis's advice to decorate the test function (the grader's, not the learner's), the
    command that shows the case again."""
    verbose = cli.invoke(main, ["grade", "--target", str(SUBS / "prints"), "-v", "--no-live"])
    assert verbose.exit_code == 1, verbose.output
    out = verbose.output
    assert "\x1b" not in out and "\\x1b[2J\\x1b[Htoy / mean  pass  (a forged row)" in out
    mean = out[out.index("toy / mean: fail") : out.index("hint:", out.index("toy / mean: fail"))]
    assert "your code printed:" in mean and mean.count("mean_of got 7 values") == 1, mean
    assert "scale is right" not in out and "pytest says:" not in out

    words = cli.invoke(main, ["grade", "--target", str(SUBS / "prints"), "-vv", "--no-live"])
    said = words.output[words.output.index("pytest says:") :]
    assert "AssertionError" in said and "@reproduce_failure(" not in said, said
    again = f"kata grade toy:mean -vv --seed 0 --target {SUBS / 'prints'}"
    assert f"To see this test case again: {again} (the same code and seed" in said
    assert "on your test function" not in said
    assert "test_mean_matches_a_float64_sum(" in said  # Hypothesis's failing case names the check


def test_a_gradescope_path_that_cannot_be_written_is_refused_before_any_grading(cli, tmp_path):
    (tmp_path / "a file").write_text("")
    refused = cli.invoke(
        main, ["grade", "--target", str(SUBS / "loop"), "--gradescope", str(tmp_path / "a file" / "r.json")]
    )
    assert refused.exit_code == 2 and "is a file, not a folder" in refused.output and "grading" not in refused.output
