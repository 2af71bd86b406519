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

  Horovod >= 0.21 heads the per-rank list ``Missing ranks:`` (``1!: [...]`` marks a rank past the
  shutdown time).

  torch's FR analyzer::

    Not all ranks joining collective: sequence number: 31117
    group info: 0:default_pg
    collective: nccl:all_reduce
    missing ranks: {3, 4, 5, 6, 7}
    world size: 8

  fields: tool (horovod | fr_analyzer | nvrx_fr | npu_fr), op, missing and/or ready
  (comma-separated ranks), seq, pg, world_size; from a per-rank list also ops (how many) and
  op_names (the first 16, comma-separated); from NVRx's table groups (its rows).

  NVRx's flight-recorder attribution (``nvidia_resiliency_ext``'s ``fr_attribution.py``): its
  summary of the groups where ranks are missing, one row per group, the last column the ranks it
  would isolate (versions before April 2026 print that column's head literally as
  ``{missing_or_completed} Ranks``); one event for the table, its ranks the rows' union, as the
  tool reads its own table::

    PGID   | Process Group Desc        | Op Type    | Size     | Dtype    | Missing Ranks
    74     | EXPERT_MODEL_PARALLEL_GROUP | nccl:all_to_all | 4096x5120 | BFloat16 | 12,14
    42     | TENSOR_MODEL_PARALLEL_GROUP | nccl:_all_gather_base | 4096x1x5120 | BFloat16 | 14

  torch_npu's flight-recorder analyser (``tools/flight_recorder/analysis_flight.py``), where one
  rank's own work kept it from a collective the others timed out in::

    The pg_id 0's rank 0's Computational task took too long, causing the other ranks' HCCL task to time out.

``stated_wait`` -- a wait-for edge written out, by a person (an issue's or a PR's wait chain) or a
tool: ``rank 4 → waiting on rank 5 (ncclCommFinalize for C_c_4567)``, ``Rank 1 is waiting for rank
0 to finish preprocessing`` (fields waiter, waited, what). Apps print such lines in normal runs
(rank 0 first, the others wait): only a cycle of them is read (``detectors/stall_reports.py``).

``fr_analyzer_error`` -- the analyzer's verdict on one collective: ``error msg: Culprit rank 22;
Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1025]]' does not match found input
sizes: '[[262144]]', Culprit rank 110; ...`` (fields culprits, error_type, expected, found).
"""

from __future__ import annotations

import re
from itertools import chain

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, ints, join_ints, make_event

_ENTRY = re.compile(r"(?P<op>[\w./-]*)\s*\[(?P<what>missing|ready) ranks: (?P<ranks>[\d, ]*)\]")
_STALLED_RANK = re.compile(r"^\s*(?:\[(?:\d+,)?\d+\]<std\w+>:)?\s*(?P<rank>\d+)!?: \[(?P<ops>[^\]]*)")
_FR_FIELD = re.compile(r"^\s*(?P<key>group info|collective|missing ranks|world size|sequence number"
                       r"|collective state): (?P<value>.*)$")
_CULPRIT = re.compile(r"Culprit rank (?P<rank>\d+); Error type: (?P<type>\w+)"
                      r"(?:, Expected input sizes: '?(?P<exp>[^']*)'? does not match found input "
                      r"sizes: '?(?P<found>[^',]*))?")
# the FR analyzer's "missing ranks: {0}" (a Python set) quoted inside a sentence, with the
# collective it names nearby ("`nccl:_all_gather_base` ... missing ranks: {0}")
_FR_INLINE = re.compile(r"missing ranks: \{(?P<ranks>\d+(?:, ?\d+)*)\}")
_FR_OP = re.compile(r"\b(?:nccl|gloo|xccl|ucc):(?P<op>_?[a-z][a-z_]*)")
_MAX_OPS = 64
_NVRX_HEAD = re.compile(r"\bPGID\s*\|\s*Process Group Desc\s*\|.*\|\s*"
                        r"(?:Missing|\{missing_or_completed\}) Ranks\s*$")
_NVRX_ROW = re.compile(r"(?:^|:)\s*(?P<pg>\d+)\s*\|(?P<desc>[^|]*)\|(?P<op>[^|]*)\|[^|]*\|[^|]*\|"
                       r"\s*(?P<ranks>\d+(?:\s*,\s*\d+)*)\s*$")
_NPU_VERDICT = re.compile(r"The pg_id (?P<pg>\d+)'s rank (?P<rank>\d+)'s Computational task took "
                          r"too long, causing the other ranks' (?:HCCL|NCCL) task to time out")


def horovod_entries(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    out = []
    if not _ENTRY.search(line.body) and not _FR_FIELD.match(line.body):
        return _fr_inline(line, ctx)
    for m in list(_ENTRY.finditer(line.body))[:_MAX_OPS]:
        ranks = join_ints(ints(m.group("ranks")))
        out.append(make_event("stall_report", line, ctx, "warning",
                              {"tool": "horovod", "op": m.group("op").strip(" ,]"),
                               m.group("what"): ranks}))
    return out


def _fr_inline(line: Line, ctx: Context) -> list[LogEvent]:
    """The analyzer's missing set quoted in prose (an issue's account of ``fr_trace``'s output);
    its own report block (``missing ranks:`` heading a line) is ``fr_not_joining``'s."""
    m = _FR_INLINE.search(line.body)
    if not m:
        return []
    op = _FR_OP.search(line.body)
    return [make_event("stall_report", line, ctx, "warning",
                       {"tool": "fr_analyzer", "op": op.group("op") if op else "",
                        "missing": join_ints(ints(m.group("ranks")))})]


