"""How many of the catalogued mistakes a student edition's public checks catch.

Every mutant of grader/suites/KATA/mutants.toml (of the reference and of the alternative) is a mistake
the instructor's full suite catches (tests/suites/test_mutants.py holds that). Here each is
graded again with only the checks the student edition ships for its task, the checks its
registry lists (a task's hidden checks left out), in one judge per kata (runner.grade_batch):
those checks are the instructor's own, text for text (grader.instructor.held_back takes out only
what no public check uses), so grading them in this checkout grades what the edition runs. A
mutant is caught there when its task does not pass; a mutant of a task the edition holds back is
not counted, nor is one of a task without a public check counted as caught.

    python tests/public_share.py [--write]

prints each kata's share and the mutants only the hidden checks catch, and with --write puts the
measurement into grader/instructor/public_share.toml, which `kata release` prints and
tests/instructor/test_public_share.py holds to a fresh grading.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from grader.instructor import release
from grader.instructor.public_share import Share, write_shares
from grader.judge.events import Status
from grader.kata.registry import find_kata, load_registry
from grader.kata.target import SOLUTIONS_DIR
from grader.run.runner import Grading, grade_batch

from mutation import ALTERNATIVES, MUTANT_LIMITS, load_mutants

SEED = 0  # the seed `kata grade` draws with in the edition


def edition_checks(edition: Path) -> dict[str, dict[str, tuple[str, ...]]]:
    """kata -> released task -> the checks the student edition at `edition` ships for it."""
    return {k.name: {t.name: tuple(t.tests) for t in k.tasks} for k in load_registry(edition / "grader" / "suites")}


def measure(
    kata: str, public: dict[str, tuple[str, ...]], folder: Path, only: set[str] | None = None, seed: int = SEED
) -> Share:
    """kata's mutants (those named `only`, when given) graded with the public checks of their task
    (`public`: task -> checks)."""
    caught, missed = [], []
    for mutants, base in zip(load_mutants(kata), (SOLUTIONS_DIR, ALTERNATIVES)):
        released = [m for m in mutants if m.task in public and (only is None or m.name in only)]
        graded = [m for m in released if public[m.task]]
        missed += [m.name for m in released if not public[m.task]]
        gradings = []
        for m in graded:
            work = folder / f"{base.name}-{len(gradings)}"
            work.mkdir()
            (work / f"{kata}.py").write_text(m.source(kata, base), encoding="utf-8")
            gradings.append(Grading(str(work), (m.task,), public[m.task]))
        results = grade_batch(find_kata(kata), gradings, seed=seed, limits=MUTANT_LIMITS, fail_fast=True)
        for m, result in zip(graded, results):
            (missed if result.tasks[0].status in (Status.PASS, Status.SUBMIT) else caught).append(m.name)
    return Share(kata, tuple(caught), tuple(missed), dict(public))


def measure_all(folder: Path, katas: list[str] | None = None) -> dict[str, Share]:
    """Every kata's share (or `katas`'), against a student edition written under folder."""
    checks = edition_checks(release_into(folder / "edition"))
    out = {}
    for kata in katas or [k.name for k in load_registry()]:
        (folder / kata).mkdir()
        out[kata] = measure(kata, checks[kata], folder / kata)
    return out


def release_into(out: Path) -> Path:
    release.write_edition(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/public_share.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("kata", nargs="*", help="only these katas (default: every one)")
    parser.add_argument("--write", action="store_true", help="write grader/instructor/public_share.toml")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        shares = measure_all(Path(folder), args.kata or None)
    for share in shares.values():
        print(f"{share.kata}: {share.line()}")
        for name in share.missed:
            print(f"    only on submission: {name}")
    if args.write:
        if args.kata:
            print("--write measures every kata: give no kata")
            return 2
        print(f"wrote {write_shares(list(shares.values()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
