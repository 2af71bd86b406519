"""What the job's processes wait for through the operating system: file locks, pipes, children.

A rank blocked in ``flock()`` or in ``read()`` on a pipe shows, in its Python stack, only the
job's line that made the call. Who holds the lock, or who should write to the pipe, is in /proc:

- ``/proc/locks``: every POSIX/flock/OFD lock; a line with ``->`` is a request blocked on the lock
  above it (same ``major:minor:inode``)::

      1: FLOCK  ADVISORY  WRITE 19491 fe:00:2163186 0 EOF
      1: -> FLOCK  ADVISORY  WRITE 19532 fe:00:2163186 0 EOF

- ``/proc/PID/syscall`` (the main thread's system call and its arguments: ``73 0x3 0x2 ...`` is
  ``flock(3, LOCK_EX)`` on x86-64, ``0 0x5 ...`` a ``read`` of fd 5) and ``/proc/PID/wchan``
  (``locks_lock_inode_wait``, ``pipe_read``);
- ``/proc/PID/fd/N`` (``pipe:[4242]``, ``socket:[77]``, a path) with ``fdinfo/N``'s ``flags``
  (octal; the low two bits are the access mode: 0 read, 1 write, 2 both), and for files the
  ``st_dev``/``st_ino`` that /proc/locks names.

One snapshot of the ranks, their descendants (DataLoader workers, helper subprocesses) and
the holders of the locks they wait on goes into the bundle as ``job/oswaits.json``
(``hangscope.oswaits/1``), read by ``sources/oswaits.py``. Reading another user's /proc entries
may fail: such a process is kept with what could be read.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from hangscope.bundle import BundleWriter, CollectionRecord
from hangscope.collect.procstate import children_of
from hangscope.sources.oswaits import KIND, SCHEMA

MAX_FDS = 256  # per process
MAX_PROCS = 512
MAX_LOCK_LINES = 4096
LOCK_READS = 6  # /proc/locks reads, LOCK_READ_GAP_S apart (see _locks_over)
LOCK_READ_GAP_S = 0.1


def collect_into(writer: BundleWriter, ranks: Mapping[int, int],
                 workers: Mapping[int, int]) -> None:
    """Take the snapshot into ``job/oswaits.json`` (a few ms); a failure is recorded, never
    raised: it must not stop the collection."""
    began = time.time()
    try:
        data = snapshot(ranks, workers)
    except Exception as exc:  # noqa: BLE001
        writer.collection.append(CollectionRecord("os-waits", None, "failed",
                                                  f"{type(exc).__name__}: {exc}"[:200], began))
        return
    writer.add_job_file(KIND, "oswaits.json", data)
    writer.collection.append(CollectionRecord("os-waits", None, "ok", "", began,
                                              round(time.time() - began, 4)))


def snapshot(ranks: Mapping[int, int], workers: Mapping[int, int],
             proc_root: str = "/proc") -> bytes:
    """``ranks`` maps pid -> rank, ``workers`` worker pid -> its rank. Returns the bundle file."""
    known: dict[int, dict[str, Any]] = {}
    queue: list[tuple[int, int | None, int | None]] = [(pid, rank, None)
                                                       for pid, rank in ranks.items()]
    queue += [(pid, None, rank) for pid, rank in workers.items() if pid not in ranks]
    while queue and len(known) < MAX_PROCS:
        pid, rank, parent_rank = queue.pop(0)
        if pid in known:
            continue
        known[pid] = _process(pid, rank, parent_rank, proc_root)
        owner = rank if rank is not None else parent_rank
        queue += [(child, None, owner) for child in children_of(pid, proc_root)
                  if child not in known]
    locks = _locks_over(proc_root, between=lambda: _settle(known, proc_root))
    # the holders of locks someone here waits on, wherever they are
    wanted = {lock["dev_ino"] for lock in locks if lock["blocked"] and lock["pid"] in known}
    for lock in locks:
        if not lock["blocked"] and lock["dev_ino"] in wanted and lock["pid"] not in known \
                and len(known) < MAX_PROCS:
            known[lock["pid"]] = _process(lock["pid"], None, None, proc_root)
    inodes = {fd["dev_ino"] for proc in known.values() for fd in proc["fds"].values()
              if fd.get("dev_ino")}
    locks = [lock for lock in locks if lock["pid"] in known or lock["dev_ino"] in inodes]
    doc = {"schema": SCHEMA, "taken_at": time.time(), "locks": locks,
           "processes": {str(pid): proc for pid, proc in known.items()}}
    return json.dumps(doc).encode()  # schema first: a bare file is told by its first bytes


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return None


def _process(pid: int, rank: int | None, worker_of: int | None,
             proc_root: str) -> dict[str, Any]:
    base = f"{proc_root}/{pid}"
    cmdline = (_read(f"{base}/cmdline") or "").replace("\0", " ").strip()[:300]
    wchan = (_read(f"{base}/wchan", 256) or "").strip()
    return {"pid": pid, "rank": rank, "worker_of": worker_of, "cmdline": cmdline,
            "syscall": (_read(f"{base}/syscall", 512) or "").strip(),
            "wchan": wchan if wchan and wchan != "0" else None,
            "ppid": _ppid(base), "fds": _fds(base)}


# what a process's wait reads while a blocking py-spy dump holds it stopped
_STOPPED_WCHAN = ("ptrace_stop", "do_signal_stop")


def _settled(proc: dict[str, Any]) -> bool:
    """Whether the reading shows the process's own wait: a system call (its number first) and
    no wchan of a ptrace stop. Attach samples stacks meanwhile: a process read while py-spy
    holds it stopped, or in the moment it resumes, reads ``running`` or ``ptrace_stop``."""
    call = proc["syscall"].split(" ", 1)[0]
    return call.isdigit() and proc["wchan"] not in _STOPPED_WCHAN


def _settle(known: dict[int, dict[str, Any]], proc_root: str) -> None:
    """Read again the system call and wchan of each process whose reading is not settled, and
    keep a settled one: a process that really runs stays ``running`` at no cost but the read."""
    for pid, proc in known.items():
        if _settled(proc):
            continue
        base = f"{proc_root}/{pid}"
        wchan = (_read(f"{base}/wchan", 256) or "").strip()
        again = {"syscall": (_read(f"{base}/syscall", 512) or "").strip(),
                 "wchan": wchan if wchan and wchan != "0" else None}
        if _settled(again):
            proc.update(again)


def _ppid(base: str) -> int | None:
    status = _read(f"{base}/status", 8192) or ""
    for line in status.splitlines():
        if line.startswith("PPid:"):
            value = line.split(":", 1)[1].strip()
            return int(value) if value.isdigit() else None
    return None


def _fds(base: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    try:
        names = sorted(os.listdir(f"{base}/fd"), key=lambda n: int(n) if n.isdigit() else 0)
    except OSError:
        return found
    for name in names[:MAX_FDS]:
        try:
            target = os.readlink(f"{base}/fd/{name}")
        except OSError:
            continue
        info: dict[str, Any] = {"target": target[:300]}
        flags = _flags(f"{base}/fdinfo/{name}")
        if flags is not None:
            info["flags"] = flags
        if target.startswith("/"):
            try:
                st = os.stat(f"{base}/fd/{name}")
                info["dev_ino"] = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
            except OSError:
                pass
        found[name] = info
    return found


def _flags(path: str) -> int | None:
    for line in (_read(path, 1024) or "").splitlines():
        if line.startswith("flags:"):
            try:
                return int(line.split(":", 1)[1].strip(), 8)
            except ValueError:
                return None
    return None


def _locks_over(proc_root: str, reads: int = LOCK_READS, gap_s: float = LOCK_READ_GAP_S,
                between: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """/proc/locks read ``reads`` times ``gap_s`` apart, each lock and request once. Attach
    samples stacks meanwhile, and a blocking py-spy dump stops its target: a request blocked in
    flock is withdrawn while its process is stopped and made again when it resumes, so one read
    can miss a waiter that every other moment shows. ``between`` runs after each gap."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for index in range(max(1, reads)):
        if index:
            time.sleep(gap_s)
            if between is not None:
                between()
        for lock in _locks(proc_root):
            seen.setdefault((lock["kind"], lock["mode"], lock["pid"], lock["dev_ino"],
                             lock["blocked"]), lock)
    return list(seen.values())


def _locks(proc_root: str) -> list[dict[str, Any]]:
    """/proc/locks as records: kind (FLOCK, POSIX, OFDLCK), mode (READ, WRITE), pid, dev_ino,
    blocked (a ``->`` request waiting for the lock above it)."""
    text = _read(f"{proc_root}/locks", 1 << 20) or ""
    found = []
    for line in text.splitlines()[:MAX_LOCK_LINES]:
        parts = line.split()
        blocked = len(parts) > 1 and parts[1] == "->"
        fields = parts[2:] if blocked else parts[1:]
        if len(fields) < 5 or not fields[3].lstrip("-").isdigit():
            continue
        found.append({"kind": fields[0], "mode": fields[2], "pid": int(fields[3]),
                      "dev_ino": fields[4], "blocked": blocked, "line": line.strip()[:200]})
    return found
