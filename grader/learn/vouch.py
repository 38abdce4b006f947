"""Which passing grades this account's grader recorded, for the one thing that
runs a learner's code because a grade says it passes: `kata play` on the
learner's own module once its tasks pass (in a jail, as grading runs it; the
gate decides whose code a demo shows, the learner's or the model's own).
(`kata bench` runs whatever code it is pointed at, the learner's own by
default, and asks no grade.)

last_grade.json is a file in the learner's folder: anyone who can write the
folder can write "pass" in it. So each time a grade is recorded, seals.json
beside it gets, per kata, the digest of the kata file each passing task was
graded on, and an HMAC over them keyed by a secret of this account
($KATA_GRADE_KEY, else kata/grades.key under $XDG_STATE_HOME or
~/.local/state; made on first use, mode 0600; grader.output.hmac_key keeps it
and makes the HMAC). A task is vouched for when its recorded digest is the
file's digest now and the HMAC checks: a state file written by hand, copied
from another account or another file, or left from before an edit vouches for
nothing, and the demo runs the model package's own code instead.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from grader.output import hmac_key
from grader.output.hmac_key import KeyFileError, KeyStore

KEY_ENV = "KATA_GRADE_KEY"
KEYS = KeyStore(KEY_ENV, "grades.key", "grades key")
SEALS = "seals.json"
LABELS = ("kata-grades",)  # what each kata's HMAC covers before [kata, tasks]: whose seal it is


def key_path() -> Path:
    """$KATA_GRADE_KEY, else kata/grades.key under $XDG_STATE_HOME or ~/.local/state."""
    return KEYS.path()


def file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def sealed(seals: dict, kata: str, passed: set[str], failed: set[str], digest: str) -> dict:
    """seals with kata's entry updated for a grade of its file (digest): the tasks that passed now vouched
    for on that file, those that did not forgotten, the rest kept; {} for kata when there is no key."""
    try:
        key = KEYS.make(key_path())
    except (KeyFileError, OSError):  # no key can be kept here (a read-only home): nothing is vouched for
        return {name: entry for name, entry in seals.items() if name != kata}
    tasks = dict(checked(seals, kata, key))
    tasks.update(dict.fromkeys(passed, digest))
    for name in failed:
        tasks.pop(name, None)
    return {**seals, kata: {"tasks": tasks, "mac": hmac_key.mac(key, LABELS, [kata, tasks])}}


def checked(seals: dict, kata: str, key: bytes) -> dict[str, str]:
    """task -> digest of kata's entry, when its HMAC checks with key; else {}."""
    entry = seals.get(kata)
    if not isinstance(entry, dict) or not isinstance(entry.get("tasks"), dict):
        return {}
    tasks = {str(t): str(d) for t, d in entry["tasks"].items()}
    return tasks if hmac_key.checks(key, LABELS, [kata, tasks], entry.get("mac")) else {}


def vouched(seals: dict, kata: str, tasks: list[str], path: Path) -> bool:
    """Whether this account's grader recorded a pass of every one of tasks on the file at path as it is now."""
    key, _ = KEYS.read(key_path())
    if key is None:
        return False
    recorded, now = checked(seals, kata, key), file_digest(path)
    return bool(now) and all(recorded.get(t) == now for t in tasks)
