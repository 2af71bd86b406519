"""rank_oom: a rank ran out of memory: CUDA OOM text, ``torch.OutOfMemoryError``, a host or
cgroup OOM kill of its pid, or a SIGKILL with its memory near the limit.

Signal: log events classified as OOM for the rank's own process (``log_causes``); for host OOM
kills, the killed pid matched to a rank. Cites: the log line (file:line). Comes before the
survivors' connection errors and timeouts, which are echoes. False positives: an OOM that the job
caught and recovered from (the rank is then still alive and moving: confidence is lowered).
"""

from __future__ import annotations

import re

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import Failure, describe, failures, unranked
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import format_ranks, ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    found = failures(ctx.evidence)
    by_rank = {rank: [f for f in items if f.what == "oom"] for rank, items in found.items()}
    pids = {ev.pid: rank for rank, ev in ctx.evidence.ranks.items() if ev.pid}
    for rank_ev in ctx.evidence.ranks.values():
        for event in rank_ev.logs:
            if event.kind == "host_oom_kill" and event.fields.get("pid") in pids:
                by_rank.setdefault(pids[int(event.fields["pid"])], [])
    culprits = sorted(rank for rank, items in by_rank.items() if items)
    if not culprits:
        return _unranked(ctx, found)
    evidence = [EvidenceItem("log", rank, describe(item.event), item.event.where())
                for rank in culprits[:8] for item in by_rank[rank][:2]]
    moving = [r for r in culprits if (s := ctx.stacks.get(r)) and s.progress == "moving"]
    first = by_rank[culprits[0]][0].event
    others = sorted(set(ctx.evidence.ranks) - set(culprits))
    summary = (f"{ranks_phrase(culprits)} ran out of "
               f"memory: {describe(first, 200)} ({first.where()})")
    if others:
        summary += (f"; the errors and timeouts of ranks {format_ranks(others)} follow from it")
    return [Finding(kind=Kind.RANK_OOM, culprit_ranks=culprits, waiting_ranks=others,
                    confidence=0.6 if moving else 0.95, summary=summary, evidence=evidence)]



def _unranked(ctx: Context, found: dict[int, list[Failure]]) -> list[Finding]:
    """An OOM in a log that names no rank (dmesg, one process's stderr): the failure is known,
    the rank is not; say which pid or process to map."""
    events = unranked(ctx.evidence, frozenset({"oom"}))
    if not events:
        return []
    first = events[0]
    pids = sorted({str(e.fields["pid"]) for e in events if e.fields.get("pid")})
    killed = [] if pids else _sigkilled(ctx, found)
    evidence = [EvidenceItem("log", None, describe(e), e.where()) for e in events[:4]]
    if len({rank for rank, _ in killed}) == 1:
        # rule oom-kill-names-sigkilled: the kernel's OOM report names no process, and one rank
        # of the job was killed by SIGKILL, the signal the OOM killer sends
        rank, line = killed[0]
        evidence.append(EvidenceItem("log", rank, describe(line), line.where()))
        summary = (f"rank {rank} ran out of host memory: it was killed by SIGKILL "
                   f"({line.where()}) and the kernel reports an out-of-memory kill "
                   f"({describe(first, 160)}, {first.where()})")
        return [Finding(kind=Kind.RANK_OOM, culprit_ranks=[rank], waiting_ranks=[],
                        confidence=0.75, summary=summary, evidence=evidence,
                        measures={"rule": "oom-kill-names-sigkilled"})]
    who = f" (pid {', '.join(pids[:4])}: match it to a rank's pid)" if pids else \
        " (the log names no rank)"
    summary = f"a process of the job ran out of memory: {describe(first, 200)}{who}"
    return [Finding(kind=Kind.RANK_OOM, culprit_ranks=[], waiting_ranks=[], confidence=0.7,
                    summary=summary, evidence=evidence)]


_SIGKILL = re.compile(r"SIGKILL|signal 9\b|exitcode:? -9\b")


def _sigkilled(ctx: Context, found: dict[int, list[Failure]]) -> list[tuple[int, LogEvent]]:
    """(rank, line) for each line that says a rank was killed by SIGKILL: a launcher's record of
    it (whose rank may come from its table, not the line), or a line that says so in words
    (torch.multiprocessing's 'process 2 terminated with signal SIGKILL')."""
    out = [(f.rank, f.event) for items in found.values() for f in items
           if f.what == "signal" and f.event.fields.get("signal") == "SIGKILL"]
    out += [(e.rank, e) for e in ctx.evidence.all_logs() if e.kind == "cue" and e.rank is not None
            and e.fields.get("cue") == "signal-death" and _SIGKILL.search(e.message)]
    return out
