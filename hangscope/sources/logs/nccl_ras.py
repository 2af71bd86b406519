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
  "Rank N reported <error> -- GPU ...", the error one of "Unhandled CUDA error", "System error",
  "Internal error", "Invalid argument", "Invalid usage", "Remote process error". NCCL 2.24-2.26 print
  INCOMPLETE ranks as "The missing rank(s): 3,5" and "different collective operation counts".)
  A group of more than one rank is listed as "N ranks have launched up to operation X" followed by
  one "Rank R -- GPU ..." line per rank (only when the group is small: an outlier); the ranks of the
  majority are not listed. One event per entry at its header line (job-level entries at their
  detail line); fields: comm (the 16-hex-digit hash, or "job"), state (MISMATCH, INCOMPLETE, DEAD,
  ERROR), ranks (the ranks the entry names, comma-separated, communicator ranks), pids, nodes,
  procs (each named process: "rank=pid@node" in communicator entries, "pid@node" in job-level
  ones), size (ranks in the communicator, from the ``Communicators`` table when the report is read
  from its table on), op_counts ("rank:count,..." for the named ranks, their first listed op),
  majority_count (operation count most ranks reached), ops (collectives whose counts differ),
  behind (the named ranks whose launched count of some op is below the highest count of that op),
  missing (count), errors (ERROR: the error names, ";"-separated), phase (ERROR: "init", "async" or
  "init,async").

