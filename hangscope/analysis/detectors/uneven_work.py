"""Rule ``uneven-work``: ranks that say they will run different numbers of batches or steps.

Synchronous training runs the same collectives on every rank, step for step. Where the ranks' own
lines (``sources/logs/work_counts.py``) give them different counts of the same thing (batches,
steps, iterations, a loader's length), the rank with more steps calls a collective the others
never join: a collective mismatch that hangs at the shortest rank's last step (the reason for
DDP's ``join()`` and for samplers that pad). The odd ones out of a majority are named; where no
count has a majority (two ranks, or all differ), the ranks with the most steps are, since they are
the ones left waiting. Confidence 0.5: a count can differ by design (an evaluation loader, a rank
that logs only its own shard), which the finding says.
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_causes import rank_events
from hangscope.analysis.majority import odd_ones_out
from hangscope.analysis.verdict import Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase

RULE = "uneven-work"
CONFIDENCE = 0.5


def detect(ctx: Context) -> list[Finding]:
    counts: dict[str, dict[int, LogEvent]] = defaultdict(dict)
    for rank, event in rank_events(ctx.evidence):
        if event.kind == "work_count":
            counts[str(event.fields["what"])][rank] = event  # the rank's latest line
    for what, lines in sorted(counts.items(), key=lambda item: -len(item[1])):
        values = {rank: int(e.fields["value"]) for rank, e in lines.items()}
        if len(values) < 2 or len(set(values.values())) < 2:
            continue
        odd = odd_ones_out(values)
        if odd is not None:
            culprits, others = odd.odd, odd.majority
            said = (f"{ranks_phrase(others)} {what} {odd.value}, while "
                    + "; ".join(f"rank {r}: {values[r]}" for r in culprits[:4]))
        else:
            most = max(values.values())
            culprits = sorted(r for r, v in values.items() if v == most)
            others = sorted(set(values) - set(culprits))
            said = "; ".join(f"rank {r}: {v}" for r, v in sorted(values.items())[:6])
        summary = (f"rule `{RULE}`: the ranks' own lines give them different numbers of {what} "
                   f"({said}). Every step runs the same collectives on every rank, so "
                   f"{ranks_phrase(culprits)} will call collectives the others never join: "
                   "uneven data per rank (pad the sampler, drop_last, or DDP's join()). Unless "
                   "these counts differ by design (an evaluation loader)")
        evidence = [log_evidence(lines[r]) for r in (culprits[:3] + others[:1])]
        return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=culprits,
                        waiting_ranks=others, confidence=CONFIDENCE, summary=summary,
                        evidence=evidence, measures={"rule": RULE, "what": what})]
    return []
