"""`kata interview`, driven end to end through the CLI with a fake clock:
the workspace holds only what it should and never the answer, every attempt
is logged, time-up freezes the code, and the report lists the attempts and
the follow-up questions. Grading a real kata takes about a second per task,
so the whole interview below is graded once and its outputs shared."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
import shutil
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli.commands import main
from grader.interview import seal
from grader.interview import session as interview
from grader.kata.registry import RegistryError, load_presets, load_registry
from grader.kata.target import SOLUTIONS_DIR

from helpers import TOY, parsed, write_registry

KATAS = load_registry()
SEED = 987654321  # distinctive enough that finding it in an output means it was printed
CANDIDATE = "Ada Lovelace"


class FakeClock(interview.Clock):
    """A clock that moves only when the test says so."""

    def __init__(self):
        self.t = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)

    def now(self) -> datetime:
        return self.t

    def advance(self, minutes: float) -> None:
        self.t += timedelta(minutes=minutes)


def run(clock: FakeClock, *args: str, workspace: Path | None = None):
    env = {"KATA_WORKDIR": str(workspace)} if workspace else {}
    return CliRunner().invoke(main, list(args), obj=clock, env=env)


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------ one whole interview


# One xdist worker runs the whole module, so its module-scoped grades are made once.
pytestmark = pytest.mark.xdist_group("test_interview")


@pytest.fixture(scope="module", autouse=True)
def key(tmp_path_factory):
    """The interview key, in a folder of its own outside every workspace (never the user's own)."""
    path = tmp_path_factory.mktemp("key") / "state" / "interview.key"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(seal.KEY_ENV, str(path))
        yield path


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """moe / capacity in 30 minutes for a named candidate: a grade of the stub at 5:00,
    a hint at 6:00 and another at 7:00, the reference dropped in and graded at 10:00,
    a grade at 35:00 (time is up), one more after; `kata list` during and after."""
    clock = FakeClock()
    ws = tmp_path_factory.mktemp("interview") / "ws"
    out = {"ws": ws, "clock": clock}
    out["start"] = run(
        clock, "interview", "moe", "capacity", "--minutes", "30", "--dir", str(ws), "--seed", str(SEED),
        "--candidate", CANDIDATE,
    )  # fmt: skip
    out["files_at_start"] = files_in(ws)
    out["stub"] = (ws / "moe.py").read_text()
    clock.advance(5)
    out["grade_stub"] = run(clock, "grade", "-v", workspace=ws)
    clock.advance(1)
    out["hint_next"] = run(clock, "hint", "moe", workspace=ws)
    clock.advance(1)
    out["hint_named"] = run(clock, "hint", "moe", "capacity", workspace=ws)
    shutil.copyfile(SOLUTIONS_DIR / "moe.py", ws / "moe.py")
    clock.advance(3)
    out["grade_solution"] = run(clock, "grade", "-v", workspace=ws)
    out["list_during"] = run(clock, "list", workspace=ws)
    clock.advance(25)
    out["grade_late"] = run(clock, "grade", workspace=ws)
    out["grade_after"] = run(clock, "grade", workspace=ws)
    out["list_after"] = run(clock, "list", workspace=ws)
    out["log"] = [json.loads(line) for line in (ws / ".interview" / "log.jsonl").read_text().splitlines()]
    out["report_md"] = (ws / ".interview" / "interview-report.md").read_text()
    out["report_json"] = json.loads((ws / ".interview" / "interview-report.json").read_text())
    return out


def test_starting_prints_the_workspace_and_the_time_but_never_the_seed(whole):
    result = whole["start"]
    assert result.exit_code == 0, result.output
    assert str(whole["ws"]) in result.output and "30 minutes" in result.output
    assert str(SEED) not in result.output


def test_a_new_workspace_holds_only_the_module_the_checklist_and_the_interview_state(whole):
    assert whole["files_at_start"] == {
        "moe.py",
        "CHECKLIST.md",
        ".interview/state.json",
        ".interview/log.jsonl",
        ".interview/start/moe.py",
    }


def test_the_module_opens_the_tasks_functions_and_keeps_the_rest_of_the_kata(whole):
    tree = ast.parse(whole["stub"])
    bodies = {n.name: n.body for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert [type(s).__name__ for s in bodies["dispatch"][1:]] == ["Raise"]
    assert [type(s).__name__ for s in bodies["expert_capacity"][1:]] == ["Raise"]
    assert len(bodies["moe_forward"]) > 2, "moe_forward (another task) should be written out"


def test_the_checklist_holds_only_the_tasks_under_interview(whole):
    text = (whole["ws"] / "CHECKLIST.md").read_text()
    assert "**capacity**" in text and "30 minutes" in text
    assert "**router**" not in text and "**layer**" not in text


def test_each_grade_shows_the_time_left_and_never_the_seed(whole):
    assert "time left: 25:00 of 30:00" in whole["grade_stub"].output
    assert "time left: 20:00 of 30:00" in whole["grade_solution"].output
    for name in ("grade_stub", "grade_solution", "grade_late", "grade_after"):
        assert str(SEED) not in whole[name].output, f"{name} printed the seed"


def test_the_untouched_stub_grades_todo_and_the_reference_dropped_in_scores_full_marks(whole):
    assert whole["grade_stub"].exit_code == 1 and "todo" in whole["grade_stub"].output
    assert whole["grade_solution"].exit_code == 0, whole["grade_solution"].output
    assert "total: 2/2 points" in whole["grade_solution"].output


def test_every_attempt_is_logged_with_its_time_score_first_failure_and_code_digest(whole):
    kinds = [e["kind"] for e in whole["log"]]
    assert kinds == ["start", "grade", "hint", "hint", "grade", "final"]
    start, stub, solution = (whole["log"][i] for i in (0, 1, 4))
    assert start["sha256"] == stub["sha256"] == hashlib.sha256(whole["stub"].encode()).hexdigest()
    assert solution["sha256"] == sha256(SOLUTIONS_DIR / "moe.py")
    assert [stub["elapsed"], solution["elapsed"]] == [300.0, 600.0]
    assert stub["tasks"][0]["status"] == "todo" and stub["tasks"][0]["failed_check"].startswith("test_")
    assert "NotImplementedError" in stub["tasks"][0]["message"]
    assert solution["tasks"][0] | {"failed_check": "", "message": ""} == solution["tasks"][0]
    assert (solution["tasks"][0]["score"], solution["tasks"][0]["max_score"]) == (2, 2)


def test_the_log_is_a_chain_each_line_naming_the_digest_of_the_one_before(whole):
    lines = (whole["ws"] / ".interview" / "log.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["prev"] for line in lines] == [""] + [
        hashlib.sha256(line).hexdigest() for line in lines[:-1]
    ]


def test_the_first_grade_after_time_is_up_is_the_final_one_and_freezes_the_code(whole):
    late, ws = whole["grade_late"], whole["ws"]
    assert "time is up" in late.output and "final grade" in late.output
    final = whole["log"][-1]
    assert (final["kind"], final["reason"], final["elapsed"]) == ("final", "time up", 2100.0)
    assert (ws / ".interview" / "final" / "moe.py").read_bytes() == (SOLUTIONS_DIR / "moe.py").read_bytes()
    for path in (ws / "moe.py", ws / ".interview" / "final" / "moe.py"):
        assert not path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH), f"{path} is still writable"


def test_a_grade_after_the_end_says_the_interview_is_over_and_names_the_report(whole):
    after = whole["grade_after"]
    assert after.exit_code == 1
    assert "this interview is over" in after.output
    assert str(whole["ws"] / ".interview" / "interview-report.md") in after.output
    assert len(whole["log"]) == 6, "a grade after the end must not be logged"


def test_the_report_lists_every_attempt_with_its_time_score_and_first_failing_check(whole):
    md = whole["report_md"]
    assert "| 1 | 5:00 |" in md and "todo 0/" in md
    assert "| 2 | 10:00 |" in md and "pass" in md
    assert whole["log"][1]["tasks"][0]["failed_check"] in md
    data = whole["report_json"]
    assert [a["elapsed"] for a in data["attempts"]] == [300.0, 600.0]
    assert (data["seed"], data["minutes"], data["end_reason"]) == (SEED, 30, "time up")


def test_the_report_says_the_time_used_and_how_late_the_code_was_frozen(whole):
    data = whole["report_json"]
    assert (data["seconds_used"], data["seconds_over"]) == (1800.0, 300.0)
    assert "frozen 5:00 after time was up" in whole["report_md"]
    assert data["final_code_attempt"] == 2, "the final code is the code graded at attempt 2"


def test_the_report_gives_the_follow_up_questions_with_their_answer_sketches(whole):
    task = next(k for k in KATAS if k.name == "moe").task("capacity")
    assert len(task.questions) >= 2
    for q in task.questions:
        assert q.ask in whole["report_md"] and q.answer in whole["report_md"]
    assert whole["report_json"]["questions"] == [
        {"task": "capacity", "ask": q.ask, "answer": q.answer} for q in task.questions
    ]


def test_the_report_shows_the_diff_from_the_stub_to_the_final_code(whole):
    diff = whole["report_json"]["diff"]
    assert "-    raise NotImplementedError" in diff
    assert "+    return position < capacity, position" in diff
    assert "```diff" in whole["report_md"]


def capacity_task():
    return next(k for k in KATAS if k.name == "moe").task("capacity")


def test_the_report_names_the_candidate_given_at_the_start(whole):
    assert CANDIDATE in whole["start"].output
    assert whole["report_json"]["candidate"] == CANDIDATE
    assert f"| candidate | {CANDIDATE} |" in whole["report_md"]


def test_a_grade_in_the_interview_points_to_kata_hint_instead_of_showing_a_hint(whole):
    task, out = capacity_task(), whole["grade_stub"].output
    assert "`kata hint moe capacity` shows one" in out
    shown = [h for h in task.hints + tuple(h for _, h in task.check_hints) if h in out]
    assert not shown, f"a grade showed a hint without logging it: {shown[0]}"


def test_each_hint_is_shown_and_logged_with_its_time_and_the_code_at_that_moment(whole):
    task = capacity_task()
    n = len(task.hints)
    assert f"moe / capacity, hint 1/{n}: {task.hints[0]}" in whole["hint_next"].output
    assert f"moe / capacity, hint 2/{n}: {task.hints[1]}" in whole["hint_named"].output
    assert "logged, with the time" in whole["hint_next"].output
    hints = [e for e in whole["log"] if e["kind"] == "hint"]
    assert [(e["elapsed"], e["hint"]["task"], e["hint"]["number"]) for e in hints] == [
        (360.0, "capacity", 1),
        (420.0, "capacity", 2),
    ]
    assert {e["sha256"] for e in hints} == {hashlib.sha256(whole["stub"].encode()).hexdigest()}


def test_the_report_lists_the_hints_with_their_times(whole):
    task, md = capacity_task(), whole["report_md"]
    n = len(task.hints)
    assert f"| 6:00 | capacity | 1/{n} |" in md and f"| 7:00 | capacity | 2/{n} |" in md
    assert task.hints[0] in md and task.hints[1] in md
    assert "| hints | 2 shown by kata hint |" in md
    assert [(h["elapsed"], h["hint"]["text"]) for h in whole["report_json"]["hints"]] == [
        (360.0, task.hints[0]),
        (420.0, task.hints[1]),
    ]


def test_the_report_gives_each_tasks_rubric_and_a_notes_section_for_the_interviewer(whole):
    rubric, md = capacity_task().rubric, whole["report_md"]
    assert f"**What it probes:** {rubric.probes}" in md and f"**What a strong answer shows:** {rubric.strong}" in md
    assert whole["report_json"]["rubric"] == [{"task": "capacity", "probes": rubric.probes, "strong": rubric.strong}]
    assert "## Interviewer's notes" in md


def test_an_untouched_interview_reports_its_seal_intact_and_the_final_code_within_time(whole):
    data = whole["report_json"]
    assert data["seal"] == {"intact": True, "tampered": [], "problem": "", "log_unsealed": False}
    assert data["within_time"] is True
    assert "graded as attempt 2, within time" in whole["report_md"] and "TAMPERED" not in whole["report_md"]


def test_kata_list_in_the_workspace_shows_the_interview_instead_of_the_katas(whole):
    during, after = whole["list_during"], whole["list_after"]
    assert during.exit_code == 0, during.output
    assert f"candidate {CANDIDATE}" in during.output
    assert re.search(r"capacity +2 pts +pass (\d+)/\1 ", during.output), during.output  # every check passed
    assert "time left: 20:00 of 30:00" in during.output and "attempts: 2, hints: 2" in during.output
    assert "kv_cache" not in during.output and "router" not in during.output, "kata list showed the katas"
    assert "over: ended" in after.output and "(time up)" in after.output
    assert str(whole["ws"] / ".interview" / "interview-report.md") in after.output


# ----------------------------------------------------- finish and practice


def test_finish_ends_the_interview_early_and_reports_the_time_used(tmp_path):
    clock = FakeClock()
    ws = tmp_path / "ws"
    assert run(clock, "interview", "moe", "router", "--minutes", "20", "--dir", str(ws)).exit_code == 0
    clock.advance(7)
    result = run(clock, "interview", "--finish", "--dir", str(ws))
    assert result.exit_code == 1, result.output  # the stub does not pass
    assert "over after 7:00 of 20:00" in result.output
    data = json.loads((ws / ".interview" / "interview-report.json").read_text())
    assert (data["end_reason"], data["seconds_used"], data["attempts"]) == ("finished", 420.0, [])
    assert "No attempts" in (ws / ".interview" / "interview-report.md").read_text()


def test_practice_shows_the_questions_at_the_end_and_the_answers_only_on_request(tmp_path):
    clock = FakeClock()
    ws = tmp_path / "ws"
    questions = next(k for k in KATAS if k.name == "moe").task("router").questions
    assert run(clock, "interview", "moe", "router", "--practice", "--dir", str(ws)).exit_code == 0
    early = run(clock, "interview", "--answers", "--dir", str(ws))
    assert early.exit_code == 1 and "come after the interview" in early.output
    clock.advance(3)
    end = run(clock, "interview", "--finish", workspace=ws)
    report = (ws / ".interview" / "interview-report.md").read_text()
    data = json.loads((ws / ".interview" / "interview-report.json").read_text())
    for q in questions:
        assert q.ask in end.output and q.ask in report
        assert q.answer not in end.output and q.answer not in report
    assert all("answer" not in q for q in data["questions"]) and data["mode"] == "practice"
    answers = run(clock, "interview", "--answers", "--dir", str(ws))
    assert answers.exit_code == 0
    assert all(q.answer in answers.output for q in questions)


# ------------------------------------------------- the answer never leaks


def interviews():
    """Every task that writes functions, alone, and every whole kata."""
    for kata in KATAS:
        yield pytest.param(kata.name, (), id=kata.name)
        for task in kata.tasks:
            if task.functions:
                yield pytest.param(kata.name, (task.name,), id=f"{kata.name}-{task.name}")


def started(tmp_path, kata: str, tasks: tuple[str, ...], seed: int | None = 1) -> interview.Session:
    plan = interview.plan(kata, tasks, 30)
    return interview.start(plan, tmp_path / "ws", seed=seed, practice=False, clock=FakeClock())


def answer_lines(kata: str, names: tuple[str, ...]) -> set[str]:
    """The lines of the reference solution that only the bodies of these functions and classes hold."""
    source = (SOLUTIONS_DIR / f"{kata}.py").read_text()
    lines = source.splitlines()
    tree = parsed(source)
    answer: set[str] = set()
    for node in tree.body:
        if getattr(node, "name", None) not in names:
            continue
        functions = (
            [node] if isinstance(node, ast.FunctionDef) else [m for m in node.body if isinstance(m, ast.FunctionDef)]
        )
        for fn in functions:
            body = (
                fn.body[1:]
                if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant)
                else fn.body
            )
            if body:
                answer |= {line.strip() for line in lines[body[0].lineno - 1 : body[-1].end_lineno]}
    elsewhere = set()
    for node in tree.body:
        if getattr(node, "name", None) not in names:
            elsewhere |= {line.strip() for line in lines[node.lineno - 1 : node.end_lineno]}
    return {line for line in answer - elsewhere if len(line) > 3 and not line.startswith("#")}


