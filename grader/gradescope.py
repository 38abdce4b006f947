"""The Gradescope kit: `kata gradescope build OUT.zip` writes the autograder
zip of a Gradescope programming assignment, and `kata gradescope run` is
what that autograder runs for every submission.

Gradescope unpacks the zip into /autograder/source, so everything sits at the
zip's root:

- the grading edition of this project (grader.release.write_edition with
  held_back=True: every task, the held-back ones included, but never the
  reference solutions or tests/), and kata-gradescope.json, which says how to
  seed the grading;
- setup.sh, run once as root when Gradescope builds the image: Python,
  bubblewrap, and this package with its dependencies in /autograder/venv;
- run_autograder, run for each submission: `kata gradescope run` (run()
  below) finds the kata modules anywhere in /autograder/submission, grades
  them in the jail and writes /autograder/results/results.json. If Python
  cannot even start, the script writes a score-0 results.json itself: the
  student always reads a reason, never Gradescope's bare "autograder failed".

results() is also what `kata grade --gradescope FILE` writes.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

from grader import files, release, report, seeds
from grader.outcome import Status
from grader.registry import load_registry
from grader.runner import GradeResult, TaskResult, grade
from grader.submissions import SubmissionError, find_katas_dir

CONFIG_NAME = "kata-gradescope.json"  # in /autograder/source: the seed settings build() chose
RESULTS_VERSION = 1  # extra_data["version"]: bumped when a field of ours is renamed or removed
MAX_FAILURES_SHOWN = 5  # failing checks a test's output details; the rest are counted
MAX_TEXT = 2000  # characters of one message or example shown; Gradescope's output box is for reading


# ------------------------------------------------------------------ results.json


def results(result: GradeResult, *, seed: int, note: str = "") -> dict:
    """Gradescope's results.json for a grade: one test per task, with a
    Markdown output (status, checks passed, and for a task that does not
    pass each failing check's message, its failing example, which is the
    learner's call as Hypothesis shrank it, and the hint), a leaderboard of
    the figures the passing speed checks measured, and `note` (Markdown)
    under the one-line summary."""
    orders = {k.name: k.order for k in load_registry()}
    tests = []
    for position, kata in enumerate(result.katas, 1):
        order = orders.get(kata.name, position)
        for number, task in enumerate(kata.tasks, 1):
            tests.append(
                {
                    "name": f"{kata.name} / {task.name}: {task.title}",
                    "number": f"{order}.{number}",
                    "score": task.score,
                    "max_score": task.max_score,
                    "status": "passed" if task.status == Status.PASS else "failed",
                    "visibility": "after_due_date" if task.visibility == "hidden" else "visible",
                    "output": _task_output(task),
                    "output_format": "md",
                    "extra_data": {
                        "kata": kata.name,
                        "task": task.name,
                        "status": str(task.status),
                        "checks_passed": task.checks_passed,
                        "checks_total": task.checks_total,
                        "seed": seed,
                    },
                }
            )
    summary = _summary(result, tests, seed)
    return {
        "score": result.score,
        "execution_time": round(result.duration, 3),
        "output": f"{summary}\n\n{note}" if note else summary,
        "output_format": "md",
        "test_name_format": "text",
        "stdout_visibility": "hidden",  # the log holds tracebacks and paths meant for the instructor
        "extra_data": {"seed": seed, "score": result.score, "max_score": result.max_score, "version": RESULTS_VERSION},
        "tests": tests,
        "leaderboard": _leaderboard(result),
    }


def _summary(result: GradeResult, tests: list[dict], seed: int) -> str:
    """One line for the top of the page. While some tasks are hidden it counts
    only the shown ones: the total would give the hidden ones away."""
    shown = [t for t in tests if t["visibility"] == "visible"]
    passed = sum(t["status"] == "passed" for t in shown)
    points = f"{sum(t['score'] for t in shown)}/{sum(t['max_score'] for t in shown)} points"
    line = f"**{points}**: {passed} of {len(shown)} tasks pass (graded with seed {seed})."
    hidden = len(tests) - len(shown)
    if hidden:
        line = (
            f"**{points} on the tasks shown now**: {passed} of {len(shown)} pass (graded with seed {seed}). "
            f"{hidden} more {'task is' if hidden == 1 else 'tasks are'} graded too and shown after the due date."
        )
    if result.interrupted:
        line += " The grading was interrupted: the tasks it did not reach score nothing."
    return line


def _task_output(task: TaskResult) -> str:
    """Markdown for one task: its status, then why it does not pass and the hint."""
    head = f"**{task.status}**: {task.checks_passed} of {task.checks_total} checks passed"
    if task.status == Status.PASS:
        return head
    parts = [head]
    if not task.failures and task.message:  # no check ran: the message says why (a crash before collection)
        parts.append(_fenced(task.message))
    for i, failure in enumerate(task.failures[:MAX_FAILURES_SHOWN]):
        label = "First failing check" if i == 0 else "Also failing"
        parts.append(f"{label}: `{failure['test']}` ({failure['outcome']})")
        parts.append(_fenced(failure["message"] or "(no message)"))
        if failure["example"]:
            parts.append("The failing example:")
            parts.append(_fenced(failure["example"]))
    unshown = len(task.failures) - MAX_FAILURES_SHOWN
    if unshown > 0:
        parts.append(f"... and {unshown} more {'check' if unshown == 1 else 'checks'} that did not pass, not shown.")
    parts.append(f"**Hint:** {task.hint}")
    return "\n\n".join(parts)


def _fenced(text: str) -> str:
    """text, cut to MAX_TEXT, in a Markdown code block: learner text renders as
    written, never as Markdown, and no backticks inside can close the block."""
    if len(text) > MAX_TEXT:
        text = f"{text[:MAX_TEXT]}\n... ({len(text) - MAX_TEXT} more characters cut)"
    text = report.printable(text)
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}text\n{text}\n{fence}"


def _code(text: str) -> str:
    """text as a Markdown code span that no backtick inside can close (CommonMark: a
    fence longer than any run of backticks in it, padded with a space where it starts
    or ends with one), its control characters and newlines escaped."""
    text = report.printable(text, lines=False)
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _leaderboard(result: GradeResult) -> list[dict]:
    """One entry per figure of a passing task: a figure whose answers were wrong
    ranks nothing. Hidden tasks stay off it, as the leaderboard is public."""
    board = []
    for kata in result.katas:
        for task in kata.tasks:
            if task.status != Status.PASS or task.visibility == "hidden":
                continue
            for figure in task.figures:
                if figure.get("bar") is not None and math.isfinite(
                    figure["value"]
                ):  # measured against a bar; JSON has no NaN
                    board.append(
                        {
                            "name": f"{kata.name}: {figure['name']}",
                            "value": round(figure["value"], 2),
                            "order": "desc" if figure["better"] == "higher" else "asc",
                        }
                    )
    return board


def error_results(message: str, *, seed: int | None, execution_time: float) -> dict:
    """results.json for a submission that could not be graded: score 0, the
    message (Markdown) at the top, and one failed test worth every point of
    the registry, so the student sees 0 out of the assignment's total."""
    output = f"**Not graded: 0 points.**\n\n{message}"
    test = {
        "name": "submission",
        "number": "0",
        "score": 0,
        "status": "failed",
        "visibility": "visible",
        "output": output,
        "output_format": "md",
    }
    total = _total_points()
    if total is not None:
        test["max_score"] = total
    return {
        "score": 0,
        "execution_time": round(execution_time, 3),
        "output": output,
        "output_format": "md",
        "stdout_visibility": "hidden",
        "extra_data": {"seed": seed, "score": 0, "max_score": total, "version": RESULTS_VERSION, "error": message},
        "tests": [test],
    }


def _total_points() -> int | None:
    """Every point of the registry, or None when the registry itself is what failed."""
    try:
        return sum(k.max_score for k in load_registry())
    except Exception:  # noqa: BLE001 - this serves the error report; it must not raise in its turn
        return None


# ------------------------------------------------------------------ run_autograder


def run(root: Path) -> int:
    """Grade the submission in root/submission and write
    root/results/results.json, whatever happens: a submission without kata
    modules, or the grader failing, gives a score-0 file that says why (and
    the traceback on stderr for the instructor). Returns 0 once the file is
    written."""
    root = Path(root)
    started = time.monotonic()
    seed = None
    try:
        config = _read_json(root / "source" / CONFIG_NAME)
        seed, seed_from = _seed(config, _read_json(root / "submission_metadata.json"))
        data = _graded(root / "submission", seed)
        data["extra_data"]["seed_from"] = seed_from
        text = files.json_text(data)
    except SubmissionError as exc:
        data = error_results(str(exc), seed=seed, execution_time=time.monotonic() - started)
        text = files.json_text(data)
    except Exception as exc:  # noqa: BLE001 - whatever broke, the student must get a results.json
        traceback.print_exc()
        message = (
            f"The autograder itself failed: {type(exc).__name__}: {exc}\n\n"
            "This is not your fault: tell your instructor."
        )
        data = error_results(message, seed=seed, execution_time=time.monotonic() - started)
        text = files.json_text(data)
    path = root / "results" / "results.json"
    files.write_atomically(path, text)
    print(f"kata gradescope: {data['score']} points, written to {path}")
    return 0


def _graded(submission: Path, seed: int) -> dict:
    """results.json for the kata modules found in submission, graded with seed.
    SubmissionError, saying what to submit, when it holds none."""
    katas = list(load_registry())
    names = [k.name for k in katas]
    try:
        katas_dir = find_katas_dir(submission, names)
    except SubmissionError as exc:
        listed = ", ".join(f"`{n}.py`" for n in names)
        raise SubmissionError(
            f"{exc}.\n\nSubmit your kata modules ({listed}): the files themselves, your "
            "repository's `katas/` folder, or the whole repository; they are found at any "
            "depth."
        ) from None
    result = grade(katas, str(katas_dir), seed=seed, jobs=os.cpu_count() or 1)
    return results(result, seed=seed, note=_found_note(submission, katas_dir, names))


def _read_json(path: Path) -> dict:
    """A JSON object from path; {} when the file is absent (a JSON error propagates)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds {type(data).__name__}, not a JSON object")
    return data


def _seed(config: dict, metadata: dict) -> tuple[int, str]:
    """(the grading seed, where it came from). With seed_from_metadata each
    student gets a seed of their own, the same on every resubmission: a hash
    of the submitters' emails (or ids), else of the submission id, salted by
    the build's seed so that a new term can draw new examples (grader.seeds:
    never the standard seed 0)."""
    base = config.get("seed", 0)
    if type(base) is not int or base < 0:
        raise ValueError(f"{CONFIG_NAME}: seed must be a whole number >= 0, got {base!r}")
    if not config.get("seed_from_metadata"):
        return base, "the autograder's fixed seed"
    users = [u for u in metadata.get("users") or [] if isinstance(u, dict)]
    who = sorted(str(i) for i in (u.get("email") or u.get("id") for u in users) if i not in (None, ""))
    if who:
        identity, source = "\n".join(who), "the submitters in submission_metadata.json"
    elif metadata.get("id") is not None:
        identity, source = f"submission {metadata['id']}", "the submission id in submission_metadata.json"
    else:
        return base, "the autograder's fixed seed (no submission_metadata.json to derive one from)"
    return seeds.derived(str(base), identity), source


def _found_note(submission: Path, katas_dir: Path, names: list[str]) -> str:
    """Where the kata modules were found, and which of them were not."""
    where = katas_dir.relative_to(submission).as_posix()
    note = (
        "Graded the kata modules at the top of your submission."
        if where == "."
        else f"Graded the kata modules in {_code(where + '/')} of your submission."
    )
    missing = [f"`{n}.py`" for n in names if not (katas_dir / f"{n}.py").is_file()]
    if missing:
        note += f" Not found there, so graded as errors: {', '.join(missing)}."
    return note


# ------------------------------------------------------------------ the zip

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image
# (Ubuntu; /autograder/source holds this zip's contents).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
# bubblewrap: the jail's namespaces when the grader does not run as root.
apt-get install -y --no-install-recommends python3 python3-pip python3-venv bubblewrap
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "the grader needs Python >= 3.10; this image has $(python3 --version 2>&1):" \\
         "choose a newer Ubuntu base image in the autograder settings" >&2
    exit 1
fi
# A virtual environment of its own: the image's Python packages stay as they are.
python3 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --upgrade pip
/autograder/venv/bin/python -m pip install /autograder/source
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission. It grades /autograder/submission
# and writes /autograder/results/results.json; if the grader cannot even
# start, it writes a score-0 results.json itself, so the student reads why.
# KATA_AUTOGRADER_ROOT, KATA_AUTOGRADER_SOURCE and KATA_PYTHON let the
# grader's own tests run this script outside Gradescope.
set -u
root="${KATA_AUTOGRADER_ROOT:-/autograder}"
case "$root" in /*) ;; *) root="$PWD/$root" ;; esac
source_dir="${KATA_AUTOGRADER_SOURCE:-$root/source}"
python="${KATA_PYTHON:-/autograder/venv/bin/python}"
results="$root/results/results.json"
mkdir -p "$root/results"
rm -f "$results"
# From the source folder, so the grader is the one this zip carries.
(cd "$source_dir" && exec "$python" -m grader.cli gradescope run --root "$root")
status=$?
if [ ! -s "$results" ]; then
    echo "kata gradescope run exited with status $status without writing $results; writing a score-0 one" >&2
    message="**Not graded: 0 points.** The autograder could not start (exit status $status)."
    message="$message This is not your fault: tell your instructor."
    format='{"score": 0, "output": "%s", "output_format": "md", "stdout_visibility": "hidden", "tests": ['
    format="$format"'{"name": "submission", "number": "0", "score": 0, "max_score": @MAX_SCORE@, "status": "failed",'
    format="$format"' "visibility": "visible", "output": "%s", "output_format": "md"}]}\\n'
    printf "$format" "$message" "$message" > "$results"
fi
exit 0
"""


