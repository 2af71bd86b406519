"""missing_rank and p2p_deadlock from the stacks of ranks that wait with nobody else in view.

Signal: stacks (no flight-recorder dump, no other rank in the evidence, the job's size not given)
whose main threads all sit in one collective, or all in one point-to-point op or grouped NCCL
launch that does not return, and do not move, with no wait in the wait graph: a paste of one
process, or of the waiting ranks only. The ranks they wait for are not in the evidence, so the
finding names no culprit (0.3 for a collective, 0.35 for a p2p op, which has one peer), says
where they wait and what to fetch. Ranks in different collectives are ``collective_mismatch``'s;
ranks that wait on each other are ``deadlock_cycle``'s. Cites: each waiting rank's main thread.
False positives: a collective that is slow, not stuck, sampled once (a second sample tells); a
grouped launch that is a coalesced collective, not p2p; every rank of the job pasted, all in one
collective (the transport stalls: the summary says so).
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.ranges import ranks_phrase

_FETCH = ("fetch the stacks of every rank (`hangscope attach`, or py-spy dump on each node), or "
          "their flight-recorder dumps (TORCH_NCCL_DUMP_ON_TIMEOUT=1, TORCH_FR_BUFFER_SIZE=2000)")


def detect(ctx: Context) -> list[Finding]:
    if not ctx.stacks or ctx.picture.dumps or set(ctx.stacks) != set(ctx.evidence.ranks) \
            or ctx.evidence.world_size:
        return []  # with the job's size known, the ranks not seen are in the wait graph
    waiting_in = {r for sources, _ in ctx.graph.waits.values() for r in sources}
    by_op: dict[tuple[str, str], list[int]] = {}
    for rank, state in sorted(ctx.stacks.items()):
        main = state.main
        if main is None or main.kind not in ("collective", "p2p") or state.gone \
                or state.progress == "moving" or rank in waiting_in:
            return []  # a rank elsewhere, or a wait the graph has: not alone
        by_op.setdefault((main.kind, main.op or "?"), []).append(rank)
    if len(by_op) != 1:
        return []
    ((kind, op), ranks), = by_op.items()
    if kind == "p2p":
        return [_finding(ctx, Kind.P2P_DEADLOCK, op, ranks, 0.35,
                         "a point-to-point exchange completes only when its peer posts the "
                         "matching send or recv, and the peer never did")]
    return [_finding(ctx, Kind.MISSING_RANK, op, ranks, 0.3,
                     "a collective completes only when every rank of its group enters it, and "
                     "some rank never did" + ("" if len(ranks) == 1 else
                                              " (if these are all the ranks, the transport "
                                              "stalls instead: NCCL's logs tell)"))]


def _finding(ctx: Context, kind: Kind, op: str, ranks: list[int], confidence: float,
             why: str) -> Finding:
    state = ctx.stacks[ranks[0]]
    verb = "are" if len(ranks) > 1 else "is"
    summary = (f"{ranks_phrase(ranks)} {verb} blocked in {op} ({state.describe()}): {why}. No "
               f"rank it waits for is in the evidence, so which one is unknown: {_FETCH}")
    evidence = [item for rank in ranks[:8]
                if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
    return Finding(kind=kind, culprit_ranks=[], waiting_ranks=ranks, confidence=confidence,
                   summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=None, seq=None, op=op))
