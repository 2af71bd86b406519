"""network_fault: transport errors in NCCL logs point at a host, peer or link.

Signal: ``nccl_transport_error`` events (``NET/IB : Got completion ... with error``,
``NET/Socket : Connection closed by remote peer`` in NCCL WARN lines) with no rank-local cause
(OOM, signal, own exception, a process NCCL RAS considers dead) that would explain them. Cites:
each WARN line. The culprit is the rank(s) reporting the errors, and the summary names the peer(s)
they blame. False positives: transport errors logged as a *consequence* of a peer process dying
(which rank_died / rank_oom then explain, ranked above this).
"""

from __future__ import annotations

from collections import Counter

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import describe, failures, unranked
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.ranges import ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    per_rank = failures(ctx.evidence)
    transport = {rank: [f for f in items if f.what == "transport"]
                 for rank, items in per_rank.items()}
    reporters = sorted(rank for rank, items in transport.items() if items)
    if not reporters:
        return _unranked(ctx)
    peers = Counter(str(f.event.fields.get("peer", "?")) for r in reporters for f in transport[r])
    other_causes = any(f.what in ("oom", "signal", "exception", "dead", "gpu")
                       for items in per_rank.values() for f in items)
    evidence = [EvidenceItem("log", rank, " ".join(f.event.message.split())[:300],
                             f.event.where())
                for rank in reporters[:8] for f in transport[rank][:1]]
    blamed = ", ".join(f"{peer} ({count}x)" for peer, count in peers.most_common(4))
    summary = (f"NCCL transport errors on {ranks_phrase(reporters)} "
               f"name peer(s) {blamed}: a link, NIC or host on that "
               "path is the first suspect")
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=reporters, waiting_ranks=[],
                    confidence=0.5 if other_causes else 0.75, summary=summary,
                    evidence=evidence)]


def _unranked(ctx: Context) -> list[Finding]:
    """Transport errors in lines that name no rank (a bare NCCL_DEBUG excerpt, one process's
    stderr): the fault is known, the rank is not."""
    events = unranked(ctx.evidence, frozenset({"transport"}))
    if not events:
        return []
    peers = Counter(str(e.fields["peer"]) for e in events if e.fields.get("peer"))
    blamed = (" naming peer(s) " + ", ".join(f"{peer} ({count}x)" for peer, count
                                            in peers.most_common(4))) if peers else ""
    summary = (f"NCCL reports a transport failure{blamed}: {describe(events[0], 200)}; a link, NIC "
               "or host on that path is the first suspect (the lines name no rank: map the "
               "host:pid or peer address to ranks with NCCL_DEBUG=INFO's 'Init COMPLETE' lines)")
    evidence = [EvidenceItem("log", None, describe(e), e.where()) for e in events[:4]]
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=[],
                    confidence=0.6, summary=summary, evidence=evidence)]
