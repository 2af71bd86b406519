# ruff: noqa: E501  (the docstring quotes what people write)
"""Where each rank sits, as people summarize py-spy dumps in prose.

A thread about a hang often says it in one paragraph instead of pasting every dump: a rank or a
group of ranks, then the collective its stack is in, as a stack's first frame or in words::

    TP0 stuck forever in:
    ```
    all_reduce (torch/distributed/distributed_c10d.py:3075)
      _all_reduce_attn_groups (hiradix_cache.py:196)
    ```
    while TP1-3 had already moved on to the next loop iteration, waiting in:
    ```
    broadcast (torch/distributed/distributed_c10d.py:2974)
    ```
    - TP0: `all_reduce → writing_check → check_hicache_events`
    rank 0 is stuck in all_reduce while ranks 1-7 wait in broadcast

``rank_position`` event per rank of each such label (``rank 3``, ``ranks 1-7``, ``TP0``,
``TP1-3``; a tensor-parallel index is read as the rank, as it is in a job of one TP group) whose
collective follows: as a frame (``all_reduce (file:line)``, ``all_reduce →``) on its line or within
``REACH`` lines after it, before the next label; or after words of waiting (``stuck in``, ``waiting
in``, ``blocked in``). fields: ``op`` (canonical, as ``collective_lines`` spells it), ``label``.
``analysis/detectors/split_positions.py`` reads ranks in different collectives at once.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.casefold import twin
from hangscope.sources.logs.collective_lines import canonical_op
from hangscope.sources.logs.common import Context, Line, make_event, parse_line
from hangscope.sources.logs.tail import MAX_LINE, LogicalTail

REACH = 4  # lines after a label where its stack's first frame may be
MAX_EVENTS = 256
_LABEL = re.compile(r"(?<![\w/.\-])(?:TP|tp|[Rr]anks?|RANKS?)\s?(?P<a>\d{1,4})"
                    r"(?:\s?(?:-|–|~|to|through)\s?(?P<b>\d{1,4}))?(?![\w.])")
_OPS = (r"all_reduce|allreduce|all_gather(?:_into_tensor)?|allgather|reduce_scatter(?:_tensor)?|"
        r"reducescatter|broadcast(?:_object_list)?|all_to_all(?:_single)?|alltoall|barrier|"
        r"monitored_barrier|send|recv|isend|irecv")
# the collective as a stack's first frame: py-spy's "all_reduce (file.py:12)", an arrow chain
_FRAME = re.compile(r"^[\s`*\-]*(?P<op>" + _OPS + r")\s*(?:\(|→|->|<-|`)")
_WAITING = re.compile(r"(?i)\b(?:stuck|waiting|waits?|blocked|blocks|hangs?|hanging|sits?|sitting)"
                      r"(?: forever)? (?:in|on|at) (?:the |a |an )?`?(?P<op>" + _OPS + r")\b")
_CANDIDATE = re.compile(rb"(?i)\b(?:tp|ranks?)\s?\d")
_FOLDED = twin(_CANDIDATE)
_JOINED = re.compile(r"^\s*(?:,|and|&|/|\+|as well as)?\s*$")


def scan_rank_positions(path: str, tail: LogicalTail | None) -> list[LogEvent]:
    if tail is None:
        return []
    said = [index for index in range(len(tail.lines)) if index not in tail.skip]
    out: list[LogEvent] = []
    for at, index in enumerate(said):
        if not _FOLDED.search(tail.lowered[index], 0, MAX_LINE):
            continue
        text = tail.text(index)
        labels = list(_LABEL.finditer(text))
        shared: str | None = None  # "ranks 0-4 and ranks 6-7 wait in barrier": one op for both
        for n in range(len(labels) - 1, -1, -1):
            label = labels[n]
            end = labels[n + 1].start() if n + 1 < len(labels) else len(text)
            between = text[label.end():end]
            op = shared if _JOINED.match(between) else _op_after(
                between, tail, said[at + 1:at + 1 + REACH], last=n + 1 == len(labels))
            shared = op
            if op is None:
                continue
            line = parse_line(text, tail.line_no(index), tail.ctx)
            out += _events(line, tail.ctx, label, op)
            if len(out) >= MAX_EVENTS:
                return out
    return out


def _op_after(rest: str, tail: LogicalTail, following: list[int], last: bool) -> str | None:
    """The collective a label's own words or its stack's first frame name, or None."""
    waiting = _WAITING.search(rest)
    if waiting is not None:
        return canonical_op(waiting.group("op"))
    framed = _FRAME.search(rest.split(":", 1)[-1]) if ":" in rest else None
    if framed is not None:
        return canonical_op(framed.group("op"))
    if not last:
        return None
    for index in following:  # the stack under the label, up to the next label
        text = tail.text(index)
        if _LABEL.search(text) is not None:
            return None
        if (framed := _FRAME.search(text)) is not None:
            return canonical_op(framed.group("op"))
    return None


def _events(line: Line, ctx: Context, label: re.Match[str], op: str) -> list[LogEvent]:
    first = int(label.group("a"))
    last = int(label.group("b")) if label.group("b") else first
    if last < first or last - first > 1023:
        return []
    fields = {"op": op, "label": label.group(0)}
    return [make_event("rank_position", line, ctx, "info", dict(fields), rank=rank,
                       rank_source="content") for rank in range(first, last + 1)]
