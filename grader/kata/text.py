"""Text safe to show: what any string that learner code (or a submission's
name) supplied becomes before a terminal, a report or a file shows it."""

from __future__ import annotations

# Every character that can move a terminal's cursor, clear its screen, ring it, write its clipboard (OSC 52)
# or reorder text (the bidirectional overrides): C0 but newline and tab, DEL, C1, and the bidi controls; and
# the line and paragraph separators, which start a new line for str.splitlines and the tools that read so.
_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), 0x200E, 0x200F, 0x2028, 0x2029]
_CONTROLS += [*range(0x202A, 0x202F)]
_CONTROLS += [*range(0x2066, 0x206A)]
_ESCAPED = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _CONTROLS}
_ESCAPED_LINES = {**_ESCAPED, 0x0A: "\\n", 0x09: "\\t"}


def printable(text: str, *, lines: bool = True) -> str:
    """text with every control character written as a visible escape (ESC as \\x1b),
    so text from learner code can neither drive a terminal nor forge a line of a
    report; newlines and tabs are kept when `lines` is set, escaped otherwise."""
    return text.translate(_ESCAPED if lines else _ESCAPED_LINES)
