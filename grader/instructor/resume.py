"""`kata grade-all --resume`: take from an earlier grading of the class, in the
same output folder, every kata a student has not changed since.

Each OUT/students/STUDENT.json records, per kata, the digest of what its grade
rests on (`digests`): the student's module, and what grades it (the kata's
registry entry, its suite's files and its baseline). With --resume, a kata whose
digest, seed and graded tasks are those of the earlier grade is not graded
again: its earlier result is kept, and the gradebook row is whole. A kata that
changed, was not graded then, or whose grading was interrupted (Ctrl-C) or
failed in the grader itself is graded again; so an interrupted class resumes
where it stopped. Delete a student's JSON to grade them afresh.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from grader.judge.events import INTERRUPTED_MESSAGE, Status
from grader.kata.registry import Kata
from grader.kata.target import ROOT
from grader.output import report
from grader.run.results import KataResult, TaskResult

GRADER_FAILED = "the grader failed: "  # the start of a note of grader.instructor.gradebook: no grade to keep
Earlier = Callable[[str, int, str, Kata, list[str]], "KataResult | None"]


def digest(katas_dir: Path, kata: Kata) -> str:
    """sha256 over the student's module of kata in katas_dir (or its absence) and
    what grades it: the kata's registry entry and its suite's files (its baseline among them)."""
    h = hashlib.sha256()
    module = Path(katas_dir) / f"{kata.name}.py"
    h.update(module.read_bytes() if module.is_file() else b"\0absent\0")
    h.update(repr(kata).encode())
    suite = Path(kata.suite)
    graders = sorted(suite.rglob("*.py")) if suite.is_dir() else [suite]
    for path in graders:
        rel = path.resolve().relative_to(ROOT) if ROOT in path.resolve().parents else path.name
        h.update(f"\0{rel}\0".encode() + path.read_bytes())
    return h.hexdigest()


def digests(katas_dir: Path, katas: list[Kata]) -> dict[str, str]:
    """kata name -> digest(katas_dir, kata)."""
    return {k.name: digest(katas_dir, k) for k in katas}


def earlier_grades(out: Path) -> Earlier:
    """earlier(student, seed, digest, kata, task_names): the student's result of kata in
    out/students/STUDENT.json when it was graded with that seed, digest and tasks and
    the grading finished, else None (a file that is missing or does not parse is None)."""
    cache: dict[str, dict | None] = {}

    def earlier(student: str, seed: int, code: str, kata: Kata, tasks: list[str]) -> KataResult | None:
        if student not in cache:
            cache[student] = _read(Path(out) / "students" / f"{student}.json", student)
        data = cache[student]
        if data is None or data.get("seed") != seed or data.get("digests", {}).get(kata.name) != code:
            return None
        entry = next((k for k in data.get("katas", []) if k.get("name") == kata.name), None)
        if entry is None or [t.get("name") for t in entry.get("tasks", [])] != tasks:
            return None
        try:
            result = kata_result(entry)
        except (KeyError, TypeError, ValueError):
            return None
        unfinished = any(INTERRUPTED_MESSAGE in t.message or t.message.startswith(GRADER_FAILED) for t in result.tasks)
        return None if unfinished else result

    return earlier


def _read(path: Path, student: str) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != report.JSON_VERSION or data.get("student") != student:
        return None
    return data


def kata_result(entry: dict) -> KataResult:
    """A KataResult from its entry in `katas` of report.as_json's shape (the inverse of it)."""
    tasks = [
        TaskResult(
            name=t["name"],
            title=t["title"],
            status=Status(t["status"]),
            score=t["score"],
            max_score=t["max_score"],
            checks_passed=t["checks_passed"],
            checks_total=t["checks_total"],
            message=t["message"],
            hint=t["hint"],
            failures=list(t["failures"]),
            visibility=t["visibility"],
            figures=list(t["figures"]),
            diagnosis=t.get("diagnosis", ""),
            diagnosis_why=t.get("diagnosis_why", ""),
            because_of=t.get("because_of", ""),
        )
        for t in entry["tasks"]
    ]
    return KataResult(entry["name"], entry["title"], entry["score"], entry["max_score"], entry["duration"], tasks)
