"""straggler (busy, not stuck): the ranks the others wait for are computing, so the job is slow.

Signal: a wait of the graph (FR or stacks) whose targets all run the CPU in the job's or a
library's code, or move data through their main thread (``RankStackState.does_io``: a write to
a slow volume that sleeps or blocks in one frame): main thread ``compute`` and, over several
samples, moving with at least half a core,
(or, on a loaded machine, at least 12% and four times the CPU of the ranks waiting for it),
or, in a single snapshot, py-spy's ``active`` flag (on the CPU when dumped). A rank 0 writing a
checkpoint while the others wait in a barrier looks like this for as long as the checkpoint
lasts; so does a rank in a slower Python loop than the others. Over several samples the waiters
must be held in their wait: two healthy ranks out of phase also wait on each other for a moment.
Cites the busy rank's stack and CPU.
Status ``slow``: the generic ``missing_rank`` for the same ranks gives way to it. Known false
negative: a rank that spins forever (a busy-wait loop, a livelock) looks the same over one
window: the summary says to look again, and ``hangscope watch`` pages only when it stays.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.rank_state import RankStackState
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.ranges import ranks_do, ranks_phrase

BUSY_SHARE = 0.5  # of one core over the samples
# On a busy machine every rank gets less of a core: a rank with this much, and RELATIVE times
# the CPU of the ranks that wait for it, is busy too (ranks compared with each other).
LOADED_SHARE = 0.12
RELATIVE = 4.0


def busy(state: RankStackState | None, waiters_share: float | None = None) -> bool:
    """On the CPU in its own work, not in a wait."""
    if state is None or state.gone or state.main is None:
        return False
    if state.does_io():
        return True  # reading or writing its own data: a slow volume, a checkpoint
    if state.main.kind != "compute":
        return False
    if state.samples >= 2 and state.cpu_share is not None:
        share = state.cpu_share
        return state.progress == "moving" and (
            share >= BUSY_SHARE or (waiters_share is not None and share >= LOADED_SHARE
                                    and share >= RELATIVE * waiters_share))
    return state.main.active is True


def _share_of(ctx: Context, ranks: set[int]) -> float | None:
    """The most CPU any of ``ranks`` used over the samples, None where one is unknown."""
    shares = [s.cpu_share if (s := ctx.stacks.get(r)) is not None else None for r in ranks]
    return None if not shares or None in shares else max(x for x in shares if x is not None)


def held(state: RankStackState | None) -> bool:
    """Held in its wait over the samples; a waiter that moves on between samples is a healthy job
    out of phase (one rank still in backward while its peer already waits), not a straggler."""
    if state is None or state.samples < 2:
        return True  # one look cannot tell; the busy rank's ``active`` flag decides
    return state.progress != "moving"


def detect(ctx: Context) -> list[Finding]:
    found: dict[tuple[int, ...], set[int]] = {}
    for waiting, targets in ctx.graph.waits.values():
        culprits = tuple(sorted(targets - waiting))
        if not all(held(ctx.stacks.get(r)) for r in waiting):
            continue
        share = _share_of(ctx, waiting)
        if culprits and all(busy(ctx.stacks.get(r), share) for r in culprits):
            found.setdefault(culprits, set()).update(waiting)
    findings = []
    for culprits, waiting in found.items():
        doing = "; ".join(f"rank {r}: {ctx.stacks[r].describe()}" for r in culprits[:4])
        summary = (f"{ranks_phrase(list(culprits))} {'is' if len(culprits) == 1 else 'are'} busy, "
                   f"not stuck ({doing}), and {ranks_do(waiting, 'wait')} for "
                   f"{'it' if len(culprits) == 1 else 'them'}: the job is slow while this phase "
                   "lasts (a checkpoint, an evaluation, a slower loop). Slow, not deadlocked; a "
                   "rank that loops forever looks the same over one look, so look again (or "
                   "run `hangscope watch`) if it does not end")
        evidence = [item for r in culprits[:4]
                    if (item := ctx.stack_evidence(r, "main thread: ")) is not None]
        evidence += [EvidenceItem("proc", r, f"{share:.0%} of a core over the samples")
                     for r in culprits[:4]
                     if (share := ctx.stacks[r].cpu_share) is not None]
        findings.append(Finding(kind=Kind.STRAGGLER, culprit_ranks=list(culprits),
                                waiting_ranks=sorted(waiting), confidence=0.6,
                                summary=summary, evidence=evidence))
    return findings
