"""python_deadlock through the operating system: a rank (or its helper process) blocked on a file
lock another process holds, or reading a pipe whose writer does not write.

Signal: the wait edges of ``analysis/os_waits.py`` (/proc/locks ``->`` requests and their holders;
a reader blocked in ``read`` on ``pipe:[N]`` and the processes holding its write end), followed from
holder to holder while the holder itself waits on such an edge. Culprit: the rank that holds the
resource, or where the end of the chain is a helper process (a child of a rank: a tokenizer
server, a subprocess), the rank it belongs to, with the helper named. The summary names the
resource, the holder and what the holder is doing (its stack). Cites: the lock line or the
syscall/wchan and the fd target. Confidence 0.95: the kernel's own tables. False positives: a
lock held briefly and sampled at the wrong moment (a single snapshot; a slow but moving holder
is seen moving in its stacks and CPU).
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.os_waits import OsEdge, os_edges, rank_of
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import OsProcess
from hangscope.ranges import ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    edges = os_edges(ctx.evidence)
    by_holder: dict[tuple[int, str], list[OsEdge]] = {}
    for edge in edges:
        by_holder.setdefault((edge.holder, edge.resource), []).append(edge)
    waits_of = {edge.waiter: edge for edge in edges}
    findings = []
    for (holder, resource), group in by_holder.items():
        snap = group[0].snapshot
        # a rank's own wait; a helper that waits (for its next request) is only a link
        waiters = sorted({proc.rank for e in group
                          if (proc := snap.processes.get(e.waiter)) is not None
                          and proc.rank is not None})
        if not waiters:
            continue
        chain = [group[0]]
        end = holder
        while end in waits_of and len(chain) < 8 and waits_of[end] not in chain:
            chain.append(waits_of[end])
            end = chain[-1].holder
        holder_rank = rank_of(snap.processes.get(holder))
        culprit = [holder_rank] if holder_rank is not None and holder_rank not in waiters \
            else waiters[:1]
        waiting = sorted((set(waiters) | {r for _, (sources, targets) in ctx.graph.waits.items()
                                          if targets & set(waiters) for r in sources})
                         - set(culprit))
        summary = (f"{ranks_phrase(waiters)} {'is' if len(waiters) == 1 else 'are'} blocked on "
                   f"the {resource}, which {group[0].who(holder)} holds"
                   + _doing(ctx, holder_rank, snap.processes.get(holder)))
        for link in chain[1:]:
            summary += (f"; it is itself blocked on the {link.resource}, held by "
                        f"{link.who(link.holder)}")
        if chain[-1].holder in {e.waiter for e in group}:
            summary += ": a cycle, nobody can go on"
        evidence = [EvidenceItem("proc", rank_of(snap.processes.get(e.waiter)),
                                 f"{e.who(e.waiter)}: {e.how}", snap.path) for e in group[:4]]
        evidence += [EvidenceItem("proc", rank_of(snap.processes.get(link.waiter)),
                                  f"{link.who(link.waiter)}: {link.how}", snap.path)
                     for link in chain[1:]]
        holder_proc = snap.processes.get(holder)
        if holder_proc is not None and holder_proc.rank is not None:
            cited = ctx.stack_evidence(holder_proc.rank, f"{group[0].who(holder)}, the holder: ")
            if cited is not None:
                evidence.append(cited)
        findings.append(Finding(kind=Kind.PYTHON_DEADLOCK, culprit_ranks=sorted(culprit),
                                waiting_ranks=waiting, confidence=0.95, summary=summary,
                                evidence=evidence,
                                measures={"resource": resource,
                                          "holder": group[0].who(holder)}))
    return findings


def _doing(ctx: Context, rank: int | None, proc: OsProcess | None) -> str:
    state = ctx.stacks.get(rank) if rank is not None and proc is not None \
        and proc.rank is not None else None
    if state is None or state.main is None:
        return ""
    return f" while its main thread is in {state.main.describe()}"
