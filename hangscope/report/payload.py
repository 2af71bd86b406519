"""The report's data: one JSON-able payload built once from a :class:`~hangscope.pipeline.Result`.

The page's JavaScript renders everything from this payload (with ``textContent`` only), and the
unit tests assert on it, not on HTML. It stays small at 4096 ranks because:

- every repeated string (frame names, file names, ops, groups, states) lives once in ``strings``
  and is referred to by index (``-1`` means none);
- tables are stored as columns (``{"rank": [...], "cls": [...]}``), not lists of dicts;
- ranks are grouped in equivalence classes whose ranks are written as ranges (``"0-2047"``);
- full per-rank detail (stacks, FR entries, logs, process state, workers) is kept only for the
  culprits and one representative per class, up to :data:`MAX_DETAIL_RANKS`; every other rank
  gets a compact row (class, host, pid, process status).

Layout (``schema`` = :data:`SCHEMA`)::

    strings   [str]                       the string table
    summary   {status, world_size, ranks_seen, ranks_missing, n_seen, version, inputs, headline}
    findings  [{kind, culprits, waiting, collective, confidence, summary,
                evidence: {source[], rank[], detail[], where[]}}]        root cause first
    gaps      [str]                       evidence the analysis lacked
    notes     [str]                       what this report left out (caps)
    classes   {id[], ranks[], count[], role[], state[], where[], last[], rep[]}
    ranks     {rank[], cls[], host[], pid[], status[], gpu[]}           one row per rank
    frames    {name[], file[], line[], lib[]}                           interned frames
    tree      {source, parent[], frame[], ranks[], count[], truncated}  merged stacks, roots first
    details   {"<rank>": RankDetail}
    job_logs  LogColumns                                                logs tied to no rank
    config    [{setting, key, values: [{value, ranks, where}], unknown}]  what differs between ranks
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from hangscope.analysis.correlate import GroupView, Picture
from hangscope.analysis.stacks import user_frame
from hangscope.analysis.verdict import Finding
from hangscope.model import FrEntry, LogEvent, ProcessState, RankEvidence, StackSample
from hangscope.ranges import format_ranks
from hangscope.redact import redact
from hangscope.report import stacktree
from hangscope.report.config_table import config_rows
from hangscope.report.payload_types import (
    ClassColumns,
    Collective,
    EvidenceColumns,
    FindingData,
    FrData,
    FrEntryColumns,
    FrGroup,
    LogColumns,
    Payload,
    ProcColumns,
    RankColumns,
    RankDetail,
    StacksData,
    Summary,
    ThreadColumns,
    WorkerData,
)
from hangscope.report.tables import Frames, Strings

if TYPE_CHECKING:
    from hangscope.result import Result

SCHEMA = "hangscope.report/1"
MAX_DETAIL_RANKS = 64  # ranks with full detail (culprits first, then one per class)
MAX_FR_ENTRIES = 20  # last FR entries per group per detailed rank
MAX_LOGS = 40  # log events per detailed rank (most severe first)
MAX_JOB_LOGS = 100
MAX_FRAMES = 64  # innermost frames kept per thread
MAX_THREADS = 64
MAX_TREE_NODES = 1500
MAX_LAST_GROUPS = 4  # groups listed in a class's "last completed" cell
_SEVERITY_ORDER = {"fatal": 0, "error": 1, "warning": 2, "info": 3, "debug": 4}


def build_payload(result: Result, redact_secrets: bool = True) -> Payload:
    """The whole report's data. With ``redact_secrets`` every string goes through ``redact``."""
    s = Strings()
    frames = Frames(s)
    verdict = result.verdict
    ev = result.evidence
    graph = result.context.graph
    picture = result.context.picture
    classes = _classes(result, s)
    all_ranks = sorted(set(graph.class_of) | set(ev.ranks))
    class_index = {cid: i for i, cid in enumerate(classes["id"])}
    ranks = _rank_rows(result, all_ranks, class_index, s)
    chosen = _detail_ranks(result, classes)
    notes = []
    if len(chosen) < len(all_ranks):
        notes.append(f"full detail kept for {len(chosen)} of {len(all_ranks)} ranks (culprits and "
                     "one per class); ranks in one class share the same flight-recorder state")
    details = {str(rank): _detail(ev.ranks.get(rank), rank, picture, picture.pending_ops(rank), s,
                                  frames)
               for rank in chosen}
    tree = stacktree.build(result, frames, s, MAX_TREE_NODES)
    if tree["truncated"]:
        notes.append(f"merged stack tree cut at {MAX_TREE_NODES} nodes "
                     f"({tree['truncated']} thread stacks cut short)")
    payload: Payload = {
        "schema": SCHEMA,
        "strings": s.items,
        "summary": _summary(result),
        "findings": [_finding(f, s) for f in verdict.findings],
        "gaps": list(verdict.evidence_gaps),
        "notes": notes,
        "classes": classes,
        "ranks": ranks,
        "frames": frames.cols,
        "tree": tree,
        "details": details,
        "job_logs": _logs(ev.unattributed_logs, s, MAX_JOB_LOGS),
        "config": config_rows(verdict),
    }
    if redact_secrets:
        payload = redact(payload)
    return payload


