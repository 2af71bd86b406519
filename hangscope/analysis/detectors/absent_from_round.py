"""Rule ``absent-from-round``: every rank printed the same probe line but one.

``sources/logs/rank_rounds.py`` finds the last round of a per-rank print (``rank 4, fetch sample
1469``) that names every rank from 0 to N except one. Basis: a synchronous job's ranks pass the
same spot once per step, so the rank whose line is missing from the round did not get there: the
others go on to the next collective and wait for it. missing_rank, 0.35: a paste cut in the middle
of a round, or a rank whose prints are buffered, reads the same. Only where nothing failed (then
the failure explains the absence).
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_causes import failures
from hangscope.analysis.verdict import Finding, Kind

RULE = "absent-from-round"
CONFIDENCE = 0.35


def detect(ctx: Context) -> list[Finding]:
    if any(failures(ctx.evidence).values()):
        return []
    rounds = [e for e in ctx.evidence.all_logs() if e.kind == "rank_round"]
    if len(rounds) != 1:
        return []  # several probes with their own gaps: no one reading
    event = rounds[0]
    absent = int(event.fields["absent"])
    present = int(event.fields["present"])
    summary = (f"rule `{RULE}`: {present} ranks printed the same line in its last round "
               f"(\u201c{' '.join(event.message.split())[:120]}\u201d) and rank {absent} alone did "
               f"not: it never reached that spot, and the others, past it, wait for rank {absent} "
               "in the next collective. Its stack (py-spy dump) says where it is; a paste cut "
               "in the middle of a round reads the same")
    waiting = [r for r in range(present + 1) if r != absent]
    return [Finding(kind=Kind.MISSING_RANK, culprit_ranks=[absent], waiting_ranks=waiting,
                    confidence=CONFIDENCE, summary=summary, evidence=[log_evidence(event)],
                    measures={"rule": RULE})]
