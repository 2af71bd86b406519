"""The process table at one moment, and walks over it: search roots, descendants, ancestors.

Also what a command line says a process is: a launcher (``torchrun``, ``mpirun``...), a python
process, or a multiprocessing child of one (a DataLoader worker, not a helper).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

# Launcher kind -> pattern over the joined command line.
_LAUNCHERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("torchrun", re.compile(r"(^|[/\s])torchrun(\s|$)")),
    ("torch.distributed.run", re.compile(r"-m\s+torch\.distributed\.(run|launch)(\s|$)")),
    ("elastic-agent", re.compile(r"torch\.distributed\.elastic\.agent")),
    ("mpirun", re.compile(r"(^|/)(mpirun|mpiexec|orterun|prterun)(\s|$)")),
    ("srun", re.compile(r"(^|/)srun(\s|$)")),
    ("deepspeed", re.compile(r"(^|[/\s])deepspeed(\s|$)|-m\s+deepspeed\.launcher")),
    ("accelerate", re.compile(r"(^|[/\s])accelerate(\s+launch)(\s|$)|-m\s+accelerate\.commands")),
)
_PYTHON_EXE = re.compile(r"^(python|pypy)[\d.]*[dmu]*$")
_MP_CHILD = re.compile(r"multiprocessing\.(spawn|forkserver)|--multiprocessing-fork")
_MP_HELPER = re.compile(r"multiprocessing\.(resource_tracker|semaphore_tracker)")


@dataclass(slots=True)
class ProcSnap:
    """One process as psutil saw it when the table was taken."""

    pid: int
    ppid: int
    name: str
    exe: str
    cmdline: list[str]
    create_time: float
    status: str

    @property
    def line(self) -> str:
        return " ".join(self.cmdline) or self.name

    @property
    def is_python(self) -> bool:
        names = [os.path.basename(self.exe), self.name]
        if self.cmdline:
            names.append(os.path.basename(self.cmdline[0]))
        return any(_PYTHON_EXE.match(n) for n in names if n)


ProcTable = dict[int, ProcSnap]
Children = dict[int, list[int]]  # pid -> its child pids


def snapshot() -> ProcTable:
    """Every process on this host, once: later walks see one consistent tree."""
    table: ProcTable = {}
    attrs = ["pid", "ppid", "name", "exe", "cmdline", "create_time", "status"]
    for proc in psutil.process_iter(attrs, ad_value=None):
        info = proc.info
        table[proc.pid] = ProcSnap(proc.pid, info["ppid"] or 0, info["name"] or "",
                                   info["exe"] or "", list(info["cmdline"] or []),
                                   info["create_time"] or 0.0, info["status"] or "")
    return table


def children_of(table: ProcTable) -> Children:
    children: Children = {}
    for snap in table.values():
        children.setdefault(snap.ppid, []).append(snap.pid)
    return children


def launcher_kind(cmdline: Sequence[str]) -> str:
    """The launcher a command line runs ("torchrun", "mpirun"...), or "" for none."""
    line = " ".join(cmdline)
    return next((kind for kind, rx in _LAUNCHERS if rx.search(line)), "")


def find_roots(table: ProcTable, pid_group: int | None, pids: Sequence[int],
               pattern: re.Pattern[str] | None, reasons: list[str]) -> list[int]:
    """The processes the user pointed at, in order, without repeats; why any part found none
    goes to ``reasons``."""
    roots: list[int] = []
    if pid_group is not None:
        members = [pid for pid in table if _pgid(pid) == pid_group]
        if not members:
            reasons.append(f"no process has process group id {pid_group}")
        roots.extend(members)
    for pid in pids:
        if pid in table:
            roots.append(pid)
        else:
            reasons.append(f"pid {pid} does not exist")
    if pattern is not None:
        me = {os.getpid(), *ancestors(os.getpid(), table)}  # our own shell matches the pattern too
        hits = [pid for pid, s in table.items() if pid not in me and pattern.search(s.line)]
        if not hits:
            reasons.append(f"no command line matches {pattern.pattern!r}")
        roots.extend(hits)
    return list(dict.fromkeys(roots))


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def with_descendants(roots: Iterable[int], children: Children) -> list[int]:
    """Roots and everything below them, parents before children."""
    seen: list[int] = []
    stack = list(reversed(list(roots)))
    known: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in known:
            continue
        known.add(pid)
        seen.append(pid)
        stack.extend(reversed(children.get(pid, [])))
    return seen


def ancestors(pid: int, table: ProcTable) -> list[int]:
    """Parent, grandparent... up to the first one not in the table (nearest first)."""
    out: list[int] = []
    cur = table[pid].ppid if pid in table else 0
    while cur > 0 and cur in table and cur not in out:
        out.append(cur)
        cur = table[cur].ppid
    return out


def is_worker(snap: ProcSnap, table: ProcTable, rank_cmdline: list[str]) -> bool:
    """A multiprocessing child (DataLoader worker) of a rank, not a helper like resource_tracker.

    spawn children say ``multiprocessing.spawn`` in their command line; forkserver children are
    forked by the forkserver, so they share its command line (the forkserver itself is a child of
    the rank); fork children (DataLoader's default) share the rank's exe and command line.
    """
    line = snap.line
    if _MP_HELPER.search(line) or not snap.is_python:
        return False
    if "multiprocessing.forkserver" in line:
        parent = table.get(snap.ppid)
        return parent is not None and parent.line == line  # else: the forkserver server
    if _MP_CHILD.search(line):
        return True
    return snap.cmdline == rank_cmdline
