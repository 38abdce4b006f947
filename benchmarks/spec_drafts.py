"""The drafts and prompts of bench_speculative: the table draft it runs (the
learner's own distilled table when their distillation task passes, else the
shipped one), the one-layer neural draft, and the prompt sets.

A draft is a `Draft`: a label and a model behind `logits(tokens)`, either a
reference `Model` (wrapped in a fresh CachedLM per run) or an `NGramLM`
(reset per run: it keeps its table, and building one is not what is timed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from benchmarks.shared import load_kata
from grader.grading.events import DONE_HERE
from grader.kata import target as _target
from grader.kata.registry import find_kata
from grader.learn import progress as state
from grader.learn import vouch
from reference.lm import CachedLM
from reference.model import WEIGHTS_DIR, Model
from reference.ngram import LEARNER_CHARS, NGRAM_PATH, NGramLM, distil
from reference.tokenizer import encode

DATA = WEIGHTS_DIR.parent / "data"
PROMPT_CHARS = 32  # characters of each val.txt prompt
VAL_PROMPTS = 5  # val.txt prompts, at line starts spread evenly through the file
LIST_PROMPT = (
    "Return True if the path is a file.\nReturn True if the path is a directory.\nReturn True if the path is a link.\n"
)
KATA, FUNCTION = "distillation", "distill_ngram"  # the task whose function distils a table


@dataclass(frozen=True)
class Draft:
    """A draft model and its label: a reference Model or an NGramLM."""

    label: str
    model: Model | NGramLM

    def lm(self):
        """The draft behind logits(tokens), fresh for a run: a new CachedLM, or the table reset."""
        if isinstance(self.model, Model):
            return CachedLM(self.model)
        self.model.reset()
        return self.model

    def scores(self, tokens: list[int]) -> np.ndarray:
        """Logits (T, V) at every position of tokens, computed from scratch."""
        if isinstance(self.model, Model):
            return self.model.forward(tokens)
        self.model.reset()
        return np.asarray(self.model.logits(tokens))


@dataclass(frozen=True)
class PromptSet:
    name: str
    prompts: tuple[tuple[int, ...], ...]


def prompt_sets() -> list[PromptSet]:
    """VAL_PROMPTS prompts of PROMPT_CHARS characters from val.txt, each at a
    line start spread evenly through the file, and the list-like prompt."""
    text = (DATA / "val.txt").read_text(encoding="ascii")
    prompts = []
    for i in range(VAL_PROMPTS):
        start = text.index("\n", i * len(text) // VAL_PROMPTS) + 1
        prompts.append(tuple(encode(text[start : start + PROMPT_CHARS])))
    return [PromptSet("val.txt", tuple(prompts)), PromptSet("list-like", (tuple(encode(LIST_PROMPT)),))]


def learner_chars_ids() -> np.ndarray:
    """The first LEARNER_CHARS characters of train.txt as ids: what a learner's table is distilled on."""
    with open(DATA / "train.txt", encoding="ascii") as f:
        return np.array(encode(f.read(LEARNER_CHARS)), dtype=np.int64)


def own_distiller(target: str):
    """(the distill_ngram to distil a table with, None) or (None, why not).

    'katas': the learner's, once every task that writes distill_ngram passed
    its last grade, recorded by this account's grader on the file as it is
    now (as `kata play` decides: grader.learn.play.kata_source); 'reference'
    or a folder: its own."""
    tasks = [t.name for t in find_kata(KATA).tasks if FUNCTION in t.functions]
    if not tasks:
        return None, f"no task of the {KATA} kata writes {FUNCTION}"
    if target == "katas":
        last = state.read(state.LAST_GRADE).get(KATA, {})
        which = f"{KATA} task {' and '.join(tasks)}"
        if not all(last.get(t) in DONE_HERE for t in tasks):
            return None, f"your {which} does not pass yet (kata grade {KATA})"
        if not vouch.vouched(state.read(vouch.SEALS), KATA, tasks, _target.kata_path(target, KATA)):
            return None, f"your {which} did not pass in a grade this account recorded of the file as it is now"
    function = getattr(load_kata(target, KATA), FUNCTION, None)
    if not callable(function):
        return None, f"{_target.kata_path(target, KATA)} has no function {FUNCTION}"
    return function, ""


def shipped_table(teacher: Model) -> tuple[Draft, str]:
    """The shipped table (reference/weights/ngram.npz) and what it is; without
    it, a table distilled now by the reference distill_ngram, said so."""
    try:
        return Draft("shipped table", NGramLM.pretrained()), f"the shipped table ({NGRAM_PATH.name})"
    except FileNotFoundError:
        from reference.solutions.distillation import distill_ngram

        table = distil(distill_ngram, teacher, learner_chars_ids())
        return Draft("stand-in table", table), (
            f"a stand-in distilled now by the reference {FUNCTION} on {LEARNER_CHARS:,} characters "
            f"({NGRAM_PATH.name} is missing: python tools/train.py --ngram-only)"
        )


def table_drafts(target: str, teacher: Model) -> list[Draft]:
    """The table drafts to run, the one the learner's code makes first when
    there is one (then the shipped one beside it, to compare), each said."""
    shipped, what = shipped_table(teacher)
    function, why = own_distiller(target)
    if function is not None:
        t0 = time.perf_counter()
        try:
            own = distil(function, teacher, learner_chars_ids())
        except NotImplementedError:
            function, why = None, f"{FUNCTION} in {_target.describe(target)} is not written yet"
        except ValueError as exc:
            function, why = None, f"{FUNCTION} in {_target.describe(target)} gave a table that does not check: {exc}"
    if function is None:
        print(f"table draft: {what}, not your own: {why}")
        return [shipped]
    print(
        f"table draft: your own, {FUNCTION} from {_target.describe(target)} distilled on the first "
        f"{LEARNER_CHARS:,} characters of train.txt ({len(own.contexts):,} rows, {time.perf_counter() - t0:.0f} s); "
        f"beside it {what}"
    )
    return [Draft("own table", own), shipped]
