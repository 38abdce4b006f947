"""Mutants: small, one-bug edits of a reference solution, and grading them.

Each kata's mutants are data, in grader/suites/<kata>/mutants.toml (its header says
how a mutant is written); tests/test_mutants.py grades every one of them, and
the alternative implementation tests/fixtures/alt/<kata>.py, with the
helpers here.

Each mutant names a check of its task that grades it one of its `expect`
statuses under every seed of SEEDS. The tests grade that check alone, under
each seed (a task passes only when every check of it passes, so the check's
verdict is the task's); naming it costs a contributor one command, which
finds the first such check in the suite's order:

    python tests/mutation.py KATA [--all] [--write]

prints the catching check of each of KATA's mutants that names none (with
--all, of every one, and whether the check it names still catches it), and
with --write puts the checks it found into grader/suites/KATA/mutants.toml.

A mutant may also name the diagnosis the grader gives it (`looks_like`, and
`why`, once per diagnosis): the kata's catalogue of known mistakes,
grader/suites/KATA/mistakes.toml, is made from their failure signatures by

    python tests/mutation.py KATA --signatures [--write]

which grades each of them with every check of its task under every seed of
SEEDS, merges the mutants that share a looks_like into one mistake, and
writes the catalogue only when each grading is diagnosed as its own mutant's
mistake (mutants it cannot tell apart must share a looks_like, or one of them
names none). tests/mutants/fresh/KATA.toml holds the same mistakes written
differently, each naming the diagnosis it should get.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from grader.kata.registry import SUITES_DIR, find_kata, tomllib  # tomllib, or tomli on Python 3.10
from grader.kata.target import SOLUTIONS_DIR
from grader.run import diagnosis
from grader.run.diagnosis import Mistake, Sign
from grader.run.results import Limits, TaskResult
from grader.run.runner import Grading, grade_batch, grade_kata

# `kata grade --seed N`: 0 is the standard draw, the others equally deterministic ones. Every mutant is
# caught under each, so that no verdict depends on the examples one seed happens to draw.
SEEDS = (0, 1, 2)

# Mutants run only the checks they name (or their task's, for the finder and the thorough test), and stop at
# the first that does not pass (fail_fast: its outcome is the task's status); generous limits keep a slow
# machine from flaking.
MUTANT_LIMITS = Limits(test_seconds=120, kata_seconds=300)

# tests/fixtures/alt/<kata>.py: a correct implementation of each kata, written differently from the reference.
ALTERNATIVES = Path(__file__).parent / "fixtures" / "alt"
# tests/mutants/fresh/<kata>.toml: each kata's mistakes written unlike its mutants (load_fresh).
FRESH = Path(__file__).parent / "mutants" / "fresh"


def mutants_file(kata: str) -> Path:
    """grader/suites/<kata>/mutants.toml: the kata's mutants, [[mutant]] of the reference, [[alternative]] of the
    alternative."""
    return SUITES_DIR / kata / "mutants.toml"


@dataclass(frozen=True)
class Mutant:
    name: str  # the mistake, in words
    task: str  # the task whose grade must not be 'pass'
    check: str  # the check (test function) of that task which catches it under every seed
    old: str  # text of the mutated file (the reference solution unless told), present exactly once
    new: str  # what replaces it
    expect: tuple[str, ...] = ("fail",)  # statuses the grader may give the task
    looks_like: str = ""  # the diagnosis the grader names for it, in the learner's words ("" : none)
    why: str = ""  # the diagnosis's one-line why (one mutant of those sharing a looks_like says it)

    def source(self, kata: str, base: Path = SOLUTIONS_DIR) -> str:
        """base/<kata>.py with the mutation made."""
        path = base / f"{kata}.py"
        text = path.read_text(encoding="utf-8")
        count = text.count(self.old)
        if count != 1:
            raise AssertionError(f"mutant {self.name!r}: its text occurs {count} times in {path}, not once")
        return text.replace(self.old, self.new)


def grade_mutant(
    kata: str,
    mutant: Mutant,
    tmp_path: Path,
    base: Path = SOLUTIONS_DIR,
    seed: int = 0,
    checks: list[str] | None = None,
    fail_fast: bool = True,
) -> TaskResult:
    """Write the mutated base/<kata>.py into tmp_path and grade its task's
    `checks` (its own check when None; every check of the task when empty) with `seed`."""
    (tmp_path / f"{kata}.py").write_text(mutant.source(kata, base), encoding="utf-8")
    result = grade_kata(
        find_kata(kata),
        str(tmp_path),
        seed=seed,
        tasks=[mutant.task],
        checks=[mutant.check] if checks is None else checks,
        limits=MUTANT_LIMITS,
        fail_fast=fail_fast,
    )
    return result.tasks[0]


def grade_mutants(
    kata: str,
    mutants: list[Mutant],
    folder: Path,
    base: Path = SOLUTIONS_DIR,
    seed: int = 0,
    whole_task: bool = False,
    every_check: bool = False,
) -> dict[str, TaskResult]:
    """Each mutant's name -> its task's grade by the mutant's check (with
    whole_task, by every check of the task, stopping at the first that does
    not pass; with every_check, by every check of the task, each run to its
    end), with `seed`: all in one judge (runner.grade_batch), each mutated
    file in a folder of its own under `folder`."""
    whole_task = whole_task or every_check
    gradings = []
    for n, mutant in enumerate(mutants):
        work = folder / str(n)
        work.mkdir()
        (work / f"{kata}.py").write_text(mutant.source(kata, base), encoding="utf-8")
        gradings.append(Grading(str(work), (mutant.task,), () if whole_task else (mutant.check,)))
    graded = grade_batch(find_kata(kata), gradings, seed=seed, limits=MUTANT_LIMITS, fail_fast=not every_check)
    return {mutant.name: result.tasks[0] for mutant, result in zip(mutants, graded)}


def load_mutants(kata: str) -> tuple[list[Mutant], list[Mutant]]:
    """kata's mutants from grader/suites/<kata>/mutants.toml: (those of the reference
    solution, those of the alternative implementation); none for a kata
    without the file (one `kata new` just made)."""
    path = mutants_file(kata)
    if not path.is_file():
        return [], []
    with open(path, "rb") as f:
        data = tomllib.load(f)
    unknown = set(data) - {"mutant", "alternative", "knobs"}
    if unknown:
        raise AssertionError(f"grader/suites/{kata}/mutants.toml: unknown tables {sorted(unknown)}")

    def mutant(entry: dict) -> Mutant:
        expect = tuple(entry.pop("expect", ("fail",)))
        entry.setdefault("check", "")  # one `kata new` just wrote: `python tests/mutation.py KATA --write` names it
        try:
            return Mutant(**entry, expect=expect)
        except TypeError as exc:
            raise AssertionError(f"grader/suites/{kata}/mutants.toml: a mutant {entry.get('name')!r}: {exc}") from None

    return [mutant(e) for e in data.get("mutant", [])], [mutant(e) for e in data.get("alternative", [])]


def load_fresh(kata: str) -> list[Mutant]:
    """kata's differently written mistakes, tests/mutants/fresh/<kata>.toml: edits of the
    reference solution unlike its mutants' own, each naming the diagnosis (looks_like) it should get."""
    path = FRESH / f"{kata}.toml"
    if not path.is_file():
        return []
    with open(path, "rb") as f:
        data = tomllib.load(f)
    if set(data) - {"fresh"}:
        raise AssertionError(f"tests/mutants/fresh/{kata}.toml: unknown tables {sorted(set(data) - {'fresh'})}")
    try:
        return [Mutant(**entry, check="") for entry in data.get("fresh", [])]
    except TypeError as exc:
        raise AssertionError(f"tests/mutants/fresh/{kata}.toml: {exc}") from None


