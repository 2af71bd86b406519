"""A case-insensitive bytes regex's twin for text lowered once.

CPython's ``re`` runs an ignore-case pattern about three times slower than the same pattern
case-sensitively: every character is folded as it is compared, and no first-character set
narrows where a match may start. The scanners of a log's tail each test every line against
such a candidate word list (``(?i)completed|stopped|epoch|...``); with the tail's lines lowered
once (``bytes.lower``: ASCII only, which is all a bytes pattern folds), the twin of each pattern
finds the same lines at a third of the cost.

The twin is the pattern's source with its letters lowered, except in escapes (``\\S``, ``\\B``
and ``\\D`` keep their meaning on lowered text: lowering changes no byte's class) and group
names. Escapes that name a letter by its code (``\\x41``) are refused: lowering would miss them.
``tests/test_logs_casefold.py`` checks each twin against its pattern on every corpus line.
"""

from __future__ import annotations

import re

_twins: dict[re.Pattern[bytes], re.Pattern[bytes]] = {}
_GROUP_NAME = re.compile(rb"\(\?P[<=]\w+[>)]?")


def twin(pattern: re.Pattern[bytes]) -> re.Pattern[bytes]:
    """The case-sensitive twin of ``pattern`` (itself when it ignores no case), to search
    ``text.lower()`` where ``pattern`` searched ``text``."""
    if not pattern.flags & re.IGNORECASE:
        return pattern
    found = _twins.get(pattern)
    if found is None:
        found = _twins[pattern] = re.compile(lowered_source(pattern.pattern),
                                             pattern.flags & ~re.IGNORECASE)
    return found


def lowered_source(source: bytes) -> bytes:
    """``source`` with its letters lowered outside escapes and group names, and its inline
    ignore-case flag dropped; ValueError where that would change what it matches."""
    out = bytearray()
    i, size = 0, len(source)
    while i < size:
        if source[i:i + 1] == b"\\":
            code = source[i + 1:i + 2]
            if code in (b"x", b"N") or code.isdigit():
                raise ValueError(f"an escape by code cannot be folded: {source!r}")
            out += source[i:i + 2]
            i += 2
        elif source.startswith(b"(?i)", i):
            i += 4
        elif source.startswith(b"(?", i) and (source[i + 2:i + 3].isalpha()
                                              or source[i + 2:i + 3] == b"-") \
                and source[i + 2:i + 3] != b"P":
            raise ValueError(f"an inline flag other than a leading (?i): {source!r}")
        elif (name := _GROUP_NAME.match(source, i)) is not None:
            out += name.group()
            i = name.end()
        else:
            out += source[i:i + 1].lower()
            i += 1
    return bytes(out)
