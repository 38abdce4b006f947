"""Every function a student edition ships, pasted into a kata module as a student who wants the points
would paste it: the reference solution for the rest of the module, and in one function's place a
helper of the edition's suites, called with the arguments the function takes.

`shipped_helpers(edition)` reads what the edition's suites define (its text, never imported);
`pastings(...)` pairs each helper with each function of each task it could stand in for (a class
for a class; for a function, a function that takes every argument the function requires, and is
given as many of its arguments, in order, as it takes); `passing(...)` grades every
pairing with the task's hidden checks, as the instructor's suite holds them, and returns those that
passed them all: a helper that does that computes the answer the hidden checks ask for, and what is
left (the refusals, the shapes) the edition's public checks tell its student. The jail runs in its
plain mode here, which reads every folder and imports every installed package, so that the pasted
module can import the helper from the edition itself, with everything its module needs: the most a
student could paste.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

from grader.kata.in_process import import_kata
from grader.kata.registry import Kata, suite_modules
from grader.kata.target import SOLUTIONS_DIR
from grader.run.judges import Grader
from grader.run.results import Limits
from grader.run.runner import Grading, grade_batch

LIMITS = Limits(test_seconds=60, kata_seconds=300)
NOT_ANSWERS = ("fixture", "composite")  # decorators whose function is no answer: calling it gives no value


@dataclass(frozen=True)
class Helper:
    module: str  # its module in the suite package, e.g. "grader.suites.moe.checks"
    name: str
    source: str  # its definition's text, decorators included
    is_class: bool
    required: int  # positional parameters without a default
    most: int  # positional parameters it takes (a large number for *args)


@dataclass(frozen=True)
class Pasting:
    task: str
    slot: str  # the function or class of the kata module the helper stands in for
    helper: Helper
    arguments: int  # how many of the slot's arguments it passes on, in order

    def module_text(self, kata: str, edition: Path) -> str:
        """The kata module: the reference solution, then the helper, imported from the edition's
        grader package (added to the path of the one the jail runs), in the slot's place."""
        text = (SOLUTIONS_DIR / f"{kata}.py").read_text(encoding="utf-8")
        h = self.helper
        if h is STUB:
            return f"{text}\n\n{_STUBBED.format(slot=self.slot)}"
        reach = f"import grader as _grader_of_paste\n_grader_of_paste.__path__.insert(0, {str(edition / 'grader')!r})\n"
        if h.is_class:
            return f"{text}\n\n{reach}from {h.module} import {h.name} as {self.slot}  # pasted\n"
        return (
            f"{text}\n\n# pasted: {h.module}.{h.name} in the place of {self.slot}\n"
            f"{reach}import inspect as _inspect_of_paste\n"
            f"from {h.module} import {h.name} as _pasted\n"
            f"_slot_signature = _inspect_of_paste.signature({self.slot})\n\n\n"
            f"def {self.slot}(*args, **kwargs):\n"
            f"    bound = _slot_signature.bind(*args, **kwargs)\n"
            f"    bound.apply_defaults()\n"
            f"    return _pasted(*list(bound.arguments.values())[:{self.arguments}])\n"
        )


_STUBBED = """\
class _NotWritten:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError


def _not_written(*args, **kwargs):
    raise NotImplementedError


{slot} = _NotWritten if isinstance({slot}, type) else _not_written
"""


def _positional(args: ast.arguments) -> tuple[int, int]:
    most = len(args.posonlyargs) + len(args.args)
    return most - len(args.defaults), 10**6 if args.vararg else most


