# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Other tools' reports of who has and has not joined a collective: Horovod's stall inspector and the
text torch's flight-recorder analyzer (``torch.distributed.flight_recorder``, ``fr_trace``) prints.

``stall_report`` -- one stalled collective, as the report names it. Horovod (``stall_inspector.cc``,
``operations.cc``; the coordinator, usually rank 0, prints it every 60 s)::

    Stalled ops:
    HorovodAllreduce_gradients_..._0 [missing ranks: 0]
    ..., DistributedMomentumOptimizer_Allreduce/HorovodAllreduce_..._0 [ready ranks: 2, 0, 1], ...
    Stalled ranks:
    6: [horovod_allreduce.0, horovod_allreduce.1, ...]

  (newer Horovod heads the same block ``Missing ranks:``)

  torch's FR analyzer::

    Not all ranks joining collective: sequence number: 31117
    group info: 0:default_pg
    collective: nccl:all_reduce
    missing ranks: {3, 4, 5, 6, 7}
    world size: 8

  fields: tool (horovod | fr_analyzer), op, missing and/or ready (comma-separated ranks), seq, pg,
  world_size.

``fr_analyzer_error`` -- the analyzer's verdict on one collective: ``error msg: Culprit rank 22;
Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1025]]' does not match found input
sizes: '[[262144]]', Culprit rank 110; ...`` (fields culprits, error_type, expected, found).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, ints, join_ints, make_event

_ENTRY = re.compile(r"(?P<op>[\w./-]*)\s*\[(?P<what>missing|ready) ranks: (?P<ranks>[\d, ]*)\]")
_STALLED_RANK = re.compile(r"^\s*(?:\[\d+,\d+\]<std\w+>:)?\s*(?P<rank>\d+): \[(?P<ops>[^\]]*)")
_FR_FIELD = re.compile(r"^\s*(?P<key>group info|collective|missing ranks|world size|sequence number"
                       r"|collective state): (?P<value>.*)$")
_CULPRIT = re.compile(r"Culprit rank (?P<rank>\d+); Error type: (?P<type>\w+)"
                      r"(?:, Expected input sizes: '?(?P<exp>[^']*)'? does not match found input "
                      r"sizes: '?(?P<found>[^',]*))?")
_MAX_OPS = 64


def horovod_entries(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    out = []
    for m in list(_ENTRY.finditer(line.body))[:_MAX_OPS]:
        ranks = join_ints(ints(m.group("ranks")))
        out.append(make_event("stall_report", line, ctx, "warning",
                              {"tool": "horovod", "op": m.group("op").strip(" ,]"),
                               m.group("what"): ranks}))
    return out


def horovod_stalled_ranks(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``Stalled ranks:`` then one ``R: [op, op ...]`` line per rank that has NOT submitted those."""
    out = []
    for nxt in follow.lines():
        m = _STALLED_RANK.match(nxt.raw) or _STALLED_RANK.match(nxt.body)
        if not m:
            break
        ops = [op.strip(" .") for op in m.group("ops").split(",") if op.strip(" .")]
        follow.consume(nxt.line_no)
        out.append(make_event("stall_report", nxt, ctx, "warning",
                              {"tool": "horovod", "op": ops[0] if ops else "",
                               "missing": m.group("rank"), "ops": len(ops)}))
        if len(out) >= _MAX_OPS:
            break
    return out


def fr_not_joining(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    fields: dict[str, str | int | float] = {"tool": "fr_analyzer"}
    seq = re.search(r"sequence number: (\d+)", line.body)
    if seq:
        fields["seq"] = int(seq.group(1))
    for nxt in follow.lines():
        m = _FR_FIELD.match(nxt.body)
        if not m:
            if nxt.body.strip() and ":" not in nxt.body:
                break
            if not nxt.body.strip():
                break
            continue
        key, value = m.group("key"), m.group("value").strip()
        if key == "group info":
            fields["pg"] = value
        elif key == "collective":
            fields["op"] = value.split(":")[-1]
        elif key == "missing ranks":
            fields["missing"] = join_ints(ints(value))
        elif key == "world size" and value.isdigit():
            fields["world_size"] = int(value)
    if "missing" not in fields:
        return []
    return [make_event("stall_report", line, ctx, "warning", fields)]


def fr_culprits(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    found = list(_CULPRIT.finditer(line.body))
    if not found:
        return []
    first = found[0]
    fields: dict[str, str | int | float] = {
        "culprits": join_ints(sorted({int(m.group("rank")) for m in found})),
        "error_type": first.group("type")}
    if first.group("exp"):
        fields["expected"] = first.group("exp")
        fields["found"] = first.group("found") or ""
    return [make_event("fr_analyzer_error", line, ctx, "error", fields)]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"missing ranks: ", horovod_entries),
    (b"ready ranks: ", horovod_entries),
    (b"Stalled ranks:", horovod_stalled_ranks),
    (b"Missing ranks:", horovod_stalled_ranks),  # Horovod >= 0.21's name for the same block
    (b"Not all ranks joining collective", fr_not_joining),
    (b"Culprit rank ", fr_culprits),
]
