"""The seal on an interview's state: an HMAC over each of its fields, keyed
by a secret kept outside the workspace.

The key is 32 random bytes in a file of the interviewer's account, made on
the first interview with mode 0600 in a folder of mode 0700:
$KATA_INTERVIEW_KEY if set (tests point it at a temporary file), else
$XDG_STATE_HOME/kata/interview.key, else ~/.local/state/kata/interview.key.
Each sealed field's HMAC also covers the interview's random id, so a field
and its HMAC copied from another interview do not match. The key file and
the HMAC (over canonical JSON) are grader.output.hmac_key's, which learn's
seals use too with a key of their own. docs/interviews.md says what this
protects against and what it does not.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from grader.interview.plan import InterviewError
from grader.output import hmac_key
from grader.output.hmac_key import KeyFileError, KeyStore

KEY_ENV = "KATA_INTERVIEW_KEY"  # the key file's path, instead of the default under the state folder
KEYS = KeyStore(
    KEY_ENV, "interview.key", "interview key", "the interview was started under another account, or it was deleted"
)
UNSEALED = ""  # the log's seal once a kata that could not read the key wrote a line
# What is sealed, in the words a report uses for each.
FIELDS = {
    "settings": "the kata, tasks, candidate and mode",
    "limit": "the time limit",
    "start": "the start time",
    "seed": "the seed",
    "attempts": "the log of attempts and hints",
}


def key_path() -> Path:
    """Where the interview key of this account lives: $KATA_INTERVIEW_KEY, else kata/interview.key under
    $XDG_STATE_HOME or ~/.local/state."""
    return KEYS.path()


def read_key(path: Path) -> tuple[bytes | None, str]:
    """(the key, "") from the file at path, or (None, why it cannot be used)."""
    return KEYS.read(path)


def make_key(path: Path) -> bytes:
    """The key at path, made first (mode 0600, its folder 0700) if there is none; an InterviewError if unusable."""
    try:
        return KEYS.make(path)
    except KeyFileError as exc:
        raise InterviewError(f"cannot seal the interview: {exc}") from None


def new_id() -> str:
    """A random id for one interview, which each of its HMACs covers."""
    return secrets.token_hex(16)


def mac(key: bytes, interview_id: str, field: str, value) -> str:
    """The HMAC-SHA256 of one field's value (anything JSON can write), bound to the interview and the field's name."""
    return hmac_key.mac(key, _labels(interview_id, field), value)


def _labels(interview_id: str, field: str) -> tuple[str, ...]:
    """What a field's HMAC covers before its value: whose seal, the interview and the field's name."""
    return ("kata-interview", interview_id, field)


def seal(key: bytes, interview_id: str, values: dict) -> dict[str, str]:
    """field -> its HMAC, for each field of values."""
    return {field: mac(key, interview_id, field, value) for field, value in values.items()}


@dataclass(frozen=True)
class SealCheck:
    """An interview's state checked against its seal."""

    key: Path  # the key the check used, or looked for
    problem: str = ""  # why the key could not be used, "" when it could
    broken: tuple[str, ...] = ()  # the fields (FIELDS) whose HMAC does not match their value
    log_unsealed: bool = False  # the log was last written by a kata that could not read the key

    @property
    def intact(self) -> bool:
        return not self.problem and not self.broken

    def summary(self) -> str:
        """One line for a report: intact, tampered (and what), or not checked (and why)."""
        if self.problem:
            return f"NOT CHECKED: {self.problem}; nothing in this report can be trusted to be unedited"
        if self.broken:
            what = " and ".join(FIELDS.get(f, f) for f in self.broken)
            return (
                f"TAMPERED: {what} changed since the interview sealed {'it' if len(self.broken) == 1 else 'them'} "
                "(edited, or a write was cut short)"
            )
        if self.log_unsealed:
            return (
                "intact: " + ", ".join(v for f, v in FIELDS.items() if f != "attempts") + " match their HMACs; the "
                "log was written by an account that cannot read the key, so only its chain of digests vouches for it"
            )
        return "intact: " + ", ".join(FIELDS.values()) + " match their HMACs"


def check(key: bytes | None, problem: str, path: Path, interview_id: str, values: dict, seals: dict) -> SealCheck:
    """values (field -> value) against seals (field -> HMAC, as read); key None: not checked, for `problem`.
    A log seal of UNSEALED stands for a log last written without the key: not a mismatch, but no HMAC either."""
    if key is None:
        return SealCheck(path, problem or "no key")
    unsealed = seals.get("attempts") == UNSEALED
    broken = tuple(
        field
        for field, value in values.items()
        if not (field == "attempts" and unsealed)
        and not hmac_key.checks(key, _labels(interview_id, field), value, seals.get(field))
    )
    return SealCheck(path, "", broken, unsealed)