@pytest.fixture(scope="module")
def started_once(tmp_path_factory):
    """started_once(kata, tasks) -> started(...) of those tasks, made once for the module: the tests below only
    read its workspace, three of them for each interview of interviews()."""
    made: dict[tuple[str, tuple[str, ...]], interview.Session] = {}

    def session(kata: str, tasks: tuple[str, ...]) -> interview.Session:
        if (kata, tasks) not in made:
            made[kata, tasks] = started(tmp_path_factory.mktemp("interview"), kata, tasks)
        return made[kata, tasks]

    return session


@pytest.mark.parametrize("kata,tasks", list(interviews()))
def test_the_workspace_never_holds_the_answer_to_the_task_under_interview(started_once, kata, tasks):
    session = started_once(kata, tasks)
    secret = answer_lines(kata, session.state.functions)
    assert secret, "the solution of the task has no lines of its own to look for"
    for path in session.directory.rglob("*"):
        if path.is_file():
            held = {line.strip() for line in path.read_text().splitlines()}
            assert not secret & held, f"{path.name} holds lines of the answer: {sorted(secret & held)[:3]}"


@pytest.mark.parametrize("kata,tasks", list(interviews()))
def test_every_private_helper_left_in_the_module_is_used_by_the_written_code(started_once, kata, tasks):
    tree = parsed(started_once(kata, tasks).module.read_text())
    helpers = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_")]
    read = {id(n): {x.id for x in ast.walk(n) if isinstance(x, ast.Name)} for n in tree.body}  # each statement's names
    for helper in helpers:
        users = [n for n in tree.body if n is not helper and helper.name in read[id(n)]]
        assert users, f"{helper.name} is left in the module but nothing written uses it"


