# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""torch's ProcessGroupWrapper (``TORCH_DISTRIBUTED_DEBUG=DETAIL``) logs each collective's
fingerprint before it runs it, on every rank::

    [I ProcessGroupWrapper.cpp:562] [Rank 2] Running collective: CollectiveFingerPrint(SequenceNumber=1276, OpType=ALLREDUCE, TensorShape=[], TensorDtypes=Float, ...)

One ``fingerprint_running`` event per line (fields ``seq``, ``op``, ``shape`` where given), on the
rank the line names. Where a rank's latest fingerprint trails the others' is
``analysis/detectors/fingerprint_lag.py``'s to say.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

_RUNNING = re.compile(r"\[Rank (?P<rank>\d+)\] Running collective: CollectiveFingerPrint\("
                      r"SequenceNumber=(?P<seq>\d+),\s*OpType=(?P<op>\w+)"
                      r"(?:,\s*TensorShape=(?P<shape>\[[^\]]*\]))?")


def running(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _RUNNING.search(line.body)
    if m is None:
        return []
    fields: dict[str, str | int | float] = {"seq": int(m.group("seq")), "op": m.group("op")}
    if m.group("shape") is not None:
        fields["shape"] = m.group("shape")
    return [make_event("fingerprint_running", line, ctx, "info", fields,
                       rank=int(m.group("rank")), rank_source="content")]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"Running collective: CollectiveFingerPrint(", running),
]
