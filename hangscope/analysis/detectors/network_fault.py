"""network_fault: transport errors in NCCL logs point at a host, peer or link.

Signal: ``nccl_transport_error`` events (``NET/IB : Got completion ... with error``,
``NET/Socket : Connection closed by remote peer`` in NCCL WARN lines) with no rank-local cause
(OOM, signal, own exception, a process NCCL RAS considers dead) that would explain them. Cites:
each WARN line. The culprit is the rank(s) reporting the errors, and the summary names the peer(s)
they blame. False positives: transport errors logged as a *consequence* of a peer process dying
(which rank_died / rank_oom then explain, ranked above this).

A rank whose NCCL call raised a system or remote error (``NCCL error in: ..., unhandled system
error``) raised because of what NCCL's WARN lines report: not a cause of its own
(``nccl-error-echo``); ranks that only saw a peer close its end are that peer's victims where
others logged a failure of their own transport (``closed-by-peer``: ``Call to ibv_create_cq
failed`` on two ranks, ``Connection closed by remote peer`` on their peers).

Rule ``transport-after-timeout``: transport errors all logged more than a few seconds after the
job's first watchdog timeout or failed collective are the abort's echo (the watchdog closes the
rank's communicators, its peers' sockets see the connection closed): no finding from them.

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
from hangscope.analysis.log_causes import (
    WATCHDOG_WAITS,
    Failure,
    describe,
    failures,
    nccl_raised,
    peer_closed,
    rank_events,
    unranked,
)
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase

_AROUND = re.compile(r"Mismatched collective detected.*?around rank (?P<rank>\d+)")


def detect(ctx: Context) -> list[Finding]:
    return _transport(ctx) or _mismatch_on_many_ranks(ctx) or _all_joined(ctx) \
        or _p2p_latency(ctx)


P2P_SLOW = 50.0  # off-diagonal latency this many times the diagonal's: the path is broken
P2P_SLOW_US = 1000.0


def _p2p_latency(ctx: Context) -> list[Finding]:
    """Rule ``p2p-latency-matrix``: CUDA's p2pBandwidthLatencyTest shows GPU-to-GPU writes at
    least 50 times slower than a GPU's own and over a millisecond. Basis: peer writes on one host
    take microseconds over NVLink or PCIe; tens of milliseconds is a path that does not work
    (IOMMU or PCIe ACS redirecting peer traffic, a broken P2P setting): NCCL's P2P transport over
    it stalls. 0.55."""
    every = [e for e in ctx.evidence.all_logs() if e.kind == "p2p_matrix"]
    slow = [e for e in every if float(e.fields.get("off_us", 0)) >= P2P_SLOW_US
            and float(e.fields.get("off_us", 0)) >= P2P_SLOW * float(e.fields.get("diag_us", 1))]
    if not slow:
        return []
    m = slow[0]
    summary = (f"rule p2p-latency-matrix: CUDA's P2P test measured GPU-to-GPU latency of "
               f"{float(m.fields['off_us']):g} us against {float(m.fields['diag_us']):g} us within "
               f"a GPU ({m.fields.get('title')}, {m.fields.get('gpus')} GPUs): peer writes that "
               "slow mean the P2P path between the GPUs does not work (IOMMU or PCIe ACS "
               "redirecting peer traffic, a broken P2P setting), and NCCL's P2P transport over it "
               "stalls. Check ACS and the IOMMU; NCCL_P2P_DISABLE=1 confirms it")
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=[],
                    confidence=0.55, summary=summary,
                    evidence=[EvidenceItem("log", None, " ".join(m.message.split())[:300],
                                           m.where())],
                    measures={"rule": "p2p-latency-matrix"})]


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
    if _after_the_waits(ctx, [f for r in reporters for f in transport[r]]):
        return []
    # rule nccl-error-echo: a rank whose NCCL call raised ("NCCL error in: ..., unhandled system
    # error") after NCCL logged its transport WARNs raised because of them: no cause of its own.
    # failures() already drops such exceptions where a rank's own transport failed; where every
    # transport line is a peer closing, it keeps them (the peer's death may be what they echo),
    # and here they still do not lower the transport finding's confidence
    other_causes = any(f.what in ("oom", "signal", "exception", "dead", "gpu")
                       and not nccl_raised(f) for items in per_rank.values() for f in items)
    # rule closed-by-peer: ranks that only saw a peer close its end are that peer's victims
    # where other ranks logged a failure of their own transport (ibv_create_cq failing)
    own = [r for r in reporters if any(not peer_closed(f) for f in transport[r])]
    if own and len(own) < len(reporters):
        reporters = own
    peers = Counter(str(f.event.fields.get("peer", "?")) for r in reporters for f in transport[r])
    evidence = [EvidenceItem("log", rank, " ".join(f.event.message.split())[:300],
                             f.event.where())
                for rank in reporters[:8] for f in transport[rank][:1]]
    named = [(peer, count) for peer, count in peers.most_common(4) if peer != "?"]
    blamed = (" name peer(s) " + ", ".join(f"{peer} ({count}x)" for peer, count in named)) \
        if named else " (NCCL's network transport failed; no peer named)"
    summary = (f"NCCL transport errors on {ranks_phrase(reporters)}{blamed}: "
               f"{_suspect([f.event for r in reporters for f in transport[r]])}")
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=reporters, waiting_ranks=[],
                    confidence=0.5 if other_causes else 0.75, summary=summary,
                    evidence=evidence)]


def _suspect(events: list[LogEvent]) -> str:
    """Where to look first: NVLS failures are the NVSwitches' (NCCL's WARN says so), the others
    a link's, a NIC's or a host's."""
    if any(e.fields.get("transport") == "NVLS" for e in events):
        return ("the NVSwitches' NVLink SHARP (NVLS) multicast resources are the first suspect "
                "(Fabric Manager's log says which; NCCL_NVLS_ENABLE=0 avoids them)")
    return "a link, NIC or host on that path is the first suspect"


