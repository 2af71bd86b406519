# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""torch.utils.data DataLoader failures (``torch/utils/data/dataloader.py``,
``torch/utils/data/_utils/signal_handling.py``, ``torch/csrc/DataLoader.cpp``; recorded with torch 2.13).

``dataloader_worker_killed``::

    RuntimeError: DataLoader worker (pid 15373) is killed by signal: Killed.
    RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited unexpectedly
    RuntimeError: DataLoader worker (pid 1234) exited unexpectedly with exit code 1. Details are lost due to multiprocessing. ...
    ERROR: Unexpected segmentation fault encountered in worker.

  fields: pid (first), pids, signal ("Killed", "Segmentation fault", "SIGSEGV"...), exit_code.

``dataloader_timeout`` -- ``RuntimeError: DataLoader timed out after 60 seconds`` (fields timeout_s).

``shm_bus_error`` -- ``ERROR: Unexpected bus error encountered in worker. This might be caused by
insufficient shared memory (shm).`` (and the ``Bus error`` signal variant of the worker-killed line).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

_KILLED = re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<sig>[^.]+)")
_EXITED = re.compile(r"DataLoader worker \(pid(?:\(s\))? (?P<pids>\d+(?:, ?\d+)*)\) exited "
                     r"unexpectedly(?: with exit code (?P<code>-?\d+))?")
_TIMEOUT = re.compile(r"DataLoader timed out after (?P<s>\d+(?:\.\d+)?) seconds")
_SEGV = re.compile(r"Unexpected (?P<what>segmentation fault|floating point exception|bus error) "
                   r"encountered in worker")


def worker(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    fields: dict[str, str | int | float] = {}
    m = _KILLED.search(body)
    if m:
        fields.update(pid=int(m.group("pid")), pids=m.group("pid"), signal=m.group("sig").strip())
        if "Bus error" in fields["signal"]:  # type: ignore[operator]
            fields["shm"] = 1
    else:
        e = _EXITED.search(body)
        if not e:
            return []
        pids = [p.strip() for p in e.group("pids").split(",")]
        fields.update(pid=int(pids[0]), pids=",".join(pids), signal="")
        if e.group("code") is not None:
            fields["exit_code"] = int(e.group("code"))
    return [make_event("dataloader_worker_killed", line, ctx, "error", fields)]


def crash(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _SEGV.search(line.body)
    if not m:
        return []
    what = m.group("what")
    if what == "bus error":
        return [make_event("shm_bus_error", line, ctx, "error",
                           {"shm_hint": 1 if "shared memory" in line.body else 0})]
    return [make_event("dataloader_worker_killed", line, ctx, "error",
                       {"signal": "SIGSEGV" if what.startswith("seg") else "SIGFPE"})]


def timeout(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _TIMEOUT.search(line.body)
    if not m:
        return []
    return [make_event("dataloader_timeout", line, ctx, "error",
                       {"timeout_s": float(m.group("s"))})]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"DataLoader worker (pid", worker),
    (b"encountered in worker", crash),
    (b"DataLoader timed out after", timeout),
]
