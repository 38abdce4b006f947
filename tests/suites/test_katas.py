"""Every kata in the registry meets the quality bars: its suite passes the
reference with full marks, marks the untouched stub todo, and its stub,
registry entry and checklist section agree with each other."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from grader.kata.registry import load_presets, load_registry, suite_modules
from grader.kata.stubs import main as stubs_main
from grader.kata.stubs import make_stub, stub_for, stub_from_solution
from grader.kata.target import KATAS_DIR, ROOT, SOLUTIONS_DIR
from grader.run.results import Limits
from grader.run.runner import grade

from helpers import parsed

KATAS = load_registry()
NAMES = [k.name for k in KATAS]
# Generous: the project's tests may run beside other work on a 2-core machine.
LIMITS = Limits(test_seconds=120, kata_seconds=600)


def suite_tests(kata) -> list[str]:
    """The test functions of every test module of the kata's suite."""
    return [
        n.name
        for module in suite_modules(kata.suite)
        for n in parsed(module.read_text(encoding="utf-8")).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    ]


def suite_sources(kata) -> list[Path]:
    """Every module of the kata's suite: a folder's (its __init__.py, support modules and test modules), or the file."""
    return sorted(kata.suite.glob("*.py")) if kata.suite.is_dir() else [kata.suite]


# One xdist worker runs the whole module, so its module-scoped grades are made once.
pytestmark = pytest.mark.xdist_group("test_katas")


def _selected(request, fixture: str) -> list:
    """The katas of the tests this session runs that use `fixture`: all of
    them in a plain run, fewer after -k (the scaffold test runs this module
    in a copy for its new kata alone)."""
    names = {
        item.callspec.params["kata"].name
        for item in request.session.items
        if fixture in item.fixturenames and "kata" in getattr(getattr(item, "callspec", None), "params", {})
    }
    return [k for k in KATAS if k.name in names]


@pytest.fixture(scope="module")
def reference_grade(request):
    return grade(_selected(request, "reference_grade"), "reference", jobs=2, limits=LIMITS)


def _grade_stubs(request, tmp_path_factory, fixture: str, fail_fast: bool):
    """The untouched stubs, made from the solutions into a folder of their own (katas/ holds the learner's
    work), graded."""
    katas = _selected(request, fixture)
    folder = tmp_path_factory.mktemp("stubs")
    for k in katas:
        (folder / f"{k.name}.py").write_text(stub_for(k.name), encoding="utf-8")
    return grade(katas, str(folder), jobs=2, limits=LIMITS, fail_fast=fail_fast)


@pytest.fixture(scope="module")
def stub_grade(request, tmp_path_factory):
    """The stubs graded as `kata grade --fail-fast` grades: each task stops at its first check (a fifth of the
    time). The checks after it are not run, and a check of the next module starts with none of its fixtures."""
    return _grade_stubs(request, tmp_path_factory, "stub_grade", fail_fast=True)


@pytest.fixture(scope="module")
def stub_grade_every_check(request, tmp_path_factory):
    return _grade_stubs(request, tmp_path_factory, "stub_grade_every_check", fail_fast=False)


def test_there_are_katas():
    assert KATAS, "the registry lists no katas"


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_every_suite_test_belongs_to_exactly_one_task(kata):
    listed = [t for task in kata.tasks for t in task.tests]
    defined = suite_tests(kata)
    assert sorted(set(defined) - set(listed)) == [], "suite tests missing from the registry"
    assert sorted(set(listed) - set(defined)) == [], "registry names tests the suite does not define"


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_kata_reset_restores_the_reference_with_bodies_removed(kata):
    made = stub_from_solution(kata.name)
    assert stub_for(kata.name) == made, "kata reset must restore the stub made from the solution"


def _is_a_stub(text: str) -> bool:
    """Whether a kata file still holds a stub (every body raises NotImplementedError, no helper of its
    own): making a stub of it changes nothing. False for a learner's code, or a file that does not parse."""
    try:
        return make_stub(text) == text
    except (SyntaxError, ValueError):  # NUL bytes: a ValueError on some Pythons, a SyntaxError on others
        return False


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_a_stub_in_katas_is_the_one_made_from_the_solution(kata):
    # katas/ holds the learner's work once they start: a file of theirs says nothing of the stubs (those come
    # from stub_for, above); a file that is still a stub, as in a fresh clone, must be today's.
    text = (KATAS_DIR / f"{kata.name}.py").read_text(encoding="utf-8", errors="replace")
    if not _is_a_stub(text):
        pytest.skip(f"katas/{kata.name}.py holds your code, not a stub: a fresh clone's is checked")
    assert text == stub_from_solution(kata.name), (
        f"katas/{kata.name}.py is stale: run python -m grader.kata.stubs {kata.name}"
    )


