"""A kata module imported into this process, for `kata bench`.

Unlike grading and `kata play`, which only ever run kata code in a jail
(grader.jailer.jail_client), a benchmark only reports: it runs the code it is
pointed at on the learner's own machine, in the process that times it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from grader.kata import target as _target


def import_kata(target: str, kata: str) -> ModuleType:
    """The module of `kata` from a target ('katas', 'reference' or a directory),
    imported here; a ValueError when the target holds no such file."""
    path = _target.kata_path(target, kata)
    if not path.is_file():
        raise ValueError(f"no module {path.name} in {path.parent}")
    spec = importlib.util.spec_from_file_location(f"_local_{kata}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