def build(out_zip: Path, *, seed: int = 0, seed_from_metadata: bool = False) -> None:
    """Write the autograder zip to out_zip: setup.sh, run_autograder and the
    grading edition with kata-gradescope.json, all at the zip's root (where
    Gradescope expects them; it unpacks the zip into /autograder/source).
    seed: the grading seed, or with seed_from_metadata the salt of each
    student's own seed (see run()). ValueError names a bad argument."""
    out_zip = Path(out_zip).expanduser()
    if type(seed) is not int or seed < 0:
        raise ValueError(f"the seed must be a whole number >= 0, got {seed!r}")
    if out_zip.suffix.lower() != ".zip":
        raise ValueError(f"the autograder is a .zip file; {out_zip} does not end with .zip")
    if not out_zip.parent.is_dir():
        raise ValueError(f"{out_zip.parent} is not an existing folder; create it or write the zip elsewhere")
    if out_zip.is_dir():
        raise ValueError(f"{out_zip} is a folder; give the path of the zip file to write")
    total = sum(k.max_score for k in load_registry())
    with tempfile.TemporaryDirectory(prefix="kata-gradescope-") as tmp:
        source = Path(tmp) / "source"
        release.write_edition(source, held_back=True)
        (source / CONFIG_NAME).write_text(
            json.dumps({"seed": seed, "seed_from_metadata": seed_from_metadata}, indent=1) + "\n", encoding="utf-8"
        )
        scripts = {"setup.sh": SETUP_SH, "run_autograder": RUN_AUTOGRADER.replace("@MAX_SCORE@", str(total))}
        zipped = io.BytesIO()
        with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, text in scripts.items():
                info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
                info.external_attr = 0o100755 << 16  # a regular file, executable
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, text)
            for path in sorted(source.rglob("*")):
                rel = path.relative_to(source).as_posix()
                if path.is_file() and rel not in scripts:
                    zf.write(path, rel)
        files.write_atomically(out_zip, zipped.getvalue())