def _through(lines: list[str], end_col: int) -> str:
    """lines joined, the last one cut at column end_col (a UTF-8 byte offset, as ast gives it)."""
    return "".join(lines[:-1]) + lines[-1].encode("utf-8")[:end_col].decode("utf-8")


@pytest.mark.parametrize("kata,tasks", [p for p in interviews() if p.values[1]])
def test_the_other_tasks_functions_are_written_as_the_reference_writes_them(started_once, kata, tasks):
    session = started_once(kata, tasks)
    mine, reference = session.module.read_text(), (SOLUTIONS_DIR / f"{kata}.py").read_text()
    lines = reference.splitlines(keepends=True)
    segments = {  # ast.get_source_segment of each top-level definition (column 0), without its splitting per call
        n.name: _through(lines[n.lineno - 1 : n.end_lineno], n.end_col_offset)
        for n in parsed(reference).body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
    }
    others = [name for name in segments if name not in session.state.functions]
    assert others
    for name in others:
        assert segments[name] in mine, f"{name} is not written out as in the reference"


# ------------------------------------------------- what may be started


def test_a_task_that_writes_no_functions_cannot_be_interviewed_alone(tmp_path):
    result = run(FakeClock(), "interview", "moe", "speed", "--dir", str(tmp_path / "ws"))
    assert result.exit_code == 2
    assert "writes no functions of its own" in result.output and "kata interview moe router speed" in result.output
    assert not (tmp_path / "ws").exists()


