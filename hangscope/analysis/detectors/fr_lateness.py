"""straggler from the flight recorder: in a job that moves, one rank enters every collective last.

Reading: each rank's dump holds, per collective, the moment its CPU issued it
(``time_created_ns``). In a moving job (``dump_skew.all_moving``: every rank completing
collectives up to its dump), take each group's newest collectives that every dumped member holds
with a time (at most ``WINDOW``), and per collective each rank's lateness: its time minus the
median of the others'. A rank that is the last to issue at least ``LAST_SHARE`` of them, by a
median of at least ``MIN_LATE_MS``, and by ``SPREAD`` times more than any other rank's median is
off the others', is the one they wait for at every step.

Why this and not the CPU: on a GPU job the ranks that wait spin their CPU (the NCCL kernel's host
side, ``cudaStreamSynchronize``) as much as the slow one computes, so CPU shares tell nothing (seen
on an H200, torch 2.11: a rank sleeping 0.25 s a step, issuing each all_reduce 0.75-0.9 s after the
others, with CPU shares alike). Basis stated in the finding; confidence 0.5: the times are wall
clocks, and a rank on a host whose clock runs ahead by as much reads the same (compare with the
ranks' step times). False positives: a rank that does extra work by design at every step (rank 0
logging, a pipeline's last stage).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from hangscope.analysis import dump_skew
from hangscope.analysis.context import Context
from hangscope.analysis.correlate import GroupView
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.model import FrEntry

WINDOW = 20  # the newest collectives a digest keeps whole, with their times (fr_digest.TAIL)
MIN_COLLECTIVES = 8
LAST_SHARE = 0.8
MIN_LATE_MS = 100.0
SPREAD = 4.0
CONFIDENCE = 0.5


def detect(ctx: Context) -> list[Finding]:
    if "nccl" not in ctx.picture.backends or dump_skew.all_moving(ctx) is None:
        return []
    found = []
    for group in ctx.picture.groups.values():
        finding = _late_rank(ctx, group)
        if finding is not None:
            found.append(finding)
    return found[:1]  # one slow rank shows in every group it is in: its largest group says it


def _late_rank(ctx: Context, group: GroupView) -> Finding | None:
    if len(group.ranks) < 3:
        return None
    times = {rank: _created(view.seqs, view.entries) for rank, view in group.ranks.items()}
    common = set.intersection(*(set(t) for t in times.values()))
    seqs = sorted(common)[-WINDOW:]
    if len(seqs) < MIN_COLLECTIVES:
        return None
    lateness: dict[int, list[float]] = {rank: [] for rank in times}
    last: dict[int, int] = dict.fromkeys(times, 0)
    for seq in seqs:
        at = {rank: times[rank][seq] for rank in times}
        last[max(at, key=at.__getitem__)] += 1
        for rank, t in at.items():
            lateness[rank].append((t - median(v for r, v in at.items() if r != rank)) / 1e6)
    typical = {rank: median(v) for rank, v in lateness.items()}
    slow = max(last, key=last.__getitem__)
    others = max(abs(v) for r, v in typical.items() if r != slow)
    if last[slow] < LAST_SHARE * len(seqs) or typical[slow] < MIN_LATE_MS \
            or typical[slow] < SPREAD * others:
        return None
    newest = group.ranks[slow].entry_at(seqs[-1])
    peer = next(r for r in sorted(group.ranks) if r != slow)
    peer_entry = group.ranks[peer].entry_at(seqs[-1])
    evidence = []
    if newest is not None:
        evidence.append(ctx.fr_evidence(slow, newest, group, "issued last"))
    if peer_entry is not None:
        evidence.append(ctx.fr_evidence(peer, peer_entry, group, "issued"))
    summary = (f"rank {slow} issued {last[slow]} of the last {len(seqs)} collectives of pg "
               f"{group.label} after every other member, by a median of {typical[slow]:.0f} ms "
               f"(the others within {others:.0f} ms of each other), while every rank kept "
               f"completing collectives: the job moves at rank {slow}'s pace (or rank {slow}'s "
               f"host clock runs ahead by as much: compare the ranks' step times)")
    return Finding(kind=Kind.STRAGGLER, culprit_ranks=[slow],
                   waiting_ranks=sorted(r for r in group.ranks if r != slow),
                   confidence=CONFIDENCE, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=group.name, seq=seqs[-1],
                                            op=newest.op if newest else "", pg_desc=group.desc))


def _created(seqs: Sequence[int], entries: Sequence[FrEntry]) -> dict[int, int]:
    """seq -> creation time of the newest ``WINDOW`` collectives that carry one."""
    out: dict[int, int] = {}
    start = max(len(seqs) - WINDOW, 0)
    for index in range(start, len(seqs)):
        entry = entries[index]
        if type(entry.time_created_ns) is int and entry.time_created_ns > 0:
            out[seqs[index]] = entry.time_created_ns
    return out
