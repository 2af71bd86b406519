# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""NCCL RAS reports (NCCL >= 2.24, ``src/ras/client_support.cc``; ``ncclras`` client, text and
``-f json`` output; docs: docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/ras.html).

Text (``rasClientRunComms``): after the ``Communicators... (0.00s)`` table come ``Errors`` and
``Warnings`` sections whose entries this module turns into ``nccl_ras`` events::

    INCOMPLETE
      Missing communicator data from 1 job process
      Process 4567 on node 10.0.0.2 managing GPU 3

    DEAD
      1 job process is considered dead (unreachable via the RAS network)
      Process 4567 on node 10.0.0.2 managing GPU 3

    #0-0 (9e6f2a1c3b5d7f80) INCOMPLETE
      Missing communicator data from 1 rank
      Rank 3 -- GPU 3 managed by process 4567 on node 10.0.0.2

    #0-0 (9e6f2a1c3b5d7f80) MISMATCH
      Communicator ranks have different AllReduce operation counts
      7 ranks have launched up to operation 1045
      Rank 5 has launched up to operation 1044 -- GPU 5 managed by process 8812 on node 10.0.0.2

  (``ERROR`` entries list "Initialization error(s) on N rank(s)" / "Asynchronous error(s) ..." and
  "Rank N reported <error> -- GPU ...".) One event per entry at its header line (job-level entries at
  their detail line); fields: comm (the 16-hex-digit hash, or "job"), state (MISMATCH, INCOMPLETE,
  DEAD, ERROR), ranks (the ranks the entry names, comma-separated, communicator ranks), pids, nodes,
  op_counts ("rank:count,..." for the named ranks), majority_count (operation count most ranks
  reached), ops (collectives whose counts differ), missing (count).