def test_a_speed_task_joins_the_task_whose_functions_it_times(tmp_path):
    result = run(FakeClock(), "interview", "moe", "layer", "speed", "--dir", str(tmp_path / "ws"))
    assert result.exit_code == 0, result.output
    session = interview.load(tmp_path / "ws")
    assert (session.state.tasks, session.state.functions) == (("layer", "speed"), ("MoEAux", "moe_forward"))


def test_an_existing_folder_that_is_not_empty_is_refused_and_left_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = run(FakeClock(), "interview", "moe", "router", "--dir", str(tmp_path))
    assert result.exit_code == 2 and "not an empty folder" in result.output
    assert files_in(tmp_path) == {"notes.txt"}


@pytest.mark.parametrize(
    "args,expected",
    [
        (["nope"], "the katas are: kv_cache, quantization"),
        (["moe", "nope"], "its tasks are: router, top_k"),
        (["moe", "router", "router"], "named twice"),
    ],
)
def test_an_unknown_kata_or_task_is_a_usage_error_naming_the_choices(tmp_path, args, expected):
    result = run(FakeClock(), "interview", *args, "--dir", str(tmp_path / "ws"))
    assert result.exit_code == 2 and expected in result.output


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], "got none of them"),
        (["--list", "--finish"], "got --list and --finish"),
        (["moe", "--preset", "moe-dispatch-30"], "got KATA and --preset"),
        (["--finish", "--minutes", "5"], "--minutes applies only when starting"),
        (["--finish", "--candidate", "Ada"], "--candidate applies only when starting"),
    ],
)
def test_interview_takes_exactly_one_thing_to_do(args, expected):
    result = run(FakeClock(), "interview", *args)
    assert result.exit_code == 2 and expected in result.output


