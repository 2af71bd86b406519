"""Rule ``last-shapes-differ``: the last lines the processes printed are one print of a shape,
with different shapes.

Where a paste ends with the same print from several processes (``sources/logs/last_shapes.py``)
and the shape or size it names differs, the collective that came next got tensors of different
shapes on different ranks: NCCL reads past the smaller buffer or waits forever, and gather-like
calls hang. Where each line names its rank and a majority agrees, the others are named; else no
culprit. Confidence 0.35: a shape printed per rank may differ by design (a rank's shard), and the
paste's end is not proof that the job stopped there.
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.majority import odd_ones_out
from hangscope.analysis.verdict import Finding, Kind

RULE = "last-shapes-differ"
CONFIDENCE = 0.35


def detect(ctx: Context) -> list[Finding]:
    for event in ctx.log_events("last_shapes"):
        values = str(event.fields["values"]).split("|")
        ranks = [int(r) for r in str(event.fields.get("ranks", "")).split(",") if r.isdigit()]
        culprits: list[int] = []
        if len(ranks) == len(values) and (odd := odd_ones_out(dict(zip(ranks, values)))):
            culprits = odd.odd
        summary = (f"rule `{RULE}`: the log ends with one print, {len(values)} times, of a "
                   f"shape that differs ({'; '.join(values[:6])}): the collective that came "
                   "next got tensors of different shapes on different ranks (a size mismatch), "
                   "unless the shapes differ by design (a rank's own shard)")
        return [Finding(kind=Kind.SIZE_MISMATCH, culprit_ranks=culprits, waiting_ranks=[],
                        confidence=CONFIDENCE, summary=summary, evidence=[log_evidence(event)],
                        measures={"rule": RULE})]
    return []
