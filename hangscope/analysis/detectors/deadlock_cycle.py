"""p2p_deadlock and pg_order_deadlock: ranks that wait on each other in a cycle.

Signal: strongly connected components of the wait graph. A cycle made only of send/recv waits is a
``p2p_deadlock`` (e.g. both peers blocked in a send to the other); one that goes through collectives
of different process groups is a ``pg_order_deadlock`` (rank 0 entered group A then B, rank 1 B then
A). For the latter the culprits are the ranks whose order of the groups differs from the other
members' (``analysis/pg_order.py``: majority of the members of both groups, from their FR history);
on a tie both sides are named with lower confidence, and where no rank's order can be compared
(stacks or logs only, or no rank in two of the groups) every rank of the cycle is. A p2p cycle
whose every edge a stack's peer argument gives (``analysis/p2p_frames.py``) is walked in order,
with 0.85 (0.75 where a peer is guessed from local names). Two ranks that face each other, one
in a send to the other and the other in a receive from the first, are a cycle where the two calls
cannot be one transfer (``waitgraph._unmatched``: their tags differ where the backend pairs by
tag, gloo or MPI, not NCCL; or both stayed in them over every sample); where their tags differ
and the other ranks waiting in p2p hold one of the two, the rank with the other tag is the
culprit (rule ``odd-tag``). Cites: the
pending FR entry of one rank per class in the cycle. False positives: p2p ops that NCCL would
complete because both sides are in one ``batch_isend_irecv`` group (torch records them as separate
entries); a snapshot taken between two legitimately overlapping async collectives.
"""

from __future__ import annotations

from collections import Counter

import networkx as nx

from hangscope.analysis.context import Context
from hangscope.analysis.pg_order import order_verdict
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.analysis.waitgraph import pairs_by_tag
from hangscope.ranges import format_ranks, ranks_phrase

CONFIDENCE_FR = 0.85
CONFIDENCE_TIE = 0.6  # one side of a tie is right, and nothing says which
CONFIDENCE_STACKS = 0.75


def detect(ctx: Context) -> list[Finding]:
    findings = []
    graph = ctx.graph
    for cycle in graph.cycles():
        nodes = set(cycle)
        reasons = graph.reasons_among(nodes)
        is_p2p = all(reason.kind in ("p2p", "stack-p2p") for reason in reasons)
        kind = Kind.P2P_DEADLOCK if is_p2p else Kind.PG_ORDER_DEADLOCK
        in_cycle = graph.ranks_of(cycle)
        waiting = sorted({r for node in graph.waiting_on(nodes) for r in graph.members[node]})
        evidence, steps = _steps(ctx, cycle)
        what = "send/recv" if is_p2p else "collectives on different process groups"
        summary = (f"ranks {format_ranks(in_cycle)} wait on each other through {what}: "
                   + "; ".join(steps))
        ring = peer_cycle(ctx, in_cycle) if is_p2p else None
        facing = ring is not None and _facing(ctx, ring)
        odd = odd_tag(ctx, ring) if ring is not None and facing else None
        measures: dict[str, float | str] = {}
        if ring is not None:
            evidence, summary = _ring_sentence(ctx, ring, facing, odd)
            measures = _ring_measures(ctx, ring)
        first = next((r for r in reasons if r.kind in ("p2p", "collective")), None)
        collective = (CollectiveRef(first.pg, first.seq, first.op, first.pg_desc)
                      if first else None)
        from_fr = any(reason.kind in ("p2p", "collective") for reason in reasons)
        confidence = CONFIDENCE_FR if from_fr else CONFIDENCE_STACKS
        if ring is not None and not any("guess" in ctx.stacks[r].p2p.how  # type: ignore[union-attr]
                                        for r in ring):
            confidence = CONFIDENCE_FR  # every edge read from a frame's own peer argument
        culprits = in_cycle
        if ring is not None and facing:
            if odd:
                culprits = odd  # two ranks facing with different tags: the one out of step
            elif not _tags_differ(ctx, ring):
                confidence = CONFIDENCE_STACKS  # read from their stillness alone
        if kind is Kind.PG_ORDER_DEADLOCK and from_fr:
            order = order_verdict(ctx.picture, in_cycle)
            if order.tie:
                culprits = order.culprits
                confidence = CONFIDENCE_TIE
                summary = (f"ranks {format_ranks(in_cycle)} wait on each other through {what}: "
                           + order.sentence())
            elif order.culprits:
                culprits = order.culprits
                collective = _odd_collective(ctx, culprits) or collective
                summary = (f"{ranks_phrase(culprits)} issued collectives of different process "
                           "groups in another order than the other members, and each side waits"
                           " for the other: " + order.sentence())
            else:
                summary += ("; no rank is a member of two of these groups with a history that "
                            "orders their collectives, so the odd order cannot be told and every "
                            "rank of the cycle is named")
        waiting = sorted((set(in_cycle) - set(culprits)) | set(waiting))
        findings.append(Finding(kind=kind, culprit_ranks=culprits, waiting_ranks=waiting,
                                confidence=confidence, summary=summary,
                                evidence=evidence, collective=collective,
                                measures=measures))
    return findings


def peer_cycle(ctx: Context, ranks: list[int]) -> list[int] | None:
    """The ranks of a cycle in the order they wait on each other (each waits on the next), from
    the peers their stacks name (``RankStackState.p2p``); None when the peers do not close one."""
    edges = nx.DiGraph()
    for rank in ranks:
        state = ctx.stacks.get(rank)
        wait = state.p2p if state is not None else None
        if wait is not None and wait.peer is not None and wait.peer in ranks:
            edges.add_edge(rank, wait.peer)
    try:
        found = nx.find_cycle(edges, source=min(ranks)) if edges else []
    except nx.NetworkXNoCycle:
        return None
    return [src for src, _ in found] or None


