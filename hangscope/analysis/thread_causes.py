"""A helper thread's death as the cause of a rank's wait.

An uncaught exception in a data-staging, prefetch or upload thread ("Exception in thread
prefetch:") does not end the process: its main thread goes on and waits for what that thread
would have produced (a DataLoader whose workers read its queue, a queue, a lock it held), and the
other ranks wait for this one. The detectors find the wait (``dataloader_stall``,
``python_deadlock``, ``missing_rank``); this adds the dead thread to every such finding about a
rank that is still alive, with the log line, so the report shows the first cause, not only the
last wait.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import dead_thread_cause, describe
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind

# What became of the culprit, by the finding that found its wait.
_CONSEQUENCE = {
    Kind.DATALOADER_STALL: "its DataLoader never delivers the next batch",
    Kind.PYTHON_DEADLOCK: "its main thread blocks",
    Kind.MISSING_RANK: "it never reaches the collective",
    Kind.INIT_HANG: "it never joins the process group",
}


def cite_dead_threads(ctx: Context, findings: list[Finding]) -> None:
    """Add each culprit's dead threads to the findings about its wait (in place)."""
    for finding in findings:
        consequence = _CONSEQUENCE.get(finding.kind)
        if consequence is None:
            continue
        for rank in finding.culprit_ranks[:8]:
            state = ctx.stacks.get(rank)
            if state is not None and state.gone:
                continue  # a process that is gone did not wait for its thread
            sentence, events = dead_thread_cause(ctx.evidence, rank, consequence)
            cited = {item.where for item in finding.evidence}
            if not sentence or all(e.where() in cited for e in events):
                continue
            finding.summary = f"{finding.summary.rstrip('.')}. {sentence[0].upper()}{sentence[1:]}"
            finding.evidence.extend(EvidenceItem("log", rank, f"thread died: {describe(e)}",
                                                 e.where()) for e in events)
