"""What each log line says about a collective, as per-rank observations in one shape.

A flight-recorder entry, a watchdog timeout, a desync report, a DETAIL fingerprint mismatch, a
failed monitored barrier and a store-barrier wait all say the same kind of thing: *this rank was in
(or had not reached, or had finished) this collective of this group*. :func:`log_observations`
turns the log events of a job into :class:`Observation` objects so that the wait graph and the
detectors read them next to the FR picture, each citing its ``file:line``.

Sequence numbers are kept *in their own numbering* (``numbering``): the watchdog's ``SeqNum``, the
work-status "at work: N", the desync report's ``#N`` and the DETAIL ``SequenceNumber`` are different
counters in some torch versions, so only observations of one numbering (and one group) are ever
compared with each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from hangscope.model import JobEvidence, LogEvent

ObsState = Literal[
    "timed_out",  # the rank's watchdog (or gloo) gave up waiting in this collective
    "waiting",  # the rank is (was) inside this collective
    "completed",  # the rank finished this collective (and had not joined the next one)
    "never_joined",  # another rank's report says this rank never entered it
    "entered",  # the rank entered it with these arguments (DETAIL fingerprints)
]

# States of ranks that are inside a collective and wait for others.
WAITING_STATES = frozenset({"timed_out", "waiting"})


@dataclass(frozen=True, slots=True)
class Observation:
    """One rank in one collective, as one log line saw it."""

    rank: int
    state: ObsState
    numbering: str  # watchdog | work_status | desync | detail | barrier | store | gloo
    pg: str  # the group as the line names it ("0", "0:default_pg", "default_pg"); "" if unknown
    seq: int | None
    op: str
    where: str  # file:line
    reporter: int | None = None  # the rank whose log said it, when it speaks of another rank
    time: float | None = None
    numel: int | None = None
    shape: str = ""
    dtype: str = ""
    timeout_ms: int | None = None
    detail: str = ""

    @property
    def group_key(self) -> tuple[str, str, str]:
        """(numbering, group, scope): observations are compared only within one key. Reports
        that name no group are compared only with themselves (scope: the report's own line):
        two ranks' desync reports may be of two groups."""
        if not self.pg and self.numbering in ("desync", "barrier", "detail"):
            return (self.numbering, "", self.where)
        return (self.numbering, self.pg, "")

    def describe(self) -> str:
        seq = f" #{self.seq}" if self.seq is not None else ""
        pg = f" on pg {self.pg}" if self.pg else ""
        args = f" numel {self.numel}" if self.numel is not None else ""
        args += f" {self.shape}" if self.shape else ""
        args += f" {self.dtype}" if self.dtype else ""
        verb = {"timed_out": "timed out in", "waiting": "waiting in",
                "completed": "completed", "never_joined": "never joined",
                "entered": "entered"}[self.state]
        after = f" after {self.timeout_ms} ms" if self.state == "timed_out" and self.timeout_ms \
            else ""
        return f"{verb} {self.op or 'a collective'}{seq}{pg}{args}{after} ({self.numbering})"


def _ranks(text: object) -> list[int]:
    return [int(part) for part in str(text or "").split(",") if part.strip().isdigit()]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _events(evidence: JobEvidence) -> Iterator[tuple[int | None, LogEvent]]:
    for rank, rank_ev in evidence.ranks.items():
        for event in rank_ev.logs:
            yield (event.rank if event.rank is not None else rank), event
    for event in evidence.unattributed_logs:
        yield event.rank, event


def _pg_of(event: LogEvent, status_pg: dict[tuple[int | None, int | None], str]) -> str:
    pg = str(event.fields.get("pg", "") or "")
    if pg:
        return pg
    seq = _int(event.fields.get("seq"))
    # a watchdog line names no group; the work-status line printed beside it does
    return status_pg.get((event.rank, seq), "") if seq is not None else ""


# a non-zero rank's report that rank 0's monitored barrier failed ("received errors while waiting
# for send/recv from rank 0"): it names rank 0, which only relayed who failed
PEER_SIDE = "peer side of a monitored barrier"
# the same report, whose exception says rank 0's connection closed: its process went away
PEER_CLOSED = "peer side of a monitored barrier: the connection to it closed"
_PEER_SIDES = (PEER_SIDE, PEER_CLOSED)


def log_observations(evidence: JobEvidence) -> list[Observation]:
    """Every collective observation the job's logs hold, duplicates (tee'd copies, repeats of
    one timeout inside the exception text) collapsed to their first line."""
    events = list(_events(evidence))
    status_pg = {(e.rank, _int(e.fields.get("seq"))): str(e.fields.get("pg", ""))
                 for _, e in events if e.kind == "nccl_work_status" and e.fields.get("pg")}
    found: dict[tuple[object, ...], Observation] = {}
    for rank, event in events:
        for obs in _from_event(rank, event, status_pg):
            key = (obs.rank, obs.state, obs.numbering, obs.pg, obs.seq, obs.op, obs.reporter)
            found.setdefault(key, obs)
    out = list(found.values())
    if any(o.numbering == "barrier" and o.state == "never_joined" and o.detail not in _PEER_SIDES
           for o in out):
        # rank 0 names who failed its barrier; the others' "errors from rank 0" echo its report
        out = [o for o in out if o.detail not in _PEER_SIDES]
    return out


def _barrier_side(fields: dict[str, str | int | float]) -> str:
    if not fields.get("peer_side"):
        return ""
    return PEER_CLOSED if fields.get("peer_closed") else PEER_SIDE


def _at_dump_signal(rank: int, event: LogEvent, where: str) -> list[Observation]:
    """A rank's own counts in torch's dump-signal line (``Received a dump signal due to a
    collective timeout from rank 3 ... Last enqueued NCCL work: 41, last completed NCCL work:
    41``): where its stream stood when a peer timed out: inside the first op it enqueued and did
    not complete, or done and idle."""
    enqueued = _int(event.fields.get("last_enqueued"))
    done = _int(event.fields.get("last_completed"))
    pg = str(event.fields["pg"])
    if enqueued is None or done is None:
        return []
    if done >= 0 and enqueued == done:
        return [Observation(rank, "completed", "work_status", pg, done, "", where,
                            time=event.time)]
    if enqueued > done >= -1:
        return [Observation(rank, "waiting", "work_status", pg, done + 1, "", where,
                            time=event.time)]
    return []


def _from_event(rank: int | None, event: LogEvent,
                status_pg: dict[tuple[int | None, int | None], str]) -> list[Observation]:
    fields = event.fields
    kind = event.kind
    where = event.where()
    if kind == "nccl_watchdog_timeout" and rank is not None:
        return [Observation(rank, "timed_out", "watchdog", _pg_of(event, status_pg),
                            _int(fields.get("seq")), str(fields.get("op", "")), where,
                            time=event.time, numel=_int(fields.get("numel_in")),
                            shape=str(fields.get("tensor_shape", "")),
                            timeout_ms=_int(fields.get("timeout_ms")))]
    if kind == "nccl_error" and rank is not None and fields.get("async") \
            and _int(fields.get("seq")) is not None:
        # "Collective WorkNCCL(SeqNum=.., OpType=..) raised the following async exception": the
        # rank was in that collective when NCCL failed it (the watchdog's numbering)
        return [Observation(rank, "waiting", "watchdog", _pg_of(event, status_pg),
                            _int(fields.get("seq")), str(fields.get("op", "")), where,
                            time=event.time, numel=_int(fields.get("numel_in")),
                            timeout_ms=_int(fields.get("timeout_ms")))]
    if kind == "nccl_work_status" and rank is not None and _int(fields.get("seq")) is not None:
        seq = _int(fields.get("seq"))
        out = [Observation(rank, "timed_out", "work_status", str(fields.get("pg", "")), seq, "",
                           where, time=event.time)]
        done = _int(fields.get("last_completed"))
        if done is not None and done >= 0:
            out.append(Observation(rank, "completed", "work_status", str(fields.get("pg", "")),
                                   done, "", where, time=event.time))
        return out
    if kind == "fr_dump_notice" and rank is not None and fields.get("pg"):
        return _at_dump_signal(rank, event, where)
    if kind == "nccl_desync":
        return _desync(rank, event, _pg_of(event, status_pg))
    if kind == "collective_fingerprint_mismatch":
        return _fingerprints(rank, event)
    if kind == "monitored_barrier_failure":
        failed = _ranks(fields.get("failed_ranks"))
        out = [Observation(r, "never_joined", "barrier", str(fields.get("pg", "")), None,
                           "monitored_barrier", where, reporter=rank, time=event.time,
                           timeout_ms=_int(fields.get("timeout_ms")),
                           detail=_barrier_side(fields)) for r in failed]
        if rank is not None and rank not in failed:
            out.append(Observation(rank, "timed_out", "barrier", str(fields.get("pg", "")), None,
                                   "monitored_barrier", where, time=event.time,
                                   timeout_ms=_int(fields.get("timeout_ms"))))
        return out
    if kind == "store_barrier_wait" and rank is not None:
        return [Observation(rank, "waiting", "store", str(fields.get("key", "")), None,
                            "init_process_group", where, time=event.time,
                            detail=f"{fields.get('joined', '?')} of {fields.get('world_size', '?')}"
                                   " ranks joined")]
    if kind == "gloo_timeout" and rank is not None:
        return [Observation(rank, "timed_out", "gloo", "", None, str(fields.get("op", "")),
                            where, time=event.time, timeout_ms=_int(fields.get("timeout_ms")))]
    return []


def _desync(reporter: int | None, event: LogEvent, pg: str) -> list[Observation]:
    """torch's ``analyzeLaggingRanks``: the ranks listed are those at the lowest seq of the
    group (the lagging ones); every rank not listed is further on."""
    fields = event.fields
    seq = _int(fields.get("seq"))
    op = str(fields.get("op", ""))
    where = event.where()
    # each list with the seq the report gives it: a lagging rank "finished collective #182, but
    # didn't join collective #183" is at #182, not at the #315 its reporter timed out in
    listed: list[tuple[str, ObsState, int | None]] = [
        ("joined_not_finished", "waiting", _int(fields.get("joined_seq"))),
        ("finished_not_joined_next", "completed", _int(fields.get("finished_seq"))),
        ("never_joined", "never_joined", None)]
    out = [Observation(r, state, "desync", pg, own if own is not None else seq,
                       op if own is None or own == seq else "", where, reporter=reporter,
                       time=event.time)
           for name, state, own in listed for r in _ranks(fields.get(name))]
    if reporter is not None and not any(o.rank == reporter for o in out):
        out.append(Observation(reporter, "timed_out", "desync", pg, seq, op, where,
                               time=event.time))
    return out


def _fingerprints(reporter: int | None, event: LogEvent) -> list[Observation]:
    fields = event.fields
    out = []
    for tag in ("a", "b"):
        rank = _int(fields.get(f"rank_{tag}"))
        if rank is None:
            continue
        out.append(Observation(rank, "entered", "detail", str(fields.get("pg", "")),
                               _int(fields.get(f"seq_{tag}")), str(fields.get(f"op_{tag}", "")),
                               event.where(), reporter=reporter, time=event.time,
                               shape=str(fields.get(f"shape_{tag}", "")),
                               dtype=str(fields.get(f"dtype_{tag}", ""))))
    return out


# Which observation of a rank tells most about where it stands: inside a collective first.
_STATE_ORDER = {"timed_out": 0, "waiting": 1, "never_joined": 2, "entered": 3, "completed": 4}


def by_rank(observations: list[Observation]) -> dict[int, list[Observation]]:
    """Each rank's observations, the most telling first (then by file order)."""
    found: dict[int, list[Observation]] = {}
    for obs in observations:
        found.setdefault(obs.rank, []).append(obs)
    for items in found.values():
        items.sort(key=lambda o: (not o.op, _STATE_ORDER[o.state], o.where))
    return found


def log_state(seen: list[Observation]) -> str:
    """One line for a rank known from logs: its most telling observation (ranks with the same
    line share a wait-graph class)."""
    first = seen[0]
    more = len({(o.numbering, o.pg, o.seq, o.state) for o in seen}) - 1
    by = f" (per rank {first.reporter}'s log)" if first.reporter is not None else ""
    return first.describe() + by + (f" +{more} more" if more > 0 else "")
