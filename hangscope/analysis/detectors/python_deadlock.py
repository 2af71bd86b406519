"""python_deadlock: the culprit's main thread is blocked on a Python lock, condition, queue or join
outside any collective, and does not move.

Signal: main-thread activity ``lock`` (threading/queue/multiprocessing waits; with native frames
also a bare ``lock.acquire()``) in every sample, no CPU. Cites: the main thread and every other
thread of that rank that also waits on a lock (the likely other side of a lock-order inversion).
False positives: a main thread that legitimately joins a worker thread that is itself busy (its
thread is then ``compute``, which the summary shows); a queue get on a producer that is slow.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.ranges import format_ranks


def detect(ctx: Context) -> list[Finding]:
    waited_on = {r for _, (_, targets) in ctx.graph.waits.items() for r in targets}
    findings = []
    for rank, state in sorted(ctx.stacks.items()):
        main = state.main
        if main is None or main.kind != "lock" or state.progress == "moving":
            continue
        others = [t for t in state.threads if t.thread_id != main.thread_id]
        blocked = [t for t in others if t.kind in ("lock", "idle")]
        evidence: list[EvidenceItem] = []
        item = ctx.stack_evidence(rank, "main thread: ")
        if item is not None:
            evidence.append(item)
        for thread in blocked[:6]:
            where = thread.user_frame.where() if thread.user_frame else ""
            name = thread.thread_name or thread.thread_id
            evidence.append(EvidenceItem("py-spy", rank, f"thread {name}: {thread.describe()}",
                                         where))
        names = ", ".join(f"'{t.thread_name or t.thread_id}' ({t.describe()})"
                          for t in blocked[:4])
        waiting = sorted({r for _, (sources, targets) in ctx.graph.waits.items()
                          if rank in targets for r in sources} - {rank})
        summary = (f"rank {rank}'s main thread is blocked on {main.op or 'a lock'}: "
                   f"{main.describe()}")
        summary += f"; other blocked threads: {names}" if names else \
            "; no other thread of the rank is blocked (a lock held and never released?)"
        if waiting:
            summary += f"; ranks {format_ranks(waiting)} wait for it"
        findings.append(Finding(kind=Kind.PYTHON_DEADLOCK, culprit_ranks=[rank],
                                waiting_ranks=waiting,
                                confidence=0.9 if rank in waited_on and blocked else 0.7,
                                summary=summary, evidence=evidence))
    return findings
