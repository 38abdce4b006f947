"""A character-level tokenizer with a fixed vocabulary of 96 symbols.

Id 0 is the newline "\\n"; ids 1..95 are the printable ASCII characters
" " (32) through "~" (126) in code-point order. Nothing else is in the
vocabulary: encode rejects any other character and names it.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

VOCAB: str = "\n" + "".join(chr(c) for c in range(32, 127))
VOCAB_SIZE: int = len(VOCAB)  # 96
_ID = {ch: i for i, ch in enumerate(VOCAB)}


def encode(text: str) -> list[int]:
    """Text -> token ids, one per character."""
    if not isinstance(text, str):
        raise ValueError(f"encode takes a str, got {type(text).__name__}")
    ids = []
    for pos, ch in enumerate(text):
        i = _ID.get(ch)
        if i is None:
            raise ValueError(
                f"character {ch!r} (U+{ord(ch):04X}) at position {pos} is not in the vocabulary "
                "(newline and printable ASCII only)"
            )
        ids.append(i)
    return ids


def decode(ids: Iterable[int]) -> str:
    """Token ids -> text; the exact inverse of encode. A ValueError names the
    first item that is not an int id in [0, 96) (a bool, a float, an array of
    several ids), or says ids is not a sequence."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable) or getattr(ids, "ndim", 1) == 0:
        raise ValueError(f"decode takes a sequence of token ids, got {type(ids).__name__}")
    chars = []
    for pos, i in enumerate(ids):
        try:
            index = None if isinstance(i, bool) else operator.index(i)  # ints and integer scalars; never 1.5 or True
        except TypeError:
            index = None
        if index is None or not 0 <= index < VOCAB_SIZE:
            raise ValueError(f"token id {i!r} at position {pos} is not an int in [0, {VOCAB_SIZE})")
        chars.append(VOCAB[index])
    return "".join(chars)
