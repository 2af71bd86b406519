"""p2p_deadlock from NCCL's COLL lines of point-to-point calls
(``sources/logs/collective_lines.py``: ``Send: opCount N ... root P comm C ... stream S``,
``Recv: ...``).

Rule ``p2p-one-sided``: a rank's last NCCL calls in the log are point-to-point, and on a
communicator it issued two or more of them all one way (only sends, or only receives) while no
call the other way on that communicator is logged by anyone. A send in NCCL blocks until the
peer posts the matching receive (beyond the small buffered slack); a stream of unanswered sends
(or receives) at the end of a log that stopped is the send/recv order of the two peers not
matching: each sends before it receives, or one receives on another stream or communicator. 0.4:
the peer's log may simply be missing from the paste. 0.5 when the rank also has calls the other
way on a second communicator or stream (``send on one, receive on another``): NCCL orders calls
only within a stream, so the peer's mirrored order can block both; the usual fix is one
``ncclGroupStart`` / ``batch_isend_irecv`` for both directions. No culprit: the order of both
peers is at fault.

Rule ``pp-send-first`` reads torch.distributed.pipelining's per-rank schedule actions
(``pp_actions``: ``0SEND_F1, 2RECV_F0, ...``): two ranks whose last send goes to the other and
is followed by a receive from the other, at the end of their lists (the last send among the last
three actions: where the rank stopped, not a whole schedule), both send first; a send larger
than NCCL's buffer waits for the peer's receive, so each waits in its send (p2p_deadlock, both
ranks named, 0.55). A stage's peer is stage+1 for SEND_F/RECV_B and stage-1 for SEND_B/RECV_F; a
stage belongs to the rank whose list shows it, else to stage mod the number of ranks listed
(looped schedules).

False positives: a one-way stream by design (a producer rank only sends) whose receiver's log is
not given, in a job that did not hang: read only when nothing else explains the log (low
confidence).
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import rank_events
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    return _one_sided(ctx) or _pp_send_first(ctx)


def _one_sided(ctx: Context) -> list[Finding]:
    by_comm: dict[str, list[tuple[int, LogEvent]]] = defaultdict(list)
    last: dict[int, LogEvent] = {}
    for rank, event in rank_events(ctx.evidence):
        if event.kind != "collective_line":
            continue
        if rank not in last or event.line_no > last[rank].line_no:
            last[rank] = event
        if event.fields.get("p2p"):
            by_comm[str(event.fields.get("comm", ""))].append((rank, event))
    one_sided = []
    for comm, calls in by_comm.items():
        ops = {str(e.fields["op"]) for _, e in calls}
        ranks = {r for r, _ in calls}
        if len(calls) >= 2 and len(ops) == 1 and any(last[r].fields.get("p2p") for r in ranks):
            one_sided.append((comm, calls))
    if not one_sided:
        return []
    comm, calls = max(one_sided, key=lambda item: len(item[1]))
    rank, sample = calls[-1]
    op = str(sample.fields["op"])
    other = "recv" if op == "send" else "send"
    crossed = [e for c, items in by_comm.items() if c != comm
               for r, e in items if r == rank and e.fields.get("op") == other]
    direction = "to" if op == "send" else "from"
    summary = (f"rule p2p-one-sided: {ranks_phrase([rank])}'s last NCCL calls are point-to-point, "
               f"and on communicator {comm or '?'} it issued {len(calls)} {op}s {direction} peer "
               f"{sample.fields.get('peer', '?')} (opCount {calls[0][1].fields.get('seq')}.."
               f"{sample.fields.get('seq')}) with no {other} on that communicator logged: a NCCL "
               f"{op} blocks until the peer posts the matching {other}, so the two peers' "
               "send/recv order does not match")
    confidence = 0.4
    if crossed:
        summary += (f"; it {other}s on another communicator ({crossed[0].fields.get('comm', '?')}"
                    f", stream {crossed[0].fields.get('stream', '?')}): NCCL orders calls only "
                    "within a stream, so a peer doing the mirror order blocks both (issue both "
                    "directions in one ncclGroupStart/End or batch_isend_irecv)")
        confidence = 0.5
    summary += "; the peer's own calls are not in the log"
    evidence = [EvidenceItem("log", r, e.message[:300], e.where()) for r, e in calls[-3:]]
    evidence += [EvidenceItem("log", rank, e.message[:300], e.where()) for e in crossed[-1:]]
    return [Finding(kind=Kind.P2P_DEADLOCK, culprit_ranks=[], waiting_ranks=[],
                    confidence=confidence, summary=summary, evidence=evidence,
                    measures={"rule": "p2p-one-sided"})]


_TAIL = 3  # the last send must be among a list's last actions: the rank stopped there


def _pp_send_first(ctx: Context) -> list[Finding]:
    lists: dict[int, tuple[LogEvent, list[tuple[int, str]]]] = {}
    for rank, event in rank_events(ctx.evidence):
        if event.kind == "pp_actions":
            parsed = []
            for item in str(event.fields.get("actions", "")).split(","):
                stage, kind, _ = (item.split(":") + ["", ""])[:3]
                if stage.isdigit():
                    parsed.append((int(stage), kind))
            lists[rank] = (event, parsed)
    if len(lists) < 2:
        return []
    owner = {stage: rank for rank, (_, acts) in lists.items() for stage, _ in acts}

    def peer(stage: int, kind: str) -> int | None:
        other = stage + 1 if kind in ("SEND_F", "RECV_B") else stage - 1
        return owner.get(other, other % len(lists) if other >= 0 else None)

    sends_first: dict[int, int] = {}  # rank -> the peer it sends to before receiving from it
    for rank, (_, acts) in lists.items():
        last = max((i for i, (_, k) in enumerate(acts) if k.startswith("SEND_")), default=None)
        if last is None or last < len(acts) - _TAIL:
            continue  # the list goes on past its last send: a schedule, not where it stopped
        to = peer(*acts[last])
        if any(k.startswith("RECV_") and peer(s, k) == to for s, k in acts[last + 1:]):
            sends_first[rank] = to  # type: ignore[assignment]
    pair = next(((a, b) for a, b in sends_first.items() if sends_first.get(b) == a and a < b), None)
    if pair is None:
        return []
    a, b = pair
    summary = (f"rule pp-send-first: the pipeline schedules of ranks {a} and {b} each send to the "
               "other before receiving from it (rank "
               f"{a}: {_tail(lists[a][0])}; rank {b}: {_tail(lists[b][0])}); a send larger than "
               "NCCL's buffer waits for the peer's receive, so both wait in their send")
    evidence = [EvidenceItem("log", r, lists[r][0].message[:300], lists[r][0].where())
                for r in pair]
    return [Finding(kind=Kind.P2P_DEADLOCK, culprit_ranks=[a, b], waiting_ranks=[],
                    confidence=0.55, summary=summary, evidence=evidence,
                    measures={"rule": "pp-send-first"})]


def _tail(event: LogEvent) -> str:
    items = str(event.fields.get("actions", "")).split(",")[-4:]
    return ", ".join(i.replace(":", "", 1).replace(":", "") for i in items)