def horovod_stalled_ranks(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``Stalled ranks:`` (Horovod < 0.21) or ``Missing ranks:`` (``stall_inspector.cc`` since) then
    one ``R: [op, op ...]`` line per rank that has NOT submitted those (``R!:`` marks a rank stalled
    past ``HOROVOD_STALL_SHUTDOWN_TIME_SECONDS``)."""
    return _rank_list(line, ctx, follow, [])


def horovod_headless_list(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A per-rank list whose ``Missing ranks:`` head was cut off the paste: ``0: [HorovodBroadcast_
    ...]`` (TensorFlow's op names, which only such a list puts after a rank and a colon)."""
    if not _STALLED_RANK.match(line.body):
        return []
    return _rank_list(line, ctx, follow, [line])


def _rank_list(line: Line, ctx: Context, follow: Follow, first: list[Line]) -> list[LogEvent]:
    out = []
    after_blank = False
    for nxt in chain(first, follow.lines()):
        if not nxt.body.strip() and not after_blank:
            after_blank = True  # a paste with a blank line between lines
            continue
        m = _STALLED_RANK.match(nxt.raw) or _STALLED_RANK.match(nxt.body)
        if not m:
            break
        after_blank = False
        ops = [op.strip(" .") for op in m.group("ops").split(",") if op.strip(" .")]
        follow.consume(nxt.line_no)
        # the listed rank is the content; the line's rank is the reporter's (the header's prefix:
        # a bare "3: [" would otherwise read as an srun task label)
        out.append(make_event("stall_report", nxt, ctx, "warning",
                              {"tool": "horovod", "op": ops[0] if ops else "",
                               "missing": m.group("rank"), "ops": len(ops),
                               "op_names": ",".join(ops[:16])},
                              rank=line.rank, rank_source=line.rank_source or ""))
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


def nvrx_missing_table(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """NVRx's table of the groups with missing ranks: one ``stall_report`` for the whole table,
    its ``missing`` every row's ranks (NVRx's own reading of it: the ranks to isolate)."""
    # read raw: "PGID   | ..." and "74     | ..." look like docker compose's "service  | "
    if not _NVRX_HEAD.search(line.raw):
        return []
    rows = []
    for nxt in follow.lines():
        m = _NVRX_ROW.search(nxt.raw)
        if not m:
            break
        follow.consume(nxt.line_no)
        rows.append(m)
        if len(rows) >= _MAX_OPS:
            break
    if not rows:
        return []
    missing = sorted(set().union(*(ints(m.group("ranks")) for m in rows)))
    first = rows[0]
    return [make_event("stall_report", line, ctx, "warning",
                       {"tool": "nvrx_fr", "op": first.group("op").strip().split(":")[-1],
                        "pg": f"{first.group('pg')}:{first.group('desc').strip()}",
                        "missing": join_ints(missing), "groups": len(rows)})]


def npu_verdict(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _NPU_VERDICT.search(line.body)
    if not m:
        return []
    return [make_event("stall_report", line, ctx, "warning",
                       {"tool": "npu_fr", "op": "", "pg": m.group("pg"),
                        "missing": m.group("rank")})]


# "rank 4 → waiting on rank 5 (ncclCommFinalize for C_c_4567)", "Rank 1 is waiting for rank 0",
# "rank 2 -> waits on rank 3 (send)": a wait-for edge a person or a tool's dump wrote out
_STATED_WAIT = re.compile(
    r"\b[Rr]ank\s*(?P<a>\d+)\s*(?:→|->|=>|:)?\s*(?:is\s+)?(?:still\s+)?(?:blocked\s+)?"
    r"(?:waiting|waits)\s+(?:on|for)\s+[Rr]ank\s*(?P<b>\d+)(?:'s)?(?:\s*\((?P<what>[^)]{1,200})\))?"
    r"(?P<rest>.{0,120})")


def stated_wait(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``stated_wait`` -- one wait-for edge as written out: fields waiter, waited, what (the
    parenthesised object or the words after the edge: ``to finish preprocessing``)."""
    out = []
    for m in list(_STATED_WAIT.finditer(line.body))[:_MAX_OPS]:
        a, b = int(m.group("a")), int(m.group("b"))
        if a == b:
            continue
        what = (m.group("what") or m.group("rest") or "").strip(" .,;:")
        out.append(make_event("stated_wait", line, ctx, "info",
                              {"waiter": a, "waited": b, "what": what[:200]}))
    return out


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"missing ranks: ", horovod_entries),
    (b"ready ranks: ", horovod_entries),
    (b"Stalled ranks:", horovod_stalled_ranks),
    (b"Missing ranks:", horovod_stalled_ranks),  # Horovod >= 0.21's name for the same block
    (b": [Horovod", horovod_headless_list),
    (b"Not all ranks joining collective", fr_not_joining),
    (b"Culprit rank ", fr_culprits),
    (b"| Process Group Desc", nvrx_missing_table),
    (b"Computational task took too long", npu_verdict),
    (b"waiting on rank", stated_wait),
    (b"waiting for rank", stated_wait),
    (b"waits on rank", stated_wait),
    (b"waits for rank", stated_wait),
    (b"waiting on Rank", stated_wait),
    (b"waiting for Rank", stated_wait),
]