def assert_alternative_passes(kata: str, tmp_path: Path, seed: int = 0) -> None:
    """The differently written correct implementation tests/fixtures/alt/<kata>.py
    passes every task but speed (the one task allowed to tell ways of writing apart), with `seed`,
    and no task of it looks like a known mistake."""
    (tmp_path / f"{kata}.py").write_text((ALTERNATIVES / f"{kata}.py").read_text(encoding="utf-8"), encoding="utf-8")
    registered = find_kata(kata)
    tasks = [t.name for t in registered.tasks if t.name != "speed"]
    result = grade_kata(registered, str(tmp_path), seed=seed, tasks=tasks, limits=MUTANT_LIMITS)
    failed = [(t.name, t.status, t.message) for t in result.tasks if t.status != "pass"]
    assert not failed, f"the alternative implementation of {kata} lost points with seed {seed}: {failed}"
    named = [(t.name, t.diagnosis) for t in result.tasks if t.diagnosis]
    assert not named, f"the alternative implementation of {kata} got a diagnosis of a known mistake: {named}"


def _check_name(test: str) -> str:
    """A check's name from a case's node name: test_x[case] -> test_x."""
    return test.split("[", 1)[0]


def catching_check(kata: str, mutant: Mutant, base: Path = SOLUTIONS_DIR) -> str | None:
    """The first check of the mutant's task, in the suite's order, that grades
    it one of mutant.expect under every seed of SEEDS; None if there is none."""
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        first = grade_mutant(kata, mutant, work, base, SEEDS[0], checks=[])
        run = [f for f in first.failures if not f["message"].startswith("not run")]
        candidate = _check_name(run[0]["test"]) if run and first.status in mutant.expect else None
        if candidate and all(
            grade_mutant(kata, mutant, work, base, seed, checks=[candidate]).status in mutant.expect
            for seed in SEEDS[1:]
        ):
            return candidate
        # The first failure is not the same under every seed: grade every check under each.
        order: list[str] = []
        catching: set[str] | None = None
        for seed in SEEDS:
            graded = grade_mutant(kata, mutant, work, base, seed, checks=[], fail_fast=False)
            names = {_check_name(f["test"]) for f in graded.failures if f["outcome"] in mutant.expect}
            order = order or [_check_name(f["test"]) for f in graded.failures]
            catching = names if catching is None else catching & names
        return next((name for name in order if name in (catching or set())), None)


