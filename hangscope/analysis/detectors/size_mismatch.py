"""size_mismatch: same op at the same seq, but different input sizes or dtypes across ranks.

Signal: as collective_mismatch, where the ops agree and ``input_sizes``/``input_dtypes`` do not
(FR), or the DETAIL fingerprints' TensorShape/TensorDtypes do not (logs).
Cites: one FR entry per side. False positives: ops whose inputs legitimately differ per rank
(``all_to_all_v``/uneven ``all_gather_v``, ``gather``/``scatter`` roots), which NCCL accepts.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.detectors.mismatch_common import log_mismatch_findings, mismatch_finding
from hangscope.analysis.verdict import Finding, Kind

# Ops whose per-rank inputs may legitimately differ.
UNEVEN_OPS = frozenset({"all_to_all", "all_to_all_v_single", "all_to_all_single", "all_gather_v",
                        "reduce_scatter_v", "gather", "scatter"})


def detect(ctx: Context) -> list[Finding]:
    findings = []
    for group in ctx.picture.groups.values():
        div = ctx.divergence(group)
        if div is None or div.ops_differ or div.sides[0][0].op in UNEVEN_OPS:
            continue
        findings.append(mismatch_finding(ctx, div, Kind.SIZE_MISMATCH))
    return findings + log_mismatch_findings(ctx, Kind.SIZE_MISMATCH)
