"""The Gradescope kit: `kata gradescope build OUT.zip` writes the autograder
zip of a Gradescope programming assignment, and `kata gradescope run` is
what that autograder runs for every submission.

Gradescope unpacks the zip into /autograder/source, so everything sits at the
zip's root:

- the grading edition of this project (grader.instructor.release.write_edition with
  held_back=True: every task, the held-back ones included, but never the
  reference solutions or tests/), kata-gradescope.json, which says how to
  seed the grading, and requirements.txt, the package's dependencies;
- setup.sh, run once as root when Gradescope builds the image: Python,
  bubblewrap, and the dependencies in /autograder/venv at the versions
  grader/instructor/constraints.txt pins (`pip install -c`). The grader
  itself is not installed there: it runs from /autograder/source, which only
  root may read, so neither a namespaced jail (which sees the venv's numpy
  and nothing else of it, grader.jail.confine.view) nor one that shares the
  file system under a uid of its own reads the held-back suites or baselines;
- run_autograder, run for each submission: `kata gradescope run` (run()
  below) finds the kata modules anywhere in /autograder/submission, grades
  them in the jail and writes /autograder/results/results.json. If Python
  cannot even start, the script writes a score-0 results.json itself: the
  student always reads a reason, never Gradescope's bare "autograder failed".

Both scripts are template files (templates/gradescope_*), filled in by build().
results.json itself is grader.output.gradescope_results's, which `kata grade --gradescope FILE` writes too.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

from grader.instructor import pins, release, scripts
from grader.instructor.submissions import SubmissionError, find_katas_dir
from grader.kata.registry import load_registry
from grader.output import files
from grader.output.gradescope_results import code_span, error_results, results
from grader.run import seeds
from grader.run.runner import grade

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

CONFIG_NAME = "kata-gradescope.json"  # in /autograder/source: the seed settings build() chose
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
    the build's seed so that a new term can draw new examples (grader.run.seeds:
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
        else f"Graded the kata modules in {code_span(where + '/')} of your submission."
    )
    missing = [f"`{n}.py`" for n in names if not (katas_dir / f"{n}.py").is_file()]
    if missing:
        note += f" Not found there, so graded as errors: {', '.join(missing)}."
    return note


# ------------------------------------------------------------------ the zip

SCRIPTS = {"setup.sh": "gradescope_setup.sh", "run_autograder": "gradescope_run_autograder"}  # in the zip: template


def requirements_text(pyproject: Path) -> str:
    """requirements.txt for setup.sh: the runtime dependencies pyproject.toml lists, one a line."""
    with open(pyproject, "rb") as f:
        dependencies = tomllib.load(f).get("project", {}).get("dependencies", [])
    return "".join(f"{d}\n" for d in dependencies)


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
        python = pins.pinned()["python"]
        texts = {
            "setup.sh": scripts.filled(
                SCRIPTS["setup.sh"], MIN_PYTHON=python.replace(".", ", "), MIN_PYTHON_DOTTED=python
            ),
            "run_autograder": scripts.filled(SCRIPTS["run_autograder"], MAX_SCORE=str(total)),
        }
        (source / "requirements.txt").write_text(requirements_text(source / "pyproject.toml"), encoding="utf-8")
        zipped = io.BytesIO()
        with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, text in texts.items():
                info = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
                info.external_attr = 0o100755 << 16  # a regular file, executable
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, text)
            for path in sorted(source.rglob("*")):
                rel = path.relative_to(source).as_posix()
                if path.is_file() and rel not in texts:
                    zf.write(path, rel)
        files.write_atomically(out_zip, zipped.getvalue())