def test_list_shows_every_preset_of_the_registry_with_its_difficulty():
    result = run(FakeClock(), "interview", "--list")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    for p in load_presets():
        assert any(p.name in line and p.title in line and str(p.difficulty) in line for line in lines), p.name


def test_a_preset_starts_its_kata_tasks_and_minutes(tmp_path):
    preset = next(p for p in load_presets() if p.name == "moe-dispatch-30")
    result = run(FakeClock(), "interview", "--preset", preset.name, "--dir", str(tmp_path / "ws"))
    assert result.exit_code == 0, result.output
    state = interview.load(tmp_path / "ws").state
    assert (state.kata, state.tasks, state.minutes, state.preset) == (
        preset.kata,
        preset.tasks,
        preset.minutes,
        preset.name,
    )


def test_without_a_seed_each_interview_draws_its_own(tmp_path):
    seeds = [started(tmp_path / str(n), "moe", ("router",), seed=None).state.seed for n in range(2)]
    assert seeds[0] != seeds[1] and min(seeds) > 0


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--seed", "3"], "leave out --seed"),
        (["--json"], "leave out --json"),
        (["kv_cache"], "grades only moe here"),
    ],
)
def test_grade_inside_an_interview_refuses_what_would_step_outside_it(tmp_path, args, expected):
    started(tmp_path, "moe", ("router",))
    result = run(FakeClock(), "grade", *args, workspace=tmp_path / "ws")
    assert result.exit_code == 2 and expected in result.output
    assert len(interview.load(tmp_path / "ws").entries) == 1, "a refused grade must not be logged"


def test_an_edited_log_line_shows_as_a_broken_chain(tmp_path):
    session = started(tmp_path, "moe", ("router",))
    clock = FakeClock()
    for minutes in (1, 2):
        clock.advance(minutes)
        session.append(interview.Entry(interview.EntryKind.GRADE, clock.now(), minutes * 60.0, "0" * 64))
    assert interview.load(session.directory).log_intact
    log = session.folder / "log.jsonl"
    lines = log.read_text().splitlines()
    lines[1] = lines[1].replace('"elapsed": 60.0', '"elapsed": 30.0')
    log.write_text("\n".join(lines) + "\n")
    assert not interview.load(session.directory).log_intact


# ------------------------------------------------------ the clock that holds


def edit_state(workspace: Path, **changes) -> None:
    path = workspace / ".interview" / "state.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_the_key_is_made_outside_the_workspace_and_only_its_owner_can_read_it(tmp_path, key):
    session = started(tmp_path, "moe", ("router",))
    assert key.is_file() and not key.resolve().is_relative_to(session.directory)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    state = json.loads((session.folder / "state.json").read_text())
    assert set(state["seal"]) == set(seal.FIELDS) and key.read_text().strip() not in json.dumps(state)


