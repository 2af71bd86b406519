"""collective_mismatch from torch's watchdog status lines: one rank completed a collective that
another rank of the same group is still stuck in.

Signal: ``nccl_work_status`` lines (``Exception (either an error or timeout) detected by watchdog
at work: S, last enqueued NCCL work: E, last completed NCCL work: C``, with the group named in the
line's ``[PG ID ... Rank R]`` head), and the ``nccl_watchdog_timeout`` of the same rank and seq for
its op and size.

Rule ``completed-past-peer`` (0.8): in one named group, rank A's last completed seq is at or past
the seq rank B timed out in. A collective completes only when every member of the group joined it,
so A's collective at that seq was paired with some other call of B's: the two ranks' streams of
collectives diverged (a branch taken on one rank only, a collective skipped or added). When B also
enqueued no fewer collectives than A (its "last enqueued" at or past A's), B is not behind in
anything it did, and the divergence is the root cause (0.8; no culprit: the lines do not say which
rank took the other path); ``log_waits``'s reading (B behind: a missing rank) comes second. When B
enqueued fewer, B is behind in issuing too and that reading stays first; this one is said as the
alternative (0.6).

Not read for send/recv (their sequence numbers count apart from collectives in torch >= 2.3), nor
for lines that name no group (two groups' counters do not compare). False positives: a watchdog
whose completion bookkeeping lags its GPU (a rank whose process was stopped between the two
reads) -- not seen in practice.
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_causes import rank_events
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.model import LogEvent

_P2P = ("send", "recv")


def detect(ctx: Context) -> list[Finding]:
    status: dict[str, dict[int, LogEvent]] = defaultdict(dict)
    timeouts: dict[tuple[int, int], LogEvent] = {}
    for rank, event in rank_events(ctx.evidence):
        seq = event.fields.get("seq")
        if not isinstance(seq, int):
            continue
        if event.kind == "nccl_work_status" and event.fields.get("pg") \
                and isinstance(event.fields.get("last_completed"), int):
            status[str(event.fields["pg"])].setdefault(rank, event)
        elif event.kind == "nccl_watchdog_timeout":
            timeouts.setdefault((rank, seq), event)
    for pg, by_rank in status.items():
        found = _diverged(pg, by_rank, timeouts)
        if found is not None:
            return [found]
    past = _timed_out_past(timeouts)
    return [past] if past is not None else []


# ops whose root may finish before the others have (broadcast, reduce, gather, scatter): a rank
# past one of them proves less than a rank past an all-to-all-shaped collective
_ROOTED = ("broadcast", "reduce", "gather", "scatter")
_SYMMETRIC = ("allreduce", "allgather", "reduce_scatter", "reducescatter", "alltoall", "barrier",
              "all_reduce", "all_gather")


def _timed_out_past(timeouts: dict[tuple[int, int], LogEvent]) -> Finding | None:
    """Rule ``timed-out-past-peer`` (watchdog lines alone): in one group, rank A's watchdog timed
    out at seq Sa and rank B's at Sb < Sa. A watchdog times out on its rank's oldest pending work,
    and NCCL completes a rank's works in order, so A completed Sb, the collective B is stuck in; a
    collective completes only with every member in it, so A's Sb was paired with another call of
    B's: the ranks' sequences of collectives diverged. 0.65 (0.55 where B's op has a root that may
    finish first, or where the lines name no group, since two groups' counters do not compare).
    The culprit is the smaller side (ranks at one seq against the ranks at the other) where one
    is smaller; send/recv are not read (their counters differ from collectives')."""
    by_pg: dict[str, dict[int, LogEvent]] = defaultdict(dict)
    for (rank, _), event in sorted(timeouts.items()):
        if any(w in str(event.fields.get("op", "")).lower() for w in _P2P):
            continue
        by_pg[str(event.fields.get("pg") or "")].setdefault(rank, event)
    for pg, by_rank in by_pg.items():
        seqs = sorted({int(e.fields["seq"]) for e in by_rank.values()})
        if len(seqs) != 2:
            continue  # one seq: nobody past anybody; three or more: read by log_waits
        low = sorted(r for r, e in by_rank.items() if int(e.fields["seq"]) == seqs[0])
        high = sorted(r for r, e in by_rank.items() if int(e.fields["seq"]) == seqs[1])
        stuck = by_rank[low[0]]
        op_b = str(stuck.fields.get("op", ""))
        rooted = any(w in op_b.lower() for w in _ROOTED) and not any(
            w in op_b.lower() for w in _SYMMETRIC)
        culprits = low if len(low) < len(high) else high if len(high) < len(low) else []
        ahead = by_rank[high[0]]
        summary = (f"rule timed-out-past-peer: {_ranks(high)} timed out at "
                   f"#{seqs[1]} ({ahead.fields.get('op', '?')}), so completed #{seqs[0]}, which "
                   f"{_ranks(low)} {'is' if len(low) == 1 else 'are'} still stuck in ({op_b}); a "
                   "collective completes only with every member in it, so the ranks' sequences of "
                   "collectives diverged (a branch, a collective skipped or added on one side)"
                   + (f"; the smaller side, {_ranks(culprits)}, is the odd one out" if culprits
                      else "; the sides are equal, so the lines do not say which took the other "
                      "path")
                   + ("" if pg else " (the lines name no process group: if these are different "
                      "groups, the numbers do not compare)"))
        return Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=culprits,
                       waiting_ranks=sorted(set(by_rank) - set(culprits)),
                       confidence=0.55 if rooted or not pg else 0.65, summary=summary,
                       evidence=[log_evidence(stuck), log_evidence(ahead)],
                       collective=CollectiveRef(pg=pg or None, seq=seqs[0], op=op_b,
                                                numbering="watchdog"),
                       measures={"rule": "timed-out-past-peer"})
    return None


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))}"


