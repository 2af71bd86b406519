"""missing_rank / collective_mismatch from other tools' reports of who joined a stalled collective.

Horovod's stall inspector and torch's flight-recorder analyzer (and NVRx's and torch_npu's, in
``sources/logs/stall_reports.py``) each say, per stalled collective, which ranks submitted it
(``ready ranks``) or which did not (``missing ranks``). Rules, each named in the finding's
``measures["rule"]`` with its basis in the summary:

* ``absent-from-stalled-ops`` (missing_rank, 0.8; 0.6 when the absent ranks were inferred from a
  ready list and a world size read as the highest rank named + 1): the same ranks are missing
  from every stalled op: the others submitted it and wait for them. Where the tool reprints its
  report on one op, the newest report counts (ranks that arrived in between were only late).
* ``split-submissions`` (collective_mismatch, 0.7): two stalled ops whose ready lists are disjoint:
  one set of ranks submitted one collective and another set a different one, so each waits for
  the other forever. The culprit is the smaller set (the odd ones out); none when the sets are
  of equal size.
* ``fr-analyzer-culprit`` (size or collective mismatch, 0.85): the FR analyzer's own "Culprit rank
  R; Error type: ..." verdict.
* ``nccl-device-mismatch`` (collective_mismatch, 0.75, no culprit): NCCL's kernel on rank R found a
  peer's collective arguments (op, count, type, root) differing from R's own and said "Mismatched
  collective detected ... at and around rank R"; R or a neighbour in its ring/tree called another
  collective, and the line does not say which.
* ``stated-wait-cycle`` (0.6; culprits every rank of the cycle): wait-for edges written out in one
  block of lines ("rank 4 → waiting on rank 5 (ncclCommFinalize for C_c_4567)") close a cycle, so
  no rank of it can move. Its kind from what the edges wait in: all send/recv, ``p2p_deadlock``;
  one operation on different groups or communicators, ``pg_order_deadlock``; different operations,
  ``collective_mismatch``; nothing named, no finding. Single edges ("rank 1 is waiting for rank 0
  to finish preprocessing") are what healthy apps print: they are not read alone.

False positives: a stall report printed once while a slow rank catches up (Horovod prints after
60 s; the job may resume): the finding says missing, the rank may be a straggler.
"""

from __future__ import annotations

import re
from collections import defaultdict

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import format_ranks, ranks_phrase

_TOOL = {"horovod": "Horovod's stall inspector", "fr_analyzer": "torch's flight-recorder analyzer",
         "nvrx_fr": "NVRx's flight-recorder attribution",
         "npu_fr": "torch_npu's flight-recorder analyser"}


def _ranks(text: object) -> set[int]:
    return {int(p) for p in str(text or "").split(",") if p.strip().isdigit()}


def detect(ctx: Context) -> list[Finding]:
    return _reports(ctx) + _fr_culprits(ctx) + _nccl_device_mismatch(ctx) + _stated_cycle(ctx)


def _reports(ctx: Context) -> list[Finding]:
    events = ctx.log_events("stall_report")
    if not events:
        return []
    named = set().union(*(_ranks(e.fields.get("missing")) | _ranks(e.fields.get("ready"))
                          for e in events))
    stated = [int(w) for e in events if isinstance(w := e.fields.get("world_size"), int)]
    world = max(stated or [ctx.picture.world_size or 0])
    guessed = not world
    if guessed:
        world = max(named) + 1 if named else 0
    missing: dict[str, set[int]] = defaultdict(set)  # op -> ranks that did not submit it
    ready: dict[str, set[int]] = {}
    first: dict[str, LogEvent] = {}
    for event in events:
        op = str(event.fields.get("op", ""))
        first.setdefault(op, event)
        if "op_names" in event.fields:
            missing[op] |= _ranks(event.fields.get("missing"))
        elif "missing" in event.fields:
            # a report the tool reprints (Horovod every 60 s): the newest says who is still
            # missing; a rank that arrived since (0,1,3,4 -> 0,1,4) was only late
            missing[op] = _ranks(event.fields.get("missing"))
        # a per-rank list ("R: [op, op, ...]") names every op the rank has not submitted
        for name in filter(None, str(event.fields.get("op_names", "")).split(",")):
            first.setdefault(name, event)
            missing[name] |= _ranks(event.fields.get("missing"))
        if "ready" in event.fields:
            ready[op] = _ranks(event.fields.get("ready"))
            missing[op] |= set(range(world)) - ready[op]
    tool = _TOOL.get(str(events[0].fields.get("tool")), "a stall report")
    split = _split(ctx, ready, first, tool)
    if split is not None:
        return [split]
    absent = set.intersection(*missing.values()) if missing else set()
    if not absent:
        crossed = _crossed(missing, first, tool, world)
        return [crossed] if crossed is not None else []
    only_ready = all("missing" not in first[op].fields for op in missing)
    ops = sorted(missing, key=lambda op: first[op].line_no)
    waiting = sorted(set(range(world)) - absent) if world else []
    basis = (f"{tool} lists {ranks_phrase(sorted(absent))} as not having submitted "
             f"{f'any of the {len(ops)} stalled ops' if len(ops) > 1 else 'the stalled op'}"
             f" ({ops[0] or 'unnamed'}{', ...' if len(ops) > 1 else ''}) that the other ranks "
             "submitted and wait in")
    if only_ready and guessed:
        basis += (f" (read from the ready ranks, taking the world as ranks 0-{world - 1}: the "
                  "highest rank named)")
    evidence = [log_evidence(first[op]) for op in ops[:4]]
    return [Finding(kind=Kind.MISSING_RANK, culprit_ranks=sorted(absent), waiting_ranks=waiting,
                    confidence=0.6 if only_ready and guessed else 0.8, summary=basis,
                    evidence=evidence, collective=_ref(first[ops[0]]),
                    measures={"rule": "absent-from-stalled-ops"})]


