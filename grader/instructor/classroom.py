"""GitHub Classroom's autograding for the katas: one test per task, worth its points.

GitHub Classroom grades a push by running commands and scoring each by its
exit code. `kata grade KATA:TASK` exits 0 exactly when that task passes, so
each task is one command. `kata classroom DIR` writes, into the student
repository's template (a student edition from `kata release`):

- .github/workflows/classroom.yml: the workflow Classroom runs. It installs
  the project, runs one `classroom-resources/autograding-command-grader`
  step per task, then the `autograding-grading-reporter` step that sends
  the points to Classroom.
- .github/classroom/autograding.json: the same tests in the older format
  that Classroom's assignment page imports.

Tasks held back from the student edition (release = false) are left out:
their suites are not in the students' repositories.
"""

from __future__ import annotations

import json
from pathlib import Path

from grader.kata.registry import Kata

TIMEOUT_MINUTES = 10  # per task; a kata grades in seconds, installing takes longer on a cold runner
PYTHON = "3.11"


def tests(katas: tuple[Kata, ...] | list[Kata]) -> list[dict]:
    """One test per released task: {id, name, command, points}."""
    out = []
    for k in katas:
        for t in k.tasks:
            if t.release:
                out.append(
                    {
                        "id": f"{k.name}-{t.name}".replace("_", "-"),
                        "name": f"{k.name}:{t.name}",
                        "command": f"kata grade {k.name}:{t.name}",
                        "points": t.points,
                    }
                )
    return out


def _q(text: str) -> str:
    """A YAML scalar: JSON's double-quoted strings are valid YAML."""
    return json.dumps(text)


def workflow_text(katas) -> str:
    """.github/workflows/classroom.yml."""
    cases = tests(katas)
    lines = [
        "# Written by `kata classroom`: one autograding test per kata task, worth its points.",
        "name: Autograding Tests",
        "on:",
        "  - push",
        "  - repository_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    steps:",
        "      - name: Checkout code",
        "        uses: actions/checkout@v4",
        "      - name: Set up Python",
        "        uses: actions/setup-python@v5",
        "        with:",
        f"          python-version: {_q(PYTHON)}",
        "      - name: Install the katas and bubblewrap (the grader's jail)",
        "        run: |",
        "          sudo apt-get install -y bubblewrap || true",
        "          python -m pip install -e .",
    ]
    for c in cases:
        lines += [
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
    lines += [
        "      - name: Autograding Reporter",
        "        uses: classroom-resources/autograding-grading-reporter@v1",
        "        env:",
    ]
    lines += [f'          {c["id"].upper()}_RESULTS: "${{{{steps.{c["id"]}.outputs.result}}}}"' for c in cases]
    lines += [
        "        with:",
        f"          runners: {_q(','.join(c['id'] for c in cases))}",
    ]
    return "\n".join(lines) + "\n"


def autograding_json(katas) -> dict:
    """.github/classroom/autograding.json."""
    return {
        "tests": [
            {
                "name": c["name"],
                "setup": "python -m pip install -e .",
                "run": c["command"],
                "input": "",
                "output": "",
                "comparison": "included",
                "timeout": TIMEOUT_MINUTES,
                "points": c["points"],
            }
            for c in tests(katas)
        ]
    }


def write(dest: Path, katas, *, force: bool = False) -> list[Path]:
    """Write both files under dest; ValueError if dest is not a folder or a
    file exists and force is not set."""
    dest = Path(dest)
    if not dest.is_dir():
        raise ValueError(f"{dest} is not a folder; give the student repository's template (from `kata release`)")
    files = {
        dest / ".github" / "workflows" / "classroom.yml": workflow_text(katas),
        dest / ".github" / "classroom" / "autograding.json": json.dumps(autograding_json(katas), indent=2) + "\n",
    }
    existing = [p for p in files if p.exists()]
    if existing and not force:
        raise ValueError(f"{existing[0]} already exists; pass --force to overwrite it")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)
