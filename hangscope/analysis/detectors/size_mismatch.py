"""size_mismatch: same op at the same seq, but sizes or dtypes that must agree do not.

Signals: as collective_mismatch, where the ops agree and what ``fr_match.match_key`` compares does
not: input or output sizes, input or output dtypes (FR, at every seq all ranks hold, pending,
failed or completed); a record that contradicts its own op (an in-place all_reduce whose output
shape differs from its input; torch's "syntax" mismatch); a send whose tensor differs from the
recv it feeds (``p2p_match``); the DETAIL fingerprints' TensorShape/TensorDtypes, or watchdog
numel, that differ (logs). Cites: one FR entry per side. When every rank retired the collective
and recorded nothing after it, it failed (gloo raises on a size mismatch): the finding says so and
outranks the first rank that raised. False positives: ops whose per-rank tensors legitimately
differ are not compared on sizes (``fr_match.UNEVEN_OPS``, gather outputs, scatter inputs);
custom backends that record other tensors than the ones they send.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.detectors.mismatch_common import (
    log_mismatch_findings,
    mismatch_finding,
    p2p_finding,
)
from hangscope.analysis.p2p_match import p2p_mismatches
from hangscope.analysis.verdict import Finding, Kind
from hangscope.sources.fr_lazy import first_record_id


def detect(ctx: Context) -> list[Finding]:
    findings = []
    # dumps list entries oldest first: a first record id of 0 means nothing was dropped
    whole = {rank for rank, dump in ctx.picture.dumps.items() if first_record_id(dump) == 0}
    for group in ctx.picture.groups.values():
        div = ctx.divergence(group)
        if div is not None and not div.ops_differ:
            findings.append(mismatch_finding(ctx, div, Kind.SIZE_MISMATCH))
        pairs = p2p_mismatches(group, whole)
        if pairs:
            findings.append(p2p_finding(ctx, pairs))
    return findings + log_mismatch_findings(ctx, Kind.SIZE_MISMATCH)