def _summary(result: Result) -> Summary:
    verdict = result.verdict
    if verdict.findings:
        headline = verdict.findings[0].summary
    elif verdict.status.value == "healthy":
        headline = "No hang found: no rank waits on another in the evidence given."
    else:
        headline = (f"{verdict.status.value.capitalize()}: no culprit could be named from this "
                    "evidence; see the evidence gaps below.")
    return {
        "status": verdict.status.value,
        "world_size": verdict.world_size,
        "ranks_seen": format_ranks(verdict.ranks_seen),
        "ranks_missing": format_ranks(verdict.ranks_missing),
        "n_seen": len(verdict.ranks_seen),
        "version": verdict.tool_version,
        "inputs": list(result.evidence.inputs),
        "headline": headline,
    }


def _finding(finding: Finding, s: Strings) -> FindingData:
    coll: Collective | None = None
    if finding.collective is not None:
        c = finding.collective
        coll = Collective(pg=c.pg, pg_desc=c.pg_desc, seq=c.seq, op=c.op)
    cols: EvidenceColumns = {"source": [], "rank": [], "detail": [], "where": []}
    for item in finding.evidence:
        cols["source"].append(s(item.source))
        cols["rank"].append(item.rank)
        cols["detail"].append(item.detail)
        cols["where"].append(s(item.where))
    return {"kind": finding.kind.value, "culprits": format_ranks(finding.culprit_ranks),
            "waiting": format_ranks(finding.waiting_ranks), "collective": coll,
            "confidence": round(finding.confidence, 2), "summary": finding.summary,
            "evidence": cols}


def _classes(result: Result, s: Strings) -> ClassColumns:
    graph = result.context.graph
    picture = result.context.picture
    roles = {cls.id: cls.role for cls in result.verdict.rank_classes}
    cols: ClassColumns = {"id": [], "ranks": [], "count": [], "role": [], "state": [],
                          "where": [], "last": [], "rep": [], "gpu": []}
    gpus = result.verdict.gpus
    for cid, members in sorted(graph.members.items(), key=lambda kv: kv[1][0]):
        rep = members[0]
        cols["id"].append(cid)
        cols["ranks"].append(format_ranks(members))
        cols["count"].append(len(members))
        cols["role"].append(s(roles.get(cid, "unknown")))
        cols["state"].append(s(graph.states.get(cid, "")))
        cols["where"].append(s(_where_waiting(result, rep, picture.pending_ops(rep))))
        last = []
        for group in picture.groups.values():
            view = group.ranks.get(rep)
            entry = view.last_completed() if view is not None else None
            if entry is not None:
                last.append(f"pg {group.label}: {entry.op} #{entry.seq}")
        if len(last) > MAX_LAST_GROUPS:
            last = last[:MAX_LAST_GROUPS] + [f"+{len(last) - MAX_LAST_GROUPS} more groups"]
        cols["last"].append(s("; ".join(last)))
        cols["rep"].append(rep)
        cols["gpu"].append(s(_gpu_labels(gpus, members)))
    return cols


_GPU_LABEL = re.compile(r"GPU (?:\d+ \([0-9a-f:]+\)|[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})")


def _gpu_labels(gpus: dict[int, str], members: list[int]) -> str | None:
    """``GPU 3 (0000:3b:00)`` for one rank; the first few, then a count, for a class."""
    labels = [m.group(0) if (m := _GPU_LABEL.match(gpus[r])) else gpus[r][:30]
              for r in members if r in gpus]
    if not labels:
        return None
    return ", ".join(labels[:3]) + (f" +{len(labels) - 3} more" if len(labels) > 3 else "")


