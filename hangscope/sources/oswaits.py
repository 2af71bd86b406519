"""Loader for the bundle's ``job/oswaits.json`` (kind ``oswaits``, written by
``collect.oswaits``; the format is documented there)::

    {"schema": "hangscope.oswaits/1", "taken_at": 1790000000.0,
     "locks": [{"kind": "FLOCK", "mode": "WRITE", "pid": 19491, "dev_ino": "fe:00:2163186",
                "blocked": false, "line": "1: FLOCK  ADVISORY  WRITE 19491 fe:00:2163186 0 EOF"}],
     "processes": {"19532": {"pid": 19532, "rank": 0, "worker_of": null, "cmdline": "python ...",
                             "syscall": "73 0x3 0x2 ...", "wchan": "locks_lock_inode_wait",
                             "ppid": 19400, "fds": {"3": {"target": "/x/results.txt",
                                                           "flags": 32769,
                                                           "dev_ino": "fe:00:2163186"}}}}}

Malformed entries are skipped; a file that is not this format is one problem naming it.
"""

from __future__ import annotations

from typing import Any

from hangscope.model import JobEvidence, OsFd, OsLock, OsProcess, OsSnapshot
from hangscope.sources.jsonfile import read_schema_file

KIND = "oswaits"
SCHEMA = "hangscope.oswaits/1"
MAX_BYTES = 32 << 20


def load_oswaits(path: str, rank: int | None, evidence: JobEvidence,
                 problems: list[str]) -> None:
    doc = read_schema_file(path, SCHEMA, MAX_BYTES, "OS wait snapshot", problems)
    if doc is None:
        return
    taken = doc.get("taken_at")
    snap = OsSnapshot(path=path, taken_at=float(taken) if isinstance(taken, (int, float)) else 0.0)
    for item in doc.get("locks") or []:
        lock = _lock(item)
        if lock is not None:
            snap.locks.append(lock)
    processes = doc.get("processes")
    for item in (processes.values() if isinstance(processes, dict) else []):
        proc = _process(item)
        if proc is not None:
            snap.processes[proc.pid] = proc
    evidence.os_waits.append(snap)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _lock(item: Any) -> OsLock | None:
    if not isinstance(item, dict) or _int(item.get("pid")) is None \
            or not isinstance(item.get("dev_ino"), str):
        return None
    return OsLock(kind=str(item.get("kind", "")), mode=str(item.get("mode", "")),
                  pid=item["pid"], dev_ino=item["dev_ino"], blocked=item.get("blocked") is True,
                  line=str(item.get("line", ""))[:200])


def _process(item: Any) -> OsProcess | None:
    if not isinstance(item, dict) or _int(item.get("pid")) is None:
        return None
    fds = {}
    raw_fds = item.get("fds")
    for name, fd in (raw_fds.items() if isinstance(raw_fds, dict) else []):
        if isinstance(fd, dict) and str(name).isdigit() and isinstance(fd.get("target"), str):
            fds[int(name)] = OsFd(int(name), fd["target"][:300], _int(fd.get("flags")),
                                  _str(fd.get("dev_ino")))
    return OsProcess(pid=item["pid"], rank=_int(item.get("rank")),
                     worker_of=_int(item.get("worker_of")),
                     cmdline=str(item.get("cmdline") or "")[:300],
                     syscall=tuple(str(item.get("syscall") or "").split()[:7]),
                     wchan=_str(item.get("wchan")), ppid=_int(item.get("ppid")), fds=fds)