@pytest.mark.parametrize(
    "field,edit",
    [
        ("limit", {"minutes": 60}),
        ("start", {"started": "2026-03-02T09:30:00+00:00"}),
        ("seed", {"seed": 2}),
        ("settings", {"tasks": ["router", "top_k"]}),
        ("settings", {"candidate": "someone else"}),
        ("settings", {"practice": True}),
    ],
)
def test_an_edited_field_of_the_state_breaks_its_own_seal(tmp_path, field, edit):
    session = started(tmp_path, "moe", ("router",))
    assert interview.load(session.directory).sealed.intact
    edit_state(session.directory, **edit)
    assert interview.load(session.directory).sealed.broken == (field,)


def test_a_seal_copied_from_another_interview_does_not_match(tmp_path):
    short, long = started(tmp_path / "a", "moe", ("router",)), started(tmp_path / "b", "moe", ("router",))
    long_state = json.loads((long.folder / "state.json").read_text())
    edit_state(
        short.directory,
        minutes=60,
        seal=json.loads((short.folder / "state.json").read_text())["seal"] | {"limit": long_state["seal"]["limit"]},
    )
    assert "limit" in interview.load(short.directory).sealed.broken


def rewrite_log(session: interview.Session, keep) -> None:
    """The log with only the lines `keep` says yes to, its chain of digests recomputed as a forger would."""
    log = session.folder / "log.jsonl"
    kept, prev = [], ""
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if keep(entry):
            kept.append(json.dumps(entry | {"prev": prev}))
            prev = hashlib.sha256(kept[-1].encode()).hexdigest()
    log.write_text("\n".join(kept) + "\n")


def test_a_log_rewritten_with_its_chain_recomputed_breaks_the_seal_and_stays_broken(tmp_path):
    session = started(tmp_path, "moe", ("router",))
    clock = FakeClock()
    for minutes in (1, 2):
        clock.advance(minutes)
        session.append(interview.Entry(interview.EntryKind.GRADE, clock.now(), minutes * 60.0, "0" * 64))
    assert interview.load(session.directory).sealed.intact
    rewrite_log(session, lambda e: e["elapsed"] != 60.0)  # the first attempt, gone
    again = interview.load(session.directory)
    assert again.log_intact, "the chain alone cannot tell"
    assert again.sealed.broken == ("attempts",)
    again.append(interview.Entry(interview.EntryKind.GRADE, clock.now(), 240.0, "0" * 64))
    assert interview.load(session.directory).sealed.broken == ("attempts",), "a later line re-sealed an edited log"


def test_an_edited_limit_is_reported_as_tampered_not_within_time(tmp_path):
    clock, ws = FakeClock(), tmp_path / "ws"
    assert run(clock, "interview", "moe", "router", "--minutes", "1", "--dir", str(ws)).exit_code == 0
    edit_state(ws, minutes=30)
    shutil.copyfile(SOLUTIONS_DIR / "moe.py", ws / "moe.py")
    clock.advance(10)
    graded = run(clock, "grade", workspace=ws)
    assert graded.exit_code == 0 and "time left: 20:00 of 30:00" in graded.output  # the edit bought time...
    assert "TAMPERED: the time limit changed" in run(clock, "list", workspace=ws).output
    assert run(clock, "interview", "--finish", "--dir", str(ws)).exit_code == 0
    data = json.loads((ws / ".interview" / "interview-report.json").read_text())
    md = (ws / ".interview" / "interview-report.md").read_text()
    assert data["seal"] == {"intact": False, "tampered": ["limit"], "problem": "", "log_unsealed": False}
    assert data["within_time"] is None and "within time" not in md
    assert "**TAMPERED: the time limit changed" in md


def test_a_state_sealed_with_another_key_does_not_match_and_without_a_key_is_not_checked(tmp_path, monkeypatch):
    session = started(tmp_path, "moe", ("router",))
    other = tmp_path / "other" / "interview.key"
    seal.make_key(other)
    monkeypatch.setenv(seal.KEY_ENV, str(other))
    assert set(interview.load(session.directory).sealed.broken) == set(seal.FIELDS)
    monkeypatch.setenv(seal.KEY_ENV, str(tmp_path / "missing.key"))
    unchecked = interview.load(session.directory).sealed
    assert not unchecked.intact and "no interview key at" in unchecked.problem
    assert "NOT CHECKED" in interview.listing(interview.load(session.directory), FakeClock().now())


