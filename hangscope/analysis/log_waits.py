"""Waits that log lines show, added to the wait graph beside the FR and stack waits.

Within one numbering and one group (never across: see ``analysis.observations``), a rank inside
collective S (timed out in it, or a report says it joined and did not finish) waits on the ranks
that are behind S: those that never joined it, those a report says finished an earlier (or the
same) collective and joined nothing after, and those stuck in an earlier one. A monitored
barrier's caller waits on the ranks that failed to pass it. The reason carries the numbering, so a
finding can say which counter its seq is in and cite the lines.

Ranks no line mentions get no edge: a log of one rank says nothing about the membership of its
group, and absent evidence is not a culprit (the finding says which logs to fetch instead).
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.correlate import Picture
from hangscope.analysis.observations import WAITING_STATES, Observation
from hangscope.analysis.waitgraph import WaitGraph, WaitReason

# Numberings whose seqs order the ranks of a group (DETAIL fingerprints are compared, not ordered;
# a store barrier names no peer).
_ORDERED = ("watchdog", "work_status", "desync")


def add_log_waits(graph: WaitGraph, picture: Picture) -> None:
    groups: dict[tuple[str, str, str], list[Observation]] = defaultdict(list)
    for obs in picture.observations:
        if obs.rank in graph.class_of:
            groups[obs.group_key].append(obs)
    for (numbering, pg, scope), seen in groups.items():
        if numbering in _ORDERED:
            _ordered_waits(graph, numbering, pg, scope, seen)
        elif numbering == "barrier":
            _barrier_waits(graph, pg, scope, seen)


def _ordered_waits(graph: WaitGraph, numbering: str, pg: str, scope: str,
                   seen: list[Observation]) -> None:
    inside: dict[int, Observation] = {}  # rank -> the lowest collective it is stuck in
    out_after: dict[int, int] = {}  # rank -> highest seq it finished, not inside anything
    never: dict[int, int] = {}  # rank -> a seq it never joined
    for obs in seen:
        if obs.seq is None:
            continue
        if obs.state in WAITING_STATES:
            if obs.rank not in inside or obs.seq < (inside[obs.rank].seq or 0):
                inside[obs.rank] = obs
        elif obs.state == "completed":
            out_after[obs.rank] = max(out_after.get(obs.rank, obs.seq), obs.seq)
        elif obs.state == "never_joined":
            never[obs.rank] = min(never.get(obs.rank, obs.seq), obs.seq)
    for rank in inside:
        out_after.pop(rank, None)  # a rank inside a collective is not outside: last word wins
    by_seq: dict[int, list[int]] = defaultdict(list)
    for rank, obs in inside.items():
        by_seq[obs.seq or 0].append(rank)
    for seq, waiting in sorted(by_seq.items()):
        behind = {r for r, s in never.items() if s <= seq}
        behind |= {r for r, s in out_after.items() if s <= seq}
        behind |= {r for r, obs in inside.items() if (obs.seq or 0) < seq}
        behind -= set(waiting)
        op = next((inside[r].op for r in waiting if inside[r].op), "")
        reason = WaitReason(f"log-{numbering}", pg, "", seq, op, numbering=numbering,
                            scope=scope)
        graph.add_wait(reason, waiting, behind)


def _barrier_waits(graph: WaitGraph, pg: str, scope: str, seen: list[Observation]) -> None:
    failed = {o.rank for o in seen if o.state == "never_joined"}
    callers = {o.rank for o in seen if o.state in WAITING_STATES} - failed
    graph.add_wait(WaitReason("log-barrier", pg, "", -1, "monitored_barrier",
                              numbering="barrier", scope=scope), callers, failed)
