"""init_hang: ranks stuck in init_process_group / rendezvous / the c10d store, and who never joined.

Signal: main threads in process-group setup (stacks), waiting on ranks that are elsewhere (alive
but not in init: still loading, downloading) or absent (no process, no evidence). Cites: one
waiting rank's stack and each culprit's. False positives: a slow start where the late rank is
about to call init (sample again), and store waits of a healthy elastic re-rendezvous.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.ranges import format_ranks, ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    findings = []
    for reason, (waiting, targets) in ctx.graph.waits.items():
        if reason.kind != "stack-init":
            continue
        culprits = sorted(targets - waiting)
        if not culprits:
            continue
        evidence = [item for rank in [min(waiting), *culprits[:8]]
                    if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
        doing = []
        for rank in culprits[:4]:
            state = ctx.stacks.get(rank)
            doing.append(f"rank {rank}: {state.describe() if state else 'no process or evidence'}")
        summary = (f"ranks {format_ranks(sorted(waiting))} wait in process-group setup for "
                   f"{ranks_phrase(culprits)}, which "
                   f"never joined ({'; '.join(doing)})")
        findings.append(Finding(kind=Kind.INIT_HANG, culprit_ranks=culprits,
                                waiting_ranks=sorted(waiting), confidence=0.85,
                                summary=summary, evidence=evidence,
                                collective=CollectiveRef(pg=None, seq=None, op=reason.op)))
    return findings