def test_a_log_written_by_an_account_without_the_key_is_marked_unsealed_not_tampered(tmp_path, key, monkeypatch):
    session = started(tmp_path, "moe", ("router",))
    clock = FakeClock()
    clock.advance(3)
    monkeypatch.setenv(seal.KEY_ENV, str(tmp_path / "not-readable-here.key"))  # the candidate's account
    candidate = interview.load(session.directory)
    assert "no interview key at" in candidate.sealed.problem
    candidate.append(interview.Entry(interview.EntryKind.GRADE, clock.now(), 180.0, "0" * 64))
    monkeypatch.setenv(seal.KEY_ENV, str(key))  # the interviewer's, again
    checked = interview.load(session.directory).sealed
    assert checked.intact and checked.log_unsealed and not checked.broken
    assert "only its chain of digests vouches for it" in checked.summary()
    edit_state(session.directory, minutes=60)
    assert interview.load(session.directory).sealed.broken == ("limit",), "the settings stay sealed"


def test_a_key_others_can_read_or_one_inside_the_workspace_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    readable = tmp_path / "keys" / "interview.key"
    seal.make_key(readable)
    readable.chmod(0o644)
    ws = tmp_path / "ws"
    for path, says in ((readable, f"chmod 600 {readable}"), (ws / "interview.key", "inside the workspace")):
        monkeypatch.setenv(seal.KEY_ENV, str(path))
        result = run(FakeClock(), "interview", "moe", "router", "--dir", str(ws))
        assert result.exit_code == 2 and says in result.output, result.output
        assert not ws.exists()


@pytest.mark.parametrize("name", ["", "   ", "two\nlines", "x" * 101])
def test_a_candidate_name_is_one_line_of_printable_text(tmp_path, name):
    result = run(FakeClock(), "interview", "moe", "router", "--candidate", name, "--dir", str(tmp_path / "ws"))
    assert result.exit_code == 2 and "--candidate takes the candidate's name" in result.output
    assert not (tmp_path / "ws").exists()


def test_kata_hint_all_shows_and_logs_every_hint_of_the_task(tmp_path):
    session = started(tmp_path, "moe", ("router",))
    hints = next(k for k in KATAS if k.name == "moe").task("router").hints
    result = run(FakeClock(), "hint", "moe", "router", "--all", workspace=session.directory)
    assert result.exit_code == 0 and all(h in result.output for h in hints)
    logged = interview.load(session.directory).hints
    assert [e.hint.number for e in logged] == list(range(1, len(hints) + 1))


@pytest.mark.parametrize("args", [["moe", "top_k"], ["kv_cache"]])
def test_kata_hint_in_an_interview_gives_only_the_interviews_hints(tmp_path, args):
    session = started(tmp_path, "moe", ("router",))
    result = run(FakeClock(), "hint", *args, workspace=session.directory)
    assert result.exit_code == 2 and "is an interview on moe / router" in result.output
    assert len(interview.load(session.directory).entries) == 1, "a refused hint must not be logged"


def test_kata_watch_in_an_interview_workspace_is_a_usage_error_that_points_to_kata_grade(tmp_path):
    session = started(tmp_path, "moe", ("router",))
    result = run(FakeClock(), "watch", workspace=session.directory)
    assert result.exit_code == 2 and f"{session.directory} is an interview workspace" in result.output
    assert "grade it with `kata grade`" in result.output
    assert len(interview.load(session.directory).entries) == 1, "watching must not grade or log"


def test_kata_list_says_when_time_is_up(tmp_path):
    session = started(tmp_path, "moe", ("router",))
    clock = FakeClock()
    clock.advance(31)
    result = run(clock, "list", workspace=session.directory)
    assert "time is up" in result.output and "the next kata grade is the final one" in result.output


# The words of messages and docstrings that told a candidate how to fix the code instead of what is wrong.
ANSWER_PHRASES = re.compile(
    r"subtract(ing)? each row'?s? maximum|maximum (first|before exp|out before exp|subtracted first)"
    r"|log of a probability that|compute into a new array|(work on|quantize) a copy|divide by the kept rows"
    r"|check (the arguments|everything) before|divided by the temperature too|int\(t\) of each|T² should keep",
    re.I,
)


@functools.lru_cache(maxsize=128)  # each preset of a kata reads the same suite modules
def shown_strings(source: str) -> tuple[str, ...]:
    """The string literals of a suite a failure can show: every one but the docstrings."""
    tree = ast.parse(source)
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in n.values))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.append(n.value)
    return tuple(out)


@pytest.mark.parametrize("preset", load_presets(), ids=lambda p: p.name)
def test_no_message_or_docstring_an_interview_shows_says_how_to_fix_the_code(preset):
    kata = next(k for k in KATAS if k.name == preset.kata)
    plan = interview.plan_preset(preset.name)
    suite = sorted(kata.suite.rglob("*.py")) if kata.suite.is_dir() else [kata.suite]
    for where, text in [(f"{kata.name}.py as handed out", interview.module_text(plan))] + [
        (path.name, s) for path in suite for s in shown_strings(path.read_text())
    ]:
        found = ANSWER_PHRASES.search(text)
        assert not found, (
            f"{where} tells the candidate how to fix it: ...{text[max(0, found.start() - 40) : found.end() + 20]}..."
        )


