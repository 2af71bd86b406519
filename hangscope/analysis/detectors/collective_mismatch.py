"""collective_mismatch: ranks of one group issued different ops at the same collective seq.

Signal: FR entries of one process group, aligned by ``collective_seq_id`` on the window every
member still holds; the first seq where the op names differ. Cites: one FR entry per side, with the
user's call site. False positives: ops torch records under different names for one user call
(e.g. ``_allgather_base`` vs ``all_gather_into_tensor`` across torch versions), and ranks that
dumped a different group under the same name.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.detectors.mismatch_common import mismatch_finding
from hangscope.analysis.verdict import Finding, Kind


def detect(ctx: Context) -> list[Finding]:
    findings = []
    for group in ctx.picture.groups.values():
        div = ctx.divergence(group)
        if div is not None and div.ops_differ:
            findings.append(mismatch_finding(ctx, div, Kind.COLLECTIVE_MISMATCH))
    return findings
