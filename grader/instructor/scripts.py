"""The kits' scripts and workflow as template files (templates/, package data), filled in by the kits."""

from __future__ import annotations

import importlib.resources
import re

TEMPLATES = importlib.resources.files("grader.instructor") / "templates"


def filled(template: str, **values: str) -> str:
    """templates/<template> with each @NAME@ replaced by values[NAME]; ValueError
    if a placeholder is left or a value has no placeholder."""
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    for name, value in values.items():
        if f"@{name}@" not in text:
            raise ValueError(f"templates/{template} has no @{name}@")
        text = text.replace(f"@{name}@", value)
    left = re.findall(r"@[A-Z0-9_]+@", text)
    if left:
        raise ValueError(f"templates/{template} still holds {', '.join(sorted(set(left)))}")
    return text
