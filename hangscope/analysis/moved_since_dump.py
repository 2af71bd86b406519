"""Dumps of a job that moves: a rank's stack inside the collective its own dump says it never
entered.

A flight-recorder dump is one rank's history up to the moment it was written; a stack sample is
another moment. When the FR says rank X never entered the collective the others wait in, and X's
stack (taken later) shows its main thread inside a collective called from that same line of the
job's code, X got there after its dump was written: the job moved between the two, and the dumps
are snapshots of a running job, not of a hang. Ranks taken at different moments then disagree by
a step or two, which reads as ``missing_rank``.

This reconciles such a ``missing_rank`` finding: the ranks seen past it are no culprits. If no
culprit is left, the finding goes and a gap says why. If some are left (behind the others in the
dumps and not seen past it), the job moved but they are behind: the finding becomes a
``straggler`` at low confidence that says one snapshot cannot tell slow from stuck.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.stacks import user_frame
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import Frame
from hangscope.ranges import ranks_phrase


def reconcile(ctx: Context, findings: list[Finding], gaps: list[str]) -> list[Finding]:
    """Findings with FR ``missing_rank`` culprits that the stacks show past their collective
    dropped or turned into a straggler; the reason goes to ``gaps``."""
    out = []
    for finding in findings:
        moved = _seen_past(ctx, finding) if finding.kind is Kind.MISSING_RANK else {}
        if not moved:
            out.append(finding)
            continue
        left = [r for r in finding.culprit_ranks if r not in moved]
        ref = finding.collective
        what = f"{ref.op} seq {ref.seq}" if ref is not None else "the collective"
        seen = "; ".join(f"rank {r}'s stack shows it inside the collective called at {where}"
                         for r, where in sorted(moved.items())[:4])
        reason = (f"the flight recorder says {ranks_phrase(sorted(moved))} never entered {what}, "
                  f"but {seen}, where the others wait in it: the job moved between the dumps "
                  "and the stacks, so the dumps are snapshots of a running job, not of a hang")
        gaps.append(reason)
        if not left:
            continue
        evidence = [item for item in finding.evidence if item.rank in left] + [
            EvidenceItem("py-spy", r, f"main thread inside the collective called at {where}, "
                         f"which its dump says it never entered", where)
            for r, where in sorted(moved.items())[:4]]
        out.append(Finding(
            kind=Kind.STRAGGLER, culprit_ranks=left, waiting_ranks=finding.waiting_ranks,
            confidence=0.5, collective=finding.collective, evidence=evidence,
            summary=(f"{ranks_phrase(left)} {'are' if len(left) > 1 else 'is'} behind the others "
                     f"(not yet in {what}) while the job moves ({reason.split(', but ')[1]}); "
                     "one snapshot cannot tell slow from stuck: attach to the live job (it "
                     "samples until it can) or compare two dumps taken a few seconds apart")))
    return out


def _seen_past(ctx: Context, finding: Finding) -> dict[int, str]:
    """Culprits whose latest stack is inside a collective called from the line the waiting
    ranks' pending entry was called from: {rank: that call site}."""
    sites = _call_sites(ctx, finding)
    if not sites:
        return {}
    moved = {}
    for rank in finding.culprit_ranks:
        state = ctx.stacks.get(rank)
        if state is None or state.main is None or state.main.kind != "collective":
            continue
        frame = state.main.user_frame
        if frame is not None and (frame.filename, frame.line) in sites:
            moved[rank] = f"{frame.filename}:{frame.line}"
    return moved


def _call_sites(ctx: Context, finding: Finding) -> set[tuple[str, int | None]]:
    ref = finding.collective
    if ref is None or ref.pg is None or ref.seq is None:
        return set()
    sites = set()
    for rank in finding.waiting_ranks:
        for group, entry in ctx.picture.pending_ops(rank):
            if group.name == ref.pg and entry.seq == ref.seq:
                frame: Frame | None = user_frame(entry.frames)
                if frame is not None:
                    sites.add((frame.filename, frame.line))
    return sites

