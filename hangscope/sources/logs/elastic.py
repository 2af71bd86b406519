# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""torchrun / torch.distributed.elastic launcher messages (``torch/distributed/elastic/multiprocessing/
api.py``, ``errors/__init__.py`` ``ChildFailedError.format_msg``; recorded with torch 2.13).

``elastic_child_failed`` from the agent's log line (glog prefix since torch 2.4; torch 1.x-2.3 wrote
``ERROR:torch.distributed.elastic.multiprocessing.api:failed ...``)::

    E1121 11:52:46.564000 14902 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 14930) of binary: /usr/bin/python

  fields: local_rank, pid, exitcode, signal (SIGKILL for -9), binary. ``rank`` is None (the line
  names only the local rank) unless a rank hint says otherwise.

``elastic_child_failed`` from each entry of the ``ChildFailedError`` table::

    Failures:
    [1]:
      time      : 2026-11-21_11:52:46
      host      : localhost
      rank      : 0 (local_rank: 0)
      exitcode  : -15 (pid: 14929)  (SIGTERM)
      error_file: <N/A>
      traceback : Signal 15 (SIGTERM) received by PID 14929
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      ...
      exitcode  : -9 (pid: 14930)  (SIGKILL)
      traceback : Signal 9 (SIGKILL) received by PID 14930

  One event per entry, at its ``[i]:`` line, with ``rank`` = the failed GLOBAL rank (``rank_source``
  "content"); fields: local_rank, pid, exitcode, signal, host, failure_time (epoch, local time),
  error_file, root_cause (1 for the "Root Cause" entry, 0 for the others), traceback (first line).

A fork's agent (seen on Alibaba PAI-DLC pods) words the same line ``failed (exitcode: -9) for binary
located at /usr/bin/python3.10 with local_rank: 0 (process ID: 71)``: the fields are read in either order.

