"""Rule ``main-process-first``: a rank's traceback runs through a block the main process runs
first (transformers' ``main_process_first`` / ``torch_distributed_zero_first``, accelerate's).

Signal: a ``traceback`` event with ``main_first``, or the ``collective_wait`` event of such a
traceback cut before its exception. Basis: inside the block, rank 0 (the main process) does the
work alone (a dataset map, a tokenizer pass, a cache build) while every other rank waits in the
block's barrier; a traceback from inside it is a waiting rank's, ended by the process group's or
the store's timeout (a Socket Timeout, the barrier's watchdog), so rank 0, still working, is the
one the others wait for. Cites the traceback. 0.55: the paste shows a waiting rank, not rank 0's
own progress. False positive: rank 0 itself failed inside the block (its own traceback would name
another exception than a timeout; the launcher's report tells).
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.verdict import Finding, Kind

CONFIDENCE = 0.55


def detect(ctx: Context) -> list[Finding]:
    events = [e for e in ctx.evidence.all_logs()
              if e.kind in ("traceback", "collective_wait") and e.fields.get("main_first")]
    if not events:
        return []
    first = events[0]
    block = first.fields["main_first"]
    waiting = sorted({e.rank for e in events if e.rank is not None and e.rank != 0})
    summary = (f"rule main-process-first: a traceback runs through {block} ({first.where()}), a "
               "block the main process runs first while every other rank waits in its barrier: "
               "rank 0 does the block's work alone (a dataset map, tokenization, a cache build) "
               "and the ranks waiting for it time out when it takes longer than the process "
               "group's timeout. Rank 0 is the one waited for; raise the timeout "
               "(init_process_group(timeout=...), ddp_timeout) or preprocess before launching")
    return [Finding(kind=Kind.MISSING_RANK, culprit_ranks=[0], waiting_ranks=waiting,
                    confidence=CONFIDENCE, summary=summary,
                    evidence=[log_evidence(e) for e in events[:3]],
                    measures={"rule": "main-process-first"})]
