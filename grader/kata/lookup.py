"""A kata by the name a learner typed, or a usage error that names the katas and the closest match."""

from __future__ import annotations

import difflib

import click

from grader.kata.registry import Kata, load_registry


def did_you_mean(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def no_kata(name: str, known) -> click.UsageError:
    return click.UsageError(f"no kata named {name!r}{did_you_mean(name, known)}; the katas are: {', '.join(known)}")


def kata_named(name: str) -> Kata:
    known = {k.name: k for k in load_registry()}
    if name not in known:
        raise no_kata(name, known)
    return known[name]
