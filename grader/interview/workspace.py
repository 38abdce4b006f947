"""An interview's workspace as it is on disk: its settings, its log and their
seal (a Session), found and loaded, with the one way a line joins the log.

The folder .interview/ of a workspace holds:

    state.json                  the settings (written at the start) and their seal: an HMAC per
                                field, the log's renewed after each line (grader.interview.seal)
    log.jsonl                   one JSON line per event, appended as it happens: the start, every
                                grade, every hint, the final grade; each names the digest of the
                                code at that moment and the digest of the line before it
    start/KATA.py               the module as handed out
    final/KATA.py               the module as frozen at the end
    interview-report.md, .json  the report, written at the end
"""

from __future__ import annotations

import hmac
import json
import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from grader.interview import seal
from grader.interview.plan import InterviewError
from grader.interview.record import Entry, EntryKind, State, digest
from grader.output import files

STATE_DIR = ".interview"  # inside the workspace
STATE_FILE = "state.json"
LOG_FILE = "log.jsonl"
REPORT_MD = "interview-report.md"
REPORT_JSON = "interview-report.json"


def log_seal_value(lines: list[bytes]) -> dict:
    """What the seal holds of the log: how many lines it has and the digest of the last, which
    (each line naming the digest of the one before) stands for all of them."""
    return {"lines": len(lines), "head": digest(lines[-1]) if lines else ""}


@dataclass
class Session:
    """A workspace as it is on disk."""

    directory: Path
    state: State
    entries: list[Entry]
    log_intact: bool  # every line names the digest of the line before it
    seals: dict[str, str]  # field -> HMAC, as state.json holds them
    sealed: seal.SealCheck  # the settings and the log against their seals, as loaded
    key: bytes | None = field(default=None, repr=False)  # the interview key, None when it could not be read

    @property
    def folder(self) -> Path:
        return self.directory / STATE_DIR

    @property
    def module(self) -> Path:
        return self.directory / f"{self.state.kata}.py"

    @property
    def start_copy(self) -> Path:
        return self.folder / "start" / f"{self.state.kata}.py"

    @property
    def final_copy(self) -> Path:
        return self.folder / "final" / f"{self.state.kata}.py"

    @property
    def report_path(self) -> Path:
        return self.folder / REPORT_MD

    @property
    def attempts(self) -> list[Entry]:
        return [e for e in self.entries if e.kind is EntryKind.GRADE]

    @property
    def hints(self) -> list[Entry]:
        return [e for e in self.entries if e.kind is EntryKind.HINT]

    @property
    def final(self) -> Entry | None:
        return next((e for e in self.entries if e.kind is EntryKind.FINAL), None)

    @property
    def over(self) -> bool:
        return self.final is not None

    def seconds_left(self, now: datetime) -> float:
        return (self.state.deadline - now).total_seconds()

    def write_state(self) -> None:
        files.write_json(self.folder / STATE_FILE, {**self.state.to_json(), "seal": self.seals})

    def append(self, entry: Entry) -> Entry:
        """Append entry to the log, chained to the line before it, and renew the log's seal if
        it held until now (a broken seal stays broken; without the key the log is marked
        unsealed instead); returns what was written."""
        log = self.folder / LOG_FILE
        lines = log.read_bytes().splitlines() if log.exists() else []
        entry = replace(entry, prev=digest(lines[-1]) if lines else "")
        line = json.dumps(entry.to_json()).encode("utf-8")
        held = self.key is not None and hmac.compare_digest(
            self.seals.get("attempts", ""), seal.mac(self.key, self.state.id, "attempts", log_seal_value(lines))
        )
        with open(log, "ab") as f:
            f.write(line + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self.entries.append(entry)
        if self.key is None and self.seals.get("attempts") != seal.UNSEALED:
            self.seals["attempts"] = seal.UNSEALED  # written by an account that cannot read the key
            self.write_state()
        elif held:
            self.seals["attempts"] = seal.mac(self.key, self.state.id, "attempts", log_seal_value(lines + [line]))
            self.write_state()
        return entry


def find_workspace() -> Path | None:
    """The interview workspace `kata grade` runs in: the current directory if
    it holds an interview, else $KATA_WORKDIR if that does; None otherwise."""
    places = [Path.cwd()] + ([Path(os.environ["KATA_WORKDIR"]).expanduser()] if os.environ.get("KATA_WORKDIR") else [])
    return next((p.resolve() for p in places if (p / STATE_DIR / STATE_FILE).is_file()), None)


def _read_state(folder: Path) -> tuple[State, dict[str, str]]:
    directory = folder.parent
    try:
        data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        seals = data["seal"]
        if not isinstance(seals, dict):
            raise TypeError(f"its seal is {type(seals).__name__}, not a table")
        return State.from_json(data), dict(seals)
    except FileNotFoundError:
        raise InterviewError(
            f"{directory} holds no interview (no {STATE_DIR}/{STATE_FILE}); "
            "start one with kata interview KATA [TASK...] --dir DIR"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InterviewError(
            f"{folder / STATE_FILE} is damaged ({exc}); it is written when the interview starts"
        ) from None


def _read_log(folder: Path) -> tuple[list[bytes], list[Entry], bool]:
    """The log's lines, their entries, and whether each names the digest of the one before."""
    try:
        lines = (folder / LOG_FILE).read_bytes().splitlines()
    except FileNotFoundError:
        raise InterviewError(f"{folder / LOG_FILE} is missing: the interview's log was deleted") from None
    entries, intact, prev = [], True, ""
    for n, line in enumerate(lines, 1):
        try:
            entry = Entry.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise InterviewError(
                f"line {n} of {folder / LOG_FILE} is not a log entry ({exc}): the log was edited"
            ) from None
        intact = intact and entry.prev == prev
        entries.append(entry)
        prev = digest(line)
    if not entries or entries[0].kind is not EntryKind.START:
        raise InterviewError(f"{folder / LOG_FILE} does not begin with the interview's start: the log was edited")
    return lines, entries, intact


def load(directory: Path) -> Session:
    """The interview in directory, checked against its seal, or an InterviewError saying there
    is none or that its files are damaged. The key is looked for where seal.key_path() says,
    never where the workspace says."""
    directory = Path(directory).expanduser().resolve()
    folder = directory / STATE_DIR
    state, seals = _read_state(folder)
    lines, entries, intact = _read_log(folder)
    path = seal.key_path()
    key, problem = seal.read_key(path)
    values = {**state.sealed(), "attempts": log_seal_value(lines)}
    checked = seal.check(key, problem, path, state.id, values, seals)
    return Session(directory, state, entries, intact, seals, checked, key)
