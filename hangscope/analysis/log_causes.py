"""Which log events are a rank's own failure, and which are the echo of someone else's.

When one rank dies, every other rank logs something too: gloo's "Connection closed by peer", NCCL
watchdog timeouts, torchrun's closing signals and its ChildFailedError table. Those are
consequences. A cause is what happened to a rank on its own: an OOM, a kill signal, an exception
of its own code, a transport error naming a peer. Detectors read :func:`failures`, which keeps
causes only, each rank's earliest first (by timestamp where the line has one, else file order).

NCCL RAS reports (``analysis/ras_facts.py``) add NCCL's own view: a process it considers dead
and a rank's own (non-remote) NCCL error become failures here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass

from hangscope.analysis.fault_context import (
    Ready,
    came_up_after,
    comms_ready,
    moving_streams,
    outlived,
    setup_failure,
)
from hangscope.analysis.gpu_ranks import FaultRanks
from hangscope.analysis.ras_facts import ras_facts
from hangscope.model import JobEvidence, LogEvent
from hangscope.sources.logs.common import one_line

# Messages of exceptions that a rank raises because a peer went away or timed out.
_ECHO = re.compile(r"Connection (closed|reset) by peer|Broken pipe|Timed out waiting|"
                   r"timed out|Watchdog caught|DistBackendError|NCCL communicator was aborted|"
                   r"remote process exited|ChildFailedError|Socket Timeout|recvBytes|"
                   r"Application timeout caused pair closure|failed to pass monitoredBarrier|"
                   r"Detected mismatch between collectives|Read timeout \[|"
                   r"received errors while waiting for send/recv from rank|"
                   # Horovod's own words: "caused by an exception on one of the ranks or an
                   # attempt to allreduce ... after one of the ranks finished execution"
                   r"Horovod has been shut down", re.I)
# a traceback that ends in the DataLoader's own report of its workers (the same words as
# sources/logs/dataloader.py's events): the loader's failure, whoever raised it
_LOADER_EXC = re.compile(r"DataLoader worker \(pid|DataLoader timed out after \d")
# torch's object collectives (broadcast_object_list, all_gather_object, gather_object,
# scatter_object_list, recv_object_list) unpickle the bytes the collective delivered in
# ``_tensor_to_object``: a rank whose collective was aborted (its watchdog's timeout, a peer gone)
# or that was sent bytes of another size raises there ("EOFError: Ran out of input", "invalid load
# key"). The collective failed; the exception is its echo, not the rank's own failure.
_OBJECT_UNPICKLE = frozenset({"_tensor_to_object", "_unpickler"})
_UNPICKLE_ERRORS = re.compile(r"^(?:\w+\.)*(?:EOFError|UnpicklingError)$")
# A Python exception that is the CUDA runtime's report of a fault on the rank's own GPU.
_GPU_FAULT = re.compile(r"CUDA error: (?!out of memory)|CUDA_ERROR_|cudaError")
ECHO_KINDS = frozenset({"gloo_connection_closed", "gloo_timeout", "nccl_watchdog_timeout",
                        "elastic_closing_signal", "nccl_heartbeat_stuck", "fr_dump_notice",
                        "nccl_work_status", "nccl_desync", "monitored_barrier_failure",
                        "collective_fingerprint_mismatch", "nccl_warn"})
OOM_KINDS = frozenset({"cuda_oom", "host_oom_kill"})
_OOM_MESSAGE = re.compile(r"^(?:CUDA|HIP) out of memory|^CUDA error: out of memory")
# Cross-rank checks that failed: DeepSpeed's (runtime/utils.py assert_ints_same_as_other_ranks,
# called by ZeRO-3's parameter coordinator: every rank all-gathers the ids of the parameters it
# fetches, and the sequences differ) and Accelerate's debug mode (utils/operations.py
# verify_operation: every rank gathers the shapes of its tensors before the operation)
RANKS_DISAGREE = re.compile(r"disagreement between rank ?\d+ and rank ?\d+|"
                            # DDP's constructor (_verify_param_shape_across_processes) compares
                            # each parameter's sizes with process 0's
                            r"appears not to match (?:sizes|strides) of the same param in "
                            r"process \d+|"
                            r"due to shape mismatches\. All shapes across devices must be valid|"
                            r"due to inadequate shapes\. All shapes on the devices must be valid")


@dataclass(frozen=True, slots=True)
class Failure:
    rank: int
    event: LogEvent
    # "oom" | "signal" | "exit" | "exception" | "thread_exception" | "transport" | "dataloader" |
    # "setup" (process-group set-up raised: ``setup_failure``) |
    # "collective_error" | "dead" | "gpu" (a fault of the rank's GPU or of its GPU program: an
    # NVRM Xid, a CUDA error) | "nvlink" (an NVLink Xid: the link between GPUs failed)
    what: str
    detail: str = ""  # what the event says about this rank, where the event names several

    def describe(self, limit: int = 240) -> str:
        return one_line(self.detail, limit) if self.detail else describe(self.event, limit)


def classify(event: LogEvent) -> str | None:
    """The kind of failure this event records for its own rank, or None for an echo/noise."""
    kind = event.kind
    if kind in OOM_KINDS or "OutOfMemoryError" in str(event.fields.get("exc_type", "")) \
            or "OOM when allocating" in str(event.fields.get("exc_message", "")):
        return "oom"  # (TensorFlow's ResourceExhaustedError under Horovod says the latter)
    if kind == "traceback" and _OOM_MESSAGE.search(str(event.fields.get("exc_message", ""))):
        return "oom"  # torch < 2.1 raised CUDA OOM as a RuntimeError
    if kind in ECHO_KINDS:
        return None
    if kind == "elastic_child_failed":
        if event.fields.get("signal") not in (None, ""):
            return "signal"
        code = event.fields.get("exitcode")
        return "exit" if isinstance(code, int) and code != 0 else None
    if kind == "cuda_error":
        return "oom" if "out of memory" in str(event.fields.get("error", "")) else "gpu"
    if kind == "gpu_xid":
        if event.fields.get("xid") == 45:
            return None  # the driver's clean-up after a process ended: an echo
        # rule nvlink-xid: an NVLink error is a fault of the fabric between GPUs, not of one rank
        return "nvlink" if event.fields.get("nvlink") else "gpu"
    if kind == "gpu_fault":
        return "gpu"
    if kind == "traceback":
        message = f"{event.fields.get('exc_type', '')}: {event.fields.get('exc_message', '')}"
        if _LOADER_EXC.search(message) or event.fields.get("queue_feeder"):
            return "dataloader"  # (a queue's feeder thread dropped what a worker put)
        if setup_failure(event):  # before the echoes: a store that reset in set-up is set-up
            return "setup"  # failing (an OOM raised there was told apart above)
        if _ECHO.search(message) or "ChildFailedError" in message or \
                event.fields.get("main_first"):
            return None  # (inside a main-process-first block: its exception is the wait's end)
        if event.fields.get("last_function") in _OBJECT_UNPICKLE \
                and _UNPICKLE_ERRORS.match(str(event.fields.get("exc_type", ""))):
            return None  # an object collective that delivered no object: the collective's
        if interrupted(event):
            return None  # Ctrl-C (or a launcher passing SIGINT on): the job stopped from outside
        if event.fields.get("thread") not in (None, "", "MainThread"):
            return "thread_exception"  # the thread died; the process lives on
        if RANKS_DISAGREE.search(message):
            return "collective_error"  # a cross-rank check failed: the ranks ran different code
        return "gpu" if _GPU_FAULT.search(message) else "exception"
    if kind == "nccl_transport_error":
        # rule truncated-is-size: a receive that got more bytes than it posted is the two sides
        # of one transfer disagreeing on its size (NCCL's own reading, unless the network is bad)
        return "collective_error" if event.fields.get("truncated") else "transport"
    if kind.startswith("dataloader") or kind == "shm_bus_error":
        return "dataloader"
    if kind == "nccl_error" and (event.fields.get("code") == "ncclRemoteError"
                                 or "remote process exited" in event.message):
        return "transport"  # NCCL's own words: the peer or the network, not this rank
    if kind == "nccl_error" and (event.fields.get("code") == "ncclUnhandledCudaError"
                                 or "Cuda failure" in str(event.fields.get("last_error", ""))):
        return "gpu"  # NCCL's CUDA call failed on this rank's own GPU
    if kind == "nccl_error" and _SETUP_CAUSE.search(str(event.fields.get("last_error", ""))):
        return None  # NCCL's bootstrap could not set its sockets up: set-up, not this rank
    if kind == "nccl_error" and _NET_CAUSE.search(str(event.fields.get("last_error", ""))):
        return "transport"  # NCCL's network transport (IB verbs, a net plugin) failed
    if kind == "gloo_enforce_fail" and "driver shutting down" in str(event.fields.get("check", "")):
        return None  # CUDA's runtime unloading as the process exits: its teardown, not a cause
    if kind in ("gloo_enforce_fail", "nccl_error"):
        return "collective_error"
    return None


# NCCL's "Last error:" of a bootstrap that found no usable socket (socket.cc, bootstrap.cc): the
# job's network set-up is wrong on every rank alike (the cue tier reads it as init)
_SETUP_CAUSE = re.compile(r"ncclSocketInit|[Bb]ootstrap ?:|no socket interface|NCCL_SOCKET_IFNAME")
# NCCL's "Last error:" naming its network transport or a net plugin as what failed ("NET/OFI
# Unable to insert remote address into address vector", "NET/IB : Got completion from peer ...
# with status=12", "ibv_modify_qp failed"): the fabric between the hosts, not the rank that raised
_NET_CAUSE = re.compile(r"\bNET/(?:IB|OFI|Plugin|Socket)\b|\bibv_\w+\b.{0,40}(?:fail|error)|"
                        r"\bfi_\w+\b.{0,40}(?:fail|error)|Got completion from peer")


def interrupted(event: LogEvent) -> bool:
    """A traceback of a ``KeyboardInterrupt``: the process stopped by hand (Ctrl-C, or a launcher
    passing SIGINT on), not a failure of its own."""
    return event.kind == "traceback" and \
        str(event.fields.get("exc_type", "")).endswith("KeyboardInterrupt")


def rank_events(evidence: JobEvidence) -> Iterator[tuple[int, LogEvent]]:
    """Every log event with the rank it belongs to (a launcher's local rank on one host)."""
    return _rank_events(evidence)


def _rank_events(evidence: JobEvidence) -> Iterator[tuple[int, LogEvent]]:
    for rank, rank_ev in evidence.ranks.items():
        for event in rank_ev.logs:
            yield (event.rank if event.rank is not None else rank), event
    world = evidence.expected_world_size()
    hosts = {ev.host for ev in evidence.ranks.values() if ev.host}
    sole = _sole_failed_child(evidence.unattributed_logs)
    # the hosts NCCL's own lines name ("gpu5:35917:35994 [1] ..."): in a log of several hosts'
    # lines a CUDA device index is a local rank of one of them, no one rank of the job
    line_hosts = {str(e.fields["host"]) for e in evidence.unattributed_logs
                  if e.fields.get("host")}
    faults = None
    for event in evidence.unattributed_logs:
        if event.rank is not None:
            yield event.rank, event
            continue
        if event.kind == "gpu_xid":  # a kernel line: its GPU's or its pid's rank, where known
            faults = faults or FaultRanks(evidence)
            owner = faults.rank_of(event)
            if owner is not None:
                yield owner, event
            continue
        local = event.fields.get("local_rank")
        if local is None and event.path in sole and event.line_no < sole[event.path][1]:
            local = sole[event.path][0]  # rule sole-failed-child (see _sole_failed_child)
        gpu = event.fields.get("gpu")
        if gpu is None and event.kind == "cuda_error" and len(line_hosts) <= 1:
            gpu = event.fields.get("cuda_dev")  # NCCL's "host:pid:tid [N]": the CUDA device
        if local is None and (event.kind in OOM_KINDS or event.kind == "cuda_error") \
                and isinstance(gpu, int) and gpu > 0:
            # rule gpu-index-as-local-rank: a process that saw GPU N > 0 was not isolated by
            # CUDA_VISIBLE_DEVICES, so under one process per GPU, N is its local rank (GPU 0 is
            # also what every isolated process sees: not read)
            local = gpu
        # On a single host a launcher's local rank is the global rank.
        if isinstance(local, int) and len(hosts) <= 1 and (world is None or local < world):
            yield local, event


def _sole_failed_child(events: list[LogEvent]) -> dict[str, tuple[int, int]]:
    """Rule ``sole-failed-child``: a log, with no rank on its lines, in which the launcher reports
    exactly one failed child (its local rank): the failures printed before that report are that
    child's (the launcher's report follows the failure it reports). Per path: (local rank, line
    of the report)."""
    found: dict[str, set[int]] = {}
    line: dict[str, int] = {}
    for event in events:
        local = event.fields.get("local_rank")
        if event.kind == "elastic_child_failed" and event.rank is None and isinstance(local, int):
            found.setdefault(event.path, set()).add(local)
            line[event.path] = max(line.get(event.path, 0), event.line_no)
    return {path: (next(iter(locals_)), line[path]) for path, locals_ in found.items()
            if len(locals_) == 1}


# Signals a launcher or scheduler sends to stop processes: on a rank that another rank's own
# failure preceded, they are the teardown, not a cause.
_STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
# A rank's own watchdog records of its collective timing out (or its watchdog stuck): after them
# torch's NCCL watchdog takes the process down with SIGABRT by design.
WATCHDOG_WAITS = frozenset({"nccl_watchdog_timeout", "nccl_work_status", "nccl_heartbeat_stuck"})


# a launcher's table and a rank's log line may differ by this much (whole seconds, two clocks)
_CLOCK_SLACK_S = 2.0


def _echo_exit(event: LogEvent, closed_pids: set[object], echoed: set[int], aborted: set[int],
               rank: int, first_timeout: float | None = None) -> bool:
    """A launcher row that only records the teardown of a rank: the signal the launcher said it
    sent to that pid, a plain exit code of a rank whose own exception was an echo, or any end
    after another rank's watchdog had already timed out."""
    if event.kind != "elastic_child_failed":
        return False
    signal = event.fields.get("signal")
    if first_timeout is not None and event.time is not None \
            and event.time > first_timeout + _CLOCK_SLACK_S:
        # rule ended-after-the-timeouts: the rank's process lived on after a peer had waited
        # out its whole timeout, so its death is not what that peer waited for; torch's
        # watchdog takes a timed-out rank down with SIGABRT, the launcher the rest
        return True
    if rank in aborted:
        # rule kill-after-own-timeout: the rank logged its own watchdog timeout, so it was alive
        # and waiting in a collective; torch aborts it after that (SIGABRT), and a launcher or
        # scheduler kills it (SIGKILL, SIGTERM, an exit code) as the job fails: its end is an echo
        return True
    if signal:
        return event.fields.get("pid") in closed_pids and signal in _STOP_SIGNALS
    return rank in echoed


def _known_signal(event: LogEvent) -> bool:
    signal = str(event.fields.get("signal") or "")
    return signal.startswith("SIG") and signal not in ("SIGTERM", "SIGINT")


def failures(evidence: JobEvidence) -> dict[int, list[Failure]]:
    """Per rank, its own failures: earliest first; duplicates (the same text copied by a
    launcher's tee) collapsed. Teardown is not a failure: a stop signal (SIGTERM) is dropped
    when the launcher says it sent it ("Sending process N closing signal SIGTERM") or when
    another rank failed on its own; a non-zero exit code when the rank's own exception was the
    echo of a peer's failure ("Connection closed by peer", a failed monitored barrier); any
    launcher-reported end (SIGABRT, SIGKILL, an exit code) of a rank whose own watchdog timed out
    first (torch aborts the process after a timeout; launchers kill what is left), or one the
    launcher timed after another rank's watchdog had already timed out (that rank outlived the
    wait it would have caused). A fault a
    stream went on past is none (``outlived``), unless the launcher says the rank's process
    ended in failure."""
    found: dict[int, list[Failure]] = {}
    seen: set[tuple[int, str, str]] = set()
    events = list(_rank_events(evidence))
    closed_pids = stopped_pids(evidence)
    echoed = {rank for rank, e in events if e.kind == "traceback" and classify(e) is None}
    # rule setup-explains-exit: where process-group set-up raised (on any process: a paste of
    # one worker's traceback and the launcher's record of it), a launcher's record of an exit
    # with no known signal is that failure's end, not a death of its own
    set_up_failed = any(classify(e) == "setup" for e in evidence.all_logs())
    moving = moving_streams(evidence)
    ready = comms_ready(evidence.all_logs())
    aborted = {rank for rank, e in events if e.kind in WATCHDOG_WAITS}
    first_timeout = min((e.time for _, e in events if e.kind in WATCHDOG_WAITS
                         and e.time is not None), default=None)
    # ranks whose process the launcher says ended in failure: nothing they logged was outlived
    # (a stream that moves on after it, unnamed, is another process's)
    ended = {rank for rank, e in events if e.kind == "elastic_child_failed"
             and (e.fields.get("exitcode") or e.fields.get("signal"))}
    for rank, event in events:
        what = classify(event)
        if what is None or _echo_exit(event, closed_pids, echoed, aborted, rank, first_timeout):
            continue
        if set_up_failed and what in ("exit", "signal") and not _known_signal(event):
            continue
        if moving and rank not in ended and outlived(event, moving):
            continue
        if what == "transport" and came_up_after(event, ready):
            continue
        key = (rank, event.kind, event.message[:200])
        if key in seen:
            continue
        seen.add(key)
        found.setdefault(rank, []).append(Failure(rank, event, what))
    for fact in ras_facts(evidence):
        what = fact.failure()
        if what is not None:
            # the report's time is when RAS was asked, not when the rank failed
            event = dataclasses.replace(fact.event, time=None)
            found.setdefault(fact.rank, []).append(Failure(fact.rank, event, what, fact.detail))
    return _without_transport_echoes(evidence, _without_teardown(_thread_copies(found)),
                                     ready)


# NCCL raising a system or remote error to the caller ("NCCL error in: ..., unhandled system
# error", "NCCL Error 2: unhandled system error", ncclRemoteError): the call failed because of
# what NCCL's own WARN lines report
_NCCL_RAISED = re.compile(r"NCCL [Ee]rror\b.{0,200}\b(?:unhandled system error|remote process "
                          r"exited)|\bncclSystemError\b|\bncclRemoteError\b")


def nccl_raised(failure: Failure) -> bool:
    """An exception that is NCCL raising a system or remote error to the caller."""
    return failure.what == "exception" and _NCCL_RAISED.search(
        f"{failure.event.fields.get('exc_message', '')} {failure.event.message}") is not None


_PEER_CLOSED = re.compile(r"(?i)Connection (?:closed|reset) by (?:remote )?peer|"
                          r"remote process exit(?:ed|ing)|ncclRemoteError|Broken pipe")


def peer_closed(failure: Failure) -> bool:
    """A transport failure that is a peer closing its end (its death's echo), not the rank's own
    transport failing."""
    return _closed_by_peer(failure.event)


def _closed_by_peer(event: LogEvent) -> bool:
    return _PEER_CLOSED.search(event.message) is not None


def _without_transport_echoes(evidence: JobEvidence, found: dict[int, list[Failure]],
                              ready: Ready) -> dict[int, list[Failure]]:
    """Where NCCL's WARN lines report a transport failure of its own (not a peer closing) that no
    communicator came up after:
    rule ``nccl-error-echo``, each exception that is NCCL raising a system or remote error is
    that failure reaching the caller, not a death of the rank's own; rule ``transport-then-death``,
    a rank's death (a signal, an exit) after its own transport failed (a connect with no route, a
    verbs call failing; not a peer closing) is that failure's end (NCCL crashing on it). Both are
    dropped, so that the transport failure is the cause read."""
    # (a peer closing its end is that peer's death, whose echoes the death rules read)
    transport = any(f.what == "transport" and not peer_closed(f)
                    for items in found.values() for f in items) or any(
        classify(e) == "transport" and not came_up_after(e, ready) and not _closed_by_peer(e)
        for e in evidence.unattributed_logs)
    if not transport:
        return found
    kept: dict[int, list[Failure]] = {}
    for rank, items in found.items():
        own = [f for f in items if f.what == "transport" and not peer_closed(f)]
        kept[rank] = [f for f in items if not nccl_raised(f) and not (
            f.what in ("signal", "exit") and any(_before(t.event, f.event) for t in own))]
    return {rank: items for rank, items in kept.items() if items}


def _before(a: LogEvent, b: LogEvent) -> bool:
    if a.time is not None and b.time is not None:
        return a.time <= b.time
    return a.path == b.path and a.line_no < b.line_no


def _thread_copies(found: dict[int, list[Failure]]) -> dict[int, list[Failure]]:
    """A rank's exception with the very type and message of one of its threads' deaths is that
    death copied without its ``Exception in thread`` header (a launcher's tee that interleaved or
    cut it): the thread died, not the process."""
    for rank, items in found.items():
        threads = {_exc_key(f.event) for f in items if f.what == "thread_exception"}
        if threads:
            found[rank] = [dataclasses.replace(f, what="thread_exception")
                           if f.what == "exception" and _exc_key(f.event) in threads else f
                           for f in items]
    return found


def _exc_key(event: LogEvent) -> tuple[object, object]:
    return event.fields.get("exc_type"), event.fields.get("exc_message")


def stopped_pids(evidence: JobEvidence) -> set[object]:
    """Pids a launcher said it sent a closing signal to (torchrun: "Sending process N closing
    signal SIGTERM"), from every log, whichever rank it was filed under."""
    every = [e for ev in evidence.ranks.values() for e in ev.logs] + evidence.unattributed_logs
    return {e.fields.get("pid") for e in every if e.kind == "elastic_closing_signal"}


def torn_down(evidence: JobEvidence) -> dict[int, LogEvent]:
    """Ranks the launcher stopped (a stop signal in its failure table): alive until then."""
    closed = stopped_pids(evidence)
    found: dict[int, LogEvent] = {}
    for rank, event in _rank_events(evidence):
        if (event.kind == "elastic_child_failed" and event.fields.get("signal") in _STOP_SIGNALS
                and (event.fields.get("pid") in closed or not closed)):
            found.setdefault(rank, event)
    return found


def _is_stop(failure: Failure) -> bool:
    return failure.what == "signal" and failure.event.fields.get("signal") in _STOP_SIGNALS


def _without_teardown(found: dict[int, list[Failure]]) -> dict[int, list[Failure]]:
    """Stop signals go where some rank failed on its own: they are how the job was torn down."""
    if any(not _is_stop(f) for items in found.values() for f in items):
        found = {rank: kept for rank, items in found.items()
                 if (kept := [f for f in items if not _is_stop(f)])}
    for items in found.values():
        items.sort(key=lambda f: (f.event.time is None, f.event.time or 0.0))
    return found


def unranked(evidence: JobEvidence, whats: frozenset[str]) -> list[LogEvent]:
    """Failure events whose rank no line, path or launcher table tells (a single process's log,
    dmesg): a detector names the failure with an unknown culprit rather than dropping it."""
    ranked = {id(event) for _, event in _rank_events(evidence)}
    moving = moving_streams(evidence)
    ready = comms_ready(evidence.all_logs())
    return [event for event in evidence.unattributed_logs
            if id(event) not in ranked and (what := classify(event)) in whats
            and not (moving and outlived(event, moving))
            and not (what == "transport" and came_up_after(event, ready))]


def dead_threads(evidence: JobEvidence, rank: int) -> list[Failure]:
    """Threads of ``rank`` (not its main thread) that died of an uncaught exception, earliest
    first: a staging or prefetch thread whose death leaves the main thread waiting for output
    that never comes."""
    found: dict[tuple[object, ...], Failure] = {}
    for failure in failures(evidence).get(rank, []):
        if failure.what == "thread_exception":
            fields = failure.event.fields
            # one death, however many logs copied it (the rank's stderr and the launcher's tee)
            key = _exc_key(failure.event)  # the header-less copy has no thread name
            if key not in found or (fields.get("thread")
                                    and not found[key].event.fields.get("thread")):
                found[key] = failure
    return list(found.values())


def dead_thread_cause(evidence: JobEvidence, rank: int,
                      consequence: str) -> tuple[str, list[LogEvent]]:
    """A sentence naming the rank's dead threads as the likely cause of its ``consequence`` ("its
    main thread blocks"), and the log events to cite; ("", []) when no thread died."""
    dead = dead_threads(evidence, rank)
    if not dead:
        return "", []
    named = ", ".join(f"'{f.event.fields.get('thread') or '?'}'" for f in dead[:3])
    first = dead[0]
    sentence = (f"the likely cause: thread{'s' if len(dead) > 1 else ''} {named} of rank {rank} "
                f"died earlier ({first.describe(160)}) and the process lived on: {consequence}, "
                f"waiting for what {'those threads' if len(dead) > 1 else 'that thread'} would "
                "have produced or released")
    return sentence, [f.event for f in dead[:3]]


def first_failure_time(items: list[Failure]) -> float | None:
    times = [f.event.time for f in items if f.event.time is not None]
    return min(times) if times else None


def describe(event: LogEvent, limit: int = 240) -> str:
    """One line for a log event: the exception, not the ``Traceback (most recent call last):``
    line it starts at; the exit signal, not the table row's first cell."""
    fields = event.fields
    if event.kind == "traceback" or fields.get("exc_type"):
        message = fields.get("exc_message") or ("" if event.kind == "traceback" else
                                                event.message)
        text = f"{fields.get('exc_type', 'exception')}: {message}".strip()
        last = fields.get("last_frame")
        if last:
            text += f" (raised at {last})"
    elif event.kind == "gpu_fault":
        text = f"GPU {fields.get('gpu')} hardware exception: {fields.get('reason')}"
    elif event.kind == "gpu_xid":
        pid = f", pid {fields['pid']}" if "pid" in fields else ""
        text = f"NVRM Xid {fields.get('xid')} on GPU {fields.get('pci')}{pid}: {fields.get('text')}"
    elif event.kind == "elastic_child_failed":
        signal = fields.get("signal")
        code = fields.get("exitcode")
        text = ("launcher: " + (f"exit code {code}" if code is not None else "died")
                + (f" ({signal})" if signal else "")
                + (f", pid {fields['pid']}" if "pid" in fields else "")
                + (f" ({fields['binary']})" if code is None and fields.get("binary") else ""))
    else:
        text = event.message
    return one_line(str(text), limit)
