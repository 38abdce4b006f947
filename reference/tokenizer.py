"""A character-level tokenizer with a fixed vocabulary of 96 symbols.

Id 0 is the newline "\\n"; ids 1..95 are the printable ASCII characters
" " (32) through "~" (126) in code-point order. Nothing else is in the
vocabulary: encode rejects any other character and names it.
"""

from __future__ import annotations

from typing import Iterable

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
    """Token ids -> text; the exact inverse of encode."""
    chars = []
    for pos, i in enumerate(ids):
        if isinstance(i, bool) or not hasattr(i, "__index__") or not 0 <= int(i) < VOCAB_SIZE:
            raise ValueError(f"token id {i!r} at position {pos} is not an int in [0, {VOCAB_SIZE})")
        chars.append(VOCAB[int(i)])
    return "".join(chars)