def test_the_project_checks_in_one_copy_of_each_stub():
    stored = ROOT / "grader" / "kata" / "stub_files"
    assert not stored.exists(), f"{stored} is a second copy of katas/: kata reset makes the stub from the solution"


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_the_stub_keeps_every_public_name_of_the_reference(kata):
    def public(text: str) -> set[str]:
        tree = parsed(text)
        return {
            n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
        }

    assert public(stub_for(kata.name)) == public((SOLUTIONS_DIR / f"{kata.name}.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_every_public_function_and_class_of_the_stub_belongs_to_exactly_one_task(kata):
    # kata interview opens a task's functions and writes the rest from the reference.
    tree = parsed(stub_for(kata.name))
    public = sorted(
        n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")
    )
    listed = [f for task in kata.tasks for f in task.functions]
    assert sorted(listed) == public, "each public name of the stub must be listed under exactly one task's functions"


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_every_task_has_two_or_three_follow_up_questions_with_answer_sketches(kata):
    for task in kata.tasks:
        assert 2 <= len(task.questions) <= 3, f"{kata.name} / {task.name} has {len(task.questions)} follow-up questions"
        assert all(q.ask.strip() and q.answer.strip() for q in task.questions)


def test_there_are_ready_made_interviews_for_every_kata():
    assert {p.kata for p in load_presets()} == set(NAMES)


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_the_reference_gets_full_marks(kata, reference_grade):
    result = next(k for k in reference_grade.katas if k.name == kata.name)
    not_passed = {t.name: (t.status, t.message) for t in result.tasks if t.status != "pass"}
    assert not not_passed, f"the reference does not pass: {not_passed}"
    assert result.score == kata.max_score


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_the_untouched_stub_is_todo_on_every_task(kata, stub_grade):
    result = next(k for k in stub_grade.katas if k.name == kata.name)
    assert {t.name: t.status for t in result.tasks} == {t.name: "todo" for t in kata.tasks}


@pytest.mark.slow  # the whole suite against each stub: the quick run stops each task at its first check
@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_every_check_of_the_untouched_stub_is_todo(kata, stub_grade_every_check):
    result = next(k for k in stub_grade_every_check.katas if k.name == kata.name)
    outcomes = {(t.name, f["test"], f["outcome"]) for t in result.tasks for f in t.failures if f["outcome"] != "todo"}
    assert not outcomes, f"checks of the untouched stub that are not todo: {sorted(outcomes)}"
    assert {t.name: (t.status, t.checks_passed) for t in result.tasks} == {t.name: ("todo", 0) for t in kata.tasks}


def test_the_checklist_lists_every_kata_and_task_in_registry_order():
    text = (ROOT / "CHECKLIST.md").read_text(encoding="utf-8")
    found = re.findall(r"^## \d+\. .*\(`katas/(\w+)\.py`\)$|^- \[ \] \*\*(\w+)\*\* \((\d+) pts?\)", text, re.M)
    expected = []
    for kata in KATAS:
        expected.append((kata.name, "", ""))
        expected.extend(("", t.name, str(t.points)) for t in kata.tasks)
    assert found == expected


def test_the_readme_table_lists_every_kata():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for kata in KATAS:
        assert f"`{kata.name}`" in text, f"README.md does not mention {kata.name}"


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_the_recap_quotes_only_figures_the_suite_records(kata):
    import string

    names = [n for _, n, _, _ in string.Formatter().parse(kata.recap) if n]
    assert names, f"kata {kata.name} has no recap quoting its figures"
    source = "".join(path.read_text(encoding="utf-8") for path in suite_sources(kata))
    missing = [n for n in names if f'key="{n}"' not in source]
    assert not missing, f"the recap of {kata.name} quotes {missing}, which no check of its suite records"


def _public_defs(tree: ast.Module):
    """(qualified name, node) of every public function, class and method of a module."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            yield node.name, node
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and (not item.name.startswith("_") or item.name == "__init__"):
                        yield f"{node.name}.{item.name}", item


def _raised(node: ast.AST) -> set[str]:
    """The exception classes a body raises by name (raise X(...) or raise X)."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Raise) and n.exc is not None:
            target = n.exc.func if isinstance(n.exc, ast.Call) else n.exc
            if isinstance(target, ast.Name) and target.id != "NotImplementedError":
                names.add(target.id)
    return names


# A row of a suite's audit table: | `where` | promise | `test_a`, `test_b` |
AUDIT_ROW = re.compile(r"^\|\s*`(?P<where>[\w.]+)`\s*\|(?P<promise>[^|]+)\|(?P<checks>[^|]+)\|\s*$")


def audit_rows(kata) -> list[tuple[str, str, list[str]]]:
    """(where, promise, checks) of every row of the audit table in the docstrings of the suite's modules (a
    folder's __init__.py holds it, or its test modules do)."""
    doc = "\n".join(ast.get_docstring(parsed(p.read_text(encoding="utf-8"))) or "" for p in suite_sources(kata))
    rows = []
    for line in doc.splitlines():
        m = AUDIT_ROW.match(line.strip())
        if m:
            rows.append((m["where"], m["promise"].strip(), re.findall(r"`(test_\w+)`", m["checks"])))
    return rows


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_the_suite_audits_each_promise_of_the_stub_against_a_check_that_exists(kata):
    """The suite's docstrings map each promise of the stub's
    docstrings to the checks that fail without it (issue 17's audit): every
    row names a public function, class or method of the stub and one or
    more of the suite's own tests, and every public name has a row."""
    rows = audit_rows(kata)
    assert rows, f"{kata.suite.name} has no audit table (| `where` | promise | `test_...` |) in its docstrings"
    public = dict(_public_defs(parsed(stub_for(kata.name))))
    tests = set(suite_tests(kata))
    bad_where = sorted({w for w, _, _ in rows if w not in public})
    assert not bad_where, f"audit rows name what the stub does not define: {bad_where}"
    no_check = [f"{w}: {p}" for w, p, checks in rows if not checks]
    assert not no_check, f"audit rows that name no check: {no_check}"
    strays = sorted({c for _, _, checks in rows for c in checks} - tests)
    assert not strays, f"audit rows name tests the suite does not define: {strays}"
    audited = {w for w, _, _ in rows}
    missing = [
        name
        for name, node in public.items()
        if name not in audited
        and not (name.endswith(".__init__") and name.split(".")[0] in audited)
        and not (isinstance(node, ast.ClassDef) and any(w.startswith(name + ".") for w in audited))
    ]
    assert not missing, f"public names of the stub with no audit row: {missing}"


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_every_public_function_of_the_stub_documents_itself_and_the_errors_it_raises(kata):
    """The stub is all a learner reads: every public function, class and
    method has a docstring, and each exception the solution raises by name
    in it is named there."""
    stub = dict(_public_defs(parsed(stub_for(kata.name))))
    solution = dict(_public_defs(parsed((SOLUTIONS_DIR / f"{kata.name}.py").read_text(encoding="utf-8"))))
    undocumented = [
        name
        for name, node in stub.items()
        if not ast.get_docstring(node)
        and not (name.endswith("__init__") and ast.get_docstring(stub[name.split(".")[0]]))
    ]
    assert not undocumented, f"katas/{kata.name}.py: no docstring on {undocumented}"
    unnamed = []
    for name, node in solution.items():
        if isinstance(node, ast.ClassDef):
            continue  # its methods answer for what they raise
        doc = ast.get_docstring(stub.get(name, node)) or ""
        if name.endswith("__init__"):
            doc += ast.get_docstring(stub[name.split(".")[0]]) or ""
        unnamed += [f"{name} raises {e}" for e in sorted(_raised(node)) if e not in doc]
    assert not unnamed, f"katas/{kata.name}.py: docstrings do not name the errors their solutions raise: {unnamed}"


@pytest.mark.parametrize("kata", KATAS, ids=NAMES)
def test_each_task_depends_on_exactly_the_tasks_whose_functions_it_or_its_checks_call(kata):
    """The registry's `depends` of every task are the other tasks whose functions the reference solution
    of its functions calls, or its checks call (tests/task_calls.py reads both): a call added or taken
    away shows here, so a failure is never blamed on a task it does not call, nor left unblamed."""
    from task_calls import called_tasks

    called = called_tasks(kata)
    wrong = [
        f"task {t.name!r} has depends = {sorted(t.depends)}, but it calls {sorted(called[t.name])}"
        for t in kata.tasks
        if set(t.depends) != called[t.name]
    ]
    assert not wrong, f"grader/suites/{kata.name}/kata.toml: " + "; ".join(wrong)


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["nope"]], ids=["help", "h", "unknown-kata"])
def test_the_stub_writer_writes_nothing_when_asked_for_help_or_a_kata_it_lacks(argv, monkeypatch, capsys):
    written = []
    monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: written.append(self))  # it rewrote katas/ on --help
    with pytest.raises(SystemExit) as info:
        stubs_main(argv)
    assert info.value.code == (2 if argv == ["nope"] else 0) and written == []
    printed = capsys.readouterr()
    assert "usage: python -m grader.kata.stubs" in printed.out + printed.err
