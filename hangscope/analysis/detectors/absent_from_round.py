"""Rule ``absent-from-round``: every rank printed the same probe line but one.

``sources/logs/rank_rounds.py`` finds the last round of a per-rank print (``rank 4, fetch sample
1469``) that names every rank from 0 to N except one. Basis: a synchronous job's ranks pass the
same spot once per step, so the rank whose line is missing from the round did not get there: the
others go on to the next collective and wait for it. missing_rank, 0.35: a paste cut in the middle
of a round, or a rank whose prints are buffered, reads the same. Only where nothing failed (then
the failure explains the absence).

Rule ``odd-line-in-round``: the absent rank did print the round's statement, in another shape
(the event's ``variant``: ``local experts [0, 4], bucket order [('experts', ...), ('dense', ...)]``
where every other rank printed ``local experts [2], bucket order [('dense', ...), ...]``). It got
there; what it said it would do differs from what the others said, and a rank that runs another
plan (its buckets, sizes, groups or order) issues collectives the others do not match.
collective_mismatch, 0.35, citing both lines; the same caveats, and a print whose values differ
by design from rank to rank reads the same. Not where the rank's own stack shows it outside any
collective (``[rank2] hang point: slow_checkpoint_write``, in a sleep there): the print then only
says where it went, and the stacks' reading (a rank missing from the others' collective) stands.
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_causes import failures
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent

RULE = "absent-from-round"
VARIANT_RULE = "odd-line-in-round"
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
    waiting = [r for r in range(present + 1) if r != absent]
    if "variant" in event.fields:
        state = ctx.stacks.get(absent)
        if state is not None and state.main is not None and state.main.kind != "collective":
            return []  # its stack says where it is, in no collective: the stacks' reading stands
        return [_variant(event, absent, present, waiting)]
    summary = (f"rule `{RULE}`: {present} ranks printed the same line in its last round "
               f"(\u201c{' '.join(event.message.split())[:120]}\u201d) and rank {absent} alone did "
               f"not: it never reached that spot, and the others, past it, wait for rank {absent} "
               "in the next collective. Its stack (py-spy dump) says where it is; a paste cut "
               "in the middle of a round reads the same")
    return [Finding(kind=Kind.MISSING_RANK, culprit_ranks=[absent], waiting_ranks=waiting,
                    confidence=CONFIDENCE, summary=summary, evidence=[log_evidence(event)],
                    measures={"rule": RULE})]


def _variant(event: LogEvent, absent: int, present: int, waiting: list[int]) -> Finding:
    variant = " ".join(str(event.fields["variant"]).split())
    summary = (f"rule `{VARIANT_RULE}`: {present} ranks printed the same line in its last round "
               f"(\u201c{' '.join(event.message.split())[:120]}\u201d) and rank {absent} printed "
               f"it differently (\u201c{variant[:120]}\u201d): it runs another plan than the "
               f"others (its sizes, order or groups), so the collectives it issues are not the "
               f"ones they wait in. Its stack or a flight-recorder dump confirms which it is in")
    where = f"{event.path}:{event.fields['variant_line']}"
    cited = EvidenceItem("log", absent, variant[:300], where)
    return Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=[absent], waiting_ranks=waiting,
                   confidence=CONFIDENCE, summary=summary,
                   evidence=[cited, log_evidence(event)], measures={"rule": VARIANT_RULE})
