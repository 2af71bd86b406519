"""missing_rank, told apart in a symmetric hang: every rank sits in the same collective.

When every rank's flight recorder shows the same collective pending with matching arguments and
none completed it, the wait graph has no sink: each rank waits for all the others. What can still
differ:

* FR's own state of that entry (``scheduled`` -> ``started`` -> ``completed``): a rank whose entry
  is still ``scheduled`` while the others' ``started`` never got its NCCL kernel running -- its
  GPU stream is stuck behind earlier work, or the launch never happened -- and the others' kernels
  spin waiting for it (0.7);
* the GPUs (``nvidia-smi`` readings tied to ranks, ``analysis/gpu_ranks.py``): ranks whose GPU
  sits at 0% utilization in every reading while the others' run (NCCL kernels spin at 100% while
  they wait for a peer) never launched their part; flat power across readings agrees (0.6;
  0.55 when the GPU-to-rank tie is only assumed from the local rank).

NCCL RAS op counts (a rank behind in a communicator) are ``missing_rank``'s own evidence. Where
none of these tells the ranks apart, no finding: the engine's evidence gap says so and what to
collect next (``engine._waiting_gap``). False positives: a rank whose kernel already finished on
its GPU while FR's watchdog had not yet noticed (``scheduled``/``started`` are discovered lazily).
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.correlate import GroupView
from hangscope.analysis.gpu_ranks import RankGpu, rank_gpus
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.model import FrEntry
from hangscope.ranges import ranks_phrase

FLAT_W = 2.0  # power within this many watts over every reading: flat


def shared_spot(ctx: Context) -> tuple[GroupView, FrEntry, dict[int, FrEntry]] | None:
    """The one collective every dumped rank waits in, none completed, all members in it."""
    spots: dict[tuple[str, int], tuple[GroupView, FrEntry, dict[int, FrEntry]]] = {}
    dumped = sorted(ctx.picture.dumps)
    for rank in dumped:
        for group, entry in ctx.picture.pending_ops(rank):
            spots.setdefault((group.name, entry.seq), (group, entry, {}))[2][rank] = entry
    if len(spots) != 1 or len(dumped) < 2:
        return None
    group, entry, by_rank = next(iter(spots.values()))
    if entry.is_p2p or set(by_rank) != set(dumped) or set(group.members) - set(by_rank):
        return None
    if len({(e.op, tuple(e.input_sizes), tuple(e.input_dtypes)) for e in by_rank.values()}) > 1:
        return None  # a mismatch: collective_mismatch / size_mismatch
    return group, entry, by_rank


def detect(ctx: Context) -> list[Finding]:
    spot = shared_spot(ctx)
    if spot is None:
        return []
    group, entry, by_rank = spot
    ranks = sorted(by_rank)
    ref = CollectiveRef(pg=group.name, seq=entry.seq, op=entry.op, pg_desc=group.desc)
    where = f"{entry.op} seq {entry.seq} on pg {group.label}"
    found = []
    not_started = [r for r in ranks if by_rank[r].state == "scheduled"]
    started = [r for r in ranks if by_rank[r].state == "started"]
    if not_started and started and len(not_started) < len(started):
        summary = (f"every rank waits in {where}, but FR shows {ranks_phrase(not_started)} "
                   f"never started it (state 'scheduled') while {ranks_phrase(started)} did "
                   "('started'): the kernel of "
                   f"{'those ranks' if len(not_started) > 1 else 'that rank'} never ran on its GPU "
                   "(its stream is stuck behind earlier work, or the launch never happened), and "
                   "the others' kernels wait for it")
        evidence = [ctx.fr_evidence(r, by_rank[r], group, "not started:") for r in not_started[:4]]
        evidence.append(ctx.fr_evidence(started[0], by_rank[started[0]], group, "started:"))
        found.append(Finding(kind=Kind.MISSING_RANK, culprit_ranks=not_started,
                             waiting_ranks=started, confidence=0.7, summary=summary,
                             evidence=evidence, collective=ref))
    gpu = _idle_gpus(ranks, rank_gpus(ctx.evidence))
    if gpu is not None:
        idle, busy, gpus = gpu
        flat = [r for r in idle if _flat(gpus[r])]
        summary = (f"every rank waits in {where}, but the GPU of {ranks_phrase(idle)} sits at 0% "
                   f"utilization in every reading{' with flat power' if flat else ''} while the "
                   f"GPUs of {ranks_phrase(busy)} run (NCCL kernels spin while they wait for a "
                   f"peer): {'those ranks' if len(idle) > 1 else 'that rank'} never launched "
                   "its part of the collective")
        evidence = [EvidenceItem("gpu", r, gpus[r].describe() + f" over {len(gpus[r].readings)} "
                                 "reading(s)", gpus[r].readings[-1].where) for r in idle[:4]]
        evidence.append(EvidenceItem("gpu", busy[0], gpus[busy[0]].describe(),
                                     gpus[busy[0]].readings[-1].where))
        assumed = any(gpus[r].how == "local rank" for r in idle)
        found.append(Finding(kind=Kind.MISSING_RANK, culprit_ranks=idle, waiting_ranks=busy,
                             confidence=0.55 if assumed else 0.6, summary=summary,
                             evidence=evidence, collective=ref,
                             measures={"gpu_util_pct": 0.0}))
    return found


def _idle_gpus(ranks: list[int], gpus: dict[int, RankGpu]
               ) -> tuple[list[int], list[int], dict[int, RankGpu]] | None:
    seen = {r: [x.util_pct for x in gpus[r].readings if x.util_pct is not None]
            for r in ranks if r in gpus}
    seen = {r: u for r, u in seen.items() if u}
    idle = [r for r, u in seen.items() if max(u) == 0]
    busy = [r for r, u in seen.items() if max(u) > 0]
    if not idle or not busy or len(idle) >= len(busy):
        return None
    return idle, busy, gpus


def _flat(gpu: RankGpu) -> bool:
    power = [x.power_w for x in gpu.readings if x.power_w is not None]
    return len(power) >= 2 and max(power) - min(power) <= FLAT_W
