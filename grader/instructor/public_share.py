"""How many of the project's catalogued mistakes the student edition's public checks catch, per kata:
the share `kata release` prints.

Every catalogued mistake (a mutant of grader/suites/KATA/mutants.toml) fails the instructor's full suite;
the share is the part of them that also fails the checks the edition ships, where the student
works, rather than only the hidden checks graded on submission. Grading every mutant takes
minutes, too long for each release, so the figures are a committed measurement,
public_share.json beside this module: `python tests/public_share.py --write` writes it, and
tests/instructor/test_public_share.py grades every mutant again and fails while the file says
anything else (quickly, when the public checks it records as graded with are not the edition's now).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from grader.output.files import write_json

MEASUREMENT = Path(__file__).with_name("public_share.json")
BAR = 0.9  # the share of its catalogued mistakes each kata's public checks must catch


@dataclass(frozen=True)
class Share:
    kata: str
    caught: tuple[str, ...]  # the mutants (by name) a public check of the edition catches
    missed: tuple[str, ...]  # those only a hidden check catches (on submission)
    # The public checks of each released task the mutants were graded with: a check added, dropped or hidden since
    # changes what they catch, and the project's tests compare this with the edition's checks now.
    checks: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.caught) + len(self.missed)

    @property
    def share(self) -> float:
        return len(self.caught) / self.total if self.total else 1.0

    def line(self) -> str:
        """e.g. '48 of 51 catalogued mistakes (94%) fail a public check'."""
        return f"{len(self.caught)} of {self.total} catalogued mistakes ({self.share:.0%}) fail a public check"


def read_shares(path: Path = MEASUREMENT) -> dict[str, Share]:
    """kata -> its measured share; none when the measurement is absent (a student edition's copy
    of the grader holds it too, but it says nothing about a kata it does not list)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        k: Share(k, tuple(v["caught"]), tuple(v["missed"]), {t: tuple(c) for t, c in v.get("checks", {}).items()})
        for k, v in data["katas"].items()
    }


def write_shares(shares: list[Share], path: Path = MEASUREMENT) -> Path:
    """Write the measurement: each kata's caught and missed mutants, by name, sorted, and the public checks of
    each task they were graded with."""
    katas = {
        s.kata: {
            "caught": sorted(s.caught),
            "missed": sorted(s.missed),
            "checks": {t: list(c) for t, c in s.checks.items()},
        }
        for s in shares
    }
    return write_json(path, {"version": 1, "katas": katas})


def share_lines(katas: list[str], path: Path = MEASUREMENT) -> list[str]:
    """One line per kata: its share, or that it was never measured."""
    shares = read_shares(path)
    return [
        f"{kata}: {shares[kata].line()}" if kata in shares else f"{kata}: not measured (python tests/public_share.py)"
        for kata in katas
    ]
