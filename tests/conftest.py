"""Shared test settings: a deterministic Hypothesis profile, loaded for every test run."""

from hypothesis import settings

# Same code, same examples: no randomness between runs, no example database,
# no per-example deadline (a shared CI machine has noisy timing).
settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=25)
settings.load_profile("ci")
