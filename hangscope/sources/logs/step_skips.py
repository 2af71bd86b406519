"""A rank's own word that it skipped a step because its loss or gradients were not finite, or
because it ran out of memory.

Training loops guard against a bad batch locally::

    2026-12-01 06:14:50,669 [rank2] WARNING non-finite loss at step 4, skipping update
    loss is nan, skipping batch 1183
    Skipping step 52 due to inf/nan gradients
    step 52 skipped: grad norm is inf
    | WARNING: ran out of memory, skipping batch                       (fairseq's trainer)
    [rank1] epoch 0 batch 12: OOM with padded length 60014, skipping batch

A skip every rank takes keeps them in step (fp16 loss scaling: DeepSpeed's ``OVERFLOW! Rank 0
Skipping step``, apex's ``Gradient overflow.  Skipping step``, printed by every rank, or decided on
all-reduced gradients); one only some ranks take drops the collectives of that step on those ranks
alone, so their sequences part (``analysis/detectors/call_sites.py`` reads it beside the stacks).
One ``step_skipped`` event per rank stream (its last such line): fields ``what`` (update | step |
batch | iteration | backward | ...) and ``reason`` (the non-finite word, or ``oom``). A skip on an
out-of-memory error is the classic one-rank skip: only the rank whose batch was too large skips.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.common import TEXT_RANK, make_event
from hangscope.sources.logs.tail import LogicalTail, tail_candidates

_CANDIDATE = re.compile(rb"(?i)skip")
_WHAT = r"(?P<what>update|step|batch|iteration|iter|backward|micro-?batch|optimi[sz]er step)"
_SKIP = re.compile(
    r"(?i)\bskip(?:ping|ped|s)?\b(?:\s+(?:the|this|its|an?|current|optimizer|whole|training))*\s+"
    + _WHAT + r"\b"
    + r"|\b" + _WHAT.replace("what", "what2") + r"\s+(?:\d+\s+)?(?:was\s+|is\s+)?skipped\b")
_NONFINITE = re.compile(r"(?i)\b(?P<reason>nan|inf|non-?finite|not finite|infinite|overflow\w*)\b")
_OOM = re.compile(r"(?i)\bout of memory\b|\bOOM\b")
_MAX_EVENTS = 64


def scan_step_skips(path: str, rank_hint: int | None = None,
                    tail: LogicalTail | None = None) -> list[LogEvent]:
    read = tail_candidates(path, rank_hint, _CANDIDATE, tail)
    if read is None:
        return []
    ctx, lines = read
    last: dict[int | None, LogEvent] = {}
    for line in lines:
        skip = _SKIP.search(line.body)
        if skip is None:
            continue
        oom = _OOM.search(line.body)
        reason = "oom" if oom else (m.group("reason").lower()
                                    if (m := _NONFINITE.search(line.body)) else "")
        if not reason:
            continue
        what = (skip.group("what") or skip.group("what2") or "").lower()
        fields: dict[str, str | int | float] = {"what": what, "reason": reason}
        event = make_event("step_skipped", line, ctx, "info", dict(fields))
        # "[rank2] WARNING ...": the print's own rank, the last one named before the skip (a
        # record glued to the next one's "[rank0] ..." names that rank after it)
        named = [m for m in TEXT_RANK.finditer(line.body) if m.start() < skip.start()]
        if event.rank is None and named:
            event = make_event("step_skipped", line, ctx, "info", fields,
                               rank=int(named[-1].group("r")), rank_source="content")
        last.pop(event.rank, None)  # (file order: the stream's last skip ends the dict)
        last[event.rank] = event
    return list(last.values())[-_MAX_EVENTS:]
