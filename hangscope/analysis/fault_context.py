"""What a failure line means in its context, before anyone counts it as a rank's own failure:
an exception raised inside process-group set-up is set-up failing (``setup-exception``), and a
fault the job went on past was recovered from (``outlived-fault``). ``log_causes`` applies both
when it lists each rank's failures; the detectors and the health notes cite them. An NCCL WARN
of a process whose communicator came up after it was set-up NCCL fell back from
(``warn-then-ready``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from hangscope.model import JobEvidence, LogEvent

# Functions of process-group set-up (torch.distributed's init_process_group and new_group, the
# store-based barrier, the rendezvous handlers that create the TCPStore; DeepSpeed's and
# Accelerate's wrappers): an exception raised with one of them innermost is set-up failing
SETUP_FUNCTIONS = frozenset({
    "init_process_group", "_store_based_barrier", "_new_process_group_helper", "new_group",
    "rendezvous", "next_rendezvous", "_rendezvous_helper", "_create_c10d_store",
    "_env_rendezvous_handler", "_tcp_rendezvous_handler", "_file_rendezvous_handler",
    "_create_tcp_store", "init_distributed", "_init_dist_pytorch", "_init_dist_slurm"})


# set-up's own words in the exception: torch_xla's client of its mesh service (the rendezvous of
# xmp.spawn's processes) never connecting ("mesh_service.cc:172 : Check failed:
# impl_->channel->WaitForConnected(...)")
_SETUP_MESSAGE = re.compile(r"mesh_service\.cc:\d+ : Check failed: \S*WaitForConnected")


def setup_failure(event: LogEvent) -> bool:
    """Rule ``setup-exception``: a traceback whose innermost frame is process-group set-up (one of
    :data:`SETUP_FUNCTIONS`), or whose exception is set-up's own (:data:`_SETUP_MESSAGE`), records
    set-up failing on that process (a store it could not reach or that reset, an interface that
    does not exist, a rank out of range), not a death of its own: its launcher's exit record
    follows from it."""
    return event.kind == "traceback" and not event.fields.get("thread") and (
        event.fields.get("last_function") in SETUP_FUNCTIONS
        or _SETUP_MESSAGE.search(str(event.fields.get("exc_message", ""))) is not None)


def outlived(event: LogEvent, moving: list[LogEvent]) -> bool:
    """Rule ``outlived-fault``: a fault the job went on past: its stream (the event's rank, or no
    rank where it names none) shows training at two positions, both after the fault's line in the
    same file. A rank that died or waits stops a synchronous job within a step; two steps on,
    whatever the line said was recovered from (NCCL's remote allocator failing on a stray
    message, a connection a retry replaced)."""
    return any(e.path == event.path and int(e.fields.get("advanced_since", 0) or 0) > event.line_no
               and (event.rank is None or e.rank in (None, event.rank)) for e in moving)


def moving_streams(evidence: JobEvidence) -> list[LogEvent]:
    """The progress events of streams the logs show move, with the line they moved from."""
    return [e for e in evidence.all_logs()
            if e.kind == "progress" and e.fields.get("advanced_since")]


# NCCL's head on its own lines: host:pid:tid [cudaDev]
_NCCL_WARN = re.compile(r"(?P<host>[\w.\-]+):(?P<pid>\d+):\d+ \[\d+\].{0,240}\bNCCL WARN\b")
Ready = dict[tuple[str, object, object], int]


def comms_ready(events: Iterable[LogEvent]) -> Ready:
    """(file, host, pid) -> the last line where that process's NCCL logged ``Init COMPLETE``."""
    ready: Ready = {}
    for e in events:
        if e.kind == "nccl_comm_ready" or e.kind in ("nccl_device", "nccl_init_done") \
                and "Init COMPLETE" in e.message:
            key = (e.path, e.fields.get("host"), e.fields.get("pid"))
            ready[key] = max(ready.get(key, 0), e.line_no)
    return ready


def came_up_after(event: LogEvent, ready: Ready) -> bool:
    """Rule ``warn-then-ready``: an NCCL WARN of a process whose communicator came up after it
    (its ``Init COMPLETE`` later in the same file) is a step of set-up that NCCL fell back from
    (a net plugin that failed to load, then its own sockets), which the process got past."""
    if not ready:
        return False
    found = _NCCL_WARN.search(event.message)
    if found is None:
        return False
    return ready.get((event.path, found.group("host"), int(found.group("pid"))), 0) > event.line_no
