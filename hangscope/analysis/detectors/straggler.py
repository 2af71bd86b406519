"""straggler: the job still moves, but one rank (or a few) computes while the others wait for it.

Signal: across the stack samples, the culprit's main thread is mostly computing (and burns CPU)
while the other ranks are mostly inside collectives, waiting; every rank shows progress (stacks
change or CPU grows) and at least one waiting rank gets past its collective between samples, so
this is slow, not deadlocked. Says by how much: the share of samples
the others spent waiting, and the CPU ratio. Cites: the straggler's stack. Needs at least 3
samples per rank; more samples (``--samples 10``) sharpen it. Stacks alone can catch the
straggler inside the collective it finally joins; a rank that burns several times the CPU of the
others and computes clearly more often counts too. False positives: rank 0 doing
legitimate extra work (logging, checkpointing) that the others wait for once.
"""

from __future__ import annotations

from statistics import median

from hangscope.analysis.context import Context
from hangscope.analysis.rank_state import RankStackState
from hangscope.analysis.verdict import Finding, Kind
from hangscope.ranges import format_ranks, ranks_phrase

MIN_SAMPLES = 3
WAIT_KINDS = ("collective", "p2p")
CPU_RATIO = 2.5  # a straggler burns this many times the median CPU of the ranks waiting for it


def detect(ctx: Context) -> list[Finding]:
    states = {r: s for r, s in ctx.stacks.items() if len(s.kinds) >= MIN_SAMPLES and not s.gone}
    if len(states) < 2:
        return []
    busy = {r: sum(k in ("compute", "cuda_sync") for k in s.kinds) / len(s.kinds)
            for r, s in states.items()}
    waiting = {r: sum(k in WAIT_KINDS for k in s.kinds) / len(s.kinds) for r, s in states.items()}
    slow = sorted(r for r in states if (busy[r] >= 0.6 and waiting[r] <= 0.34)
                  or _burns_for_the_rest(r, states, busy))
    others = [r for r in states if r not in slow]
    if not slow or not others or len(slow) > max(1, len(states) // 4):
        return []
    # Waiting ranks that never move could be waiting forever on a rank stuck in a compute loop;
    # one of them getting past its collective between samples shows the job still moves.
    if not any(states[r].progress == "moving" for r in others):
        return []
    others_wait = median(waiting[r] for r in others)
    if others_wait < 0.5:
        return []
    cpu_slow = [c for r in slow if (c := states[r].cpu_share) is not None]
    cpu_rest = [c for r in others if (c := states[r].cpu_share) is not None]
    cpu_text = ""
    if cpu_slow and cpu_rest:
        cpu_text = (f"; CPU {median(cpu_slow):.0%} of a core on the straggler vs "
                    f"{median(cpu_rest):.0%} on the others")
    who = ranks_phrase(slow)
    summary = (f"the job is moving but {who} {'lag' if len(slow) > 1 else 'lags'}: computing in "
               f"{median(busy[r] for r in slow):.0%} of samples while ranks "
               f"{format_ranks(others)} spent {others_wait:.0%} of theirs waiting in collectives "
               f"for it{cpu_text}. Slow, not deadlocked.")
    evidence = [item for rank in slow[:4]
                if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
    return [Finding(kind=Kind.STRAGGLER, culprit_ranks=slow, waiting_ranks=sorted(others),
                    confidence=0.75, summary=summary, evidence=evidence)]


def _burns_for_the_rest(rank: int, states: dict[int, RankStackState],
                        busy: dict[int, float]) -> bool:
    """Stacks also catch a straggler inside the collective it finally joins (up to half its
    samples on a busy machine); CPU time does not: it burns several times what the ranks waiting
    for it burn, and computes clearly more often than they do."""
    share = states[rank].cpu_share
    rest = [c for r, s in states.items() if r != rank and (c := s.cpu_share) is not None]
    if share is None or not rest or share < 0.5 or share < CPU_RATIO * median(rest):
        return False
    others_busy = median(busy[r] for r in states if r != rank)
    return busy[rank] >= 0.3 and busy[rank] >= others_busy + 0.2
