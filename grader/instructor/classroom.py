"""GitHub Classroom's autograding for the katas: one test per task, worth its points,
graded by the instructor's grader in a jail.

GitHub Classroom grades a push by running commands and scoring each by its
exit code (0: the test's points; anything else: none). `kata grade KATA:TASK`
exits 0 only when that task's own checks ran and passed, so each task is one
command. In a student edition, and so with the wheel this kit installs, a task
whose public checks pass is `on submission` and exits 0: Classroom's points
count the public checks. A task the edition holds no check of (every check of
it hidden, such as a speed task timed against a baseline) exits 1 when graded
alone, so it has no test here (gradable); Classroom's total is the points of
the other tasks, and your own grading (`kata grade-all`, Gradescope) grades it.
Untouched stubs score 0: every test's task is todo. `kata classroom DIR --grader-url URL --grader-sha256 HEX`
writes, into the student repository's template (a student edition from `kata release`):

- .github/classroom/install-grader.sh (templates/classroom_install.sh): from a
  temporary folder of its own, removed as it ends (the student's checkout, whose pip/ or zipfile.py Python would
  import first, is never the working folder of a Python it starts, and each runs
  isolated, `python -I`), installs
  bubblewrap and checks that it can isolate the learner's code on the runner (on
  Ubuntu 24.04 it first lifts AppArmor's ban on unprivileged user namespaces, which
  bubblewrap needs), or stops saying it cannot; then installs the grader from the
  wheel at URL, which pip checks against its sha256, with the dependencies at the
  versions the wheel's constraints.txt pins. The repository's own grader/, which
  the student may have edited, is never installed or run.
- .github/workflows/classroom.yml (templates/classroom.yml): the workflow Classroom
  runs. It runs the script, then one `classroom-resources/autograding-command-grader`
  step per gradable task (KATA_JAIL=bwrap, so the grader fails rather than grade unconfined,
  on the repository's katas/; `kata` is a console script, which never imports from
  the folder it runs in), then the `autograding-grading-reporter` step that
  sends the points to Classroom.
- .github/classroom/autograding.json: the same tests in the older format
  that Classroom's assignment page imports (the first test's setup runs the script).

A student who edits these files in their repository changes what grades them: this
kit stops a student's edited grader/ from grading their work, not an edited
workflow. `kata grade-all` over the class's repositories on the instructor's
machine is the grade to trust (docs/instructors.md).

Tasks held back from the student edition (release = false) are left out:
their suites are not in the students' repositories.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

from grader.instructor import release, scripts
from grader.kata.registry import Kata, Task

TIMEOUT_MINUTES = 10  # per task; a kata grades in seconds, installing takes longer on a cold runner
PYTHON = "3.11"  # what the runner sets up: the pinned dependencies (constraints.txt) need 3.11 or later
INSTALL = ".github/classroom/install-grader.sh"  # in the student's repository
PACKAGE = "llm-speed-katas"  # the distribution the grader's wheel holds (pyproject.toml's name)


def tests(katas: tuple[Kata, ...] | list[Kata]) -> list[dict]:
    """One test per task the student edition grades (gradable): {id, name, command, points}. The
    command grades the repository's katas/ with the installed grader, in bubblewrap's jail or not at all."""
    graded = gradable(katas)
    return [
        {
            "id": f"{k}-{t.name}".replace("_", "-"),
            "name": f"{k}:{t.name}",
            "command": f"KATA_JAIL=bwrap kata grade {k}:{t.name} --target ./katas",
            "points": t.points,
        }
        for k, tasks in graded.items()
        for t in tasks
    ]


def gradable(katas: tuple[Kata, ...] | list[Kata]) -> dict[str, list[Task]]:
    """kata name -> its tasks that the student edition can grade: released (release = true) and with
    a check the edition holds (one that is not hidden: held_back.hidden_checks, or the hidden_checks
    of an edition's own registry). A task all of whose checks are hidden (a speed task that times
    against a baseline) is graded by your own grading only: `kata grade KATA:TASK` in the edition
    checks nothing of it and exits 1."""
    katas = tuple(katas)
    hidden = release.hidden_by_task(katas, release.held_back_tasks(katas))
    return {
        k.name: [
            t for t in k.tasks if t.release and any(x not in hidden.get(k.name, {}).get(t.name, ()) for x in t.tests)
        ]
        for k in katas
    }


def check_grader(url: str, sha256: str) -> None:
    """ValueError unless url is an https:// address of a wheel (.whl) and sha256 its 64 hex digits."""
    where = urlparse(url)
    if where.scheme != "https" or not where.netloc or not where.path.endswith(".whl"):
        raise ValueError(
            f"the grader's URL must be an https:// address of a wheel file (.../NAME-VERSION-...-any.whl), got {url!r}"
        )
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"the grader's sha256 must be 64 hexadecimal digits (sha256sum's output), got {sha256!r}")


def install_script(url: str, sha256: str) -> str:
    """.github/classroom/install-grader.sh for the grader wheel at url with that sha256."""
    return scripts.filled("classroom_install.sh", GRADER_URL=url, GRADER_SHA256=sha256, PACKAGE=PACKAGE)


def _q(text: str) -> str:
    """A YAML scalar: JSON's double-quoted strings are valid YAML."""
    return json.dumps(text)


def workflow_text(katas) -> str:
    """.github/workflows/classroom.yml."""
    cases = tests(katas)
    steps = []
    for c in cases:
        steps += [
            f"      - name: {_q(c['name'])}",
            f"        id: {c['id']}",
            "        uses: classroom-resources/autograding-command-grader@v1",
            "        with:",
            f"          test-name: {_q(c['name'])}",
            '          setup-command: ""',
            f"          command: {_q(c['command'])}",
            f"          timeout: {TIMEOUT_MINUTES}",
            f"          max-score: {c['points']}",
        ]
    reporter = [f'          {c["id"].upper()}_RESULTS: "${{{{steps.{c["id"]}.outputs.result}}}}"' for c in cases]
    return scripts.filled(
        "classroom.yml",
        PYTHON=PYTHON,
        STEPS="\n".join(steps),
        REPORTER_ENV="\n".join(reporter),
        RUNNERS=",".join(c["id"] for c in cases),
    )


def autograding_json(katas) -> dict:
    """.github/classroom/autograding.json: the first test's setup installs the grader and its jail."""
    return {
        "tests": [
            {
                "name": c["name"],
                "setup": f"bash {INSTALL}" if i == 0 else "",
                "run": c["command"],
                "input": "",
                "output": "",
                "comparison": "included",
                "timeout": TIMEOUT_MINUTES,
                "points": c["points"],
            }
            for i, c in enumerate(tests(katas))
        ]
    }


def write(dest: Path, katas, *, grader_url: str, grader_sha256: str, force: bool = False) -> list[Path]:
    """Write the three files under dest; ValueError if dest is not a folder, the grader's
    URL or sha256 is not one (check_grader), or a file exists and force is not set."""
    dest = Path(dest)
    if not dest.is_dir():
        raise ValueError(f"{dest} is not a folder; give the student repository's template (from `kata release`)")
    check_grader(grader_url, grader_sha256)
    files = {
        dest / ".github" / "workflows" / "classroom.yml": workflow_text(katas),
        dest / ".github" / "classroom" / "autograding.json": json.dumps(autograding_json(katas), indent=2) + "\n",
        dest / INSTALL: install_script(grader_url, grader_sha256),
    }
    existing = [p for p in files if p.exists()]
    if existing and not force:
        raise ValueError(f"{existing[0]} already exists; pass --force to overwrite it")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (dest / INSTALL).chmod(0o755)
    return list(files)