``elastic_closing_signal`` -- ``Sending process 14929 closing signal SIGTERM`` (or ``... the closing
signal SIGTERM``, the same fork's wording) (the agent stopping the
survivors after a failure: a CONSEQUENCE; fields pid, signal).
"""

from __future__ import annotations

import re
import time as _time

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import SIGNALS, Context, Line, make_event

_FAILED = re.compile(r"failed \(exitcode: (?P<exit>-?\d+)\)")
# the rest of the agent's line, in either order torch's versions and forks wrote it: ``local_rank: 1
# (pid: 14930) of binary: X`` or ``for binary located at X with local_rank: 0 (process ID: 71)``
_FAILED_LOCAL = re.compile(r"local_rank: (?P<lr>\d+)")
_FAILED_PID = re.compile(r"\((?:pid|process ID): (?P<pid>\d+)\)")
_FAILED_BIN = re.compile(r"(?:of binary:|for binary located at) (?P<bin>\S+)")
_CLOSING = re.compile(r"Sending process (?P<pid>\d+) (?:the )?closing signal (?P<sig>SIG\w+)")
_ENTRY = re.compile(r"^\[(\d+)\]:\s*$")
_FIELD = re.compile(r"^  (\w+)\s*: ?(.*)$")
_TABLE_KEYS = frozenset({"time", "host", "rank", "exitcode", "error_file", "traceback"})
_RANK = re.compile(r"(-?\d+)(?: \(local_rank: (\d+)\))?")
_EXIT = re.compile(r"(-?\d+)(?: \(pid: (\d+)\))?(?:\s+\((SIG\w+)\))?")
_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)_(\d\d):(\d\d):(\d\d)")


def _signal_of(exitcode: int) -> str:
    return SIGNALS.get(-exitcode, f"SIG{-exitcode}") if exitcode < 0 else ""


def failed(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _FAILED.search(line.body)
    local = _FAILED_LOCAL.search(line.body, m.end()) if m else None
    if not m or not local:
        return []
    code = int(m.group("exit"))
    fields: dict[str, str | int | float] = {
        "local_rank": int(local.group("lr")), "exitcode": code, "signal": _signal_of(code)}
    pid = _FAILED_PID.search(line.body, m.end())
    if pid:
        fields["pid"] = int(pid.group("pid"))
    binary = _FAILED_BIN.search(line.body, m.end())
    if binary:
        fields["binary"] = binary.group("bin")[:200]
    return [make_event("elastic_child_failed", line, ctx, "error", fields,
                       rank=line.rank, rank_source=line.rank_source or "")]


def closing(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _CLOSING.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {"pid": int(m.group("pid")), "signal": m.group("sig")}
    return [make_event("elastic_closing_signal", line, ctx, "warning", fields,
                       rank=line.rank, rank_source=line.rank_source or "")]


def table(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    head = line.body.strip()
    if head not in ("Failures:", "Root Cause (first observed failure):"):
        return []
    root = 1 if head.startswith("Root Cause") else 0
    events: list[LogEvent] = []
    entry: Line | None = None
    values: dict[str, str] = {}

    def flush() -> None:
        if entry is None or "rank" not in values:
            return
        events.append(_entry_event(entry, ctx, values, root))

    for nxt in follow.lines():
        if nxt.key != line.key:
            continue
        text = nxt.body
        if text.startswith(("---", "===")) or text.strip().startswith("Root Cause"):
            break
        em = _ENTRY.match(text)
        if em:
            follow.consume(nxt.line_no)
            flush()
            entry, values = nxt, {}
            continue
        fm = _FIELD.match(text)
        if fm and entry is not None and fm.group(1) in _TABLE_KEYS:
            follow.consume(nxt.line_no)
            key = fm.group(1)
            if key not in values:
                values[key] = fm.group(2).strip()
        # other lines (a child's traceback, which @record's error file puts in the table) are
        # left to their own readers: a DETAIL mismatch or an OOM in it is the failure's cause
    flush()
    return events


_LOOSE_RANK = re.compile(r"^\s*rank\s*: (-?\d+ \(local_rank: \d+\))\s*$")
_LOOSE_FIELD = re.compile(r"^\s*(\w+)\s*: ?(.*?)\s*$")


def table_fragment(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A failure table pasted without its ``Root Cause``/``Failures:`` header: a ``rank : N
    (local_rank: M)`` row and the rows after it (exitcode, error_file, traceback)."""
    m = _LOOSE_RANK.match(line.body)
    if not m:
        return []
    values = {"rank": m.group(1)}
    for nxt in follow.lines():
        fm = _LOOSE_FIELD.match(nxt.body)
        if not fm or fm.group(1) in values or fm.group(1) == "rank":
            break
        follow.consume(nxt.line_no)
        values[fm.group(1)] = fm.group(2)
    if "exitcode" not in values:
        return []
    return [_entry_event(line, ctx, values, 1)]


def _entry_event(entry: Line, ctx: Context, values: dict[str, str], root: int) -> LogEvent:
    fields: dict[str, str | int | float] = {"root_cause": root}
    rank: int | None = None
    rm = _RANK.match(values.get("rank", ""))
    if rm:
        rank = int(rm.group(1))
        if rm.group(2) is not None:
            fields["local_rank"] = int(rm.group(2))
    em = _EXIT.match(values.get("exitcode", ""))
    if em:
        code = int(em.group(1))
        fields["exitcode"] = code
        if em.group(2):
            fields["pid"] = int(em.group(2))
        fields["signal"] = em.group(3) or _signal_of(code)
    if values.get("host"):
        fields["host"] = values["host"]
    tm = _TIME.match(values.get("time", ""))
    if tm:
        try:
            g = [int(x) for x in tm.groups()]
            fields["failure_time"] = _time.mktime((g[0], g[1], g[2], g[3], g[4], g[5], 0, 0, -1))
        except (OverflowError, ValueError):
            pass
    if values.get("error_file"):
        fields["error_file"] = values["error_file"]
    if values.get("traceback"):
        fields["traceback"] = values["traceback"][:300]
    event = make_event("elastic_child_failed", entry, ctx, "error", fields, rank=rank,
                       rank_source="content" if rank is not None else "")
    if event.time is None and "failure_time" in fields:
        from dataclasses import replace

        event = replace(event, time=float(fields["failure_time"]))
    return event