JSON (``rasDumpCommsToJSON``, NCCL 2.28+): ``{"nccl_version": ..., "communicators": [{"hash": "0x..",
"size": 8, "ranks_count": 7, "missing_ranks_count": 1, "ranks": [{"rank": 0, "host": .., "pid": ..,
"status": {"init_state": 0, "async_error": 0, ...}, "collective_counts": {"AllReduce": 52, ..}}],
"missing_ranks": [{"rank": 3, "status": {"unresponsive": true, "considered_dead": false}}]}]}``. A
whole file in that form gives one event per communicator and problem: INCOMPLETE (missing ranks
that did not respond and are not considered dead; a missing rank whose process answered has left
the communicator, which NCCL's text report shows as status NOCOMM, not as missing data), DEAD
(missing ranks considered dead), MISMATCH (collective counts differ; ``ranks`` = the ranks behind the
most advanced count of the first such op, ``behind`` = those of any such op), ERROR (init_state or
async_error neither ncclSuccess 0 nor ncclInProgress 7; ``errors`` names them).

Ranks are communicator ranks. Torch numbers the ranks of a communicator in the order of their global
ranks, so in a communicator of the whole job (``size`` = world size) they are global ranks.
"""

from __future__ import annotations

import functools
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
_MISSING_LIST = re.compile(r"^\s+The missing ranks?: (?P<ranks>\d+(?:,\d+)*)\s*$")
_DEAD = re.compile(r"(?P<n>\d+) job process(?:es are| is) considered dead")
_ERR_PHASE = re.compile(r"(?P<phase>Initialization|Asynchronous) errors? on \d+ ranks?")
_ERR_NAME = re.compile(r"(?:\d+ ranks|Rank \d+) reported (?P<error>[A-Za-z ]{1,40}?)\s*(?:--|$)")
_TABLE_HEAD = re.compile(r"^Group\s+Comms\s+Nodes\s+Ranks\s+Ranks\s+Ranks\s+Status\s+Errors\s*$")
_TABLE_ROW = re.compile(r"^\s*(?P<g>\d+)\s+\d+\s+\d+\s+\d+(?:-\d+)?\s+(?P<size>\d+)\s+\d+"
                        r"\s+(?P<status>[A-Z]+)\s+(?P<errors>[A-Z,]+)\s*$")
_SECTION = re.compile(r"^(?:Errors|Warnings|=+|INCOMPLETE|DEAD|TIMEOUT)\s*$")
# ncclResult_t values of the JSON status fields, named as client_support.cc's ncclErrorToString does
_NCCL_ERRORS = {1: "Unhandled CUDA error", 2: "System error", 3: "Internal error",
                4: "Invalid argument", 5: "Invalid usage", 6: "Remote process error"}


class _OpCounts:
    """The launched-operation counts a MISMATCH entry lists, one op section after another."""

    def __init__(self) -> None:
        self.first: dict[int, int] = {}  # rank -> count in the first section that lists it
        self.behind: list[int] = []
        self.majority: tuple[int, int] | None = None  # (ranks, count) of the largest group
        self._section: dict[int, int] | None = {}  # None: a status section, no counts
        self._top = -1
        self._group: int | None = None  # the count of the rank group being listed

    def start_section(self, counts: bool) -> None:
        self.close()
        self._section, self._top, self._group = ({} if counts else None), -1, None

    def group(self, ranks: int, count: int | None) -> None:
        self._group = count
        if count is None:
            return
        self._top = max(self._top, count)
        if self.majority is None or ranks > self.majority[0]:
            self.majority = (ranks, count)

    def rank(self, rank: int, own_count: int | None) -> int | None:
        count = own_count if own_count is not None else self._group
        if count is None or self._section is None:
            return None
        self._section.setdefault(rank, count)
        self._top = max(self._top, count)
        self.first.setdefault(rank, count)
        return count

    def close(self) -> None:
        if self._section:
            self.behind.extend(r for r, n in self._section.items()
                               if n < self._top and r not in self.behind)
        self._section = None


def _collect(head: Line, follow: Follow, fields: dict[str, str | int | float]) -> None:
    ranks: list[int] = []
    pids: list[int] = []
    nodes: list[str] = []
    procs: list[str] = []
    ops: list[str] = []
    errors: list[str] = []
    phases: list[str] = []
    counts = _OpCounts()
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
            counts.start_section(counts=True)
        elif "different status" in text:
            counts.start_section(counts=False)
        if (m := _MANY_OPS.search(text)) is not None:
            counts.group(int(m.group("count")), int(m.group("n") or 0))
        elif "ranks have status" in text:
            counts.group(0, None)
        if (m := _MISSING_LIST.match(text)) is not None:
            ranks.extend(r for r in map(int, m.group("ranks").split(",")) if r not in ranks)
        if (m := _ERR_PHASE.search(text)) is not None:
            phase = "init" if m.group("phase") == "Initialization" else "async"
            if phase not in phases:
                phases.append(phase)
        if (m := _ERR_NAME.search(text)) is not None and m.group("error") not in errors:
            errors.append(m.group("error"))
        rank: int | None = None
        if (m := _RANK.match(text)) is not None:
            rank = int(m.group("rank"))
            if rank not in ranks:
                ranks.append(rank)
            o = _RANK_OPS.search(text)
            counts.rank(rank, int(o.group("n") or 0) if o else None)
        if (m := _PROC.search(text)) is not None:
            pid = int(m.group("pid"))
            if pid not in pids:
                pids.append(pid)
            if m.group("node") not in nodes:
                nodes.append(m.group("node"))
            proc = f"{pid}@{m.group('node')}"
            procs.append(proc if rank is None else f"{rank}={proc}")
    counts.close()
    fields["ranks"] = join_ints(ranks)
    fields["pids"] = join_ints(pids)
    fields["nodes"] = ",".join(nodes)
    if procs:
        fields["procs"] = ",".join(procs)
    if counts.first:
        fields["op_counts"] = ",".join(f"{r}:{n}" for r, n in counts.first.items())
    if ops:
        fields["ops"] = ",".join(ops)
    if counts.majority is not None:
        fields["majority_count"] = counts.majority[1]
    if counts.behind:
        fields["behind"] = join_ints(sorted(counts.behind))
    if errors:
        fields["errors"] = ";".join(errors)
    if phases:
        fields["phase"] = ",".join(phases)


def _comm_event(line: Line, ctx: Context, follow: Follow, size: int | None) -> list[LogEvent]:
    m = _HEAD.match(line.body.strip())
    if not m:
        return []
    fields: dict[str, str | int | float] = {"comm": m.group("hash").lower(),
                                            "state": m.group("state")}
    if size is not None:
        fields["size"] = size
    _collect(line, follow, fields)
    return [make_event("nccl_ras", line, ctx, "error", fields, rank=None, rank_source="")]


def comm_entry(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    return _comm_event(line, ctx, follow, None)


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


def report(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """The whole Errors/Warnings part of a report, read from its ``Communicators`` table on, so
    that each communicator entry gets its ``size`` from the table row of its group (``#g-i``).
    Entries past the lookahead are still found one by one by the handlers above."""
    if not _TABLE_HEAD.match(line.body.strip()):
        return []
    lines = [nxt for nxt in follow.lines() if nxt.key == line.key]
    sizes: dict[int, int] = {}
    clean_rows = True
    at = 0
    while at < len(lines) and lines[at].body.strip():
        if (row := _TABLE_ROW.match(lines[at].body)) is not None:
            sizes[int(row.group("g"))] = int(row.group("size"))
            clean_rows &= row.group("errors") == "OK" and row.group("status") == "RUNNING"
        at += 1
    events: list[LogEvent] = []
    taken: set[int] = set()
    sections: set[str] = set()
    for index in range(at, len(lines)):
        current = lines[index]
        text = current.body
        if current.line_no in taken or not text.strip() or _SECTION.match(text.strip()):
            if text.strip() in ("Errors", "Warnings"):
                sections.add(text.strip())
            continue
        entry = Follow(functools.partial(iter, lines[index + 1:]))
        head = _HEAD.match(text.strip())
        if head is not None:
            found = _comm_event(current, ctx, entry, sizes.get(int(head.group("g"))))
        elif text.startswith(" "):
            found = job_entry(current, ctx, entry)
        else:
            break  # past the end of the report
        if found:
            events.extend(found)
            taken |= entry.consumed | {current.line_no}
    for line_no in taken:
        follow.consume(line_no)
    if not events and sizes and clean_rows and sections == {"Errors", "Warnings"}:
        # every communicator RUNNING with no error, and nothing under Errors or Warnings: all
        # ranks alive and launched the same operations (no count MISMATCH, nobody missing)
        events.append(make_event("ras_clean", line, ctx, "info",
                                 {"comms": len(sizes), "size": max(sizes.values())},
                                 rank=None, rank_source=""))
    return events


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"Status  Errors", report),
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
            procs = [f"{_int(r.get('rank'))}={_int(r.get('pid'))}@{r.get('host')}" for r in named
                     if _int(r.get("pid")) > 0 and r.get("host") not in (None, "", "unknown")]
            if procs:
                fields["procs"] = ",".join(procs)
            fields.update(extra)
            message = f"ncclras {state} comm {chash}: ranks [{fields['ranks']}]"
            events.append(LogEvent(kind="nccl_ras", message=message[:MESSAGE_CLIP], path=path,
                                   line_no=_line_no, rank=None, time=stamp, severity="error",
                                   fields=fields))

        dead = [r for r in missing if isinstance(r.get("status"), dict)
                and r["status"].get("considered_dead") is True]
        unresp = [r for r in missing if r not in dead and isinstance(r.get("status"), dict)
                  and r["status"].get("unresponsive") is True]
        if dead:
            emit("DEAD", dead, {"missing": len(dead)})
        if unresp:
            emit("INCOMPLETE", unresp, {"missing": len(unresp)})
        failed: dict[str, list[int]] = {"init": [], "async": []}
        for r in ranks:
            status = r.get("status")
            if isinstance(status, dict):
                failed["init"].append(_int(status.get("init_state")))
                failed["async"].append(_int(status.get("async_error")))
            else:
                failed["init"].append(0)
                failed["async"].append(0)
        errors = [r for i, r in enumerate(ranks)
                  if failed["init"][i] not in (0, 7) or failed["async"][i] not in (0, 7)]
        if errors:
            codes = [c for phase in ("init", "async") for c in failed[phase] if c not in (0, 7)]
            emit("ERROR", errors, {
                "phase": ",".join(p for p in ("init", "async")
                                  if any(c not in (0, 7) for c in failed[p])),
                "errors": ";".join(dict.fromkeys(_NCCL_ERRORS.get(c, "Unexpected error")
                                                 for c in codes))})
        counts: dict[int, dict[str, object]] = {
            _int(r.get("rank")): r["collective_counts"] for r in ranks
            if isinstance(r.get("collective_counts"), dict)}
        ops = sorted({op for c in counts.values() for op in c})
        differing = [op for op in ops
                     if len({_int(c.get(op)) for c in counts.values()}) > 1]
        if differing:
            lagging: set[int] = set()
            for op in differing:
                of_op = {r: _int(c.get(op)) for r, c in counts.items()}
                lagging |= {r for r, n in of_op.items() if n < max(of_op.values())}
            op = differing[0]
            per_rank = {r: _int(c.get(op)) for r, c in counts.items()}
            majority = Counter(per_rank.values()).most_common(1)[0][0]
            top = max(per_rank.values())
            behind = sorted(r for r, n in per_rank.items() if n < top)
            named = [r for r in ranks if _int(r.get("rank")) in behind]
            emit("MISMATCH", named, {
                "ops": ",".join(differing), "majority_count": majority,
                "op_counts": ",".join(f"{r}:{per_rank[r]}" for r in behind),
                "behind": join_ints(sorted(lagging))})
    return events


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1
