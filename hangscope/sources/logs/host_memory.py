# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""How much host memory a process says it uses, line after line, per stream.

A process the host's OOM killer ends leaves no line of its own: the last thing it printed is
often its own memory report. Loops and frameworks print it in these wordings::

    ... TRAIN Batch 0/185700 loss 4.32 lr 0.00065 rank 0 RSS MEM USE: 212.04G     # wenet
    [INFO] [utils.py:799:see_memory_usage] CPU Virtual Memory: used = 26.4 GB, percent = 84.6%   # DeepSpeed
    host memory: 61.2 GB  /  RSS: 45.1 GiB  /  rss=12000MB

One ``host_memory`` event per stream (at its last such line): fields first_gb, last_gb, max_gb,
count, last_pct (DeepSpeed's percent of the host's memory, where printed). ``detectors/host_memory``
reads a climb, or a report right before a kill.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.common import TEXT_RANK, Line, make_event
from hangscope.sources.logs.tail import LogicalTail, tail_candidates

_CANDIDATE = re.compile(rb"(?i)RSS|Virtual Memory|host mem")
_UNITS = {"g": 1.0, "m": 1 / 1024, "t": 1024.0}
_WORDINGS = (
    re.compile(r"(?i)\bCPU Virtual Memory:\s*used\s*=\s*(?P<v>\d+(?:\.\d+)?)\s*(?P<u>[GMT])B"
               r"(?:,\s*percent\s*=\s*(?P<pct>\d+(?:\.\d+)?)%)?"),
    re.compile(r"(?i)\b(?:RSS(?: MEM(?:ORY)?(?: USE)?)?|host mem(?:ory)?(?: used)?)\s*[:=]\s*"
               r"(?P<v>\d+(?:\.\d+)?)\s*(?P<u>[GMT])(?:i?B)?\b"),
)


def scan_host_memory(path: str, rank_hint: int | None = None,
                     tail: LogicalTail | None = None) -> list[LogEvent]:
    read = tail_candidates(path, rank_hint, _CANDIDATE, tail)
    if read is None:
        return []
    ctx, lines = read
    series: dict[tuple[object, object], tuple[Line, list[float], float | None]] = {}
    for line in lines:
        for pattern in _WORDINGS:
            m = pattern.search(line.body)
            if m is None:
                continue
            stream = (line.rank if line.rank is not None else ctx.rank_hint,
                      line.local_rank if line.local_rank is not None else ctx.local_hint)
            value = float(m.group("v")) * _UNITS[m.group("u").lower()]
            pct = m.groupdict().get("pct")
            _, values, _ = series.get(stream, (line, [], None))
            values.append(value)
            series[stream] = (line, values, float(pct) if pct else None)
            break
    events = []
    for line, values, pct in series.values():
        fields: dict[str, str | int | float] = {
            "first_gb": round(values[0], 2), "last_gb": round(values[-1], 2),
            "max_gb": round(max(values), 2), "count": len(values)}
        if pct is not None:
            fields["last_pct"] = pct
        named = _named(line)
        events.append(make_event("host_memory", line, ctx, "info", fields, rank=named,
                                 rank_source="content") if named is not None
                      else make_event("host_memory", line, ctx, "info", fields))
    return events


def _named(line: Line) -> int | None:
    """The rank a line with no prefix names in its text ("... rank 0 RSS MEM USE: 5.11G"), where
    it names exactly one."""
    if line.rank is not None:
        return None
    ranks = {int(m.group("r")) for m in TEXT_RANK.finditer(line.body)}
    return ranks.pop() if len(ranks) == 1 else None
