"""Known mistakes, told by their failure signature: which of a task's checks
fail and how. A kata's catalogue, grader/suites/<kata>/mistakes.toml, holds a
diagnosis per known mistake (a short name in the learner's words and a
one-line why) with the signature its mutants left when graded with every check
of their task under several seeds; `diagnose` names the one a failing task's
checks match best, or none. It reads outcomes only, never the learner's code,
so a mistake written unlike the catalogue's own still gets its name.

The score of a mistake is a weighted Jaccard similarity between the checks
that failed and the checks its signature says fail (each by the share of the
catalogue's gradings it failed in, an outcome other than the signature's
counting half, and a message whose shape, numbers left out, is not the
signature's counting SHAPE_WEIGHT less), times the share of the signature the grading ran at all (a
fail-fast grading runs less); the best mistake is named when it scores at
least THRESHOLD and strictly more than the next.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from grader.judge.events import Status
from grader.kata.registry import Kata, tomllib

CATALOGUE = "mistakes.toml"  # in a kata's suite folder (package data)
THRESHOLD = 0.5  # the least score that names a mistake
OTHER_OUTCOME = 0.5  # what a check failing otherwise than its signature says counts for
SHAPE_WEIGHT = 0.5  # what a failing check's message shape (numbers left out) adds when it is the signature's
SHAPE_CHARS = 160  # how much of a message's first line its shape keeps
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", re.IGNORECASE)
_NUMBERS = re.compile(r"#(?:[\s,]+#)+")
# A kata's knobs (its catalogue's `knobs`, from the top of grader/suites/KATA/mutants.toml) are the parameters
# at whose 0 or 1 a term vanishes or a factor does nothing (distillation's T=1: no softening, so no T^2 either;
# alpha=0: no soft term): which of them a failing case had tells mistakes apart (a missing T^2 cannot fail at T=1), so a
# message's `T=1` stays in its shape. Other parameters' values, and other katas' T (a count of tokens), are numbers.


@functools.lru_cache(maxsize=None)
def _numbers(knobs: tuple[str, ...]) -> re.Pattern:
    """A number, with the knob it is set to when there is one (`T=1`: knob T, number 1)."""
    knob = rf"(?:\b(?P<knob>{'|'.join(map(re.escape, knobs))})=)?" if knobs else ""
    return re.compile(knob + rf"(?P<number>{_NUMBER.pattern})", re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def _setting(knobs: tuple[str, ...]) -> re.Pattern:
    return re.compile(rf"\b({'|'.join(map(re.escape, knobs))})=(#|\?|0|1)(?![\w.])")


_UNSEEN = "not run"  # a check's message starts so when the judge stopped its task before it (fail-fast, a timeout)


@dataclass(frozen=True)
class Sign:
    """One check of a mistake's signature: how it did not pass across the catalogue's gradings."""

    check: str  # the check's id in the task: test_x, or test_x[case]
    outcomes: tuple[tuple[str, int], ...]  # (outcome, in how many gradings), the most frequent first
    message: str = ""  # the shape (message_shape) of its most frequent message


@dataclass(frozen=True)
class Mistake:
    """A known mistake of one task, and the failure signature it leaves."""

    task: str
    name: str  # in the learner's words: "the T^2 factor is missing"
    why: str  # one line: why it matters, without the fix's code
    mutants: tuple[str, ...]  # the mutants (grader/suites/<kata>/mutants.toml) it was measured on
    gradings: int  # how many gradings (mutants times seeds) the signature counts
    signature: tuple[Sign, ...]
    knobs: tuple[str, ...] = ()  # its kata's knobs: whose 0 or 1 its message shapes keep

    def sign(self, check: str) -> Sign | None:
        return next((s for s in self.signature if s.check == check), None)

    def share(self, check: str, outcome: str = "") -> float:
        """The share of the gradings in which `check` did not pass (had `outcome`, when given)."""
        sign = self.sign(check)
        if sign is None:
            return 0.0
        return sum(n for o, n in sign.outcomes if not outcome or o == outcome) / self.gradings


def message_shape(message: str, knobs: tuple[str, ...] = ()) -> str:
    """A check's message without what varies between ways of writing a mistake: its first line,
    every number (and run of numbers) as #, but a knob set to 0 or 1 (`T=1`), at most SHAPE_CHARS
    characters."""
    first = message.strip().split("\n", 1)[0]

    def shape(m: re.Match) -> str:
        knob = m.groupdict().get("knob")
        if knob and re.fullmatch(r"[01](?:\.0*)?", m["number"]):
            return f"{knob}={int(float(m['number']))}"
        return f"{knob}=#" if knob else "#"

    return _NUMBERS.sub("#", _numbers(knobs).sub(shape, first))[:SHAPE_CHARS]


@dataclass(frozen=True)
class Diagnosis:
    name: str
    why: str
    score: float

    @property
    def line(self) -> str:
        """What a report prints under the task."""
        return f"looks like: {self.name} (why: {self.why})"


def score(mistake: Mistake, failing: dict[str, tuple[str, str]], unseen: set[str], weights: dict[str, float]) -> float:
    """How well a task's failing checks (check id -> (outcome, message shape)) match the mistake,
    in [0, 1]; `unseen`: the checks that did not run (every other check passed)."""
    total = sum(mistake.share(s.check) for s in mistake.signature)
    ran = sum(mistake.share(s.check) for s in mistake.signature if s.check not in unseen)
    if not total or not ran:
        return 0.0
    shared = union = 0.0
    for check in set(failing) | {s.check for s in mistake.signature if s.check not in unseen}:
        weight, share = weights.get(check, 1.0), mistake.share(check)
        if check in failing:
            outcome, shape = failing[check]
            as_said = mistake.share(check, outcome)
            agree = as_said + OTHER_OUTCOME * (share - as_said)
            sign = mistake.sign(check)
            if sign is not None and contradicts(sign.message, shape, mistake.knobs):
                return 0.0
            shared += weight * agree * (1 - SHAPE_WEIGHT * (sign is None or sign.message != shape))
            union += weight
        else:
            union += weight * share
    return shared / union * ran / total


def contradicts(expected: str, got: str, knobs: tuple[str, ...]) -> bool:
    """Whether a check failed at a parameter's identity (T=1, alpha=0) where every grading of the mistake
    failed it at another setting (T=#, alpha=1), or the other way round: the minimal failing cases differ
    where a term vanishes or a factor does nothing, so the mistake is not what failed it (a missing T^2
    does nothing at T=1; a wrong hard term does nothing at alpha=1)."""
    if not knobs:
        return False
    setting = _setting(knobs)
    said = {name: value for name, value in setting.findall(expected) if value != "?"}  # ?: the gradings disagree
    return any(name in said and said[name] != value for name, value in setting.findall(got))


def merged_shape(shapes: Counter, knobs: tuple[str, ...] = ()) -> str:
    """The shape a signature keeps of a check's messages over its gradings (shape -> count): the most
    frequent, with every setting the gradings disagree on (T=1 in one, T=# in another) as `NAME=?`, which
    contradicts nothing."""
    common = shapes.most_common(1)[0][0]
    if not knobs:
        return common
    setting, values = _setting(knobs), {}
    for shape in shapes:
        for name, value in setting.findall(shape):
            values.setdefault(name, set()).add(value)
    split = {name for name, seen in values.items() if len(seen) > 1}
    return setting.sub(lambda m: f"{m[1]}=?" if m[1] in split else m[0], common)


def check_weights(mistakes: tuple[Mistake, ...]) -> dict[str, float]:
    """check id -> its weight: a check that many of the task's mistakes fail tells them apart less."""
    counts: dict[str, int] = {}
    for m in mistakes:
        for sign in m.signature:
            counts[sign.check] = counts.get(sign.check, 0) + 1
    return {check: 1.0 / n**0.5 for check, n in counts.items()}


def ranked(
    mistakes: tuple[Mistake, ...], task: str, failing: dict[str, tuple[str, str]], unseen: set[str] = frozenset()
) -> list[tuple[float, Mistake]]:
    """The task's mistakes by score (failing and unseen as score's), best first (catalogue order among equals)."""
    mine = tuple(m for m in mistakes if m.task == task)
    weights = check_weights(mine)
    scored = [(score(m, failing, unseen, weights), m) for m in mine]
    return sorted(scored, key=lambda pair: -pair[0])


def diagnose(mistakes: tuple[Mistake, ...], task: str, failures: list[dict]) -> Diagnosis | None:
    """The known mistake a task's failures match (its checks that did not pass, as
    TaskResult.failures lists them: test, outcome, message; every other check passed), or None:
    for a task that passes, one not started (a check still todo), one whose grading Ctrl-C
    stopped (no verdict), and failures that match no mistake well enough, or two equally well."""
    if not failures or any(f["outcome"] in (Status.TODO.value, Status.INTERRUPTED.value) for f in failures):
        return None
    unseen = {f["test"] for f in failures if f["message"].startswith(_UNSEEN)}
    knobs = mistakes[0].knobs if mistakes else ()
    failing = {
        f["test"]: (f["outcome"], message_shape(f["message"], knobs)) for f in failures if f["test"] not in unseen
    }
    if not failing:
        return None
    best = ranked(mistakes, task, failing, unseen)[:2]
    if not best or best[0][0] < THRESHOLD or (len(best) > 1 and best[1][0] == best[0][0]):
        return None
    top, mistake = best[0]
    return Diagnosis(mistake.name, mistake.why, round(top, 3))


def catalogue(kata: Kata) -> tuple[Mistake, ...]:
    """The kata's known mistakes: its suite folder's mistakes.toml, or none (also when the file
    does not read: a diagnosis is a courtesy, and never stops a grade)."""
    try:
        return read_catalogue(Path(kata.suite) / CATALOGUE)
    except (OSError, ValueError):
        return ()


@functools.lru_cache(maxsize=None)
def read_catalogue(path: Path) -> tuple[Mistake, ...]:
    """The mistakes of a mistakes.toml; ValueError naming the file and the entry when it is malformed."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    knobs = data.get("knobs", [])
    if type(knobs) is not list or not all(type(k) is str and k.isidentifier() for k in knobs):
        raise ValueError(f"{path}: knobs must be a list of parameter names; regenerate it")
    mistakes = (_mistake(path, n, entry) for n, entry in enumerate(data.get("mistake", []), 1))
    return tuple(dataclasses.replace(m, knobs=tuple(knobs)) for m in mistakes)


def _mistake(path: Path, n: int, entry: dict) -> Mistake:
    try:
        signature = tuple(
            Sign(check, tuple((o, int(k)) for o, k in said.items() if o != "message"), str(said.get("message", "")))
            for check, said in entry["signature"].items()
        )
        mistake = Mistake(
            task=str(entry["task"]),
            name=str(entry["name"]),
            why=str(entry["why"]),
            mutants=tuple(str(m) for m in entry.get("mutants", ())),
            gradings=int(entry["gradings"]),
            signature=signature,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: mistake {n} is malformed ({type(exc).__name__}: {exc}); regenerate it") from None
    if mistake.gradings < 1 or not signature or any(not s.outcomes for s in signature):
        raise ValueError(f"{path}: mistake {n} ({mistake.name!r}) has no gradings or an empty signature; regenerate it")
    return mistake


def pruned(mistakes: tuple[Mistake, ...], dropped: set[str]) -> tuple[Mistake, ...]:
    """The mistakes an edition without the checks named `dropped` (test function names) can tell:
    those checks taken out of every signature, then the mistakes left with none dropped, and,
    until none is left, those that their own signature's typical failures no longer diagnose
    (another mistake looks the same, or better)."""
    return _pruned(tuple(mistakes), frozenset(dropped))


@functools.lru_cache(maxsize=64)  # each edition of a class prunes the same catalogues the same way
def _pruned(mistakes: tuple[Mistake, ...], dropped: frozenset[str]) -> tuple[Mistake, ...]:
    kept = []
    for m in mistakes:
        signature = tuple(sign for sign in m.signature if sign.check.split("[", 1)[0] not in dropped)
        if signature:
            kept.append(dataclasses.replace(m, signature=signature))
    while True:
        told = [m for m in kept if _diagnosed_as_itself(tuple(kept), m)]
        if len(told) == len(kept):
            return tuple(kept)
        kept = told


def _diagnosed_as_itself(mistakes: tuple[Mistake, ...], mistake: Mistake) -> bool:
    """Whether the typical failures of `mistake` (the checks that fail in most of its gradings,
    with their most frequent outcome and message) are diagnosed as it among `mistakes`."""
    typical = [
        {"test": s.check, "outcome": s.outcomes[0][0], "message": s.message}
        for s in mistake.signature
        if mistake.share(s.check) >= 0.5
    ]
    found = diagnose(mistakes, mistake.task, typical)
    return found is not None and found.name == mistake.name


def catalogue_text(mistakes: tuple[Mistake, ...], header: str) -> str:
    """A mistakes.toml holding `mistakes`, under the comment lines of `header`."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    knobs = mistakes[0].knobs if mistakes else ()
    if knobs:
        lines += ["", f"knobs = [{', '.join(_quoted(k) for k in knobs)}]"]
    for m in mistakes:
        lines += [
            "",
            "[[mistake]]",
            f"task = {_quoted(m.task)}",
            f"name = {_quoted(m.name)}",
            f"why = {_quoted(m.why)}",
        ]
        lines.append(f"mutants = [{', '.join(_quoted(x) for x in m.mutants)}]")
        lines += [f"gradings = {m.gradings}", "", "[mistake.signature]"]
        for sign in m.signature:
            said = [f"{_key(o)} = {k}" for o, k in sign.outcomes] + [f"message = {_quoted(sign.message)}"]
            lines.append(f"{_quoted(sign.check)} = {{ {', '.join(said)} }}")
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def _key(outcome: str) -> str:
    return outcome if outcome.isidentifier() else _quoted(outcome)
