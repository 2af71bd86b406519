"""A rank left stopped by a py-spy that did not end cleanly: found, and resumed with SIGCONT.

A blocking py-spy dump stops every thread of the rank with ptrace, reads the stacks and lets
go. When py-spy dies in between (killed at our deadline, by the OOM killer, by a user), the
kernel detaches the threads it held and restarts them, except where a stop was in flight: a
tracer that attached with ``PTRACE_ATTACH`` sends each thread a SIGSTOP, and one not yet
consumed when the tracer dies is delivered as an ordinary stop. The rank then sits in state
``T`` with no tracer, and the job hangs on it for real, caused by the tool meant to explain
the hang. A py-spy that is wedged (stopped itself, stuck in the kernel) holds the threads in
tracing stop (``t``) for as long as it lives, which is why each dump has a hard kill deadline.

So before each dump we read the rank's state from ``/proc/PID/stat``, and after a dump that did
not end cleanly, once py-spy is gone, we read it again (and its threads', for a few tens of
milliseconds, since a pending stop lands asynchronously). A rank found stopped with no tracer
is resumed with SIGCONT, but only if it was running before the dump: a rank that a user or a
debugger stopped on purpose is left as it was. Both outcomes are said in one line that goes
into the bundle's collection record and the report's evidence gaps.
"""

from __future__ import annotations

import os
import signal
import time

from hangscope.collect.procstate import read_stat_fields

STOPPED_STATES = ("T", "t")  # stopped (job control) / tracing stop
SETTLE_S = 0.1  # how long a stop still in flight may take to land after py-spy died
POLL_S = 0.005


def proc_state(pid: int, tid: int | None = None) -> str | None:
    """The kernel's one-letter state of a process (or one of its threads); None if gone."""
    fields = read_stat_fields(f"/proc/{pid}/stat" if tid is None
                              else f"/proc/{pid}/task/{tid}/stat")
    return fields[0] if fields else None


def tracer_pid(pid: int) -> int | None:
    """``TracerPid`` from ``/proc/PID/status``: 0 when nobody traces the process; None if gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_stopped(pid: int) -> bool:
    """The process, or any of its threads, is stopped or in tracing stop."""
    if proc_state(pid) in STOPPED_STATES:
        return True
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any(proc_state(pid, int(tid)) in STOPPED_STATES for tid in tids if tid.isdigit())


def resume_if_left_stopped(pid: int, state_before: str | None, why: str,
                           settle: float = SETTLE_S) -> str:
    """After a dump that did not end cleanly, and once its py-spy is gone: resume ``pid`` if
    py-spy left it stopped. Returns one line for the collection record and the evidence gaps,
    or "" when the rank runs (or is gone). ``state_before`` is :func:`proc_state` read before
    the dump; ``why`` says how the dump ended ("py-spy was killed at its 5s deadline")."""
    if state_before is None:
        return ""
    # Right after the tracer dies its threads are woken and re-enter a stop still pending:
    # a stopped state may take a moment to show (or to show again).
    if not _stopped_within(pid, settle):
        if state_before in STOPPED_STATES and proc_state(pid) is not None:
            return (f"pid {pid} was stopped before the dump (state {state_before}) and runs "
                    f"after {why}; hangscope sent it no signal")
        return ""
    if state_before in STOPPED_STATES:
        return (f"pid {pid} was already stopped before the dump (state {state_before}); "
                f"left stopped as it was")
    tracer = tracer_pid(pid)
    if tracer:
        return (f"pid {pid} is still stopped under tracer pid {tracer} after {why}; not "
                f"resumed (kill pid {tracer}, then `kill -CONT {pid}`)")
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return ""
    except PermissionError as exc:
        return (f"pid {pid} was left stopped by {why} and could not be resumed "
                f"({exc.strerror}): run `kill -CONT {pid}`")
    return _confirm_running(pid, why)


def _stopped_within(pid: int, settle: float) -> bool:
    deadline = time.monotonic() + settle
    while not is_stopped(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def _confirm_running(pid: int, why: str, wait: float = 1.0) -> str:
    deadline = time.monotonic() + wait
    while is_stopped(pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if is_stopped(pid):
        return (f"pid {pid} was left stopped by {why}; SIGCONT sent but it is still stopped: "
                f"run `kill -CONT {pid}`")
    return f"pid {pid} was left stopped by {why}; resumed with SIGCONT"