def _where_waiting(result: Result, rank: int,
                   pending: list[tuple[GroupView, FrEntry]]) -> str | None:
    """The user's call site the rank is stuck at: FR's pending op, else its main thread."""
    if pending:
        frame = user_frame(pending[0][1].frames)
        if frame is not None:
            return f"{frame.name} {frame.where()}"
    ev = result.evidence.ranks.get(rank)
    if ev is not None and ev.samples:
        threads = ev.samples[-1].threads
        main = next((t for t in threads if t.is_main), threads[0] if threads else None)
        frame = user_frame(main.frames) if main is not None else None
        if frame is not None:
            return f"{frame.name} {frame.where()}"
    return None


def _rank_rows(result: Result, ranks: list[int], class_index: dict[str, int],
               s: Strings) -> RankColumns:
    graph = result.context.graph
    cols: RankColumns = {"rank": [], "cls": [], "host": [], "pid": [], "status": [], "gpu": []}
    for rank in ranks:
        ev = result.evidence.ranks.get(rank)
        cid = graph.class_of.get(rank)
        cols["rank"].append(rank)
        cols["cls"].append(class_index[cid] if cid is not None else -1)
        host = ev.host if ev is not None else None
        if host is None and ev is not None and ev.fr is not None:
            host = ev.fr.host
        cols["host"].append(s(host))
        cols["pid"].append(ev.pid if ev is not None else None)
        cols["status"].append(s(ev.proc[-1].status) if ev is not None and ev.proc else -1)
        cols["gpu"].append(s(result.verdict.gpus.get(rank)))
    return cols


def _detail_ranks(result: Result, classes: ClassColumns) -> list[int]:
    """Every rank in a small job; else culprits of the root finding, one representative per class,
    cited ranks and other culprits, up to :data:`MAX_DETAIL_RANKS`."""
    findings = result.verdict.findings
    ordered: list[int] = []
    if findings:
        ordered += sorted(findings[0].culprit_ranks)
    ordered += classes["rep"]
    ordered += [item.rank for f in findings for item in f.evidence if item.rank is not None]
    ordered += sorted({r for f in findings[1:] for r in f.culprit_ranks})
    known = set(result.context.graph.class_of) | set(result.evidence.ranks)
    if len(known) <= MAX_DETAIL_RANKS:
        return sorted(known)
    chosen: list[int] = []
    seen: set[int] = set()
    for rank in ordered:
        if rank in known and rank not in seen:
            seen.add(rank)
            chosen.append(rank)
        if len(chosen) >= MAX_DETAIL_RANKS:
            break
    return sorted(chosen)


def _detail(ev: RankEvidence | None, rank: int, picture: Picture,
            pending: list[tuple[GroupView, FrEntry]], s: Strings, frames: Frames) -> RankDetail:
    if ev is None:
        return {"rank": rank, "host": -1, "pid": None, "stacks": None, "fr": None,
                "logs": _logs([], s, MAX_LOGS), "proc": _proc([], s), "workers": []}
    workers: list[WorkerData] = [
        {"pid": pid, "proc": _proc(ev.worker_proc.get(pid, []), s),
         "stacks": _stacks(ev.worker_samples.get(pid, []), s, frames)}
        for pid in sorted(set(ev.worker_pids) | set(ev.worker_samples) | set(ev.worker_proc))]
    host = ev.host or (ev.fr.host if ev.fr is not None else None)
    return {"rank": rank, "host": s(host), "pid": ev.pid,
            "stacks": _stacks(ev.samples, s, frames),
            "fr": _fr(rank, picture, pending, s, frames),
            "logs": _logs(ev.logs, s, MAX_LOGS), "proc": _proc(ev.proc, s), "workers": workers}


