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

from hangscope.collect.procstate import stat_fields

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


# /proc/PID/stat state letters, named as psutil names them (psutil.STATUS_*).
_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped",
           "t": "tracing-stop", "Z": "zombie", "X": "dead", "x": "dead", "K": "wake-kill",
           "W": "waking", "I": "idle", "P": "parked"}


@dataclass(slots=True)
class ProcSnap:
    """One process as /proc showed it when the table was taken. The command line and the
    executable are read on first use: a busy node runs a thousand processes, and a search by
    process group only needs them for the few it reaches."""

    pid: int
    ppid: int
    pgid: int
    name: str
    create_time: float
    status: str
    _cmdline: list[str] | None = None
    _exe: str | None = None

    @property
    def cmdline(self) -> list[str]:
        if self._cmdline is None:
            self._cmdline = _read_cmdline(self.pid)
        return self._cmdline

    @property
    def exe(self) -> str:
        if self._exe is None:
            try:
                exe = os.readlink(f"/proc/{self.pid}/exe")
            except OSError:  # gone, a kernel thread, or not ours to read
                exe = ""
            if exe.endswith(" (deleted)") and not os.path.exists(exe):
                exe = exe.removesuffix(" (deleted)")  # replaced on disk since (as psutil says)
            self._exe = exe
        return self._exe

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
    """Every process on this host, once, from one read of /proc/PID/stat each: later walks see
    one consistent tree. (psutil would read four files per process: 10x slower here.)"""
    table: ProcTable = {}
    ticks = os.sysconf("SC_CLK_TCK")
    booted = psutil.boot_time()  # create_time as psutil computes it, so the two compare
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        snap = _read_stat(int(entry), ticks, booted)
        if snap is not None:
            table[snap.pid] = snap
    return table


def _read_stat(pid: int, ticks: int, booted: float) -> ProcSnap | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read(4096).decode("utf-8", "replace")
    except OSError:  # exited since the listing
        return None
    fields = stat_fields(raw)  # state ppid pgrp ... starttime (the 20th of them)
    if fields is None or "(" not in raw:
        return None
    try:
        ppid, pgid, started = int(fields[1]), int(fields[2]), int(fields[19])
    except ValueError:
        return None
    name = raw[raw.index("(") + 1:raw.rindex(")")]
    return ProcSnap(pid, ppid, pgid, name, booted + started / ticks,
                    _STATES.get(fields[0], fields[0]))


def _read_cmdline(pid: int) -> list[str]:
    """Split as psutil splits it: a process that rewrote its title (setproctitle) may separate
    its words with spaces, with or without a final NUL."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            data = handle.read(1 << 20).decode("utf-8", "surrogateescape")
    except OSError:
        return []
    if not data:
        return []
    sep = "\0" if data.endswith("\0") else " "
    words = data.removesuffix(sep).split(sep)
    if sep == "\0" and len(words) == 1 and " " in data:
        words = data.removesuffix(sep).split(" ")
    return words


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
        members = [pid for pid, snap in table.items() if snap.pgid == pid_group]
        if not members:
            reasons.append(f"no process has process group id {pid_group}")
        roots.extend(members)
    for pid in pids:
        if pid in table:
            roots.append(pid)
        else:
            reasons.append(f"pid {pid} does not exist")
    if pattern is not None:
        # our own shell matches the pattern too, and so does a copy of us we forked (its command
        # line is ours) or a py-spy we started: none of them is the job (a job started by the
        # process that runs hangscope, as tests do, still is)
        own = table[os.getpid()].line if os.getpid() in table else None
        me = {os.getpid(), *ancestors(os.getpid(), table),
              *(pid for pid in with_descendants([os.getpid()], children_of(table))
                if table[pid].line == own or "py-spy" in table[pid].line)}
        hits = [pid for pid, s in table.items() if pid not in me and pattern.search(s.line)]
        if not hits:
            reasons.append(f"no command line matches {pattern.pattern!r}")
        roots.extend(hits)
    return list(dict.fromkeys(roots))


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
