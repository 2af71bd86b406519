"""What one stack sample per rank cannot tell, and what the logs add to it.

A single py-spy dump per rank (a postmortem, or ``attach --samples 1``) shows where each rank was
at one instant. A rank that is slow looks the same as one that is stuck, and a collective that a
healthy job passes through every few milliseconds looks like one it hangs in. The verdict says so
rather than guessing; where the ranks' logs print progress (step counters, with or without
timestamps), it says how far each got, which is the progress signal a postmortem has.
"""

from __future__ import annotations

import time

from hangscope.analysis.context import Context
from hangscope.analysis.log_progress import describe_progress, rank_logs
from hangscope.ranges import format_ranks

MAX_LISTED = 6


def single_sample_gap(ctx: Context) -> str | None:
    """The gap sentence when every rank's stacks are one sample; None otherwise."""
    sampled = {rank: state.samples for rank, state in ctx.stacks.items() if state.samples}
    if not sampled or max(sampled.values()) > 1:
        return None
    text = ("one stack sample per rank: a slow rank cannot be told from a stuck one, nor a "
            "collective the job passes through from one it hangs in (attach takes several "
            "samples; or run `py-spy dump` twice a few seconds apart)")
    progress = {rank: log.progress for rank, log in rank_logs(ctx.evidence).items()
                if log.progress is not None}
    if not progress:
        return text
    by_line: dict[str, list[int]] = {}
    for rank, event in sorted(progress.items()):
        when = f" at {_clock(event.time)}" if event.time is not None else ""
        by_line.setdefault(f"{describe_progress(event)}{when}", []).append(rank)
    shown = [f"ranks {format_ranks(ranks)} reached {line}"
             for line, ranks in list(by_line.items())[:MAX_LISTED]]
    return f"{text}. Their logs show progress: {'; '.join(shown)}"


def _clock(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
