"""Rule ``split-positions``: ranks that sit in different collectives at the same time.

Where a thread summarizes the ranks' stacks (``sources/logs/rank_positions.py``: ``TP0 stuck in
all_reduce``, ``TP1-3 waiting in broadcast``), ranks in two different collectives at once called
them in another order: each waits for peers that are in the other one, and neither completes. The
smaller group is named (it left the order the others keep: a branch only it took); with groups of
one size, no side is picked and both are said. Confidence 0.5: a summary of stacks is one moment,
written by a person, and a rank passing through a collective reads the same.
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_causes import rank_events
from hangscope.analysis.verdict import Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase

RULE = "split-positions"
CONFIDENCE = 0.5


def detect(ctx: Context) -> list[Finding]:
    # the latest summary of a rank wins
    where: dict[int, LogEvent] = {rank: event for rank, event in rank_events(ctx.evidence)
                                  if event.kind == "rank_position"}
    groups: dict[str, list[int]] = defaultdict(list)
    for rank, event in sorted(where.items()):
        groups[str(event.fields["op"])].append(rank)
    if len(groups) < 2:
        return []
    ordered = sorted(groups.items(), key=lambda item: (len(item[1]), item[1]))
    smallest = ordered[0]
    culprits = smallest[1] if len(smallest[1]) < len(ordered[1][1]) else []
    said = "; ".join(f"{ranks_phrase(ranks)} in {op}" for op, ranks in ordered)
    summary = (f"rule `{RULE}`: the ranks' stacks, as summarized here, sit in different "
               f"collectives at once ({said}): they called collectives in another order, and "
               "each waits for peers that are in the other one")
    summary += (f"; {ranks_phrase(culprits)}, the smaller side, left the order the others keep"
                if culprits else "; the sides are of one size, so which one left the order is "
                "not told")
    others = sorted(r for r in where if r not in culprits)
    evidence = [log_evidence(where[ranks[0]]) for _, ranks in ordered[:4]]
    return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=culprits,
                    waiting_ranks=others if culprits else [], confidence=CONFIDENCE,
                    summary=summary, evidence=evidence, measures={"rule": RULE})]
