# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""MPI and Slurm launchers' word on which rank ended first and how (Open MPI's ``mpirun``/``prterun``,
MPICH and Intel MPI's Hydra ``mpiexec``, Slurm's ``srun``); Horovod and DeepSpeed jobs often run
under them. Every event is an ``elastic_child_failed`` (a launcher's failure report) with the GLOBAL
rank the launcher names (``rank_source`` "content"), fields exitcode and/or signal, pid, host.

Open MPI (ORTE ``help-errmgr-base.txt``, PRRTE for Open MPI 5; the binary's name leads: ``mpirun``,
``mpiexec``, ``orterun``, ``prterun``). It reports the FIRST process that ended abnormally, then
kills the rest itself without naming them, so the named rank is the launcher's first cause::

    mpirun noticed that process rank 1 with PID 4242 on node gpu03 exited on signal 9 (Killed).
    mpirun noticed that job rank 0 with PID 3386 on node n1 exited on signal 15 (Terminated).   (1.2)
    mpirun detected that one or more processes exited with non-zero status, thus causing
    the job to be terminated. The first process to do so was:

      Process name: [[44542,1],3]        (the last number is the rank; prterun: [prterun-h-1@1,3])
      Exit code:    137

MPICH / Intel MPI Hydra::

    =   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
    =   RANK 3 PID 12345 RUNNING AT node1
    =   KILLED BY SIGNAL: 9 (Killed)         (or ``=   EXIT STATUS: 139`` / ``EXIT CODE: 9``)

Slurm ``srun`` (``srun: error: <host>: task[s] <ids>: <how>``; the task id is the rank under
``srun`` launching one task per rank; ``Out Of Memory`` is Slurm's cgroup OOM verdict, read as an
OOM: kind ``host_oom_kill``)::

    srun: error: node01: task 3: Killed
    srun: error: node01: tasks 0-1: Exited with exit code 1
    srun: error: node02: task 5: Out Of Memory

srun kills the other tasks once one has failed (``srun: Terminating StepId=...`` /
``Terminating job step``, ``*** STEP ... CANCELLED``); task lines printed after that are its teardown
and are not reported.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import SIGNALS, Context, Line, make_event

_NAMES = {name.lower(): sig for sig, name in (
    ("SIGKILL", "Killed"), ("SIGTERM", "Terminated"), ("SIGSEGV", "Segmentation fault"),
    ("SIGABRT", "Aborted"), ("SIGBUS", "Bus error"), ("SIGINT", "Interrupt"),
    ("SIGFPE", "Floating point exception"), ("SIGILL", "Illegal instruction"),
    ("SIGHUP", "Hangup"))}

_NOTICED = re.compile(r"(?P<tool>[\w.]+) noticed that (?:process|job) rank (?P<rank>\d+) with PID "
                      r"(?P<pid>\S+)(?: on node (?P<host>.+?))?\s+exited on signal (?P<sig>\d+)")
_PROCESS_NAME = re.compile(r"Process name:\s*\[(?:\[\d+,\d+\]|[^\]@]*@\d+),(?P<rank>\d+)\]")
_EXIT_CODE = re.compile(r"Exit code:\s*(?P<code>-?\d+)")
_HYDRA_RANK = re.compile(r"RANK (?P<rank>\d+) PID (?P<pid>\S+) RUNNING AT (?P<host>\S+)")
_HYDRA_HOW = re.compile(r"KILLED BY SIGNAL: (?P<sig>\d+)|EXIT (?:STATUS|CODE): (?P<code>-?\d+)")
_SRUN = re.compile(r"srun: error: (?P<host>[\w.\-]+): tasks? (?P<ids>[\d,\-\[\] ]+): (?P<how>.+?)\s*$")
_SRUN_EXIT = re.compile(r"Exited with exit code (?P<code>-?\d+)")
_SRUN_STOP = re.compile(r"srun: (?:Terminating |Job step aborted|forcing job termination)|"
                        r"\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED")
_FOLLOW = 6  # lines a wrapped report may span


def _signal(number: int) -> str:
    return SIGNALS.get(number, f"SIG{number}")


def _exit_fields(code: int) -> dict[str, str | int | float]:
    """An exit status as a shell or launcher reports it: 128+N (137) and -N (-9) are signal N."""
    fields: dict[str, str | int | float] = {"exitcode": code}
    if code < 0:
        fields["signal"] = _signal(-code)
    elif 128 < code < 160:
        fields["signal"] = _signal(code - 128)
    return fields


def _joined(line: Line, follow: Follow, done: re.Pattern[str]) -> str:
    """The line and the next few, joined, until ``done`` matches (a report hard-wrapped by a
    terminal or mail client)."""
    text = line.body
    if done.search(text):
        return text
    for count, nxt in enumerate(follow.lines()):
        if count >= _FOLLOW:
            break
        text += " " + nxt.body.strip()
        if done.search(text):
            break
    return text


def _report(line: Line, ctx: Context, fields: dict[str, str | int | float],
            rank: int) -> list[LogEvent]:
    return [make_event("elastic_child_failed", line, ctx, "error", fields, rank=rank,
                       rank_source="content")]


def noticed(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _NOTICED.search(_joined(line, follow, _NOTICED))
    if not m:
        return []
    number = int(m.group("sig"))
    if number == 0:
        return []  # "exited on signal 0 (Unknown signal 0)": no signal
    fields: dict[str, str | int | float] = {"signal": _signal(number), "exitcode": -number,
                                            "binary": m.group("tool")}
    if m.group("pid").isdigit():  # posters mask it ("with PID xxxxxx")
        fields["pid"] = int(m.group("pid"))
    if m.group("host"):
        fields["host"] = m.group("host")
    return _report(line, ctx, fields, int(m.group("rank")))


def first_process(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``... The first process to do so was:`` then ``Process name:`` and ``Exit code:``."""
    name = code = None
    for count, nxt in enumerate(follow.lines()):
        if count >= _FOLLOW or (name and code):
            break
        name = name or _PROCESS_NAME.search(nxt.body)
        code = code or _EXIT_CODE.search(nxt.body)
    if not name or not code or int(code.group("code")) == 0:
        return []
    return _report(line, ctx, _exit_fields(int(code.group("code"))), int(name.group("rank")))


def hydra(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _HYDRA_RANK.search(line.body)
    if not m:
        return []
    how = None
    for count, nxt in enumerate(follow.lines()):
        if count >= 2 or how:
            break
        how = _HYDRA_HOW.search(nxt.body)
    if how is None:
        return []
    if how.group("sig"):
        fields: dict[str, str | int | float] = {"signal": _signal(int(how.group("sig"))),
                                                "exitcode": -int(how.group("sig"))}
    else:
        fields = _exit_fields(int(how.group("code")))
        if fields["exitcode"] == 0:
            return []
    fields["host"] = m.group("host")
    if m.group("pid").isdigit():
        fields["pid"] = int(m.group("pid"))
    return _report(line, ctx, fields, int(m.group("rank")))


def _task_ids(text: str) -> list[int]:
    ids: list[int] = []
    for part in re.split(r"[,\s]+", text.strip("[] ")):
        lo, _, hi = part.strip("[]").partition("-")
        if lo.isdigit():
            ids.extend(range(int(lo), (int(hi) if hi.isdigit() else int(lo)) + 1))
    return ids[:64]


def srun_task(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _SRUN.search(line.body)
    if not m or ctx.launcher_stopping:
        return []
    how, host = m.group("how"), m.group("host")
    code = _SRUN_EXIT.search(how)
    if how.startswith("Out Of Memory"):
        kind, fields = "host_oom_kill", {"host": host, "source": "srun"}
    elif code:
        kind, fields = "elastic_child_failed", _exit_fields(int(code.group("code")))
        if fields["exitcode"] == 0:
            return []
    else:
        signal = _NAMES.get(how.split(" (")[0].strip().lower())
        if signal is None:
            return []
        kind, fields = "elastic_child_failed", {"signal": signal}
    fields["host"] = host
    return [make_event(kind, line, ctx, "error", dict(fields), rank=rank, rank_source="content")
            for rank in _task_ids(m.group("ids"))]


def srun_stop(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """srun's teardown notice: the task lines after it in this file are its kills, not causes.
    Returns no event (the line is not evidence of its own); it marks the file."""
    if _SRUN_STOP.search(line.body):
        ctx.launcher_stopping = True
    return []


HANDLERS: list[tuple[bytes, Handler]] = [
    (b" noticed that ", noticed),
    (b"The first process to do so was", first_process),
    (b"RUNNING AT ", hydra),
    (b"srun: error: ", srun_task),
    (b"srun: Terminating", srun_stop),
    (b"srun: Job step aborted", srun_stop),
    (b"srun: forcing job termination", srun_stop),
    (b"*** STEP ", srun_stop),
    (b"*** JOB ", srun_stop),
]
