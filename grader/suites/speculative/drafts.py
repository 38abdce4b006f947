"""The drafts and prompts of the speculative kata's benchmark
(grader/suites/speculative/bench.py): the table drafts it runs (the shipped
one, and beside it a table file it is given: `kata bench speculative` gives
the learner's own distilled table when their distillation task passes, as
`kata play stack` decides, grader.learn.table_draft), the one-layer neural
draft, and the prompt sets.

A draft is a `Draft`: a label and a model behind `logits(tokens)`, either a
reference `Model` (wrapped in a fresh CachedLM per run) or an `NGramLM`
(reset per run: it keeps its table, and building one is not what is timed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def table_drafts(table: str | None, whose: str) -> list[Draft]:
    """The table drafts to run, each said: the table in the file `table` (whose: what it is, as `kata bench`
    says), then the shipped table beside it; without a file, the shipped one alone (whose: why)."""
    shipped = NGramLM.pretrained()
    if table is None:
        print(f"table draft: {whose}")
        return [Draft("shipped table", shipped)]
    try:
        own = NGramLM.pretrained(table)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--table {table}: not an n-gram table this benchmark can read: {exc}") from None
    print(f"table draft: {whose} ({len(own.contexts):,} rows); beside it the shipped n-gram table")
    return [Draft("own table", own), Draft("shipped table", shipped)]
