"""network_fault: transport errors in NCCL logs point at a host, peer or link.

Signal: ``nccl_transport_error`` events (``NET/IB : Got completion ... with error``,
``NET/Socket : Connection closed by remote peer`` in NCCL WARN lines) with no rank-local cause
(OOM, signal, own exception, a process NCCL RAS considers dead) that would explain them. Cites:
each WARN line. The culprit is the rank(s) reporting the errors, and the summary names the peer(s)
they blame. False positives: transport errors logged as a *consequence* of a peer process dying
(which rank_died / rank_oom then explain, ranked above this).

Rule ``mismatch-on-many-ranks``: NCCL's device-side check ``Mismatched collective detected,
please check your collective calls at and around rank N`` (NCCL 2.4-2.6 ``init.cu``, N is the
reporting rank's own ``comm->rank``) fires on at least three ranks. Basis: the check fires in a
rank whose kernel received a peer's data tagged with another operation; a program that calls
another collective on one rank is seen by that rank's neighbours, one or two reports around it;
three or more ranks failing the check at once, spread over the job, is what data corrupted in
transit does (GPUDirect RDMA, PCIe ACS or relaxed ordering, a bad NIC). 0.55; the other reading
(a real mismatch) is named in the finding.

Rule ``all-joined-none-finished``: torch's desync report (``TORCH_NCCL_DESYNC_DEBUG``) says
every rank it lists joined the collective and none finished it, naming no rank that lagged,
never joined or moved on (the list runs 0..N-1). Basis: no rank is missing from the collective,
so what did not complete is the collective itself: the transport between the ranks (or a GPU
that hangs inside the kernel) stalled. 0.55; py-spy and nvidia-smi of the ranks tell the two
apart (a GPU at 0% with flat power while the others spin is the odd one).
"""

from __future__ import annotations

import re
from collections import Counter

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import describe, failures, unranked
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase

_AROUND = re.compile(r"Mismatched collective detected.*?around rank (?P<rank>\d+)")


def detect(ctx: Context) -> list[Finding]:
    return _transport(ctx) or _mismatch_on_many_ranks(ctx) or _all_joined(ctx)


def _all_joined(ctx: Context) -> list[Finding]:
    """Rule ``all-joined-none-finished`` (module docstring)."""
    every = [e for r in ctx.evidence.ranks.values() for e in r.logs] + \
        ctx.evidence.unattributed_logs
    for event in every:
        fields = event.fields
        if event.kind != "nccl_desync" or fields.get("never_joined") \
                or fields.get("finished_not_joined_next"):
            continue
        joined = [int(r) for r in str(fields.get("joined_not_finished", "")).split(",") if r]
        lagging = [int(r) for r in str(fields.get("lagging_ranks", "")).split(",") if r]
        if len(joined) < 2 or sorted(joined) != list(range(len(joined))) \
                or set(lagging) - set(joined):
            continue
        where = f"{fields.get('op', 'the collective')} #{fields.get('seq', '?')}"
        summary = (f"rule all-joined-none-finished: torch's desync report says all "
                   f"{len(joined)} ranks joined {where} and none finished it, and names no rank "
                   "that lagged or never joined: no rank is missing, the collective itself did not "
                   "complete, so the transport between the ranks (or a GPU hung inside the kernel) "
                   "stalled. Check the NCCL WARN lines and the links; py-spy and nvidia-smi of "
                   "every rank tell a stuck GPU (0% with flat power) from a stuck network")
        return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=sorted(joined),
                        confidence=0.55, summary=summary,
                        evidence=[EvidenceItem("log", event.rank, " ".join(
                            event.message.split())[:300], event.where())],
                        measures={"rule": "all-joined-none-finished"})]
    return []


def _mismatch_on_many_ranks(ctx: Context) -> list[Finding]:
    """Rule ``mismatch-on-many-ranks`` (module docstring)."""
    every = [e for r in ctx.evidence.ranks.values() for e in r.logs] + \
        ctx.evidence.unattributed_logs
    reports: dict[int, LogEvent] = {}
    for event in every:
        if event.kind in ("nccl_warn", "nccl_device_mismatch") \
                and (m := _AROUND.search(event.message)):
            reports.setdefault(int(m.group("rank")), event)
    if len(reports) < 3:
        return []
    ranks = sorted(reports)
    summary = (f"rule mismatch-on-many-ranks: NCCL's device-side mismatch check fired on "
               f"{len(ranks)} ranks ({', '.join(map(str, ranks[:8]))}"
               f"{', ...' if len(ranks) > 8 else ''}): a program that calls another collective "
               "on one rank is seen by that rank's neighbours, one or two reports; many ranks "
               "failing the check at once is what data corrupted in transit does (GPUDirect RDMA, "
               "PCIe ACS / relaxed ordering, a NIC). Likelier a transport fault than a real "
               "mismatch; to tell, rerun with NCCL_NET_GDR_LEVEL=0 (or nccl-tests) and "
               "NCCL_DEBUG_SUBSYS=COLL")
    evidence = [EvidenceItem("log", rank, " ".join(reports[rank].message.split())[:300],
                             reports[rank].where()) for rank in ranks[:4]]
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=[],
                    confidence=0.55, summary=summary, evidence=evidence,
                    measures={"rule": "mismatch-on-many-ranks"})]


def _transport(ctx: Context) -> list[Finding]:
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
