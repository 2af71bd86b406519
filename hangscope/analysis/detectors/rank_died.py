"""rank_died: a rank's process is gone, a zombie, or its main thread finished, while others wait.

Signals: /proc state ``gone`` or ``Z`` (with exit code or signal when the kernel still holds it), a
main thread found in ``threading._shutdown`` (the main module raised or returned and non-daemon
threads keep the process alive), and a rank that discovery expected on this host but found no
process for. Cites: the process state and the main thread's stack. False positives: a rank that
finished its work normally while others still run (a healthy uneven end of training).
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.ranges import format_ranks


def detect(ctx: Context) -> list[Finding]:
    dead = sorted(rank for rank, state in ctx.stacks.items()
                  if state.gone or state.main_finished)
    if not dead:
        return []
    waited_on = {r for _, (_, targets) in ctx.graph.waits.items() for r in targets}
    waiting = sorted({r for _, (sources, targets) in ctx.graph.waits.items()
                      if targets & set(dead) for r in sources} - set(dead))
    evidence: list[EvidenceItem] = []
    parts = []
    for rank in dead[:8]:
        state = ctx.stacks[rank]
        proc = ctx.evidence.ranks[rank].proc
        last = proc[-1] if proc else None
        how = state.describe()
        if last is not None and (last.exit_code is not None or last.exit_signal is not None):
            how += (f" (exit code {last.exit_code})" if last.exit_signal is None
                    else f" (killed by signal {last.exit_signal})")
        parts.append(f"rank {rank}: {how}")
        if last is not None:
            evidence.append(EvidenceItem("proc", rank, f"pid {last.pid} status {last.status}", ""))
        item = ctx.stack_evidence(rank, "main thread: ")
        if item is not None and not state.gone:
            evidence.append(item)
    others = f"; ranks {format_ranks(waiting)} wait for {'them' if len(dead) > 1 else 'it'}" \
        if waiting else ""
    summary = f"rank{'s' if len(dead) > 1 else ''} {format_ranks(dead)} died: " \
              + "; ".join(parts) + others
    confidence = 0.9 if set(dead) & waited_on else 0.6
    return [Finding(kind=Kind.RANK_DIED, culprit_ranks=dead, waiting_ranks=waiting,
                    confidence=confidence, summary=summary, evidence=evidence)]
