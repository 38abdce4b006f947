"""The types both ends of the judge's result pipe share: a check's outcome,
a task's status, and the events the judge streams to the runner."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum


class Status(str, Enum):
    """A task's status, and a check's outcome, most severe first: a task takes
    the most severe status of its checks."""

    INTERRUPTED = "interrupted"  # Ctrl-C stopped the grading before the check ended: no verdict
    CRASH = "crash"  # the kata's process died during the check
    TIMEOUT = "timeout"  # the check did not finish in its time limit
    ERROR = "error"  # an exception, an import or syntax error, a check that did not finish
    FAIL = "fail"  # a wrong answer
    TODO = "todo"  # the stub still raises NotImplementedError
    SLOW = "slow"  # correct, but a speed check failed
    SUBMIT = "on submission"  # an edition's task: its public checks pass, its hidden ones are graded on submission
    PASS = "pass"
    NOT_RUN = "not run"  # a check no result came back for (never a task's status)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def rank(self) -> int:
        return list(Status).index(self)

    @property
    def done_here(self) -> bool:
        """Nothing left to do in this copy: a pass, or a pass of every check this copy holds."""
        return self in (Status.PASS, Status.SUBMIT)

    @property
    def failed(self) -> bool:
        """A verdict against the task: fail, error, timeout, crash or slow (todo is none: not started)."""
        return self in (Status.FAIL, Status.ERROR, Status.TIMEOUT, Status.CRASH, Status.SLOW)

    @property
    def blocks(self) -> bool:
        """Whether a task of this status can be why a task that needs it fails: it does not pass here, and it
        is neither correct but slow nor stopped by Ctrl-C before a verdict (todo blocks: it raises)."""
        return not self.done_here and self not in (Status.SLOW, Status.INTERRUPTED, Status.NOT_RUN)


INTERRUPTED_MESSAGE = "not graded: the grading was interrupted (Ctrl-C)"

DONE_HERE = (Status.PASS.value, Status.SUBMIT.value)  # the statuses, as recorded in learner state, that are done_here


class EventKind(str, Enum):
    COLLECTED = "collected"  # the checks the judge will run: tests = [{"id", "name"}]
    START = "start"  # a check started: id
    RESULT = "result"  # a check ended: id, outcome, message, example, printed, pytest, load
    DONE = "done"  # every check ended


@dataclass
class Event:
    kind: EventKind
    id: str = ""
    outcome: Status = Status.NOT_RUN
    message: str = ""
    example: str = ""  # Hypothesis's minimal falsifying example, if any
    printed: str = ""  # what the learner's code printed during a check that failed (jail_client.printed)
    pytest: str = ""  # a failed check's exception as pytest words it, Hypothesis's notes included, verbatim
    tests: list[dict] = field(default_factory=list)
    figures: list[dict] = field(default_factory=list)  # what a check measured against its bar (common.figure)
    load: bool = False  # the check failed because the kata module could not be loaded (the message says why)

    def to_line(self) -> bytes:
        data = asdict(self)
        data["kind"], data["outcome"] = self.kind.value, self.outcome.value
        return (json.dumps(data) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes) -> "Event":
        """An event from one line the judge wrote; ValueError if it is not one."""
        data = json.loads(line)
        if not isinstance(data, dict):
            raise ValueError("not an event")
        return cls(
            kind=EventKind(data["kind"]),
            id=str(data.get("id", "")),
            outcome=Status(data.get("outcome", "not run")),
            message=str(data.get("message", "")),
            example=str(data.get("example", "")),
            printed=str(data.get("printed", "")),
            pytest=str(data.get("pytest", "")),
            tests=list(data.get("tests", [])),
            figures=_figures(data.get("figures")),
            load=data.get("load") is True,
        )


def _figures(data) -> list[dict]:
    """The figures of a result line, each checked to be {name, value, bar (a number or None), unit, better, key}."""
    out = []
    for f in data if isinstance(data, list) else []:
        if (
            isinstance(f, dict)
            and isinstance(f.get("value"), (int, float))
            and (f.get("bar") is None or isinstance(f.get("bar"), (int, float)))
        ):
            out.append(
                {
                    "name": str(f.get("name", ""))[:200],
                    "value": float(f["value"]),
                    "bar": None if f.get("bar") is None else float(f["bar"]),
                    "unit": str(f.get("unit", ""))[:20],
                    "better": "lower" if f.get("better") == "lower" else "higher",
                    "key": str(f.get("key", ""))[:40],
                }
            )
    return out