_ECHO_MARGIN_S = 5.0  # clocks of two hosts may differ by a few seconds


def _after_the_waits(ctx: Context, errors: list[Failure]) -> bool:
    """Rule ``transport-after-timeout``: every transport error was logged (by its own time) more
    than a few seconds after the job's first watchdog timeout or failed collective. Basis: when
    the watchdog gives up it aborts the rank's communicators, and its peers' sockets then see the
    connection closed: errors that come after the waits cannot have caused them."""
    waits = [event.time for _, event in rank_events(ctx.evidence)
             if event.time is not None and (event.kind in WATCHDOG_WAITS
                                            or event.kind == "nccl_error"
                                            and event.fields.get("async"))]
    times = [f.event.time for f in errors]
    if not waits or any(t is None for t in times):
        return False
    first = min(waits)
    return all(t is not None and t > first + _ECHO_MARGIN_S for t in times)


def _unranked(ctx: Context) -> list[Finding]:
    """Transport errors in lines that name no rank (a bare NCCL_DEBUG excerpt, one process's
    stderr): the fault is known, the rank is not."""
    events = unranked(ctx.evidence, frozenset({"transport"}))
    if not events:
        return []
    peers = Counter(str(e.fields["peer"]) for e in events if e.fields.get("peer"))
    blamed = (" naming peer(s) " + ", ".join(f"{peer} ({count}x)" for peer, count
                                            in peers.most_common(4))) if peers else ""
    summary = (f"NCCL reports a transport failure{blamed}: {describe(events[0], 200)}; "
               f"{_suspect(events)} (the lines name no rank: map the host:pid or peer address to "
               "ranks with NCCL_DEBUG=INFO's 'Init COMPLETE' lines)")
    evidence = [EvidenceItem("log", None, describe(e), e.where()) for e in events[:4]]
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=[],
                    confidence=0.6, summary=summary, evidence=evidence)]