_DS_EXIT = re.compile(r"exits with return code = (?P<exit>-?\d+)")
_DS_LOCAL = re.compile(r"--local_rank=(?P<lr>\d+)")
_DS_MAX_LINES = 40


def deepspeed_exit(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """DeepSpeed's launcher (``launcher/launch.py`` ``sigkill_handler``): ``[ERROR]
    [launch.py:320:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=1', ...] exits with
    return code = -9``, the command list often wrapped over several lines."""
    text = line.body
    if "sigkill_handler" not in line.raw:
        return []
    end = _DS_EXIT.search(text)
    if end is None:
        for count, nxt in enumerate(follow.lines()):
            if count >= _DS_MAX_LINES:
                return []
            text += " " + nxt.body
            end = _DS_EXIT.search(nxt.body)
            if end is not None:
                break
    local = _DS_LOCAL.search(text)
    fields: dict[str, str | int | float]
    if end is not None:
        code = int(end.group("exit"))
        fields = {"exitcode": code, "signal": _signal_of(code)}
    elif local is not None and line.body.lstrip().startswith("["):
        # the paste ends inside the command list, before "exits with return code": the handler
        # only reports a worker that exited on its own, so that worker failed; how, it does not say
        fields = {"signal": "unknown (the log ends before its return code)"}
    else:
        return []
    if local is not None:
        fields["local_rank"] = int(local.group("lr"))
    return [make_event("elastic_child_failed", line, ctx, "error", fields,
                       rank=line.rank, rank_source=line.rank_source or "")]


_WORKER_DIED = re.compile(r"Worker proc (?P<name>[A-Za-z]+)-(?P<idx>\d+) died unexpectedly")
_CAUGHT = re.compile(r"\[(?P<host>[\w.-]+):(?P<pid>\d+)\s*:\d+:\d+\]\s+Caught signal (?P<n>\d+) "
                     r"\((?P<what>[^):]*)")


def worker_died(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """vLLM's multiprocess executor: ``Worker proc VllmWorker-3 died unexpectedly, shutting down
    executor``: the worker's index is its tensor-parallel rank; how it died is not said."""
    m = _WORKER_DIED.search(line.body)
    if not m:
        return []
    return [make_event("elastic_child_failed", line, ctx, "error",
                       {"signal": "unknown (died unexpectedly)", "binary": m.group("name")},
                       rank=int(m.group("idx")), rank_source="content")]


_CALLED = re.compile(r"CalledProcessError: Command '\[.*?--local_rank=(?P<lr>\d+)(?:.*?\]' "
                     r"(?:returned non-zero exit status (?P<code>-?\d+)|died with <Signals\.(?P<sig>SIG\w+)))?")


_RAY_DIED = re.compile(r"The actor is dead because its worker process has died|A worker died or was "
                       r"killed while executing a task by an unexpected system error")


def ray_worker_died(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """Ray's raylet / GCS on a dead worker process (verl, OpenRLHF, vLLM on Ray): ``A worker died or
    was killed while executing a task by an unexpected system error``; ``The actor is dead because
    its worker process has died. Worker exit type: SYSTEM_ERROR``. Ray's list of "potential root
    causes" after it (OOM killer, ``ray stop``, SIGSEGV) is generic, and not read as the cause."""
    if not _RAY_DIED.search(line.body):
        return []
    return [make_event("elastic_child_failed", line, ctx, "error",
                       {"signal": "unknown (Ray worker process died)", "binary": "ray"},
                       rank=line.rank, rank_source=line.rank_source or "")]


def called_process(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """torch.distributed.launch before torchrun: ``subprocess.CalledProcessError: Command
    '['python', '-u', 'train.py', '--local_rank=7', ...]' returned non-zero exit status 1.`` (or
    ``died with <Signals.SIGKILL: 9>``; a line cut before that still names the local rank): the
    launcher's word on which local rank failed."""
    m = _CALLED.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {"local_rank": int(m.group("lr"))}
    if m.group("code") is not None:
        fields["exitcode"] = int(m.group("code"))
        fields["signal"] = _signal_of(int(m.group("code")))
    elif m.group("sig"):
        fields["signal"] = m.group("sig")
    return [make_event("elastic_child_failed", line, ctx, "error", fields,
                       rank=line.rank, rank_source=line.rank_source or "")]


_SHARD = re.compile(r"\bShard (?P<rank>\d+) (?:failed to start|crashed)\b")


def shard_failed(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """Hugging Face text-generation-inference's launcher on a tensor-parallel shard it started:
    ``ERROR text_generation_launcher: Shard 0 failed to start`` (or ``Shard 1 crashed``): the
    shard's number is its rank; the error before it (an OOM, an exception) is that shard's."""
    m = _SHARD.search(line.body)
    if not m or "text_generation_launcher" not in line.raw and "shard-manager" not in line.raw:
        return []
    return [make_event("elastic_child_failed", line, ctx, "error",
                       {"local_rank": int(m.group("rank")),
                        "signal": "unknown (the launcher's shard failed)",
                        "binary": "text-generation-inference"},
                       rank=line.rank, rank_source=line.rank_source or "")]


def caught_signal(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A process's own fatal-signal handler (UCX/UCS, as NCCL and MPI jobs load it):
    ``[host:5283 :0:5704] Caught signal 7 (Bus error: nonexistent physical address)``; the rank
    comes from the pid where NCCL's ``Init COMPLETE`` line mapped it."""
    m = _CAUGHT.search(line.body) or _CAUGHT.search(line.raw)
    if not m:
        return []
    pid, host = int(m.group("pid")), m.group("host")
    number = int(m.group("n"))
    fields: dict[str, str | int | float] = {"signal": SIGNALS.get(number, f"SIG{number}"),
                                            "pid": pid, "host": host, "exitcode": -number}
    known = ctx.pid_rank.get((host, pid))
    if known is not None:
        return [make_event("elastic_child_failed", line, ctx, "error", fields, rank=known[1],
                           rank_source="pid")]
    return [make_event("elastic_child_failed", line, ctx, "error", fields)]


_AGENT_SIGNAL = re.compile(r"Received (?:Signals\.)?(?P<sig>SIG[A-Z]+|\d+) death signal, shutting down "
                           r"workers")


def agent_signalled(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``elastic_agent_signalled`` -- the torchrun agent of a node was itself signalled and stops
    that node's workers (``agent/server/api.py``: ``Received 15 death signal, shutting down
    workers``; torch >= 2.2 may print ``Received Signals.SIGTERM death signal``). Field signal. The
    line names no rank: the agent is a node's launcher."""
    m = _AGENT_SIGNAL.search(line.body)
    if not m:
        return []
    sig = m.group("sig")
    name = SIGNALS.get(int(sig), f"SIG{sig}") if sig.isdigit() else sig
    return [make_event("elastic_agent_signalled", line, ctx, "warning", {"signal": name},
                       rank=None, rank_source="")]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"death signal, shutting down", agent_signalled),
    (b"died unexpectedly", worker_died),
    (b"failed to start", shard_failed),
    (b" crashed", shard_failed),
    (b"worker process has died", ray_worker_died),
    (b"A worker died or was killed", ray_worker_died),
    (b"CalledProcessError: Command", called_process),
    (b"Caught signal ", caught_signal),
    (b"sigkill_handler] [", deepspeed_exit),
    (b"failed (exitcode:", failed),
    (b"closing signal", closing),
    (b"Failures:", table),
    (b"Root Cause (first observed failure):", table),
    (b"(local_rank: ", table_fragment),
]
