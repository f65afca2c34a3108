"""Control characters shown as escapes: the one definition every text format uses (the terminal report,
`check`'s and `diff`'s text). Kept free of heavy imports: a cached `check` renders through it without numpy.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides that reorder a line.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    r"""`text` with every control character shown as an escape (`\x1b`), so that names taken from files
    cannot move the cursor, clear the screen or reorder a line on the user's terminal.

    Example:
        >>> print(printable("a\x1b[2Jb"))
        a\x1b[2Jb
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", str(text))
