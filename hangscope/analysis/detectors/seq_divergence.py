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

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import rank_events
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
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
    return []


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
            evidence = [_item(ahead), _item(stuck)]
            evidence += [_item(e) for e in (timeouts.get((a, int(ahead.fields["seq"]))),
                                            timeouts.get((b, seq_b))) if e is not None]
            return Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=[],
                           waiting_ranks=sorted(by_rank),
                           confidence=0.8 if issued_more else 0.6, summary=summary,
                           evidence=evidence,
                           collective=CollectiveRef(pg=pg, seq=seq_b, op=op_b,
                                                    numbering="watchdog"),
                           measures={"rule": "completed-past-peer"})
    return None


def _item(event: LogEvent) -> EvidenceItem:
    return EvidenceItem("log", event.rank, event.message[:300], event.where())
