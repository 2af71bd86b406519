"""collective_mismatch from per-rank sizes a person wrote out (``stated_size``: ``rank 5:
NumelIn=8171520`` beside ``rank 0/1/2/3/4/6/7: NumelIn=4501504``, or a Markdown table of them).

Basis: such a summary stands for the watchdog lines of one stalled collective, each rank's size as
its own line said it; ranks that posted different sizes to one collective are in a size mismatch.
Rule ``stated-sizes`` (0.7): where more than half of the ranks named agree on a size (one rule
for every comparison: ``analysis/majority.py``), the others are the culprits; with no majority,
both sides are named waiting and no culprit is. Only where the summary names two ranks or more
and two sizes or more of one kind (NumelIn or NumelOut). False positives: a table of sizes that
differ by design (per-rank shards of an uneven split), written out beside a hang for another
reason; the finding cites the lines.
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.majority import odd_ones_out
from hangscope.analysis.verdict import Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import format_ranks, ranks_phrase

RULE = "stated-sizes"
CONFIDENCE = 0.7


def detect(ctx: Context) -> list[Finding]:
    by_what: dict[str, dict[int, int]] = defaultdict(dict)
    cited: dict[str, list[LogEvent]] = defaultdict(list)
    for event in ctx.log_events("stated_size"):
        what = str(event.fields.get("what", "NumelIn"))
        numel = event.fields.get("numel")
        if not isinstance(numel, int):
            continue
        for part in str(event.fields.get("ranks", "")).split(","):
            if part.isdigit():
                by_what[what][int(part)] = numel
        cited[what].append(event)
    for what in ("NumelIn", "NumelOut"):
        sizes = by_what.get(what, {})
        if len(sizes) < 2 or len(set(sizes.values())) < 2:
            continue
        groups: dict[int, list[int]] = defaultdict(list)
        for rank, numel in sizes.items():
            groups[numel].append(rank)
        stated = "; ".join(f"{ranks_phrase(sorted(r))} {what}={n}"
                           for n, r in sorted(groups.items(), key=lambda g: -len(g[1])))
        odd = odd_ones_out(sizes)
        culprits = odd.odd if odd is not None else []
        summary = (f"rule `{RULE}`: the log writes out each rank's size in one collective ("
                   f"{stated}): ranks that post different sizes to one collective are in a size "
                   "mismatch")
        if culprits:
            summary += (f"; rank{'s' if len(culprits) > 1 else ''} {format_ranks(culprits)} "
                        f"differ{'s' if len(culprits) == 1 else ''} from the "
                        f"{len(odd.majority) if odd else 0} others")
        return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=culprits,
                        waiting_ranks=odd.majority if odd is not None else sorted(sizes),
                        confidence=CONFIDENCE, summary=summary,
                        evidence=[log_evidence(e) for e in cited[what][:4]],
                        measures={"rule": RULE})]
    return []
