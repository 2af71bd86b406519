"""Wait edges through the operating system, from the /proc snapshot (``collect.oswaits``).

- **File locks**: a ``->`` line of /proc/locks is a process blocked on the lock another process
  holds on the same ``major:minor:inode``; the path comes from any snapshot process's fd on that
  inode. Edge: waiter -> holder.
- **Pipes**: a process blocked reading a pipe (wchan ``pipe_read``/``pipe_wait``, or its
  ``/proc/PID/syscall`` is ``read`` on an fd whose target is ``pipe:[N]``) waits for whoever holds
  the pipe's write end (an fd on ``pipe:[N]`` opened for writing, in another process). Edge:
  reader -> each writer.

Both sides are named by pid, with the rank where the pid is a rank, else the rank it descends
from (a helper or DataLoader worker). Known limits: /proc/PID/syscall and wchan are the main
thread's; another thread blocked in ``flock`` is seen only through /proc/locks (which names the
process). A writer that never writes because it waits itself is followed by the detector.
"""

from __future__ import annotations

from dataclasses import dataclass

from hangscope.model import JobEvidence, OsProcess, OsSnapshot

# x86-64 numbers of the calls a blocked reader sits in (other architectures: wchan only)
_READ_CALLS = {"0": "read", "17": "pread64", "19": "readv"}
_PIPE_WCHAN = ("pipe_read", "anon_pipe_read", "pipe_wait", "pipe_wait_readable")


@dataclass(frozen=True, slots=True)
class OsEdge:
    waiter: int  # pid
    holder: int  # pid
    resource: str  # "file lock on /x/results.txt (FLOCK WRITE)", "pipe:[4242]"
    how: str  # what shows the waiter is blocked: the lock line, the syscall, the wchan
    snapshot: OsSnapshot

    def who(self, pid: int) -> str:
        return describe(self.snapshot.processes.get(pid), pid)


def describe(proc: OsProcess | None, pid: int) -> str:
    """``rank 1 (pid 4242)``, ``pid 4300, a child of rank 2 (python tokenize_server.py)``."""
    if proc is None:
        return f"pid {pid}"
    if proc.rank is not None:
        return f"rank {proc.rank} (pid {pid})"
    owner = f", a child of rank {proc.worker_of}" if proc.worker_of is not None else ""
    cmd = f" ({' '.join(proc.cmdline.split())[:80]})" if proc.cmdline else ""
    return f"pid {pid}{owner}{cmd}"


def rank_of(proc: OsProcess | None) -> int | None:
    """The rank a process is, or descends from."""
    if proc is None:
        return None
    return proc.rank if proc.rank is not None else proc.worker_of


def os_edges(evidence: JobEvidence) -> list[OsEdge]:
    edges: list[OsEdge] = []
    for snap in evidence.os_waits:
        edges.extend(_lock_edges(snap))
        edges.extend(_pipe_edges(snap))
    return edges


def _paths(snap: OsSnapshot) -> dict[str, str]:
    return {fd.dev_ino: fd.target for proc in snap.processes.values()
            for fd in proc.fds.values() if fd.dev_ino}


def _lock_edges(snap: OsSnapshot) -> list[OsEdge]:
    paths = _paths(snap)
    holders: dict[str, list[int]] = {}
    for lock in snap.locks:
        if not lock.blocked:
            holders.setdefault(lock.dev_ino, []).append(lock.pid)
    edges: list[OsEdge] = []
    for lock in snap.locks:
        if not lock.blocked:
            continue
        path = paths.get(lock.dev_ino, f"inode {lock.dev_ino}")
        resource = f"file lock on {path} ({lock.kind} {lock.mode})"
        edges.extend(OsEdge(lock.pid, holder, resource, f"/proc/locks: {lock.line}", snap)
                     for holder in holders.get(lock.dev_ino, []) if holder != lock.pid)
    return edges


def _pipe_edges(snap: OsSnapshot) -> list[OsEdge]:
    writers: dict[str, list[int]] = {}
    for proc in snap.processes.values():
        for fd in proc.fds.values():
            if fd.target.startswith("pipe:") and fd.flags is not None and fd.flags & 3:
                writers.setdefault(fd.target, []).append(proc.pid)
    edges: list[OsEdge] = []
    for proc in snap.processes.values():
        target, how = _blocked_read(proc)
        if target is None:
            continue
        edges.extend(OsEdge(proc.pid, writer, target, how, snap)
                     for writer in sorted(set(writers.get(target, [])) - {proc.pid}))
    return edges


def _blocked_read(proc: OsProcess) -> tuple[str | None, str]:
    """The pipe a process's main thread is blocked reading, and what shows it."""
    call = proc.syscall[0] if proc.syscall else ""
    if call in _READ_CALLS and len(proc.syscall) > 1:
        try:
            fd = proc.fds.get(int(proc.syscall[1], 16))
        except ValueError:
            fd = None
        if fd is not None and fd.target.startswith("pipe:"):
            return fd.target, (f"/proc/{proc.pid}/syscall: {_READ_CALLS[call]}(fd "
                               f"{fd.fd} -> {fd.target})" + (f", wchan {proc.wchan}"
                                                             if proc.wchan else ""))
    if proc.wchan in _PIPE_WCHAN:
        readable = [fd for fd in proc.fds.values() if fd.target.startswith("pipe:")
                    and fd.flags is not None and fd.flags & 3 == 0]
        if len(readable) == 1:
            return readable[0].target, (f"wchan {proc.wchan}; its one pipe read end: fd "
                                        f"{readable[0].fd} -> {readable[0].target}")
    return None, ""