def _split(ctx: Context, ready: dict[str, set[int]], first: dict[str, LogEvent],
           tool: str) -> Finding | None:
    """Two stalled ops with disjoint, non-empty ready lists: different collectives per rank set."""
    sets = {frozenset(s) for s in ready.values() if s}
    if len(sets) < 2:
        return None
    ordered = sorted(sets, key=len)
    small, large = ordered[0], ordered[-1]
    if small & large:
        return None
    op_small = next(op for op, s in ready.items() if s == small)
    op_large = next(op for op, s in ready.items() if s == large)
    culprits = sorted(small) if len(small) < len(large) else []
    summary = (f"{tool}: {ranks_phrase(sorted(small))} submitted {op_small or 'one op'} while "
               f"{ranks_phrase(sorted(large))} submitted {op_large or 'another'}; neither set "
               "joined the other's op, so the ranks are in different collectives")
    if culprits:
        summary += f" (rank{'s' if len(culprits) > 1 else ''} {format_ranks(culprits)}: the " \
                   "odd one out)"
    return Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=culprits,
                   waiting_ranks=sorted(large if culprits else small | large),
                   confidence=0.7, summary=summary,
                   evidence=[log_evidence(first[op_small]), log_evidence(first[op_large])],
                   collective=_ref(first[op_large]), measures={"rule": "split-submissions"})


def _crossed(missing: dict[str, set[int]], first: dict[str, LogEvent], tool: str,
             world: int) -> Finding | None:
    """Rule ``crossed-submissions``: each listed rank lacks ops the others submitted, and no rank
    lacks them all (the missing sets are disjoint): every rank waits in an op another has not
    reached, so they are in different collectives. The smaller side is the odd one out where the
    sides differ in size."""
    # ranks that lack overlapping sets of ops are on one side (a per-rank list names each op)
    sides: list[tuple[str, set[int]]] = []
    for op, ranks in sorted(missing.items(), key=lambda item: first[item[0]].line_no):
        if not ranks:
            continue
        joined = [side for side in sides if side[1] & ranks]
        merged = set(ranks).union(*(side[1] for side in joined))
        sides = [side for side in sides if side not in joined]
        sides.append((joined[0][0] if joined else op, merged))
    if len(sides) < 2 or any(a & b for i, (_, a) in enumerate(sides) for _, b in sides[i + 1:]):
        return None
    covered = set().union(*(ranks for _, ranks in sides))
    if world and len(covered) < world:
        return None  # some ranks lack nothing: they are the ones the others wait for elsewhere
    sizes = sorted({len(ranks) for _, ranks in sides})
    small = [ranks for _, ranks in sides if len(ranks) == sizes[0]]
    culprits = sorted(small[0]) if len(small) == 1 and len(sides) == 2 and sizes[0] < sizes[-1] \
        else []
    parts = "; ".join(f"{ranks_phrase(sorted(ranks))} lack{'s' if len(ranks) == 1 else ''} "
                      f"{op or 'an op'}" for op, ranks in sides[:4])
    summary = (f"{tool}: {parts}, each submitted by the others: no rank lacks them all, so the "
               "ranks wait in different collectives (rule `crossed-submissions`)")
    ops = sorted((op for op, _ in sides), key=lambda op: first[op].line_no)
    return Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=culprits,
                   waiting_ranks=sorted(covered - set(culprits)), confidence=0.65,
                   summary=summary, evidence=[log_evidence(first[op]) for op in ops[:4]],
                   collective=_ref(first[ops[0]]), measures={"rule": "crossed-submissions"})


