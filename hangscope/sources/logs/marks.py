# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Marks: a user's own prints on either side of a call, naming the rank that printed them.

People who debug a hang bracket the call they suspect with prints (``before 1 - {...}`` /
``after 0``, ``rank 3 before barrier``, ``Before init_process_group rank=2``), then paste what each
rank printed. A rank that printed the *before* of a call and never its *after*, while another rank
printed both, is inside that call: ``analysis/detectors/stuck_between.py`` reads it (rule
``before-without-after``).

Recognised (case-insensitive; the line's process prefix peeled first), in the log's tail
(``progress.TAIL_BYTES``)::

    before 1 - {'backend': 'nccl', 'init_method': 'env://', 'rank': 1}     # the rank right after the word
    after 0
    rank 3 before barrier           /  Rank 3: after all_reduce
    Before init_process_group rank=2 /  after barrier, rank: 0

``user_mark`` fields: mark (``before`` | ``after``), label (the call's words between the mark and
the rank, digits and punctuation dropped; may be empty), text (the line, clipped). The event's rank
is the printed one (``rank_source`` ``content``). Only lines that start with the mark or with
``rank N``: a library's message that merely contains "before" (``... before timing out``) is not
a user's mark.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.common import make_event
from hangscope.sources.logs.tail import LogicalTail, tail_candidates

_CANDIDATE = re.compile(rb"(?i)before|after")
_RANK = r"(?:rank|RANK|Rank)\s*[=:#]?\s*(?P<r{n}>\d{{1,5}})\b"
_MARKS = (
    # before 1 - {...} / after 0 / before: 3
    re.compile(r"^(?P<m>before|after)\b[\s:\-_]*(?P<r>\d{1,5})\b(?!\s*(?:s|ms|sec|seconds|%))",
               re.I),
    # before init_process_group rank=2 / after barrier, rank: 0
    re.compile(r"^(?P<m>before|after)\b(?P<label>[^\d\n]{0,60}?)" + _RANK.format(n=""), re.I),
    # rank 3 before barrier / Rank 3: after all_reduce
    re.compile(r"^" + _RANK.format(n="") + r"\W{1,3}(?P<m>before|after)\b(?P<label>[^\d\n]{0,60})",
               re.I),
)
_WORDS = re.compile(r"[A-Za-z_][A-Za-z_.]*")


def scan_marks(path: str, rank_hint: int | None = None,
               tail: LogicalTail | None = None) -> list[LogEvent]:
    read = tail_candidates(path, rank_hint, _CANDIDATE, tail)
    if read is None:
        return []
    ctx, lines = read
    events = []
    for line in lines:
        body = line.body.strip()
        for pattern in _MARKS:
            m = pattern.match(body)
            if m is None:
                continue
            label = " ".join(w.lower() for w in _WORDS.findall(m.groupdict().get("label") or "")
                             if w.lower() not in ("rank", "the", "call", "calling"))
            fields: dict[str, str | int | float] = {"mark": m.group("m").lower(), "label": label,
                                                    "text": body[:200]}
            events.append(make_event("user_mark", line, ctx, "info", fields,
                                     rank=int(m.group("r")), rank_source="content"))
            break
    return events
