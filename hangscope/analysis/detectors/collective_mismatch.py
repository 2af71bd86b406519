"""collective_mismatch: ranks of one group issued different ops at the same collective seq.

Signals: FR entries of one process group, aligned by ``collective_seq_id`` on the window every
member still holds: the first seq where the op names differ, pending, failed or completed, and op by
op inside a coalesced block (a block with more ops on one rank differs too; see
``analysis.divergence``); ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
fingerprint mismatches in logs (each rank's op at one DETAIL sequence number, by majority where
more than two ranks are shown). Cites: one FR entry per side, with the
user's call site. False positives: ops torch records under different names for one user call
(e.g. ``_allgather_base`` vs ``all_gather_into_tensor`` across torch versions), and ranks that
dumped a different group under the same name.

From stacks alone (no dumps), where the odd ranks' own logs say they skipped a step and no other
rank's does (``analysis/skips.py``), the finding says so; a skip on an out-of-memory error makes
it that rank's OOM (rank_oom, 0.7, rule ``one-sided-skip``).
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.detectors.mismatch_common import log_mismatch_findings, mismatch_finding
from hangscope.analysis.majority import odd_ones_out
from hangscope.analysis.skips import cause, one_sided, sentence
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.ranges import format_ranks, ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    findings = []
    for group in ctx.picture.groups.values():
        div = ctx.divergence(group)
        if div is not None and div.ops_differ:
            findings.append(mismatch_finding(ctx, div, Kind.COLLECTIVE_MISMATCH))
    findings.extend(log_mismatch_findings(ctx, Kind.COLLECTIVE_MISMATCH))
    if not findings:
        findings.extend(_from_stacks(ctx))
    return findings


# waits a native stack shows without naming the collective (``c10d::Work::wait``: any op's work;
# a functional collective's wait_tensor): they differ from no collective
UNNAMED_OPS = frozenset({"wait", "wait_tensor", "?"})


def _from_stacks(ctx: Context) -> list[Finding]:
    """Ranks without FR dumps whose main threads sit in different collectives.

    Weaker than FR: a stack names the op but not its group or seq, and ranks may legitimately be
    in different collectives of different groups (tensor- vs data-parallel) at one instant. A
    wait on a work that no frame names (:data:`UNNAMED_OPS`) is no different collective.
    """
    by_op: dict[str, list[int]] = {}
    for rank, state in ctx.stacks.items():
        if rank in ctx.picture.dumps or state.main is None or state.gone:
            continue
        if state.main.kind == "collective" and state.progress != "moving" \
                and (state.main.op or "?") not in UNNAMED_OPS:
            by_op.setdefault(state.main.op or "?", []).append(rank)
    if len(by_op) < 2:
        return []
    sides = sorted(by_op.items(), key=lambda item: (-len(item[1]), min(item[1])))
    (expected_op, majority), rest = sides[0], sides[1:]
    culprits = sorted(r for _, ranks in rest for r in ranks)
    # the one rule every path uses: more than half of the ranks agree, the others are odd
    clear = odd_ones_out({r: op for op, ranks in by_op.items() for r in ranks}) is not None
    found = "; ".join(f"{ranks_phrase(ranks)} {'are' if len(ranks) > 1 else 'is'} in {op}"
                      for op, ranks in rest)
    summary = (f"{found} while ranks {format_ranks(majority)} are in {expected_op} "
               "(from stacks: group and seq unknown)")
    if not clear:
        summary += "; no majority: either side may be the odd one"
    evidence = [item for _, ranks in sides
                if (item := ctx.stack_evidence(ranks[0], "main thread: ")) is not None]
    skipped = one_sided(ctx, culprits, majority) if clear else []
    if skipped:  # the odd ranks said why they are elsewhere (``analysis/skips.py``)
        oom = cause(skipped).startswith("an out")
        return [Finding(kind=Kind.RANK_OOM if oom else Kind.COLLECTIVE_MISMATCH,
                        culprit_ranks=culprits, waiting_ranks=sorted(majority), confidence=0.7,
                        summary=f"{summary}; {sentence(skipped, ranks_phrase(culprits))}",
                        evidence=[*evidence, *(log_evidence(e) for e in skipped[:4])],
                        collective=CollectiveRef(pg=None, seq=None, op=rest[0][0]),
                        measures={"rule": "one-sided-skip"})]
    return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=culprits,
                    waiting_ranks=sorted(majority), confidence=0.7 if clear else 0.5,
                    summary=summary, evidence=evidence,
                    collective=CollectiveRef(pg=None, seq=None, op=rest[0][0]))]
