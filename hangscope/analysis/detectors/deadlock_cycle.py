"""p2p_deadlock and pg_order_deadlock: ranks that wait on each other in a cycle.

Signal: strongly connected components of the wait graph. A cycle made only of send/recv waits is a
``p2p_deadlock`` (e.g. both peers blocked in a send to the other); one that goes through collectives
of different process groups is a ``pg_order_deadlock`` (rank 0 entered group A then B, rank 1 B then
A). Cites: the pending FR entry of one rank per class in the cycle. False positives: p2p ops that
NCCL would complete because both sides are in one ``batch_isend_irecv`` group (torch records them
as separate entries); a snapshot taken between two legitimately overlapping async collectives.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.ranges import format_ranks, ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    findings = []
    graph = ctx.graph
    for cycle in graph.cycles():
        nodes = set(cycle)
        reasons = graph.reasons_among(nodes)
        is_p2p = all(reason.kind in ("p2p", "stack-p2p") for reason in reasons)
        kind = Kind.P2P_DEADLOCK if is_p2p else Kind.PG_ORDER_DEADLOCK
        culprits = graph.ranks_of(cycle)
        waiting = sorted({r for node in graph.waiting_on(nodes) for r in graph.members[node]})
        evidence = []
        steps = []
        for node in cycle:
            rank = graph.members[node][0]
            pending = ctx.picture.pending_ops(rank)
            if not pending:
                item = ctx.stack_evidence(rank, "main thread: ")
                if item is not None:
                    evidence.append(item)
                    who = graph.members[node]
                    steps.append(f"{ranks_phrase(who)} "
                                 f"{item.detail}")
                continue
            group, entry = pending[0]
            evidence.append(ctx.fr_evidence(rank, entry, group, "blocked in"))
            peer = ""
            if entry.is_p2p and entry.peer is not None:
                direction = "to" if entry.op == "send" else "from"
                peer = f" {direction} rank {group.global_rank(entry.peer)}"
            steps.append(f"{ranks_phrase(graph.members[node])} blocked in {entry.op}{peer} "
                         f"seq {entry.seq} on pg {group.label}")
        what = "send/recv" if is_p2p else "collectives on different process groups"
        summary = (f"ranks {format_ranks(culprits)} wait on each other through {what}: "
                   + "; ".join(steps))
        first = next((r for r in reasons if r.kind in ("p2p", "collective")), None)
        collective = (CollectiveRef(first.pg, first.seq, first.op, first.pg_desc)
                      if first else None)
        from_fr = any(reason.kind in ("p2p", "collective") for reason in reasons)
        findings.append(Finding(kind=kind, culprit_ranks=culprits, waiting_ranks=waiting,
                                confidence=0.85 if from_fr else 0.75, summary=summary,
                                evidence=evidence, collective=collective))
    return findings

