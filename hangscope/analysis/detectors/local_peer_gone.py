"""rank_died from NCCL's proxy threads: the other processes of a node all lost one local rank.

Rule ``closed-by-local-rank`` (0.5): at least two processes of one host log ``[Service thread]
Connection closed by localRank N`` (NCCL's proxy service, at INFO) for the same N, and no other
local rank of that host is named so. Basis: a proxy prints it when the process it served closed
its connection; one local rank named by all its neighbours is the one process that went away
first (a segfault, a kill), the others report it. At a normal teardown every process closes and
many local ranks are named, which this does not read; nor does it read closures logged after a
watchdog timeout in the same file: a process its own watchdog took down after a collective
timed out closed its connections as a consequence of waiting, not first. The culprit is the
global rank of that process where a log maps it (its ``Init COMPLETE`` line, or a process on GPU N
of the same host); otherwise the finding names the host and local rank only.
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent

MIN_REPORTERS = 2


def detect(ctx: Context) -> list[Finding]:
    every = list(ctx.evidence.all_logs())
    closed: dict[str, dict[int, list[LogEvent]]] = defaultdict(lambda: defaultdict(list))
    for event in every:
        if event.kind == "nccl_local_peer_closed":
            closed[str(event.fields.get("host"))][int(event.fields.get("peer_local", -1))].append(
                event)
    for host, by_peer in closed.items():
        if len(by_peer) != 1:
            continue  # several local ranks named: a teardown, or more than one death
        (local, events), = by_peer.items()
        reporters = {e.fields.get("pid") for e in events}
        if len(reporters) < MIN_REPORTERS or _after_timeout(every, events):
            continue
        culprit = _global_rank(every, host, local)
        who = f"rank {culprit}" if culprit is not None else f"the process of local rank {local}"
        summary = (f"rule closed-by-local-rank: {len(reporters)} processes on {host} logged "
                   f"'Connection closed by localRank {local}' (NCCL's proxy service) and named no "
                   f"other local rank: {who} went away first (a crash, a segfault or a kill; its "
                   "own stderr says which), the others' errors are echoes")
        waiting = sorted({e.rank for e in events if e.rank is not None})
        return [Finding(kind=Kind.RANK_DIED,
                        culprit_ranks=[culprit] if culprit is not None else [],
                        waiting_ranks=waiting, confidence=0.5, summary=summary,
                        evidence=[EvidenceItem("log", e.rank, " ".join(e.message.split())[:300],
                                               e.where()) for e in events[:3]],
                        measures={"rule": "closed-by-local-rank"})]
    return []


def _global_rank(every: list[LogEvent], host: str, local: int) -> int | None:
    """The global rank of the process on ``host``'s GPU ``local``, where a log says it."""
    ranks = {e.rank for e in every if e.rank is not None and e.fields.get("host") == host
             and e.fields.get("cuda_dev") == local
             and e.kind not in ("nccl_local_peer_closed",)}
    return ranks.pop() if len(ranks) == 1 else None


_TIMEOUTS = frozenset({"nccl_watchdog_timeout", "nccl_work_status"})


def _after_timeout(every: list[LogEvent], closed: list[LogEvent]) -> bool:
    """A watchdog timeout earlier in the file of the first closure: the teardown it started."""
    first = min(closed, key=lambda e: (e.path, e.line_no))
    return any(e.kind in _TIMEOUTS and e.path == first.path and e.line_no < first.line_no
               for e in every)
