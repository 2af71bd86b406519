"""Process state from /proc: is a rank computing, sleeping, stuck in the kernel, or gone?

Two samples a few seconds apart tell a busy rank (cpu time grows, status R) from a waiting one
(status S with a wchan such as ``futex_wait_queue`` or ``do_epoll_wait``) and from one stuck in
uninterruptible I/O (status D). We read ``/proc/PID/stat`` directly rather than through psutil so
the status letter is the kernel's own, and a process that vanished yields status "gone", never an
exception: a rank dying mid-collection is evidence, not an error.

Bundle file kind ``proc`` (one file per process)::

    {"pid": 456, "worker_of": null, "states": [{"pid": 456, "sampled_at": 1790000000.0,
      "status": "S", "cpu_time_s": 12.5, "rss_bytes": 1048576, "num_threads": 9,
      "wchan": "futex_wait_queue", "children": [470, 471], "exit_code": null,
      "exit_signal": null, "voluntary_switches": 1234, "main_io_bytes": 52428800}, ...]}

A rank whose process was gone before the look (only an orphan of it told so) has one state with
``"pid": 0``, ``"status": "gone"`` and ``"told_by"``: what told it.

``worker_of`` is the rank a DataLoader worker belongs to (then its states go to ``worker_proc``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import Any, cast, get_args

from hangscope.errors import BadInputError
from hangscope.model import JobEvidence, ProcessState, ProcStatus

MAX_PROC_FILE_BYTES = 16 << 20
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STATUSES = frozenset(get_args(ProcStatus))
# Kernel state letters -> ours. t (tracing stop) is a stop; X/x (dead) is gone.
_LETTER: dict[str, ProcStatus] = {"R": "R", "S": "S", "D": "D", "Z": "Z", "T": "T", "t": "T",
                                  "I": "I", "X": "gone", "x": "gone"}


def sample_process(pid: int, children: tuple[int, ...] | None = None,
                   proc_root: str = "/proc") -> ProcessState:
    """One reading of ``pid``. ``children`` may be passed in when the caller already knows them
    (``sample_many`` scans /proc once for all pids instead of once per pid)."""
    now = time.time()
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ProcessState(pid=pid, sampled_at=now, status="gone")
    except OSError:
        return ProcessState(pid=pid, sampled_at=now, status="unknown")
    fields = stat_fields(raw)
    if fields is None:
        return ProcessState(pid=pid, sampled_at=now, status="unknown")
    status = _LETTER.get(fields[0], "unknown")
    exit_code = exit_signal = None
    if status == "Z" and len(fields) > 49:
        exit_code, exit_signal = _decode_exit(fields[49])
    if children is None:
        children = children_of(pid, proc_root)
    return ProcessState(
        pid=pid, sampled_at=now, status=status,
        cpu_time_s=round((int(fields[11]) + int(fields[12])) / _CLOCK_TICKS, 3),
        rss_bytes=int(fields[21]) * _PAGE_SIZE, num_threads=int(fields[17]),
        wchan=_read_wchan(pid, proc_root), children=children,
        exit_code=exit_code, exit_signal=exit_signal,
        voluntary_switches=read_voluntary_switches(pid, proc_root),
        main_io_bytes=read_main_io(pid, proc_root))


def read_main_io(pid: int, proc_root: str = "/proc") -> int | None:
    """``rchar`` + ``wchar`` of the main thread (``/proc/PID/task/PID/io``, the thread's own);
    None where unreadable (another user's process without ptrace rights)."""
    try:
        with open(f"{proc_root}/{pid}/task/{pid}/io", "rb") as handle:
            text = handle.read(1024)
    except OSError:
        return None
    total = 0
    for key in (b"rchar:", b"wchar:"):
        at = text.find(key)
        if at < 0:
            return None
        value = text[at + len(key):text.find(b"\n", at)].strip()
        if not value.isdigit():
            return None
        total += int(value)
    return total


def read_voluntary_switches(pid: int, proc_root: str = "/proc") -> int | None:
    """The main thread's ``voluntary_ctxt_switches`` (``/proc/PID/status`` is the thread group
    leader's own, not a sum over threads); None where unreadable."""
    try:
        with open(f"{proc_root}/{pid}/status", "rb") as handle:
            text = handle.read(8192)
    except OSError:
        return None
    key = b"\nvoluntary_ctxt_switches:"
    at = text.find(key)
    if at < 0:
        return None
    value = text[at + len(key):text.find(b"\n", at + 1)].strip()
    return int(value) if value.isdigit() else None


def sample_many(pids: Iterable[int], proc_root: str = "/proc") -> dict[int, ProcessState]:
    """One reading of each pid, with one scan of /proc for all their children."""
    wanted = list(dict.fromkeys(pids))
    kids = _children_map(proc_root)
    return {pid: sample_process(pid, tuple(sorted(kids.get(pid, ()))), proc_root)
            for pid in wanted}


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process, from one small read; None when it is gone or a zombie
    (what ``watch`` reads at every check, without the rest of ``sample_process``)."""
    fields = read_stat_fields(f"/proc/{pid}/stat")
    if fields is None or _LETTER.get(fields[0]) in ("Z", "gone"):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def read_stat_fields(path: str) -> list[str] | None:
    """``stat_fields`` of a /proc stat file (a process's or a thread's); None when unreadable."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return stat_fields(raw)


def stat_fields(raw: str) -> list[str] | None:
    """Fields 3.. of /proc/PID/stat (after ``pid (comm)``; comm may hold spaces and parens)."""
    end = raw.rfind(")")
    if end < 0:
        return None
    fields = raw[end + 2:].split()
    return fields if len(fields) > 21 else None


def _decode_exit(word: str) -> tuple[int | None, int | None]:
    try:
        status = int(word)
    except ValueError:
        return None, None
    if status & 0x7F:
        return None, status & 0x7F
    return (status >> 8) & 0xFF, None


def _read_wchan(pid: int, proc_root: str) -> str | None:
    """The kernel function a sleeping process waits in; "0" (running, or hidden) means none."""
    try:
        with open(f"{proc_root}/{pid}/wchan", "rb") as handle:
            value = handle.read(256).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return value if value and value != "0" else None


def children_of(pid: int, proc_root: str = "/proc") -> tuple[int, ...]:
    """Children from /proc/PID/task/*/children when the kernel has it, else a /proc scan."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"{proc_root}/{pid}/task")
    except OSError:
        return ()
    for tid in tasks:
        try:
            with open(f"{proc_root}/{pid}/task/{tid}/children", "rb") as handle:
                found.extend(int(x) for x in handle.read().split())
        except FileNotFoundError:  # CONFIG_PROC_CHILDREN off (or the task ended): scan
            return tuple(sorted(_children_map(proc_root).get(pid, ())))
        except (OSError, ValueError):
            continue
    return tuple(sorted(set(found)))


def _children_map(proc_root: str) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return kids
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc_root}/{name}/stat", "rb") as handle:
                fields = stat_fields(handle.read().decode("utf-8", errors="replace"))
        except OSError:
            continue
        if fields is not None:
            kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


# --------------------------------------------------------------------------------------------------
# Bundle file kind "proc"


def state_to_dict(state: ProcessState) -> dict[str, Any]:
    return {"pid": state.pid, "sampled_at": state.sampled_at, "status": state.status,
            "cpu_time_s": state.cpu_time_s, "rss_bytes": state.rss_bytes,
            "num_threads": state.num_threads, "wchan": state.wchan,
            "children": list(state.children), "exit_code": state.exit_code,
            "exit_signal": state.exit_signal, "voluntary_switches": state.voluntary_switches,
            "main_io_bytes": state.main_io_bytes,
            **({"told_by": state.told_by} if state.told_by else {})}


def to_json(pid: int, states: Iterable[ProcessState], worker_of: int | None = None) -> bytes:
    """The ``proc`` bundle file for one process (a rank, or a worker of rank ``worker_of``)."""
    doc = {"pid": pid, "worker_of": worker_of, "states": [state_to_dict(s) for s in states]}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def from_json(data: bytes, path: str) -> tuple[int, int | None, list[ProcessState]]:
    """Parse a ``proc`` file: (pid, worker_of, states). Bad input raises BadInputError(path)."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise BadInputError(path, f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("states"), list):
        raise BadInputError(path, "not a process-state file (no 'states' list)")
    pid = _req_int(doc.get("pid"), path, "pid")
    worker_of = doc.get("worker_of")
    if worker_of is not None:
        worker_of = _req_int(worker_of, path, "worker_of")
    states = [_state_from_dict(item, path, i) for i, item in enumerate(doc["states"])]
    return pid, worker_of, states


def _state_from_dict(item: Any, path: str, index: int) -> ProcessState:
    where = f"states[{index}]"
    if not isinstance(item, dict):
        raise BadInputError(path, f"{where} is not an object")
    status = item.get("status")
    if status not in _STATUSES:
        raise BadInputError(path, f"{where}: unknown status {status!r}")
    children = item.get("children") or []
    if not isinstance(children, list):
        raise BadInputError(path, f"{where}: 'children' is not a list")
    sampled_at = item.get("sampled_at")
    if not isinstance(sampled_at, (int, float)) or isinstance(sampled_at, bool):
        raise BadInputError(path, f"{where}: missing field 'sampled_at'")
    cpu = item.get("cpu_time_s")
    wchan = item.get("wchan")
    return ProcessState(
        pid=_req_int(item.get("pid"), path, f"{where}.pid"), sampled_at=float(sampled_at),
        status=cast(ProcStatus, status),
        cpu_time_s=float(cpu) if isinstance(cpu, (int, float)) else None,
        rss_bytes=_opt_int(item.get("rss_bytes")), num_threads=_opt_int(item.get("num_threads")),
        wchan=wchan if isinstance(wchan, str) else None,
        children=tuple(_req_int(c, path, f"{where}.children") for c in children),
        exit_code=_opt_int(item.get("exit_code")), exit_signal=_opt_int(item.get("exit_signal")),
        voluntary_switches=_opt_int(item.get("voluntary_switches")),
        main_io_bytes=_opt_int(item.get("main_io_bytes")),
        told_by=str(told)[:500] if (told := item.get("told_by")) else None)


def _req_int(value: Any, path: str, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise BadInputError(path, f"field {name!r} is not an integer")


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_proc_file(path: str, rank: int | None, evidence: JobEvidence, problems: list[str]
                   ) -> None:
    """Bundle loader: append the states to the rank (or to its worker's list)."""
    try:
        if os.path.getsize(path) > MAX_PROC_FILE_BYTES:
            raise BadInputError(path, "process-state file is implausibly large")
        with open(path, "rb") as handle:
            pid, worker_of, states = from_json(handle.read(), path)
    except OSError as exc:
        problems.append(f"{path}: unreadable ({exc.strerror or exc})")
        return
    except BadInputError as exc:
        problems.append(str(exc))
        return
    rank = rank if rank is not None else worker_of
    if rank is None:
        problems.append(f"{path}: process state of pid {pid} belongs to no rank: ignored")
        return
    rank_ev = evidence.rank(rank)
    if worker_of is None:
        rank_ev.pid = rank_ev.pid or pid
        rank_ev.proc.extend(states)
        rank_ev.proc.sort(key=lambda s: s.sampled_at)
    else:
        if pid not in rank_ev.worker_pids:
            rank_ev.worker_pids.append(pid)
        found = rank_ev.worker_proc.setdefault(pid, [])
        found.extend(states)
        found.sort(key=lambda s: s.sampled_at)