def graded_every_check(kata: str) -> list[tuple[Mutant, list[list[dict]]]]:
    """Each mutant of kata (of the reference and of the alternative) that names a
    diagnosis, and its task's failures under each seed of SEEDS, graded with every check of the task."""
    out: dict[int, tuple[Mutant, list[list[dict]]]] = {}
    for mutants, base in zip(load_mutants(kata), (SOLUTIONS_DIR, ALTERNATIVES)):
        named = [m for m in mutants if m.looks_like]
        for seed in SEEDS if named else ():
            with tempfile.TemporaryDirectory() as folder:
                graded = grade_mutants(kata, named, Path(folder), base, seed, every_check=True)
            for m in named:
                out.setdefault(id(m), (m, []))[1].append(graded[m.name].failures)
    return list(out.values())


def load_knobs(kata: str) -> tuple[str, ...]:
    """The kata's knobs (`knobs = [...]` at the top of grader/suites/<kata>/mutants.toml): the parameters whose 0 or 1
    its catalogue's message shapes keep (grader.run.diagnosis)."""
    path = mutants_file(kata)
    if not path.is_file():
        return ()
    with open(path, "rb") as f:
        return tuple(tomllib.load(f).get("knobs", ()))


def catalogue_of(graded: list[tuple[Mutant, list[list[dict]]]], knobs: tuple[str, ...] = ()) -> tuple[Mistake, ...]:
    """The mistakes the graded mutants show: one per task and looks_like, its signature
    each failing check's outcomes (counted over its mutants' gradings) and most frequent message shape
    (settings its gradings disagree on left open: diagnosis.merged_shape)."""
    groups: dict[tuple[str, str], list[tuple[Mutant, list[list[dict]]]]] = {}
    for mutant, failures in graded:
        groups.setdefault((mutant.task, mutant.looks_like), []).append((mutant, failures))
    mistakes = []
    for (task, name), members in groups.items():
        whys = {m.why for m, _ in members if m.why}
        if len(whys) != 1:
            raise AssertionError(f"the mutants that look like {name!r} give {len(whys)} whys: give one, once")
        outcomes: dict[str, Counter] = {}
        shapes: dict[str, Counter] = {}
        for _, by_seed in members:
            for f in (f for failures in by_seed for f in failures):
                outcomes.setdefault(f["test"], Counter())[f["outcome"]] += 1
                shapes.setdefault(f["test"], Counter())[diagnosis.message_shape(f["message"], knobs)] += 1
        signature = tuple(
            Sign(check, tuple(counts.most_common()), diagnosis.merged_shape(shapes[check], knobs))
            for check, counts in outcomes.items()
        )
        gradings = sum(len(by_seed) for _, by_seed in members)
        mutants = tuple(m.name for m, _ in members)
        mistakes.append(Mistake(task, name, whys.pop(), mutants, gradings, signature, knobs))
    return tuple(mistakes)


def confusions(mistakes: tuple[Mistake, ...], graded: list[tuple[Mutant, list[list[dict]]]]) -> list[str]:
    """Each mutant grading (under a seed of SEEDS) that the catalogue does not diagnose as its own mistake."""
    wrong = []
    for mutant, by_seed in graded:
        for seed, failures in zip(SEEDS, by_seed):
            found = diagnosis.diagnose(mistakes, mutant.task, failures)
            if found is None or found.name != mutant.looks_like:
                said = f"looks like {found.name!r}" if found else "no diagnosis"
                wrong.append(f"{mutant.name!r} (seed {seed}): {said}, not {mutant.looks_like!r}")
    return wrong


CATALOGUE_HEADER = """The known mistakes of the {kata} kata and the failure signature each leaves. Written by
`python tests/mutation.py {kata} --signatures --write` from grading the mutants of
grader/suites/{kata}/mutants.toml that name a looks_like, with every check of their task, under
seeds {seeds}. Do not edit: change the mutants' looks_like and why, and write it again."""


def task_checks(kata: str) -> dict[str, list[str]]:
    """Each task of kata -> the names of its checks, sorted: what a catalogue was written against."""
    return {task.name: sorted(task.tests) for task in sorted(find_kata(kata).tasks, key=lambda t: t.name)}


