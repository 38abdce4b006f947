"""Trusted baseline of the kv_cache suite's speed check, run in a jail of its
own so that it crosses the same channel as the learner's code."""

from reference.sampling import generate_naive  # noqa: F401 - the baseline: a full recompute per token