def _ring_sentence(ctx: Context, ring: list[int], facing: bool,
                   odd: list[int] | None) -> tuple[list[EvidenceItem], str]:
    """Evidence per rank of a p2p ring and the sentence that walks it (``facing``: two ranks,
    a send and the receive it faces; ``odd``: the one whose tag is out of step)."""
    evidence, clauses = [], []
    for rank in ring:
        wait = ctx.stacks[rank].p2p
        assert wait is not None
        where = wait.frame.where() if wait.frame is not None else ""
        detail = (f"main thread {wait.clause()} in {wait.call} at "
                  f"{wait.frame.name if wait.frame else '?'} ({wait.how})")
        evidence.append(EvidenceItem(source="py-spy", rank=rank, detail=detail, where=where))
        clauses.append(f"rank {rank} {wait.clause()}")
    path = " -> ".join(str(r) for r in [*ring, ring[0]])
    ops = {ctx.stacks[rank].p2p.op for rank in ring}  # type: ignore[union-attr]
    if facing:
        blame = (f": rank {odd[0]}'s tag is the one no other waiting rank uses, so it is the "
                 "one that skipped or added a message" if odd else "")
        summary = (f"ranks {ring[0]} and {ring[1]} face each other and neither call completes: "
                   + "; ".join(clauses) + ". A posted send and its receive complete at once, so "
                   "these two are not one transfer (another tag, size or group): each waits on "
                   f"the other for ever{blame}. Look for a send or receive that one side skips "
                   "or adds (a step guarded on local data, an uneven number of micro-batches)")
        return evidence, summary
    fix = ("make one rank of the cycle send before it receives" if ops == {"recv"} else
           "make one rank of the cycle receive before it sends" if ops == {"send"} else
           "order each pair's send and recv the same way on both sides")
    summary = (f"p2p cycle of {len(ring)} ranks ({path}, each waiting on the next): "
               + "; ".join(clauses) + f". Nobody posts the matching op first, so none of them "
               f"can proceed: {fix} (or post the exchange with batch_isend_irecv)")
    return evidence, summary


def _facing(ctx: Context, ring: list[int]) -> bool:
    ops = {ctx.stacks[rank].p2p.op for rank in ring}  # type: ignore[union-attr]
    return len(ring) == 2 and ops == {"send", "recv"}


def _tags_differ(ctx: Context, ring: list[int]) -> bool:
    tags = [ctx.stacks[rank].p2p.tag for rank in ring]  # type: ignore[union-attr]
    return None not in tags and tags[0] != tags[1] and pairs_by_tag(ctx.picture, ctx.stacks)


def odd_tag(ctx: Context, ring: list[int]) -> list[int] | None:
    """Of two ranks that face each other with different tags, the one whose tag fewer of the
    ranks waiting in p2p ops hold (a pipeline's stages all wait on one micro-batch's tag, and the
    stage that skipped it sends the next one's); None where the count does not tell."""
    tags = {rank: state.p2p.tag for rank, state in ctx.stacks.items()
            if state.p2p is not None and state.p2p.tag is not None}
    a, b = ring
    if not _tags_differ(ctx, ring):
        return None
    held = Counter(tags.values())
    if held[tags[a]] == held[tags[b]]:
        return None
    return [a] if held[tags[a]] < held[tags[b]] else [b]


def _ring_measures(ctx: Context, ring: list[int]) -> dict[str, float | str]:
    """``cycle``: "0 -> 2 -> 1 -> 0"; ``p2p_edges``: "0 recv from 2; 2 recv from 1; ..."."""
    edges = []
    for rank in ring:
        wait = ctx.stacks[rank].p2p
        assert wait is not None
        verb = {"recv": "recv from", "send": "send to"}.get(wait.op or "", "p2p with")
        edges.append(f"{rank} {verb} {wait.peer}")
    return {"cycle": " -> ".join(str(r) for r in [*ring, ring[0]]),
            "p2p_edges": "; ".join(edges)}


def _steps(ctx: Context, cycle: list[str]) -> tuple[list[EvidenceItem], list[str]]:
    """Per class of the cycle: the cited op one of its ranks is blocked in, and a clause."""
    graph = ctx.graph
    evidence = []
    steps = []
    for node in cycle:
        rank = graph.members[node][0]
        pending = ctx.picture.pending_ops(rank)
        if not pending:
            item = ctx.stack_evidence(rank, "main thread: ")
            if item is not None:
                evidence.append(item)
                steps.append(f"{ranks_phrase(graph.members[node])} {item.detail}")
            continue
        group, entry = pending[0]
        evidence.append(ctx.fr_evidence(rank, entry, group, "blocked in"))
        peer = ""
        if entry.is_p2p and entry.peer is not None:
            direction = "to" if entry.op == "send" else "from"
            peer = f" {direction} rank {group.global_rank(entry.peer)}"
        steps.append(f"{ranks_phrase(graph.members[node])} blocked in {entry.op}{peer} "
                     f"seq {entry.seq} on pg {group.label}")
    return evidence, steps


def _odd_collective(ctx: Context, culprits: list[int]) -> CollectiveRef | None:
    """The collective the first culprit entered out of order (its oldest pending one)."""
    for rank in culprits:
        for group, entry in ctx.picture.pending_ops(rank):
            if not entry.is_p2p:
                return CollectiveRef(group.name, entry.seq, entry.op, group.desc)
    return None