# ------------------------------------------------------ registry checks


@pytest.mark.parametrize(
    "edit,expected",
    [
        (
            lambda t: t.replace(
                'hints = ["What does the mean', 'functions = ["mean_of"]\n  hints = ["What does the mean'
            ).replace('hints = ["What shape', 'functions = ["mean_of"]\n  hints = ["What shape'),
            "function 'mean_of' is listed under tasks 'mean' and 'scale'",
        ),
        (
            lambda t: t.replace('hints = ["What shape', 'functions = ["_private"]\n  hints = ["What shape'),
            "task 'scale': 'functions' item 1 must name a public function or class of the kata module, got '_private'",
        ),
        (
            lambda t: t + '\n  [[kata.task.question]]\n  ask = "Why?"\n  answer = "Because."\n',
            "task 'fast': 'question' must be two or three follow-up questions, or none, got",
        ),
        (
            lambda t: (
                t + '\n  [[kata.task.question]]\n  ask = "Why?"\n\n  [[kata.task.question]]\n  ask = "How?"\n  answer '
                '= "So."\n'
            ),
            "missing 'answer'",
        ),
        (
            lambda t: t + '\n  [kata.task.rubric]\n  probes = "Sums."\n  strong = "Exact sums."\n  answer = "np.sum"\n',
            r"task 'fast', rubric: unknown key 'answer' \(allowed: probes, strong\)",
        ),
        (lambda t: t + '\n  [kata.task.rubric]\n  probes = "Sums."\n', "task 'fast', rubric: missing 'strong'"),
        (
            lambda t: t + '\n  [kata.task.rubric]\n  probes = " "\n  strong = "Exact sums."\n',
            "task 'fast', rubric: 'probes' must not be empty, got ' '",
        ),
        (
            lambda t: t.replace(
                'hints = ["Is there a Python loop?"', 'rubric = "sums"\n  hints = ["Is there a Python loop?"'
            ),
            r"task 'fast': 'rubric' must be a table, got 'sums'",
        ),
    ],
)
def test_the_registry_rejects_bad_interview_fields_naming_the_task(tmp_path, edit, expected):
    write_registry(tmp_path, {"toy": edit((TOY / "kata.toml").read_text())})
    with pytest.raises(RegistryError, match=expected):
        load_registry(tmp_path)


PRESET = (
    '\nformat = 1\n[[preset]]\nname = "toy-10"\ntitle = "Toy in 10"\nkata = "toy"\ntasks = ["mean"]\n'
    'minutes = 10\ndifficulty = "easy"\n'
)


@pytest.mark.parametrize(
    "edit,expected",
    [
        (
            lambda p: p.replace('kata = "toy"', 'kata = "nope"'),
            r"preset 'toy-10': 'kata' must name a kata of the registry \(toy\), got 'nope'",
        ),
        (lambda p: p.replace('tasks = ["mean"]', 'tasks = ["nope"]'), "has no task 'nope'"),
        (lambda p: p.replace('"easy"', '"brutal"'), "'difficulty' must be 'easy', 'medium' or 'hard', got 'brutal'"),
        (lambda p: p.replace("minutes = 10", "minutes = 0"), "'minutes' must be greater than or equal to 1, got 0"),
        (lambda p: p.replace('tasks = ["mean"]', 'tasks = ["fast"]'), "leaves nothing to write"),
        (lambda p: p + p.replace("format = 1", ""), "preset names repeat"),
    ],
)
def test_the_registry_rejects_bad_presets_naming_the_preset(tmp_path, edit, expected):
    registry = (
        (TOY / "kata.toml")
        .read_text()
        .replace('hints = ["What does the mean', 'functions = ["mean_of"]\n  hints = ["What does the mean')
    )
    write_registry(tmp_path, {"toy": registry}, edit(PRESET))
    with pytest.raises(RegistryError, match=expected):
        load_presets(tmp_path)
    write_registry(tmp_path, {"toy": registry}, PRESET)
    assert [p.name for p in load_presets(tmp_path)] == ["toy-10"]


def test_every_task_of_the_registry_has_a_rubric_for_the_interviewer():
    missing = [f"{k.name} / {t.name}" for k in KATAS for t in k.tasks if t.rubric is None]
    assert not missing, f"tasks without a [kata.task.rubric]: {', '.join(missing)}"


def test_a_well_formed_rubric_loads_with_its_task(tmp_path):
    rubric = '\n  [kata.task.rubric]\n  probes = " Sums. "\n  strong = "Exact sums."\n'
    write_registry(tmp_path, {"toy": (TOY / "kata.toml").read_text() + rubric})
    fast = load_registry(tmp_path)[0].task("fast")
    assert (fast.rubric.probes, fast.rubric.strong) == ("Sums.", "Exact sums.")