def _op(timeouts: dict[tuple[int, int], LogEvent], rank: int, seq: int) -> str:
    event = timeouts.get((rank, seq))
    return str(event.fields.get("op", "")) if event is not None else ""


def _diverged(pg: str, by_rank: dict[int, LogEvent],
              timeouts: dict[tuple[int, int], LogEvent]) -> Finding | None:
    for a, ahead in sorted(by_rank.items()):
        for b, stuck in sorted(by_rank.items()):
            seq_b = int(stuck.fields["seq"])
            if a == b or int(ahead.fields["last_completed"]) < seq_b:
                continue
            op_a, op_b = _op(timeouts, a, int(ahead.fields["seq"])), _op(timeouts, b, seq_b)
            if any(word in (op_a + op_b).lower() for word in _P2P):
                continue
            enqueued = stuck.fields.get("last_enqueued")
            both = isinstance(enqueued, int) and enqueued >= int(ahead.fields["seq"])
            theirs = ahead.fields.get("last_enqueued")
            issued_more = both and isinstance(enqueued, int) and isinstance(theirs, int) \
                and enqueued >= theirs
            summary = (
                f"rule completed-past-peer: rank {a} completed collective #{seq_b} of pg {pg} "
                f"(its last completed is #{ahead.fields['last_completed']}) while rank {b} is "
                f"still stuck in #{seq_b}{f' ({op_b})' if op_b else ''}; a collective completes "
                "only when every member joins it, so rank "
                f"{a}'s #{seq_b} was paired with another call of rank {b}'s: the ranks' "
                "sequences of collectives diverged (one rank took a branch, skipped or added a "
                "collective)"
                + (f"; rank {b} had enqueued up to #{enqueued}, past rank {a}'s stuck "
                   f"#{ahead.fields['seq']}" if both else "")
                + (f" and no fewer than rank {a} (#{ahead.fields['last_enqueued']}), so it is not "
                   "behind; the lines do not say which rank took the other path" if issued_more
                   else f"; rank {b} also issued fewer collectives than rank {a}, so the reading "
                   f"that rank {b} is behind (a missing rank) is likelier"))
            evidence = [log_evidence(ahead), log_evidence(stuck)]
            evidence += [log_evidence(e) for e in (timeouts.get((a, int(ahead.fields["seq"]))),
                                            timeouts.get((b, seq_b))) if e is not None]
            return Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=[],
                           waiting_ranks=sorted(by_rank),
                           confidence=0.8 if issued_more else 0.6, summary=summary,
                           evidence=evidence,
                           collective=CollectiveRef(pg=pg, seq=seq_b, op=op_b,
                                                    numbering="watchdog"),
                           measures={"rule": "completed-past-peer"})
    return None
