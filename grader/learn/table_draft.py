"""The draft `kata play stack` speculates with: an n-gram table of the teacher's averaged distributions
(reference.ngram.NGramLM), which costs a few dictionary look-ups a character where the one-layer
neural draft costs a quarter of the teacher.

It is the learner's own table once the distillation kata's `ngram` task passes (distill_ngram runs in
its jail, as every demo runs kata code, on the teacher's logits over the first LEARNER_CHARS
characters of train.txt), else the shipped one. Distilling takes about a minute, so the learner's
table is kept in the learner's state folder under the digest of the kata file it came from, and made
again only when that file changes."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from grader.kata import target as _target
from grader.learn import play_jails, vouch
from grader.learn import progress as state
from grader.learn.play import kata_source
from grader.learn.play_jails import LearnerError
from reference.model import Model
from reference.ngram import LEARNER_CHARS, TEXT_PATH, NGramLM, distil
from reference.tokenizer import encode

JAIL_CHUNK = 25_000  # positions per call of the learner's distill_ngram: (25,000, V) logits cross at a time
SHIPPED = "the shipped n-gram table (reference/weights/ngram.npz)"


def table_draft(teacher: Model, target: str, progress: Callable[[int, int], None] | None = None, *, make=True):
    """(the NGramLM to draft with, a sentence saying whose table it is and why). Call it inside
    play_jails.jails(): the learner's distill_ngram runs in a jail that stops on the way out. With
    make=False a table not kept yet is not distilled (a page cannot wait a minute): the shipped one
    stands in, and the sentence says how to make yours."""
    source = kata_source("distillation", ("distill_ngram",), target)
    if source.module is None:
        why = source.says.removeprefix("the model's own").lstrip(", :")
        return NGramLM.pretrained(), f"{SHIPPED}, {why}"
    path = _target.kata_path(target, "distillation")
    cache = state.state_dir() / f"ngram-{vouch.file_digest(path)[:16]}.npz"
    whose = "your" if target == "katas" else "the"
    if cache.is_file():
        try:
            return NGramLM.pretrained(cache), f"{whose} distill_ngram's table ({path}), kept in {cache}"
        except (OSError, ValueError):
            cache.unlink(missing_ok=True)  # a damaged copy: made again below
    if not make:
        return NGramLM.pretrained(), f"{SHIPPED}; kata play stack distils {whose} table once (about a minute)"
    ids = np.array(encode(TEXT_PATH.read_text(encoding="ascii")[:LEARNER_CHARS]))
    try:
        lm = distil(source.module.distill_ngram, teacher, ids, chunk=JAIL_CHUNK, progress=progress)
    except (LearnerError, ValueError) as exc:  # it passed its grade, but what it made here is no table
        return NGramLM.pretrained(), f"{SHIPPED}, since {whose} distill_ngram's table could not be used: {exc}"
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        lm.save(cache)
    except OSError:  # a read-only folder: the table is used, and made again next time
        pass
    return lm, f"{whose} distill_ngram's table ({path}), distilled on {LEARNER_CHARS:,} characters of train.txt"


def table_bytes(lm: NGramLM) -> int:
    """What the table holds as shipped: a byte per context id and a byte per stored -log p."""
    return lm.contexts.size + lm.probs.size


def bench_args(kata: str, target: str, folder: Path) -> list[str]:
    """What `kata bench KATA --target TARGET` adds to its benchmark's arguments: for the speculative kata, the
    table draft `kata play stack` would draft with when it is the target's own (saved in folder, --table) and
    what it is (--table-whose); the benchmark runs the shipped table in any case. Nothing for another kata,
    nor without the teacher's weights to distil from."""
    if kata != "speculative":
        return []
    try:
        teacher = Model.pretrained("teacher")
    except (ValueError, FileNotFoundError):
        return []
    with play_jails.jails():
        table, whose = table_draft(teacher, target)
    if whose.startswith(SHIPPED):
        return ["--table-whose", whose]
    path = folder / "table.npz"
    table.save(path)
    return ["--table", str(path), "--table-whose", whose]