def shipped_helpers(edition: Path, kata: str) -> list[Helper]:
    """The top-level functions and classes of the edition's suite of `kata`, its shared
    grader/suites/common.py and any baseline it ships, but its checks, its fixtures and its
    benchmark (bench.py, a script kata bench runs, which no check imports)."""
    suites = edition / "grader" / "suites"
    paths = [p for p in sorted((suites / kata).glob("*.py")) if p.name != "bench.py"] + [suites / "common.py"]
    out = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        module = ".".join(path.relative_to(edition).with_suffix("").parts)
        for node in ast.parse(text).body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("test"):
                continue
            decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
            if any(word in decorators for word in NOT_ANSWERS):
                continue
            required, most = (0, 0) if isinstance(node, ast.ClassDef) else _positional(node.args)
            source = ast.get_source_segment(text, node, padded=False)
            out.append(Helper(module, node.name, source, isinstance(node, ast.ClassDef), required, most))
    return out


def timed(kata: Kata, task: str) -> list[str]:
    """The functions of the kata that a task with none of its own (speed) times: those its
    test modules in the instructor's suite name."""
    text = "".join(p.read_text(encoding="utf-8") for p in suite_modules(kata.suite) if _marks(p, task))
    return [f for t in kata.tasks for f in t.functions if re.search(rf"\b{f}\b", text)]


def _marks(path: Path, task: str) -> bool:
    return f'@pytest.mark.task("{task}")' in path.read_text(encoding="utf-8")


def pastings(kata: Kata, tasks: list[str], helpers: list[Helper]) -> list[Pasting]:
    """Each helper in the place of each function of each of `tasks` it could stand in for; a
    task with no function of its own (speed) takes its helpers in the place of each function
    it times."""
    solution = import_kata("reference", kata.name)
    out = []
    for task in tasks:
        for slot in kata.task(task).functions or timed(kata, task):
            real = getattr(solution, slot)
            for h in helpers:
                if inspect.isclass(real):
                    if h.is_class:
                        out.append(Pasting(task, slot, h, 0))
                    continue
                if h.is_class:
                    continue
                params = [
                    p
                    for p in inspect.signature(real).parameters.values()
                    if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                ]
                n = min(len(params), h.most)  # it is given the slot's arguments, as many as it takes
                if h.required <= n and n >= sum(p.default is p.empty for p in params):
                    out.append(Pasting(task, slot, h, n))
    return out


STUB = Helper("", "", "", False, 0, 0)  # the slot as the stub writes it: it raises NotImplementedError


def stubbed(pasted: list[Pasting]) -> list[Pasting]:
    """For each (task, slot) of `pasted`, that slot stubbed: what its hidden checks give when the
    slot does nothing. A slot whose task's hidden checks pass even so is one they do not test."""
    return [Pasting(task, slot, STUB, 0) for task, slot in dict.fromkeys((p.task, p.slot) for p in pasted)]


def leaks(
    kata: Kata, pasted: list[Pasting], hidden: dict[str, list[str]], edition: Path, folder: Path, grader: Grader
) -> tuple[list[Pasting], list[Pasting]]:
    """(the pastings that pass every hidden check of their task, in a slot those checks test;
    the stubbed slots those checks do not test). hidden: task -> its hidden checks."""
    untested = passing(kata, stubbed(pasted), hidden, edition, folder / "stubbed", grader)
    skip = {(p.task, p.slot) for p in untested}
    tried = [p for p in pasted if (p.task, p.slot) not in skip]
    return passing(kata, tried, hidden, edition, folder / "pasted", grader), untested


def passing(
    kata: Kata, pasted: list[Pasting], hidden: dict[str, list[str]], edition: Path, folder: Path, grader: Grader
) -> list[Pasting]:
    """The pastings that pass every hidden check of their task (stopping at the first that does
    not pass), each graded in a folder of its own, all in one judge."""
    if not pasted:
        return []
    gradings = []
    for n, p in enumerate(pasted):
        work = folder / str(n)
        work.mkdir(parents=True)
        (work / f"{kata.name}.py").write_text(p.module_text(kata.name, edition), encoding="utf-8")
        gradings.append(Grading(str(work), (p.task,), tuple(hidden[p.task])))
    graded = grade_batch(kata, gradings, limits=LIMITS, fail_fast=True, grader=grader)
    return [p for p, result in zip(pasted, graded) if result.tasks[0].status.value == "pass"]
