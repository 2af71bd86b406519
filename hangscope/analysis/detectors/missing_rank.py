"""missing_rank: some ranks never entered the collective the others are blocked in.

Signal: sinks of the wait graph, classes that others wait on through a collective and that wait on
nobody themselves (a rank that is behind because it waits elsewhere is a link in a chain, not the
cause; following the chain to its end finds the rank to look at). Cites: the waiting ranks'
pending FR entry and the culprit's last entry on that group. A culprit without a dump is named with
lower confidence: absent evidence is consistent with a dead or wedged rank, but proves neither.
False positives: a dump taken while a healthy job was between collectives on one rank.
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.analysis.waitgraph import WaitReason
from hangscope.ranges import format_ranks, ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    sink_ranks = set(ctx.graph.ranks_of(ctx.graph.sinks()))
    if not sink_ranks:
        return []
    # Group the waits by the culprits they point at, so one stuck rank is one finding.
    by_culprits: dict[tuple[int, ...], list[tuple[WaitReason, set[int]]]] = defaultdict(list)
    by_stack: dict[tuple[int, ...], list[tuple[WaitReason, set[int]]]] = defaultdict(list)
    for reason, (waiting, waited_on) in ctx.graph.waits.items():
        culprits = tuple(sorted(waited_on & sink_ranks))
        if not culprits:
            continue
        if reason.kind == "collective":
            by_culprits[culprits].append((reason, waiting))
        elif reason.kind == "stack-collective":
            by_stack[culprits].append((reason, waiting))
    findings = [_finding(ctx, list(culprits), waits) for culprits, waits in by_culprits.items()]
    findings += [_stack_finding(ctx, list(culprits), waits)
                 for culprits, waits in by_stack.items() if culprits not in by_culprits]
    return findings


def _stack_finding(ctx: Context, culprits: list[int],
                   waits: list[tuple[WaitReason, set[int]]]) -> Finding:
    """From stacks alone: which collective the others wait in is known, its group and seq not."""
    waits.sort(key=lambda item: -len(item[1]))
    reason, _ = waits[0]
    waiting = sorted(set().union(*(w for _, w in waits)) - set(culprits))
    evidence = [item for rank in [min(waiting), *culprits[:8]]
                if (item := ctx.stack_evidence(rank)) is not None]
    doing = []
    for rank in culprits[:4]:
        state = ctx.stacks.get(rank)
        doing.append(f"rank {rank}: {state.describe()}" if state else f"rank {rank}: no stack")
    verb = "are" if len(culprits) > 1 else "is"
    summary = (f"{ranks_phrase(culprits)} {verb} not in any collective "
               f"while {ranks_phrase(waiting)} wait in {reason.op} ({'; '.join(doing)})")
    has_stacks = all(rank in ctx.stacks for rank in culprits)
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=culprits, waiting_ranks=waiting,
                   confidence=0.8 if has_stacks else 0.5, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=None, seq=None, op=reason.op))


def _finding(ctx: Context, culprits: list[int],
             waits: list[tuple[WaitReason, set[int]]]) -> Finding:
    waits.sort(key=lambda item: (-len(item[1]), item[0].pg, item[0].seq))
    reason, waiting = waits[0]
    group = ctx.picture.groups[reason.pg]
    all_waiting = sorted(set().union(*(w for _, w in waits)) - set(culprits))
    with_dump = [r for r in culprits if r in ctx.picture.dumps]
    without = [r for r in culprits if r not in ctx.picture.dumps]
    where = f"{reason.op} seq {reason.seq} on pg {group.label}"
    evidence: list[EvidenceItem] = []
    rep_waiter = min(waiting)
    pending = group.ranks[rep_waiter].pending
    if pending is not None:
        evidence.append(ctx.fr_evidence(rep_waiter, pending, group,
                                        f"ranks {format_ranks(waiting)} wait in"))
    parts = []
    if with_dump:
        last_parts = []
        for rank in with_dump[:8]:
            view = group.ranks.get(rank)
            last = view.last_completed() if view else None
            if last is not None:
                evidence.append(ctx.fr_evidence(rank, last, group, "last completed"))
                last_parts.append(f"rank {rank}: {last.op} seq {last.seq}")
            elif view is not None and view.entries:
                evidence.append(ctx.fr_evidence(rank, view.entries[-1], group, "last entered"))
            state = ctx.graph.states[ctx.graph.class_of[rank]]
            evidence.append(EvidenceItem("flight_recorder", rank, f"rank {rank} is {state}",
                                         ctx.picture.dumps[rank].path))
        last_text = f" (last completed there: {'; '.join(last_parts)})" if last_parts else ""
        parts.append(f"{ranks_phrase(with_dump)} never entered {where}{last_text}")
    if without:
        parts.append(f"{ranks_phrase(without)} left no flight-recorder dump and so never showed "
                     f"{where}")
        evidence.extend(EvidenceItem("flight_recorder", r, "no flight-recorder dump", "")
                        for r in without[:8])
    idle = [r for r in with_dump if not ctx.picture.pending_ops(r)
            and ctx.picture.dumps[r].backend == "gloo" and r not in ctx.stacks]
    if idle:
        parts.append(f"the flight recorder shows nothing pending on {ranks_phrase(idle)}: "
                     "gloo records "
                     "no send/recv, so they may be blocked in a point-to-point op or outside "
                     "torch.distributed (stacks tell which)")
    summary = "; ".join(parts) + f"; {ranks_phrase(all_waiting)} wait for them there"
    for rank in culprits[:8]:
        item = ctx.stack_evidence(rank, "main thread: ")
        if item is not None:
            evidence.append(item)
    # Absence of a dump is weak evidence: a mismatch or a cycle seen in the dumps beats it.
    confidence = 0.9 if with_dump and not without else 0.7 if with_dump else 0.5
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=culprits, waiting_ranks=all_waiting,
                   confidence=confidence, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=reason.pg, seq=reason.seq, op=reason.op,
                                            pg_desc=reason.pg_desc))
