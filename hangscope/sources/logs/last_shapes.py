"""The shapes the processes printed last: one print, different shapes, then nothing.

People chase a hang by printing a tensor's shape just before the collective that hangs, on every
process; the paste then ends with those lines::

    CHOSEN LOGPS SHAPE: torch.Size([1])
    CHOSEN LOGPS SHAPE: torch.Size([5])          # huggingface/trl#1396: accelerator.gather hangs

``last_shapes`` event where, among the log's last ``LAST`` lines that say something, one template
(the line with its numbers replaced) that prints a tensor's shape is printed at least twice with
different shapes. fields: ``template``, ``values`` (the shapes, ``|``-joined, in file order),
``ranks`` (comma-joined, where each such line names its rank; else empty).
``analysis/detectors/last_shapes.py`` reads it as a collective over tensors of different shapes.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.common import TEXT_RANK, Line, make_event, parse_line
from hangscope.sources.logs.tail import LogicalTail

LAST = 8
# a tensor's shape as printed: torch.Size([8, 512]), "shape: (8, 512)", "shape [8, 512]"
_SHAPE = re.compile(r"(?i)torch\.Size\(\[[\d, ]*\]\)|\bshapes?\b\W{0,3}[\[(]\d+(?:, ?\d+)*[\])]")
_NUMBERS = re.compile(r"\d+")


def scan_last_shapes(path: str, tail: LogicalTail | None) -> list[LogEvent]:
    if tail is None:
        return []
    last = [parse_line(tail.text(index), tail.line_no(index), tail.ctx)
            for index in tail.last_said(LAST)]
    by_template: dict[str, list[Line]] = {}
    for line in last:
        body = line.body
        if _SHAPE.search(body) is None:
            continue
        numbered = TEXT_RANK.sub("rank #", body)  # a rank's own number is no size
        by_template.setdefault(_NUMBERS.sub("#", numbered), []).append(line)
    for template, lines in by_template.items():
        values = [",".join(",".join(_NUMBERS.findall(m.group(0)))
                           for m in _SHAPE.finditer(ln.body)) for ln in lines]
        if len(lines) < 2 or len(set(values)) < 2:
            continue
        ranks = [ln.rank if ln.rank is not None else (
            int(m.group("r")) if (m := TEXT_RANK.search(ln.body)) else None) for ln in lines]
        fields: dict[str, str | int | float] = {
            "template": template[:300], "values": "|".join(values)[:1000],
            "ranks": ",".join(str(r) for r in ranks) if None not in ranks else ""}
        return [make_event("last_shapes", lines[-1], tail.ctx, "info", fields)]
    return []
