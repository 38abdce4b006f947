"""What an interview keeps on disk: its settings (State, in .interview/state.json)
and the lines of its log (Entry, one per line of .interview/log.jsonl), as
types with their JSON forms."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from enum import Enum

from grader.judge.events import Status

STATE_VERSION = 2
MESSAGE_CHARS = 400  # a failing check's message is cut to this length in the log


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class State:
    """An interview's settings, fixed when it starts (.interview/state.json, beside their seal)."""

    kata: str
    tasks: tuple[str, ...]  # the tasks graded
    functions: tuple[str, ...]  # the functions and classes the candidate writes
    title: str
    preset: str  # "" when the interview was not started from a preset
    candidate: str  # the candidate's name, "" when none was given
    minutes: int
    seed: int  # the grading seed; never printed to the candidate
    practice: bool  # practice alone: the report is the candidate's debrief, answers on request
    started: datetime
    id: str  # random, made at the start; every HMAC of the seal covers it
    version: int = STATE_VERSION

    @property
    def deadline(self) -> datetime:
        return self.started + timedelta(minutes=self.minutes)

    def sealed(self) -> dict:
        """The sealed fields but the log's (seal.FIELDS): field -> its value, as JSON writes it."""
        settings = {
            "kata": self.kata,
            "tasks": list(self.tasks),
            "functions": list(self.functions),
            "title": self.title,
            "preset": self.preset,
            "candidate": self.candidate,
            "practice": self.practice,
        }
        return {"settings": settings, "limit": self.minutes, "start": self.started.isoformat(), "seed": self.seed}

    def to_json(self) -> dict:
        values = self.sealed()
        return {
            "version": self.version,
            "id": self.id,
            **values["settings"],
            "minutes": self.minutes,
            "seed": self.seed,
            "started": values["start"],
        }

    @classmethod
    def from_json(cls, data: dict) -> "State":
        version = int(data["version"])
        if version != STATE_VERSION:
            raise ValueError(
                f"state version {version}, this kata reads {STATE_VERSION}: finish it with the kata that started it"
            )
        return cls(
            kata=str(data["kata"]),
            tasks=tuple(data["tasks"]),
            functions=tuple(data["functions"]),
            title=str(data["title"]),
            preset=str(data["preset"]),
            candidate=str(data["candidate"]),
            minutes=int(data["minutes"]),
            seed=int(data["seed"]),
            practice=bool(data["practice"]),
            started=datetime.fromisoformat(data["started"]),
            id=str(data["id"]),
            version=version,
        )


class EntryKind(str, Enum):
    START = "start"  # the interview started; sha256 is the module as handed out
    GRADE = "grade"  # an attempt: `kata grade` in the workspace
    HINT = "hint"  # a hint shown by `kata hint` in the workspace; sha256 is the module at that moment
    FINAL = "final"  # the final grade: `kata interview --finish`, or the first grade after time is up

    def __str__(self) -> str:
        return self.value


class EndReason(str, Enum):
    FINISHED = "finished"  # kata interview --finish
    TIME_UP = "time up"  # the first grade after the deadline

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TaskScore:
    """One task's result in one attempt."""

    name: str
    status: Status
    score: int
    max_score: int
    checks_passed: int
    checks_total: int
    failed_check: str = ""  # the first check that did not pass, "" when all passed
    message: str = ""  # that check's message, cut to MESSAGE_CHARS


@dataclass(frozen=True)
class HintShown:
    """One hint `kata hint` showed during the interview."""

    task: str
    number: int  # from 1
    of: int  # how many hints the task has
    text: str


@dataclass(frozen=True)
class Entry:
    """One line of the log."""

    kind: EntryKind
    time: datetime
    elapsed: float  # seconds since the start
    sha256: str  # the digest of the code graded (for the start: of the module handed out)
    tasks: tuple[TaskScore, ...] = ()
    reason: EndReason | None = None  # FINAL only
    hint: HintShown | None = None  # HINT only
    prev: str = ""  # sha256 of the log line before this one; "" for the first

    @property
    def score(self) -> int:
        return sum(t.score for t in self.tasks)

    @property
    def max_score(self) -> int:
        return sum(t.max_score for t in self.tasks)

    def to_json(self) -> dict:
        return {
            "kind": self.kind.value,
            "time": self.time.isoformat(),
            "elapsed": round(self.elapsed, 3),
            "sha256": self.sha256,
            "tasks": [dict(asdict(t), status=t.status.value) for t in self.tasks],
            "reason": self.reason.value if self.reason else "",
            "hint": asdict(self.hint) if self.hint else None,
            "prev": self.prev,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Entry":
        return cls(
            kind=EntryKind(data["kind"]),
            time=datetime.fromisoformat(data["time"]),
            elapsed=float(data["elapsed"]),
            sha256=str(data["sha256"]),
            tasks=tuple(TaskScore(**dict(t, status=Status(t["status"]))) for t in data["tasks"]),
            reason=EndReason(data["reason"]) if data["reason"] else None,
            hint=HintShown(**data["hint"]) if data["hint"] else None,
            prev=str(data["prev"]),
        )
