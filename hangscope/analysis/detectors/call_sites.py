"""pg_order_deadlock from stacks alone: every rank stuck in the same collective op, most of them
from one place of the job's code and a minority from another.

Basis: a collective of one group completes once all its members enter it, wherever each called it
from; so ranks that all sit in ``all_reduce`` and stay there are in collectives of *different*
groups (or seqs), and the call site tells which ranks issued which. Where one place holds a strict
majority, the ranks at the other places are the likely culprits (the one mismatch rule: majority
where there is one, see ``analysis/majority.py``); with no majority nothing is invented and
:func:`~hangscope.analysis.pg_order.stack_only_note` says what only FR dumps can tell.

Fires only when every rank seen has a stack and is in that op, stuck (not moving over the samples),
with no dump: otherwise a rank elsewhere is the better suspect (``missing_rank``), and FR names the
group and seq itself. Confidence 0.5: a stack names no group, and one collective legitimately called
from two places on a transport stall looks the same. Cites each place's first rank's stack.

Where the odd ranks' own logs say they skipped a step on a non-finite loss or gradient
(``step_skipped``) and no majority rank's log does, the split is no ordering: the odd ranks dropped
that step's collectives and went on to the next step's, where they wait for ranks still in the
skipped one (collective_mismatch, 0.6, rule ``one-sided-skip``; the skip line is cited); a skip on
an out-of-memory error is that rank's OOM (rank_oom; ``analysis/skips.py``).
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.pg_order import stack_sites
from hangscope.analysis.skips import cause, one_sided, sentence
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.ranges import ranks_phrase

CONFIDENCE = 0.5
SKIP_CONFIDENCE = 0.6


def detect(ctx: Context) -> list[Finding]:
    sites = stack_sites(ctx.picture, ctx.stacks)
    if len(sites) != 1 or ctx.picture.dumps:
        return []
    ((op, places),) = sites.items()
    seen = sorted(r for _, ranks in places for r in ranks)
    world = ctx.picture.world_size
    if len(places) < 2 or seen != sorted(ctx.stacks) or (world and len(seen) != world):
        return []
    (where, majority), minority = places[0], places[1:]
    if len(majority) <= max(len(ranks) for _, ranks in minority):
        return []
    odd = sorted(r for _, ranks in minority for r in ranks)
    odd_where = "; ".join(f"{ranks_phrase(ranks)} from {at}" for at, ranks in minority)
    summary = (f"every rank is stuck in {op}, {ranks_phrase(majority)} called from {where} and "
               f"{odd_where}: one collective would complete wherever each rank called it from, so "
               f"these are {op}s of different process groups (or seqs) issued in different orders, "
               f"and {ranks_phrase(odd)}, away from the majority's place, "
               f"{'is' if len(odd) == 1 else 'are'} the likely odd one{'s' if len(odd) > 1 else ''}"
               " (an ordering deadlock; stacks name no group or seq: flight-recorder dumps, "
               "TORCH_FR_BUFFER_SIZE, would confirm)")
    evidence = [item for r in [majority[0], *(ranks[0] for _, ranks in minority)]
                if (item := ctx.stack_evidence(r, "main thread: ")) is not None]
    skipped = one_sided(ctx, odd, majority)
    if skipped:
        oom = cause(skipped).startswith("an out")
        summary = (f"every rank is stuck in {op}, {ranks_phrase(majority)} called from {where} and "
                   f"{odd_where}; {sentence(skipped, ranks_phrase(odd))}")
        return [Finding(kind=Kind.RANK_OOM if oom else Kind.COLLECTIVE_MISMATCH,
                        culprit_ranks=odd, waiting_ranks=majority,
                        confidence=SKIP_CONFIDENCE, summary=summary,
                        evidence=[*evidence, *(log_evidence(e) for e in skipped[:4])],
                        collective=CollectiveRef(pg=None, seq=None, op=op),
                        measures={"rule": "one-sided-skip"})]
    return [Finding(kind=Kind.PG_ORDER_DEADLOCK, culprit_ranks=odd, waiting_ranks=majority,
                    confidence=CONFIDENCE, summary=summary, evidence=evidence,
                    collective=CollectiveRef(pg=None, seq=None, op=op))]
