"""grader.grading.seeds, the one seed scheme: own seeds are stable, keyed, and never the standard seed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from grader.grading import seeds


@given(st.text(), st.text())
def test_a_derived_seed_is_never_the_standard_seed_and_fits_a_31_bit_seed(key, identity):
    assert 1 <= seeds.derived(key, identity) <= seeds.SPAN


def test_a_derived_seed_is_the_same_for_the_same_key_and_identity_and_differs_otherwise():
    first = seeds.derived("term 2026", "alice@example.com")
    assert seeds.derived("term 2026", "alice@example.com") == first
    assert seeds.derived("term 2027", "alice@example.com") != first
    assert seeds.derived("term 2026", "bob@example.com") != first


def test_drawn_seeds_are_never_the_standard_seed():
    assert all(1 <= seeds.drawn() <= seeds.SPAN for _ in range(1000))