JSON (``rasDumpCommsToJSON``, NCCL 2.28+): ``{"nccl_version": ..., "communicators": [{"hash": "0x..",
"size": 8, "ranks_count": 7, "missing_ranks_count": 1, "ranks": [{"rank": 0, "host": .., "pid": ..,
"status": {"init_state": 0, "async_error": 0, ...}, "collective_counts": {"AllReduce": 52, ..}}],
"missing_ranks": [{"rank": 3, "status": {"unresponsive": true, "considered_dead": false}}]}]}``. A
whole file in that form gives one event per communicator and problem: INCOMPLETE (missing ranks
that did not respond), DEAD (missing ranks considered dead), MISMATCH (collective counts differ;
``ranks`` = the ranks behind the most advanced count), ERROR (non-zero init_state/async_error).
"""

from __future__ import annotations

import json
import re
from collections import Counter

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import MESSAGE_CLIP, Context, Line, join_ints, make_event

_HEAD = re.compile(r"^#(?P<g>\d+)-(?P<i>\d+) \((?P<hash>[0-9a-fA-F]+)\) "
                   r"(?P<state>INCOMPLETE|ERROR|MISMATCH)\s*$")
_RANK = re.compile(r"^\s+Rank (?P<rank>\d+)\b")
_RANK_OPS = re.compile(r"Rank (?P<rank>\d+) has (?:launched up to operation (?P<n>\d+)|not launched)")
_MANY_OPS = re.compile(r"(?P<count>\d+) ranks have (?:launched up to operation (?P<n>\d+)|not launched)")
_PROC = re.compile(r"(?:Process|process) (?P<pid>\d+) on node (?P<node>[\w.:\-]+)")
_DIFF_OPS = re.compile(r"different (?P<op>\w+) operation counts")
_MISSING = re.compile(r"Missing communicator data from (?P<n>\d+) (?P<what>rank|job process)")
_DEAD = re.compile(r"(?P<n>\d+) job process(?:es are| is) considered dead")


def _collect(head: Line, follow: Follow, fields: dict[str, str | int | float]) -> None:
    ranks: list[int] = []
    pids: list[int] = []
    nodes: list[str] = []
    op_counts: list[str] = []
    ops: list[str] = []
    majority: tuple[int, int] | None = None
    for nxt in follow.lines():
        if nxt.key != head.key:
            continue
        text = nxt.body
        if not text.strip() or not text.startswith(" "):
            break
        follow.consume(nxt.line_no)
        if (m := _MISSING.search(text)) is not None:
            fields["missing"] = int(m.group("n"))
        if (m := _DIFF_OPS.search(text)) is not None:
            ops.append(m.group("op"))
        if (m := _MANY_OPS.search(text)) is not None:
            count, n = int(m.group("count")), int(m.group("n") or 0)
            if majority is None or count > majority[0]:
                majority = (count, n)
        if (m := _RANK.match(text)) is not None:
            rank = int(m.group("rank"))
            if rank not in ranks:
                ranks.append(rank)
            o = _RANK_OPS.search(text)
            if o:
                op_counts.append(f"{rank}:{int(o.group('n') or 0)}")
        if (m := _PROC.search(text)) is not None:
            pid = int(m.group("pid"))
            if pid not in pids:
                pids.append(pid)
            if m.group("node") not in nodes:
                nodes.append(m.group("node"))
    fields["ranks"] = join_ints(ranks)
    fields["pids"] = join_ints(pids)
    fields["nodes"] = ",".join(nodes)
    if op_counts:
        fields["op_counts"] = ",".join(op_counts)
    if ops:
        fields["ops"] = ",".join(ops)
    if majority is not None:
        fields["majority_count"] = majority[1]


def comm_entry(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _HEAD.match(line.body.strip())
    if not m:
        return []
    fields: dict[str, str | int | float] = {"comm": m.group("hash").lower(),
                                            "state": m.group("state")}
    _collect(line, follow, fields)
    return [make_event("nccl_ras", line, ctx, "error", fields, rank=None, rank_source="")]


def job_entry(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    fields: dict[str, str | int | float] = {"comm": "job"}
    d = _DEAD.search(body)
    if d:
        fields.update(state="DEAD", missing=int(d.group("n")))
    else:
        m = _MISSING.search(body)
        if not m or m.group("what") != "job process":
            return []
        fields.update(state="INCOMPLETE", missing=int(m.group("n")))
    _collect(line, follow, fields)
    fields["missing"] = int(d.group("n")) if d else fields["missing"]
    return [make_event("nccl_ras", line, ctx, "error", fields, rank=None, rank_source="")]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b") MISMATCH", comm_entry),
    (b") INCOMPLETE", comm_entry),
    (b") ERROR", comm_entry),
    (b"considered dead (unreachable", job_entry),
    (b"Missing communicator data from", job_entry),
]


def looks_like_ras_json(head: bytes) -> bool:
    start = head.lstrip()[:1]
    return start == b"{" and b'"communicators"' in head and (
        b'"nccl_version"' in head or b'"communicators_count"' in head)


def scan_json(text: str, path: str, ctx: Context) -> list[LogEvent] | None:
    """Events from a whole RAS JSON document; None when it is not one."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("communicators"), list):
        return None
    events: list[LogEvent] = []
    stamp = None
    ts = doc.get("timestamp")
    if isinstance(ts, str):
        from hangscope.sources.logs.common import parse_line

        stamp = parse_line(ts + " x", 1, ctx).time
    for comm in doc["communicators"]:
        if not isinstance(comm, dict):
            continue
        chash = str(comm.get("hash", ""))
        needle = f'"hash": "{chash}"'
        pos = text.find(needle)
        line_no = text.count("\n", 0, pos) + 1 if pos >= 0 else 1
        base: dict[str, str | int | float] = {"comm": chash.lower().removeprefix("0x").rjust(16, "0") if chash else "",
                "size": _int(comm.get("size"))}
        ranks = [r for r in comm.get("ranks") or [] if isinstance(r, dict)]
        missing = [r for r in comm.get("missing_ranks") or [] if isinstance(r, dict)]

        def emit(state: str, named: list[dict[str, object]], extra: dict[str, str | int | float],
                 _line_no: int = line_no) -> None:
            fields: dict[str, str | int | float] = dict(base)
            fields["state"] = state
            fields["ranks"] = join_ints([_int(r.get("rank")) for r in named])
            fields["pids"] = join_ints([_int(r.get("pid")) for r in named if _int(r.get("pid")) > 0])
            fields["nodes"] = ",".join(sorted({str(r.get("host")) for r in named if r.get("host")}))
            fields.update(extra)
            message = f"ncclras {state} comm {chash}: ranks [{fields['ranks']}]"
            events.append(LogEvent(kind="nccl_ras", message=message[:MESSAGE_CLIP], path=path,
                                   line_no=_line_no, rank=None, time=stamp, severity="error",
                                   fields=fields))

        dead = [r for r in missing if isinstance(r.get("status"), dict)
                and r["status"].get("considered_dead")]
        unresp = [r for r in missing if r not in dead]
        if dead:
            emit("DEAD", dead, {"missing": len(dead)})
        if unresp:
            emit("INCOMPLETE", unresp, {"missing": len(unresp)})
        errors = [r for r in ranks if isinstance(r.get("status"), dict)
                  and (_int(r["status"].get("init_state")) not in (0, 7)
                       or _int(r["status"].get("async_error")) not in (0, 7))]
        if errors:
            emit("ERROR", errors, {})
        counts: dict[int, dict[str, object]] = {
            _int(r.get("rank")): r["collective_counts"] for r in ranks
            if isinstance(r.get("collective_counts"), dict)}
        ops = sorted({op for c in counts.values() for op in c})
        differing = [op for op in ops
                     if len({_int(c.get(op)) for c in counts.values()}) > 1]
        if differing:
            op = differing[0]
            per_rank = {r: _int(c.get(op)) for r, c in counts.items()}
            majority = Counter(per_rank.values()).most_common(1)[0][0]
            top = max(per_rank.values())
            behind = sorted(r for r, n in per_rank.items() if n < top)
            named = [r for r in ranks if _int(r.get("rank")) in behind]
            emit("MISMATCH", named, {
                "ops": ",".join(differing), "majority_count": majority,
                "op_counts": ",".join(f"{r}:{per_rank[r]}" for r in behind)})
    return events


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1
