"""NCCL RAS reports as facts about global ranks.

RAS (``nccl_ras`` events, see ``sources/logs/nccl_ras.py``) is NCCL's own job-wide view: which
processes it considers dead, which do not answer, how many operations each rank of a communicator
launched, which communicators hold an error. It names communicator ranks and processes (pid and
node), not global ranks and not torch process groups: :func:`ras_facts` maps only what can be
mapped without guessing, and detectors cite what it returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hangscope.analysis.rank_state import RankStackState
from hangscope.analysis.verdict import EvidenceItem
from hangscope.model import JobEvidence, LogEvent
from hangscope.sources.logs.common import one_line

RAS_MARK = "NCCL RAS"  # every RAS evidence detail starts with it (see is_ras_evidence)
RAS_STATES = ("DEAD", "INCOMPLETE", "MISMATCH", "ERROR")
_MAX_RANK = 1 << 20
_REMOTE_ERROR = "Remote process error"  # ncclRemoteError: the peer or the network failed


@dataclass(frozen=True, slots=True)
class RasFact:
    """What one RAS report entry says about one global rank.

    ``state``: DEAD (NCCL gave up on the process: unreachable over the RAS network), INCOMPLETE
    (it does not answer), MISMATCH (the rank launched fewer operations of a collective than the
    most advanced rank of the communicator), ERROR (a communicator of the rank holds an
    initialization or asynchronous error). ``echo`` marks an ERROR that is most likely the
    consequence of another rank's loss (a remote error, or any error while the same report names
    a dead or unresponsive process).
    """

    rank: int
    state: str
    event: LogEvent
    detail: str
    echo: bool = False

    def failure(self) -> str | None:
        """The rank's own failure this fact records, for :func:`failures`."""
        if self.state == "DEAD":
            return "dead"
        if self.state == "ERROR" and not self.echo:
            return "collective_error"
        return None

    def evidence(self) -> EvidenceItem:
        return EvidenceItem("log", self.rank, self.detail, self.event.where())


def seen_alive(stacks: dict[int, RankStackState], rank: int) -> bool:
    """The rank's latest stack sample shows its main thread: a live process, whatever RAS says."""
    state = stacks.get(rank)
    return state is not None and state.main is not None and not state.gone \
        and not state.main_finished


def is_ras_evidence(item: EvidenceItem) -> bool:
    return item.source == "log" and item.detail.startswith(RAS_MARK)


def ras_facts(evidence: JobEvidence) -> list[RasFact]:
    return _map_report(evidence)[0]


def ras_unmapped(evidence: JobEvidence) -> list[str]:
    """What RAS reports blame but no global rank could be found for, one line per entry: an
    evidence gap, never a finding."""
    return _map_report(evidence)[1]


def _map_report(evidence: JobEvidence) -> tuple[list[RasFact], list[str]]:
    """Every rank a RAS report names, as a global rank.

    RAS names communicator ranks, and processes by pid and node (an IP address). A communicator
    rank is the global rank when the communicator spans the job (its ``size`` is the world size:
    torch orders a communicator's ranks by global rank); a process is a rank when the report's own
    entries for such a communicator name it, else when exactly one rank of the evidence has its pid
    (and either the rank's host is that node or everything seen is on one node). Anything else
    stays unmapped: a communicator hash is not a torch process group, and a sub-communicator's
    rank 2 is not global rank 2. Entries that name no rank, or ranks outside the job, give nothing.
    """
    events = [e for e in evidence.all_logs()
              if e.kind == "nccl_ras" and e.fields.get("state") in RAS_STATES]
    if not events:
        return [], []
    sizes = [s for e in events if isinstance(s := e.fields.get("size"), int) and s > 0]
    # a communicator of the whole job is as large as the job (when no one declared its size)
    world = evidence.world_size or max([evidence.expected_world_size() or 0, *sizes]) or None
    by_proc = _ranks_by_proc(evidence, events, world)
    lost = {e.path for e in events if e.fields.get("state") in ("DEAD", "INCOMPLETE")}
    # A report whose only lost processes are dead ones (a DEAD entry, no job-level INCOMPLETE
    # one) lost every rank its communicators miss to them: NCCL 2.24-2.26 name those ranks
    # without their process.
    only_dead = {e.path for e in events if e.fields.get("comm") == "job"
                 and e.fields.get("state") == "DEAD"} - {
        e.path for e in events if e.fields.get("comm") == "job"
        and e.fields.get("state") == "INCOMPLETE"}
    facts: list[RasFact] = []
    unmapped: list[str] = []
    seen: set[tuple[int, str, str, int]] = set()
    for event in events:
        state = str(event.fields["state"])
        missed: list[str] = []
        for rank, proc, comm_rank in _named(event, world, by_proc, missed):
            if not 0 <= rank < (world or _MAX_RANK):
                continue
            states = [state]
            if state == "INCOMPLETE" and event.path in only_dead and event.fields["comm"] != "job":
                states.append("DEAD")
            for named_state in states:
                key = (rank, named_state, event.path, event.line_no)
                if key in seen:
                    continue
                seen.add(key)
                echo = named_state == "ERROR" and (event.path in lost or _only_remote(event))
                facts.append(RasFact(rank, named_state, event,
                                     _ras_detail(event, named_state, rank, proc, comm_rank), echo))
        if missed:
            unmapped.append(f"NCCL RAS {state} at {event.where()} names {', '.join(missed[:4])}"
                            + (f" and {len(missed) - 4} more" if len(missed) > 4 else "")
                            + ": no global rank is certain for "
                            + ("it" if len(missed) == 1 else "them")
                            + " (a communicator rank is one only when the communicator spans the"
                            " job, a process only when exactly one known rank has its pid)")
    return facts, unmapped