def _stacks(samples: Sequence[StackSample], s: Strings, frames: Frames) -> StacksData | None:
    if not samples:
        return None
    sample = samples[-1]
    cols: ThreadColumns = {"name": [], "tid": [], "main": [], "active": [], "gil": [],
                           "stack": [], "cut": []}
    threads = sorted(sample.threads, key=lambda t: (not t.is_main, t.thread_id))[:MAX_THREADS]
    for thread in threads:
        cols["name"].append(s(thread.name))
        cols["tid"].append(thread.thread_id)
        cols["main"].append(thread.is_main)
        cols["active"].append(thread.active)
        cols["gil"].append(thread.owns_gil)
        cols["stack"].append([frames(f) for f in thread.frames[:MAX_FRAMES]])
        cols["cut"].append(max(0, len(thread.frames) - MAX_FRAMES))
    return {"source": s(sample.source), "path": s(sample.path), "taken_at": sample.taken_at,
            "samples": len(samples), "threads": cols}


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def _fr(rank: int, picture: Picture, pending_ops: list[tuple[GroupView, FrEntry]],
        s: Strings, frames: Frames) -> FrData | None:
    dump = picture.dumps.get(rank)
    if dump is None:
        return None
    by_group: dict[str, list[FrEntry]] = {}
    for entry in dump.entries:
        by_group.setdefault(entry.pg_name, []).append(entry)
    groups: list[FrGroup] = []
    for name, entries in sorted(by_group.items(), key=lambda kv: _group_key(kv[0])):
        entries.sort(key=lambda e: e.record_id)
        shown = entries[-MAX_FR_ENTRIES:]
        group = picture.groups.get(name)
        label = group.label if group is not None else name
        blocked = next((e for g, e in pending_ops if g.name == name), None)
        cols: FrEntryColumns = {"rid": [], "seq": [], "op": [], "state": [], "done": [],
                                "sizes": [], "created": [], "started": [], "completed": [],
                                "p2p": [], "peer": [], "where": []}
        for e in shown:
            cols["rid"].append(e.record_id)
            cols["seq"].append(e.seq)
            cols["op"].append(s(e.op))
            cols["state"].append(s(e.state))
            cols["done"].append(e.completed)
            cols["sizes"].append(s(_sizes(e)))
            cols["created"].append(_ms(e.time_created_ns))
            cols["started"].append(_ms(e.time_started_ns))
            cols["completed"].append(_ms(e.time_completed_ns))
            cols["p2p"].append(e.is_p2p)
            cols["peer"].append(e.peer)
            frame = user_frame(e.frames)
            cols["where"].append(s(f"{frame.name} {frame.where()}" if frame else None))
        pending = shown.index(blocked) if blocked is not None and blocked in shown else -1
        groups.append({"pg": s(label), "pending": pending, "total": len(entries),
                       "entries": cols})
    stack_of = pending_ops[0][1] if pending_ops else (
        max(dump.entries, key=lambda e: e.record_id) if dump.entries else None)
    stack = [frames(f) for f in stack_of.frames[:MAX_FRAMES]] if stack_of is not None else []
    return {"path": s(dump.path), "version": s(dump.version), "backend": s(dump.backend),
            "groups": groups, "stack": stack}


def _group_key(name: str) -> tuple[int, str]:
    return (0, f"{int(name):012d}") if name.isdigit() else (1, name)


def _sizes(entry: FrEntry) -> str:
    if not entry.input_sizes and not entry.input_dtypes:
        return ""
    sizes = ",".join("[" + ",".join(map(str, shape)) + "]" for shape in entry.input_sizes)
    return f"[{sizes}] {','.join(entry.input_dtypes)}".strip()


def _logs(events: Iterable[LogEvent], s: Strings, cap: int) -> LogColumns:
    """The ``cap`` most severe events, shown in file order."""
    events = list(events)
    keep = sorted(range(len(events)),
                  key=lambda i: (_SEVERITY_ORDER.get(events[i].severity, 5), i))[:cap]
    chosen = sorted((events[i] for i in keep), key=lambda e: (e.path, e.line_no))
    cols: LogColumns = {"kind": [], "sev": [], "msg": [], "where": [], "time": [],
                        "omitted": len(events) - len(chosen)}
    for event in chosen:
        cols["kind"].append(s(event.kind))
        cols["sev"].append(s(event.severity))
        cols["msg"].append(event.message)
        cols["where"].append(s(event.where()))
        cols["time"].append(event.time)
    return cols


def _proc(states: Sequence[ProcessState], s: Strings) -> ProcColumns:
    cols: ProcColumns = {"status": [], "at": [], "cpu": [], "rss": [], "threads": [],
                         "wchan": [], "exit": [], "signal": []}
    for state in states[-10:]:
        cols["status"].append(s(state.status))
        cols["at"].append(state.sampled_at)
        cols["cpu"].append(state.cpu_time_s)
        cols["rss"].append(state.rss_bytes)
        cols["threads"].append(state.num_threads)
        cols["wchan"].append(s(state.wchan))
        cols["exit"].append(state.exit_code)
        cols["signal"].append(state.exit_signal)
    return cols
