"""CHECKLIST.md at the top of the checkout is the kata folders' checklist.md put together, in order."""

from __future__ import annotations

from grader.kata.checklist import HEADER, checklist_text
from grader.kata.registry import SUITES_DIR, load_registry
from grader.kata.target import ROOT


def test_checklist_md_is_current_with_the_kata_folders():
    assert (ROOT / "CHECKLIST.md").read_text(encoding="utf-8") == checklist_text(), (
        "CHECKLIST.md is not the kata folders' checklist.md put together: run `python -m grader.kata.checklist --write`"
    )


def test_each_kata_section_comes_from_its_own_folder_in_the_katas_order():
    text = checklist_text()
    assert text.startswith(HEADER)
    starts = [text.index((SUITES_DIR / k.name / "checklist.md").read_text(encoding="utf-8")) for k in load_registry()]
    assert starts == sorted(starts)