def _procs(event: LogEvent) -> list[tuple[int | None, str]]:
    """``procs`` as (communicator rank or None, "pid@node")."""
    out: list[tuple[int | None, str]] = []
    for item in str(event.fields.get("procs", "")).split(","):
        rank_text, _, proc = item.rpartition("=")
        pid, _, node = proc.partition("@")
        if not pid.isdigit() or not node:
            continue
        out.append((int(rank_text) if rank_text.isdigit() else None, proc))
    return out


def _spans_job(event: LogEvent, world: int | None) -> bool:
    size = event.fields.get("size")
    return event.fields.get("comm") != "job" and isinstance(size, int) and size == world


def _ranks_by_proc(evidence: JobEvidence, events: list[LogEvent],
                   world: int | None) -> dict[str, int]:
    """"pid@node" -> global rank: from the report's job-wide communicators, else by pid."""
    found: dict[str, int] = {}
    for event in events:
        if _spans_job(event, world):
            for rank, proc in _procs(event):
                if rank is not None:
                    found.setdefault(proc, rank)
    owners: dict[int, list[int]] = {}
    for rank, rank_ev in evidence.ranks.items():
        if rank_ev.pid:
            owners.setdefault(rank_ev.pid, []).append(rank)
    procs = {proc for event in events for _, proc in _procs(event)}
    nodes = {proc.partition("@")[2] for proc in procs}
    hosts = {rank_ev.host for rank_ev in evidence.ranks.values() if rank_ev.host}
    one_node = len(nodes) <= 1 and len(hosts) <= 1
    for proc in procs - set(found):
        pid, _, node = proc.partition("@")
        ranks = owners.get(int(pid), [])
        if len(ranks) == 1 and (one_node or evidence.ranks[ranks[0]].host == node):
            found[proc] = ranks[0]
    return found


def _named(event: LogEvent, world: int | None, by_proc: dict[str, int],
           missed: list[str]) -> Iterator[tuple[int, str, int | None]]:
    """(global rank, "pid@node" or "", communicator rank or None) for each rank the entry blames;
    what it blames but cannot be mapped goes to ``missed``."""
    fields = event.fields
    if fields.get("comm") == "job":
        for _, proc in _procs(event):
            if proc in by_proc:
                yield by_proc[proc], proc, None
            else:
                missed.append(_process_words(proc))
        return
    listed = fields.get("behind") if fields.get("state") == "MISMATCH" else fields.get("ranks")
    proc_of = {rank: proc for rank, proc in _procs(event) if rank is not None}
    for text in str(listed or "").split(","):
        if not text.isdigit():
            continue
        comm_rank = int(text)
        proc = proc_of.get(comm_rank, "")
        if _spans_job(event, world):
            yield comm_rank, proc, comm_rank
        elif proc in by_proc:
            yield by_proc[proc], proc, comm_rank
        else:
            missed.append(f"rank {comm_rank} of communicator {fields.get('comm', '?')}"
                          + (f" ({_process_words(proc)})" if proc else ""))


def _process_words(proc: str) -> str:
    pid, _, node = proc.partition("@")
    return f"process {pid} on node {node}"


def _only_remote(event: LogEvent) -> bool:
    errors = [e for e in str(event.fields.get("errors", "")).split(";") if e]
    return bool(errors) and all(e == _REMOTE_ERROR for e in errors)


def _ras_detail(event: LogEvent, state: str, rank: int, proc: str, comm_rank: int | None) -> str:
    fields = event.fields
    pid, _, node = proc.partition("@")
    who = f"rank {rank}" + (f" (process {pid} on node {node})" if proc else "")
    comm = str(fields.get("comm", ""))
    where = f"communicator {comm}" + (f", where it is rank {comm_rank}"
                                      if comm_rank is not None and comm_rank != rank else "")
    if state == "DEAD" and fields.get("state") == "INCOMPLETE":
        text = (f"{who} is missing from {where}, and the only processes the report lost are "
                "considered dead (unreachable via the RAS network)")
    elif state == "DEAD":
        text = (f"{who} is considered dead by NCCL (unreachable via the RAS network"
                + (f"; missing from {where})" if comm != "job" else ")"))
    elif state == "INCOMPLETE":
        text = f"{who} does not answer: no data from it for " + (
            "any communicator" if comm == "job" else where)
    elif state == "MISMATCH":
        ops = str(fields.get("ops", "collective")).replace(",", "/")
        launched = dict(item.split(":", 1) for item in str(fields.get("op_counts", "")).split(",")
                        if ":" in item)
        count = launched.get(str(comm_rank))
        majority = fields.get("majority_count")
        text = (f"{who} has launched {count if count is not None else 'fewer'} {ops} operations"
                + (f", most ranks {majority}" if majority is not None else "")
                + f" ({where})")
    else:
        phase = str(fields.get("phase", "")).replace("init", "initialization")
        phase = phase.replace("async", "asynchronous").replace(",", " and ")
        errors = str(fields.get("errors", "")).replace(";", ", ")
        text = (f"{who}: {where} holds {phase + ' ' if phase else ''}error(s)"
                + (f": {errors}" if errors else ""))
    return one_line(f"{RAS_MARK}: {text}", 400)
