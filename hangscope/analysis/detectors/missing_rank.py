"""missing_rank: some ranks never entered the collective the others are blocked in.

Signal: sinks of the wait graph, classes that others wait on through a collective and that wait on
nobody themselves (a rank that is behind because it waits elsewhere is a link in a chain, not the
cause; following the chain to its end finds the rank to look at). Cites: the waiting ranks'
pending FR entry and the culprit's last entry on that group. A culprit without a dump is named with
lower confidence: absent evidence is consistent with a dead or wedged rank, but proves neither.
A rank blocked in an earlier collective of the group is named the same way, as still in it
(NCCL ranks enqueue ahead: such a rank may have recorded the later seq without entering it), and
so is a rank still inside a collective that others completed, where nobody waits for it yet
(:func:`_still_inside`). False positives: a dump taken while a healthy job was between
collectives on one rank.

NCCL RAS (``ras_facts.ras_facts``) adds NCCL's own view. A rank that does not answer RAS
(INCOMPLETE; or "dead" while its stacks show it alive: cut off from the RAS network) cannot be in
the collectives its communicators wait in; a rank that launched fewer operations than the most
advanced rank of its communicator (MISMATCH) is where the others wait. Naming the culprit of a
finding above, RAS is cited there and raises its confidence (to at least 0.7 for a rank that does
not answer, 0.5 for one behind, else by 0.05); naming other ranks, it is a finding of its own: 0.7
for ranks that do not answer, 0.5 for ranks behind, and these only while something shows ranks
blocked in communication (one report cannot tell a lagging rank from a stuck one). RAS names no
process group and no sequence number. False positives: a rank behind by a few operations in a job
that still moves; a process slow to answer while RAS's own collective times out.
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context
from hangscope.analysis.correlate import GroupView, finished
from hangscope.analysis.ras_facts import RAS_MARK, RasFact, ras_facts, seen_alive
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.analysis.waitgraph import WaitReason
from hangscope.ranges import format_ranks, ranks_do, ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    found = _from_waits(ctx)
    found += _still_inside(ctx, {r for f in found for r in f.culprit_ranks})
    return _with_ras(ctx, found) or _ras_few_ahead(ctx)


def _still_inside(ctx: Context, named: set[int]) -> list[Finding]:
    """Ranks still inside a collective that other members of its group completed (torch's
    ``COLLECTIVE_STATE_MISMATCH``), not named already: their side of it never finished.

    A collective cannot complete on one rank while another has not entered it, so the rank that
    did not finish is the one to look at (its transport, its GPU stream, its progress thread),
    whatever its position in the group. Where others wait for it in a later collective the wait
    graph names it (:func:`_finding`); this covers the case where nobody waits for it yet.
    One dump taken at the instant a collective ends can catch it finished on some ranks and not
    yet on others: lower confidence when nothing waits on the rank."""
    findings = []
    for group in ctx.picture.groups.values():
        pending: dict[int, list[int]] = defaultdict(list)
        for rank, view in group.ranks.items():
            if view.pending is not None and rank not in named:
                pending[view.pending.collective_seq_id].append(rank)
        for seq, stuck in sorted(pending.items()):
            done = sorted(r for r, view in group.ranks.items()
                          if any(finished(e) for e in view.block_at(seq)))
            if done:
                findings.append(_inside_finding(ctx, group, seq, sorted(stuck), done))
    return findings


def _inside_finding(ctx: Context, group: GroupView, seq: int, stuck: list[int],
                    done: list[int]) -> Finding:
    entry = group.ranks[stuck[0]].pending
    assert entry is not None
    finished = group.ranks[done[0]].block_at(seq)[0]
    waiting = sorted({r for _, (sources, targets) in ctx.graph.waits.items()
                      if targets & set(stuck) for r in sources} - set(stuck))
    verb = "are" if len(stuck) > 1 else "is"
    summary = (f"{ranks_phrase(stuck)} {verb} still in {entry.op} seq {seq} of pg {group.label} "
               f"({entry.state}), which {ranks_phrase(done)} completed: "
               f"{'their' if len(stuck) > 1 else 'its'} side of the collective never finished "
               "(look at that rank's transport, GPU stream or progress thread)")
    if waiting:
        summary += f"; {ranks_do(waiting, 'wait')} for {'them' if len(stuck) > 1 else 'it'}"
    evidence = [ctx.fr_evidence(stuck[0], entry, group, "still in"),
                ctx.fr_evidence(done[0], finished, group, "completed")]
    evidence += [item for rank in stuck[:8]
                 if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=stuck, waiting_ranks=waiting,
                   confidence=0.85 if waiting else 0.6, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=group.name, seq=seq, op=entry.op,
                                            pg_desc=group.desc))


def _from_waits(ctx: Context) -> list[Finding]:
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
               f"while {ranks_phrase(waiting)} wait{'s' if len(waiting) == 1 else ''} in "
               f"{reason.op} ({'; '.join(doing)})")
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
    stuck = [r for r in with_dump if (view_ := group.ranks.get(r)) is not None
             and view_.pending is not None and view_.pending.collective_seq_id < reason.seq]
    if stuck:
        # blocked in an earlier collective of the group (NCCL may have enqueued this one already)
        for rank in stuck[:8]:
            earlier = group.ranks[rank].pending
            assert earlier is not None
            evidence.append(ctx.fr_evidence(rank, earlier, group, "still in"))
            done = [r for r, v in group.ranks.items()
                    if any(finished(e) for e in v.block_at(earlier.collective_seq_id))]
            by = f", which {ranks_phrase(done[:8])} completed" if done else ""
            parts.append(f"rank {rank} is still in {earlier.op} seq {earlier.collective_seq_id}"
                         f"{by}, and so never reached {where}")
        with_dump = [r for r in with_dump if r not in stuck]
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
            said = f"rank {rank} is {state}" if ctx.picture.dumps[rank].entries \
                else f"rank {rank} recorded no collective"
            evidence.append(EvidenceItem("flight_recorder", rank, said,
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
                     f"gloo records no send/recv, so {'they' if len(idle) > 1 else 'it'} may be "
                     "blocked in a point-to-point op or outside torch.distributed (stacks tell "
                     "which)")
    them = "them" if len(culprits) > 1 else "it"
    summary = "; ".join(parts) + f"; {ranks_do(all_waiting, 'wait')} for {them} there"
    for rank in culprits[:8]:
        item = ctx.stack_evidence(rank, "main thread: ")
        if item is not None:
            evidence.append(item)
    # Absence of a dump is weak evidence: a mismatch or a cycle seen in the dumps beats it.
    dumped = bool(stuck or with_dump)
    confidence = 0.9 if dumped and not without else 0.7 if dumped else 0.5
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=culprits, waiting_ranks=all_waiting,
                   confidence=confidence, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=reason.pg, seq=reason.seq, op=reason.op,
                                            pg_desc=reason.pg_desc))


_RAS_STRENGTH = {"INCOMPLETE": 0.7, "DEAD": 0.5, "MISMATCH": 0.5}


def _with_ras(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """Cite RAS in the findings whose culprits it names; its other ranks become findings."""
    every = ras_facts(ctx.evidence)
    facts = [fact for fact in every if fact.state in ("INCOMPLETE", "MISMATCH")
             or (fact.state == "DEAD" and seen_alive(ctx.stacks, fact.rank))]
    if not facts:
        return findings
    for finding in findings:
        agree = [fact for fact in facts if fact.rank in finding.culprit_ranks]
        if agree:
            finding.evidence.extend(_cite(agree))
            strength = max(_RAS_STRENGTH[fact.state] for fact in agree)
            finding.confidence = min(0.95, max(finding.confidence + 0.05, strength))
            finding.summary += "; NCCL RAS agrees: " + _details(agree, 2)
    named = {rank for finding in findings for rank in finding.culprit_ranks}
    silent = [fact for fact in facts if fact.state != "MISMATCH" and fact.rank not in named]
    if silent:
        return [*findings, _unresponsive(ctx, silent)]
    behind = [fact for fact in facts if fact.state == "MISMATCH" and fact.rank not in named]
    # a dead rank (rank_died) explains why the others fell behind
    if behind and _blocked(ctx) and not any(fact.state == "DEAD" for fact in every):
        return [*findings, _behind(ctx, behind)]
    return findings


def _unresponsive(ctx: Context, facts: list[RasFact]) -> Finding:
    culprits = sorted({fact.rank for fact in facts})
    verb = "do" if len(culprits) > 1 else "does"
    summary = (f"{ranks_phrase(culprits)} {verb} not answer NCCL's RAS service "
               f"({_details(facts, 4)}): a process that is stopped, dying or cut off from the "
               "network holds up every collective of its communicators (RAS does not say which "
               "one the others wait in)")
    return _ras_finding(ctx, culprits, facts, summary,
                        max(_RAS_STRENGTH[fact.state] for fact in facts))


def _behind(ctx: Context, facts: list[RasFact]) -> Finding:
    culprits = sorted({fact.rank for fact in facts})
    them = "them" if len(culprits) > 1 else "it"
    summary = (f"{ranks_phrase(culprits)} launched fewer operations than the most advanced ranks "
               f"of {'their' if len(culprits) > 1 else 'its'} communicator ({_details(facts, 4)}):"
               f" the others wait for {them} in the next one. One RAS report cannot tell a lag "
               "from a hang; counts that do not move between two reports can")
    return _ras_finding(ctx, culprits, facts, summary, _RAS_STRENGTH["MISMATCH"])


def _ras_finding(ctx: Context, culprits: list[int], facts: list[RasFact], summary: str,
                 confidence: float) -> Finding:
    waiting = sorted({r for _, (sources, targets) in ctx.graph.waits.items()
                      if targets & set(culprits) for r in sources} - set(culprits))
    waiting = waiting or sorted(set(ctx.evidence.ranks) - set(culprits))
    evidence = _cite(facts)
    evidence += [item for rank in culprits[:8]
                 if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=culprits, waiting_ranks=waiting,
                   confidence=confidence, summary=summary, evidence=evidence)


def _cite(facts: list[RasFact]) -> list[EvidenceItem]:
    return list(dict.fromkeys(fact.evidence() for fact in facts))[:8]


def _details(facts: list[RasFact], limit: int) -> str:
    texts = list(dict.fromkeys(fact.detail.removeprefix(RAS_MARK + ": ") for fact in facts))
    more = f"; and {len(texts) - limit} more" if len(texts) > limit else ""
    return "; ".join(texts[:limit]) + more


def _blocked(ctx: Context) -> bool:
    """Something shows ranks blocked in communication: FR pending ops, or stacks in collectives."""
    return any(ctx.picture.pending_ops(rank) for rank in ctx.picture.dumps) or any(
        state.main is not None and state.main.kind in ("collective", "p2p")
        and state.progress != "moving" for state in ctx.stacks.values())


def _ras_few_ahead(ctx: Context) -> list[Finding]:
    """Rule ``ras-few-ahead``: a RAS MISMATCH entry whose named ranks all launched MORE operations
    than the count most ranks of the communicator reached (NCCL lists the small group: here the
    ones ahead). The named ranks wait in the next operation for the unnamed majority, which has
    not launched it: the rank or cause holding the majority back is not in the report. No culprit
    (0.4: one report cannot tell a lag from a hang)."""
    for event in [e for r in ctx.evidence.ranks.values() for e in r.logs] + \
            ctx.evidence.unattributed_logs:
        fields = event.fields
        majority = fields.get("majority_count")
        counts = [c.split(":") for c in str(fields.get("op_counts", "")).split(",") if ":" in c]
        if event.kind != "nccl_ras" or fields.get("state") != "MISMATCH" \
                or not isinstance(majority, int) or not counts \
                or not all(n.isdigit() and int(n) > majority for _, n in counts):
            continue
        ahead = sorted(int(r) for r, _ in counts if r.isdigit())
        size = fields.get("size")
        rest = f"the other {int(size) - len(ahead)} ranks" if isinstance(size, int) else \
            "the other ranks"
        summary = (f"rule ras-few-ahead: NCCL RAS lists {ranks_phrase(ahead)} as having launched "
                   f"{fields.get('ops') or 'a collective'} up to operation "
                   f"{counts[0][1]} while {rest} of communicator {fields.get('comm')} reached "
                   f"{majority}: {ranks_phrase(ahead)} wait in the next operation for them, and "
                   "the report does not name who holds the majority back (a rank missing from "
                   "that operation, or the whole group waiting on something else); a second "
                   "report tells a lag from a hang")
        return [Finding(kind=Kind.MISSING_RANK, culprit_ranks=[], waiting_ranks=ahead,
                        confidence=0.4, summary=summary,
                        evidence=[EvidenceItem("log", None, event.message[:300], event.where())],
                        measures={"rule": "ras-few-ahead"})]
    return []