def changed_checks(then: dict, now: dict) -> list[str]:
    """Each task whose checks differ between two tables of task -> its checks (a measurement's, and the
    suite's now), with the checks added and those gone."""
    return [
        f"{task}: {sorted(set(now.get(task, ())) - set(then.get(task, ())))} added, "
        f"{sorted(set(then.get(task, ())) - set(now.get(task, ())))} gone"
        for task in sorted(set(now) | set(then))
        if sorted(now.get(task, ())) != sorted(then.get(task, ()))
    ]


def written_against(path: Path) -> dict[str, list[str]]:
    """The [checks] table of a mistakes.toml (task -> its checks when it was written); {} for a file without one."""
    with open(path, "rb") as f:
        return tomllib.load(f).get("checks", {})


def write_catalogue(kata: str, mistakes: tuple[Mistake, ...]) -> Path:
    """Write kata's catalogue of mistakes, grader/suites/<kata>/mistakes.toml, and after it the checks of each
    task it was written against (a [checks] table, which the grader does not read: a check added since
    leaves signatures the catalogue never saw, and the project's tests say so); returns its path."""
    header = CATALOGUE_HEADER.format(kata=kata, seeds=", ".join(map(str, SEEDS)))
    path = Path(find_kata(kata).suite) / diagnosis.CATALOGUE
    table = ["", "[checks]"]  # no comment: an edition's catalogue keeps every comment line as its header
    for task, checks in task_checks(kata).items():
        names = ", ".join('"' + check + '"' for check in checks)  # test function names: nothing to escape
        table.append(f"{task} = [{names}]")
    path.write_text(diagnosis.catalogue_text(mistakes, header) + "\n".join(table) + "\n", encoding="utf-8")
    return path


def signatures_main(kata: str, write: bool) -> int:
    """--signatures: grade kata's mutants that name a diagnosis, print the catalogue they make and
    each grading it does not diagnose as its own mutant's; with write, and none such, write it."""
    graded = graded_every_check(kata)
    mistakes = catalogue_of(graded, load_knobs(kata))
    for m in mistakes:
        print(f"{m.task}: {m.name!r} ({len(m.mutants)} mutants, {len(m.signature)} checks in its signature)")
    wrong = confusions(mistakes, graded)
    for line in wrong:
        print(f"confused: {line}")
    if wrong:
        print("give confused mutants one looks_like (one mistake), or leave one's out; nothing written")
        return 1
    if write:
        print(f"wrote {len(mistakes)} mistakes into {write_catalogue(kata, mistakes)}")
    return 0


def write_checks(path: Path, found: dict[tuple[str, str], str]) -> None:
    """Put `check = "..."` after the task line of each mutant of the mutants
    file `path` named in found ((table, name) -> check), replacing a check
    line it has."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    out: list[str] = []
    table = name = None
    written = False  # the check line of the current table
    for line in lines:
        header = re.fullmatch(r"\[\[(mutant|alternative)\]\]\s*", line)
        if header:
            table, name, written = header.group(1), None, False
        elif table and name is None and line.startswith("name = "):
            name = tomllib.loads(line)["name"]
        elif table and line.startswith("check = ") and (table, name) in found:
            continue
        out.append(line)
        if table and not written and line.startswith("task = ") and (table, name) in found:
            out.append(f'check = "{found[table, name]}"\n')
            written = True
    path.write_text("".join(out), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tests/mutation.py", description="Find the check that catches each mutant."
    )
    parser.add_argument("kata")
    parser.add_argument("--all", action="store_true", help="every mutant, not only those that name no check")
    parser.add_argument("--write", action="store_true", help="write the checks found into the kata's mutants file")
    parser.add_argument(
        "--signatures",
        action="store_true",
        help="grade the mutants with every check of their task and make the kata's catalogue of mistakes "
        "(with --write, into grader/suites/KATA/mistakes.toml)",
    )
    args = parser.parse_args(argv)
    if args.signatures:
        return signatures_main(args.kata, args.write)
    found: dict[tuple[str, str], str] = {}
    missed = 0
    for table, mutants, base in zip(("mutant", "alternative"), load_mutants(args.kata), (SOLUTIONS_DIR, ALTERNATIVES)):
        for mutant in mutants:
            if mutant.check and not args.all:
                continue
            check = catching_check(args.kata, mutant, base)
            if check is None:
                missed += 1
                print(f"{table} {mutant.name!r}: no check of task {mutant.task!r} catches it under seeds {SEEDS}")
                continue
            said = "" if not mutant.check else " (as named)" if check == mutant.check else f" (names {mutant.check})"
            print(f"{table} {mutant.name!r}: {check}{said}")
            if check != mutant.check:
                found[table, mutant.name] = check
    if args.write and found:
        write_checks(mutants_file(args.kata), found)
        print(f"wrote {len(found)} checks into {mutants_file(args.kata)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