def _fr_culprits(ctx: Context) -> list[Finding]:
    out = []
    for event in ctx.log_events("fr_analyzer_error"):
        culprits = sorted(_ranks(event.fields.get("culprits")))
        kind_name = str(event.fields.get("error_type", ""))
        if not culprits or "MISMATCH" not in kind_name:
            continue
        kind = Kind.SIZE_MISMATCH if "SIZE" in kind_name else Kind.COLLECTIVE_MISMATCH
        detail = ""
        if event.fields.get("expected"):
            detail = (f": expected input sizes {event.fields['expected']}, found "
                      f"{event.fields.get('found', '?')}")
        out.append(Finding(kind=kind, culprit_ranks=culprits, waiting_ranks=[], confidence=0.85,
                           summary=(f"torch's flight-recorder analyzer names "
                                    f"{ranks_phrase(culprits)} as culprit ({kind_name}){detail}"),
                           evidence=[log_evidence(event)],
                           measures={"rule": "fr-analyzer-culprit"}))
    return out[:1]


def _nccl_device_mismatch(ctx: Context) -> list[Finding]:
    events = ctx.log_events("nccl_device_mismatch")
    if not events:
        return []
    around = sorted({int(r) for e in events if isinstance(r := e.fields.get("around_rank"), int)})
    if len(around) >= 3:
        return []  # on three or more ranks at once: network_fault's mismatch-on-many-ranks
    summary = (f"NCCL detected mismatched collectives at and around {ranks_phrase(around)}: "
               f"the collective arguments (op, count, datatype or root) that "
               f"{'these ranks' if len(around) > 1 else 'this rank'} received from a neighbour "
               "differ from its own, so the ranks are in different collectives; NCCL does not "
               "say which side called the wrong one (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL, a "
               "flight-recorder dump or TORCH_DISTRIBUTED_DEBUG=DETAIL shows each rank's call)")
    return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=[], waiting_ranks=[],
                    confidence=0.75, summary=summary,
                    evidence=[log_evidence(e) for e in events[:4]],
                    measures={"rule": "nccl-device-mismatch"})]


_P2P = re.compile(r"(?i)\b(?:i?send|i?recv|p2p|send/recv|sendrecv)\b")
_BLOCK_GAP = 3  # lines between two edges of one written-out chain


def _stated_cycle(ctx: Context) -> list[Finding]:
    edges = ctx.log_events("stated_wait")
    blocks: list[list[LogEvent]] = []
    for event in edges:
        if blocks and blocks[-1][-1].path == event.path \
                and event.line_no - blocks[-1][-1].line_no <= _BLOCK_GAP:
            blocks[-1].append(event)
        else:
            blocks.append([event])
    for block in blocks:
        cycle = _cycle_edges(block)
        if cycle:
            finding = _cycle_finding(cycle)
            if finding is not None:
                return [finding]
    return []


def _cycle_edges(block: list[LogEvent]) -> list[LogEvent]:
    """The edges among the ranks that reach themselves (a cycle), in the block's order."""
    nxt: dict[int, set[int]] = defaultdict(set)
    for event in block:
        nxt[int(event.fields["waiter"])].add(int(event.fields["waited"]))

    def reach(start: int) -> set[int]:
        seen, todo = set(), [start]
        while todo:
            for peer in nxt.get(todo.pop(), ()):
                if peer not in seen:
                    seen.add(peer)
                    todo.append(peer)
        return seen

    looped = {rank for rank in list(nxt) if rank in reach(rank)}
    return [e for e in block if e.fields["waiter"] in looped and e.fields["waited"] in looped]


def _cycle_finding(cycle: list[LogEvent]) -> Finding | None:
    whats = [str(e.fields.get("what", "")).strip() for e in cycle]
    if not all(whats):
        return None
    ops = {w.split()[0].lower() for w in whats}
    if all(_P2P.search(w) for w in whats):
        kind, how = Kind.P2P_DEADLOCK, "each blocked in a send or receive to the next"
    elif len(ops) == 1 and len(set(whats)) > 1:
        kind, how = Kind.PG_ORDER_DEADLOCK, (
            f"each in {whats[0].split()[0]} on a different group or communicator, so the ranks "
            "reached those groups in different orders")
    elif len(ops) > 1:
        kind, how = Kind.COLLECTIVE_MISMATCH, "each in a different operation"
    else:
        return None
    ranks = sorted({int(e.fields["waiter"]) for e in cycle})
    chain = "; ".join(f"rank {e.fields['waiter']} waits on rank {e.fields['waited']} ({w})"
                      for e, w in zip(cycle, whats))
    summary = (f"the log writes out a wait cycle: {chain}; {ranks_phrase(ranks)} wait on each "
               f"other, {how}, so none can move (no single rank is shown at fault: all are named)")
    return Finding(kind=kind, culprit_ranks=ranks, waiting_ranks=[], confidence=0.6,
                   summary=summary, evidence=[log_evidence(e) for e in cycle[:6]],
                   measures={"rule": "stated-wait-cycle"})


def _ref(event: LogEvent) -> CollectiveRef:
    seq = event.fields.get("seq")
    return CollectiveRef(pg=str(event.fields.get("pg") or "") or None,
                         seq=seq if isinstance(seq, int) else None,
                         op=str(event.fields.get("op", "")),
                         numbering=str(event.fields.get("tool", "")))
