"""The drafts and prompts of the speculative kata's benchmark
(grader/suites/speculative/bench.py): the table draft it runs (the learner's
own distilled table when their distillation task passes, else the shipped
one: grader.learn.table_draft, as `kata play stack` decides), the one-layer
neural draft, and the prompt sets.

A draft is a `Draft`: a label and a model behind `logits(tokens)`, either a
reference `Model` (wrapped in a fresh CachedLM per run) or an `NGramLM`
(reset per run: it keeps its table, and building one is not what is timed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from grader.learn import play_jails
from grader.learn.table_draft import SHIPPED, table_draft
from reference.lm import CachedLM
from reference.model import WEIGHTS_DIR, Model
from reference.ngram import NGramLM
from reference.tokenizer import encode

DATA = WEIGHTS_DIR.parent / "data"
PROMPT_CHARS = 32  # characters of each val.txt prompt
VAL_PROMPTS = 5  # val.txt prompts, at line starts spread evenly through the file
LIST_PROMPT = (
    "Return True if the path is a file.\nReturn True if the path is a directory.\nReturn True if the path is a link.\n"
)


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


def table_drafts(target: str, teacher: Model) -> list[Draft]:
    """The table drafts to run, each said: the learner's own table (or the
    reference's, or a folder's: the --target's distill_ngram, distilled on
    LEARNER_CHARS characters of train.txt in a jail, kept per kata file)
    first, when the target's distillation task that writes it passes (for
    'katas': its last grade, recorded by this account's grader on the file as
    it is now), then the shipped table beside it; else the shipped one alone."""
    t0 = time.perf_counter()
    with play_jails.jails():
        table, whose = table_draft(teacher, target)
    if whose.startswith(SHIPPED):
        print(f"table draft: {whose}")
        return [Draft("shipped table", table)]
    print(f"table draft: {whose} ({len(table.contexts):,} rows, {time.perf_counter() - t0:.0f} s); beside it {SHIPPED}")
    return [Draft("own table", table), Draft("shipped table", NGramLM.pretrained())]
