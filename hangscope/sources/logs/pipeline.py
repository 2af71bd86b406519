# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""torch.distributed.pipelining's schedule actions as a rank prints them (``schedules.py``
``_Action.__repr__``: ``{stage}{type}{microbatch}``; types ``F``, ``B``, ``I``, ``W``, ``SEND_F``,
``RECV_F``, ``SEND_B``, ``RECV_B``, ``UNSHARD``, ``RESHARD``; some versions and users' own prints
write ``SendF``/``RecvB``)::

    rank 0:  [... 0SendF1, 2RecvF0, 2F0]
    [rank1]: actions: [1F0, 1SEND_F0, 1RECV_F1, 1F1]

``pp_actions`` -- one rank's list (the rank from the line's prefix or its ``rank N:`` head): field
``actions``, the last 16 actions, comma-separated as ``stage:TYPE:microbatch`` with TYPE one of
F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B (others dropped).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

_ACTION = re.compile(r"(?<![\w.])(?P<stage>\d+)(?P<type>SEND_F|RECV_F|SEND_B|RECV_B|SendF|RecvF|SendB"
                     r"|RecvB|F|B|I|W)(?P<mb>\d+)(?![\w.])")
_HEAD = re.compile(r"\b[Rr]ank\s*(?P<rank>\d+)\s*[:\]]")
_MAX = 16


def actions(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    found = [f"{m.group('stage')}:{_canon(m.group('type'))}:{m.group('mb')}"
             for m in _ACTION.finditer(line.body)]
    if not any(":SEND_" in a or ":RECV_" in a for a in found):
        return []
    rank = line.rank
    source = line.rank_source
    head = _HEAD.search(line.body)
    if rank is None and head is not None:
        rank, source = int(head.group("rank")), "content"
    if rank is None:
        return []
    return [make_event("pp_actions", line, ctx, "info", {"actions": ",".join(found[-_MAX:])},
                       rank=rank, rank_source=source)]


def _canon(kind: str) -> str:
    return {"SendF": "SEND_F", "RecvF": "RECV_F", "SendB": "SEND_B", "RecvB": "RECV_B"}.get(kind, kind)


HANDLERS: list[tuple[bytes, Handler]] = [
    (trigger, actions) for trigger in (b"SendF", b"RecvF", b"SendB", b"RecvB", b"SEND_F", b"RECV_F",
                                       b"SEND_B", b"RECV_B")
]
