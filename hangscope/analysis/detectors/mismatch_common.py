"""Turn a :class:`Divergence` into a finding that states both sides (expected vs found)."""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.divergence import Divergence
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.model import FrEntry
from hangscope.ranges import ranks_phrase


def describe(entry: FrEntry) -> str:
    sizes = [list(shape) for shape in entry.input_sizes]
    dtypes = ",".join(entry.input_dtypes)
    return f"{entry.op} with {sizes}{' ' + dtypes if dtypes else ''}"



def mismatch_finding(ctx: Context, div: Divergence, kind: Kind) -> Finding:
    expected_entry, majority = div.sides[0]
    culprits = sorted(r for _, ranks in div.sides[1:] for r in ranks)
    group = div.group
    found = "; ".join(f"{ranks_phrase(ranks)} entered {describe(entry)}"
                      for entry, ranks in div.sides[1:])
    verb = "expect" if len(majority) > 1 else "expects"
    summary = (f"{found} at seq {div.seq} of pg {group.label}; {ranks_phrase(majority)} {verb} "
               f"{describe(expected_entry)}")
    confidence = 0.9
    if not div.majority_is_clear:
        confidence = 0.55
        summary += " (no majority: either side may be the wrong one)"
    evidence = [ctx.fr_evidence(ranks[0], entry, group, "entered")
                for entry, ranks in div.sides]
    return Finding(
        kind=kind, culprit_ranks=culprits, waiting_ranks=sorted(majority),
        confidence=confidence, summary=summary, evidence=evidence,
        collective=CollectiveRef(pg=group.name, seq=div.seq, op=div.sides[-1][0].op,
                                 pg_desc=group.desc))
