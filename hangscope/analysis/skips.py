"""Skips one side of a split took alone: the odd ranks' own word that they skipped a step.

A training loop that skips a step locally (a non-finite loss, an out-of-memory error caught and
the batch dropped: fairseq's ``ran out of memory, skipping batch``) drops that step's collectives
on the ranks that skipped and nowhere else; they go on to the next step's collectives while the
others wait in the skipped one. Where the stacks split the ranks and every odd rank logged such a
skip while no majority rank did, the skip explains the split (``sources/logs/step_skips.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from hangscope.analysis.context import Context
from hangscope.model import LogEvent


def one_sided(ctx: Context, odd: Sequence[int], majority: Sequence[int]) -> list[LogEvent]:
    """The odd ranks' skip lines (one per rank, in rank order) where every odd rank logged a skip
    and no majority rank did; [] otherwise."""
    skips = {e.rank: e for e in ctx.log_events("step_skipped") if e.rank is not None}
    if not odd or not set(odd) <= set(skips) or set(majority) & set(skips):
        return []
    return [skips[r] for r in sorted(odd)]


def cause(skipped: Sequence[LogEvent]) -> str:
    """What the skip was for, in words: "an out-of-memory error" or "a non-finite value"."""
    if any(e.fields.get("reason") == "oom" for e in skipped):
        return "an out-of-memory error"
    return "a non-finite value"


def sentence(skipped: Sequence[LogEvent], who: str) -> str:
    """``who``'s own log says it skipped, quoted, and what that does to the collectives."""
    first = skipped[0]
    what = str(first.fields.get("what", "step"))
    return (f"{who}'s own log says it skipped {'an' if what[:1] in 'aeiou' else 'a'} {what} on "
            f"{cause(skipped)} (\u201c{' '.join(first.message.split())[:120]}\u201d) and no other "
            f"rank's does: a skip decided on one rank drops that step's collectives there alone, "
            f"so {who} went on to the next step's collectives while the others wait in the skipped "
            "one (a skip must be decided on values all ranks share)")
