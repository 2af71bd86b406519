"""Dumps of a moving job taken moments apart: a rank "still in" a collective its peers completed,
whose own dump shows it completing collectives up to the moment it was written.

A flight-recorder dump is one rank's history up to the moment it was written, and dumps of a live
job are never one moment: each rank's monitor thread writes its own when it notices the request.
NCCL ranks enqueue far ahead of their GPUs, and a collective completes on every member at about the
same time, so a rank whose dump was written a little earlier than its peers' shows an older
completion frontier: "still in seq N, which the others completed". When that rank's watchdog had
discovered a completion in the same group less than ``MOVING_WITHIN_S`` before its dump was
written, the rank was moving at that moment; the frontier difference is the dumps' skew, not a
stall (seen on an H200 with torch 2.11: four healthy ranks, dumps 0.7-1.1 s apart, read as
``missing_rank``). In a hang the stuck rank's newest completion is as old as the hang, and the
finding stands.

The time a dump was written is its file's modification time: torch writes it in place, and
``hangscope attach`` keeps that time on the bundle's copy. A copy that got a fresh time (a later
``cp``) only makes the dump look newer than it was, which keeps findings, never drops them.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import Finding, Kind
from hangscope.ranges import format_ranks
from hangscope.sources.flight_recorder import written_at

MOVING_WITHIN_S = 2.0  # the watchdog polls about every 0.1-1 s; a dump takes milliseconds
MAX_CHECKED = 8  # culprits looked at per finding
MAX_RANKS_MOVING = 256  # ranks looked at to tell that every one was moving
LOOK_BACK = 256  # a group's newest records searched for its newest completion


def reconcile(ctx: Context, findings: list[Finding], gaps: list[str]) -> list[Finding]:
    """FR ``missing_rank`` findings whose every culprit was completing collectives of the group
    when its dump was written go; the reason goes to ``gaps``."""
    out = []
    for finding in findings:
        moving = _moving_culprits(ctx, finding)
        if moving is None:
            out.append(finding)
            continue
        ranks = format_ranks(sorted(moving))
        worst = max(moving.values())
        many = len(moving) > 1
        whose = "each one's" if many else "its"
        gaps.append(f"rank{'s' if many else ''} {ranks} looked behind in pg "
                    f"{finding.collective.pg if finding.collective else '?'}, but {whose} dump "
                    f"shows it completing collectives there up to {worst:.1f} s "
                    f"before the dump was written: the dumps are snapshots of a job that was "
                    f"moving, taken moments apart, not evidence of a stall (attach again: a stuck "
                    f"rank's completions stop)")
    return out


def _moving_culprits(ctx: Context, finding: Finding) -> dict[int, float] | None:
    """Culprit -> seconds from its newest completion in the finding's group to its dump, when
    every culprit (at most ``MAX_CHECKED``) completed one within ``MOVING_WITHIN_S``."""
    ref = finding.collective
    if finding.kind is not Kind.MISSING_RANK or ref is None or ref.pg is None \
            or not finding.culprit_ranks or len(finding.culprit_ranks) > MAX_CHECKED:
        return None
    if not any(item.source == "flight_recorder" for item in finding.evidence):
        return None
    moving: dict[int, float] = {}
    for rank in finding.culprit_ranks:
        lag = _completion_lag(ctx, rank, ref.pg)
        if lag is None or not -MOVING_WITHIN_S < lag < MOVING_WITHIN_S:
            return None
        moving[rank] = max(lag, 0.0)
    return moving


def _completion_lag(ctx: Context, rank: int, pg: str) -> float | None:
    """Seconds between the rank's newest completion in ``pg``, as its watchdog discovered it, and
    the writing of its dump; None when either is unknown.

    Looks back from the group's newest record at most ``LOOK_BACK`` records: a moving rank
    completed one of its newest. (Reduced dumps keep times only on the records they keep whole,
    the newest of each group and the pending ones; past those this finds no time and keeps the
    finding: cheap at any scale, and never drops on a guess.)"""
    dump = ctx.picture.dumps.get(rank)
    group = ctx.picture.groups.get(pg)
    view = group.ranks.get(rank) if group is not None else None
    if dump is None or dump.backend != "nccl" or view is None:
        return None
    written = written_at(dump.path)
    if written is None:
        return None
    entries = view.entries
    newest = 0
    for index in range(len(entries) - 1, max(len(entries) - LOOK_BACK, 0) - 1, -1):
        entry = entries[index]
        done = entry.time_completed_ns
        if entry.completed is True and type(done) is int and done > newest:
            newest = done
    return written - newest / 1e9 if newest else None


def all_moving(ctx: Context) -> str | None:
    """A note when every rank of the job has an NCCL dump and, in every group where it has an op
    pending, its watchdog discovered a completion within ``MOVING_WITHIN_S`` of the dump's
    writing: nobody was stuck when looked at (a stuck rank's newest completion in the group it is
    stuck in is as old as its stall; a side group that keeps completing, a thread's periodic
    barrier, says nothing of the others), whatever the frontiers say."""
    dumps = ctx.picture.dumps
    world = ctx.picture.world_size or 0
    if not dumps or len(dumps) < world or len(dumps) > MAX_RANKS_MOVING:
        return None
    worst, checked = 0.0, 0
    for rank in dumps:
        for pg in {group.name for group, _ in ctx.picture.pending_ops(rank)}:
            lag = _completion_lag(ctx, rank, pg)
            if lag is None or not -MOVING_WITHIN_S < lag < MOVING_WITHIN_S:
                return None
            worst, checked = max(worst, lag), checked + 1
    if not checked:
        return None  # nothing pending anywhere: nothing to tell moving from (a finished job)
    return (f"every rank's dump shows it completing collectives up to {worst:.1f} s before the "
            f"dump was written: the job was moving when it was looked at (its dumps, taken "
            f"moments apart, differ in how far each had got)")
