"""Tell the processes found apart: ranks, their DataLoader workers and helpers, and launchers.

A forked DataLoader worker inherits its rank's environment, so it looks like a second copy of the
rank: a process whose ancestor is already that rank is a worker (or a helper) of it, never a rank.
"""

from __future__ import annotations

from hangscope.discover.environ import env_int, filter_env, identity, read_environ
from hangscope.discover.job import ProcInfo, RankProcess
from hangscope.discover.proctree import (
    Children,
    ProcSnap,
    ProcTable,
    is_worker,
    launcher_kind,
    with_descendants,
)


def proc_info(snap: ProcSnap) -> ProcInfo:
    return ProcInfo(snap.pid, snap.ppid, snap.name, snap.cmdline, snap.create_time,
                    launcher_kind(snap.cmdline), snap.status)


def classify(looked: list[int], table: ProcTable, children: Children
             ) -> tuple[list[RankProcess], dict[int, list[int]], dict[int, ProcInfo], list[str]]:
    """Split the processes (parents before children) into ranks, their workers (by rank pid) and
    launchers (by pid); say why the others are none of these."""
    ranks: dict[int, RankProcess] = {}
    owner: dict[int, int] = {}  # pid -> rank pid it belongs to (workers, helpers)
    workers: dict[int, list[int]] = {}
    launchers: dict[int, ProcInfo] = {}
    reasons: list[str] = []
    for pid in looked:
        snap = table[pid]
        parent_owner = owner.get(snap.ppid) if snap.ppid not in ranks else snap.ppid
        if parent_owner is not None:
            owner[pid] = parent_owner
            if is_worker(snap, table, ranks[parent_owner].cmdline):
                workers.setdefault(parent_owner, []).append(pid)
            continue
        kind = launcher_kind(snap.cmdline)
        if kind:
            launchers[pid] = proc_info(snap)
            if not children.get(pid):
                reasons.append(f"pid {pid} is a launcher ({kind}) with no live child process")
            continue
        if not snap.is_python:
            if not children.get(pid):
                reasons.append(f"pid {pid} ({snap.name or '?'}) is not a python process")
            continue
        env = read_environ(pid)
        if isinstance(env, str):
            reasons.append(f"pid {pid} {env}")
            continue
        ident = identity(env)
        if ident is None and (spawned := spawn_index(snap, table)) is not None:
            # torch.multiprocessing.spawn hands each process its index as an argument, not in
            # its environment; the parent starts them one after another, index order
            index, siblings = spawned
            launchers.setdefault(snap.ppid, proc_info(table[snap.ppid]))
            ranks[pid] = RankProcess(
                pid=pid, rank=index, local_rank=index, world_size=siblings,
                local_world_size=siblings, group_rank=None, run_id=None,
                master_addr=env.get("MASTER_ADDR"), master_port=env_int(env.get("MASTER_PORT")),
                env=filter_env(env), cmdline=snap.cmdline, workers=[],
                create_time=snap.create_time, identity_from=SPAWN_ORDER)
            continue
        if ident is None:
            reasons.append(f"pid {pid} is a python process but has no RANK (nor SLURM_PROCID, "
                           f"OMPI_COMM_WORLD_RANK, PMI_RANK) in its environment")
            continue
        if ident.variable != "RANK" and _has_rank_below(pid, children):
            launchers[pid] = proc_info(snap)  # a custom launcher inside an srun/mpirun task
            continue
        ranks[pid] = RankProcess(
            pid=pid, rank=ident.rank, local_rank=ident.local_rank, world_size=ident.world_size,
            local_world_size=ident.local_world_size,
            group_rank=env_int(env.get("GROUP_RANK") or env.get("SLURM_NODEID")),
            run_id=env.get("TORCHELASTIC_RUN_ID") or env.get("SLURM_JOB_ID"),
            master_addr=env.get("MASTER_ADDR"), master_port=env_int(env.get("MASTER_PORT")),
            env=filter_env(env), cmdline=snap.cmdline, workers=[], create_time=snap.create_time,
            identity_from=ident.variable)
    # (a spawning parent was looked at before its children made it their launcher)
    reasons = [r for r in reasons if not any(r.startswith(f"pid {pid} ") for pid in launchers)]
    return list(ranks.values()), workers, launchers, reasons


def left_behind(ranks: list[RankProcess], table: ProcTable) -> list[tuple[RankProcess, str]]:
    """Processes that carry a rank's identity but are no rank: a child the rank forked (a
    helper, a metrics sink) that outlived it. When the rank exits, its children are handed to
    init (or a subreaper) and keep the rank's environment; a second copy of the rank while it
    lived, they are the only one once it died. Told by their parent: at least two other ranks
    share one parent (their launcher), this process has another, one orphans are handed to (init
    or a subreaper), and it started after every one of them (a rank's child starts after the
    rank)."""
    parents: dict[int, list[RankProcess]] = {}
    for rank in ranks:
        if rank.pid in table:
            parents.setdefault(table[rank.pid].ppid, []).append(rank)
    if len(parents) < 2:
        return []
    launcher, started = max(parents.items(), key=lambda item: len(item[1]))
    if len(started) < 2:
        return []
    latest = max(r.create_time for r in started)
    found = []
    for rank in ranks:
        snap = table.get(rank.pid)
        if snap is None or snap.ppid == launcher or len(parents.get(snap.ppid, [])) > 1 \
                or rank.create_time <= latest or any(r.rank == rank.rank for r in started) \
                or not _is_reaper(table.get(snap.ppid)):
            continue
        found.append((rank, f"pid {rank.pid} carries rank {rank.rank}'s identity but is no rank: "
                            f"its parent is pid {snap.ppid}, not pid {launcher} which started "
                            f"ranks {', '.join(str(r.rank) for r in sorted(started, key=_rank))}, "
                            f"and it started after them: a child rank {rank.rank} forked, left "
                            f"behind when rank {rank.rank}'s own process exited"))
    return found


# where an orphan goes: init, or a subreaper (a container's init, a user's systemd)
_REAPERS = frozenset({"systemd", "init", "tini", "dumb-init", "catatonit", "docker-init",
                      "s6-svscan", "runit", "supervisord"})


def _is_reaper(parent: ProcSnap | None) -> bool:
    """The process an orphan was handed to, not a launcher that started a rank of its own (a
    second node's slurmstepd or torchrun on the same host starts ranks later too)."""
    return parent is not None and (parent.pid == 1 or parent.name in _REAPERS)


def _rank(rank: RankProcess) -> int:
    return rank.rank


SPAWN_ORDER = "spawn order"
# multiprocessing's spawn child: "python -c 'from multiprocessing.spawn import spawn_main;
# spawn_main(tracker_fd=6, pipe_handle=8)' --multiprocessing-fork"
_SPAWN_CHILD = "spawn_main("


def spawn_index(snap: ProcSnap, table: ProcTable) -> tuple[int, int] | None:
    """The place of a process among the multiprocessing spawn children of a python parent that
    is none itself (torch.multiprocessing.spawn's ranks: started in index order, so by start time,
    then pid), and how many they are; or None. A spawn child's own spawn children (its
    DataLoader's) are not counted."""
    parent = table.get(snap.ppid)
    if _SPAWN_CHILD not in snap.line or parent is None or not parent.is_python \
            or _SPAWN_CHILD in parent.line:
        return None
    siblings = _spawned_siblings(snap, table)
    return (siblings.index(snap.pid), len(siblings)) if snap.pid in siblings else None


def _spawned_siblings(snap: ProcSnap, table: ProcTable) -> list[int]:
    found = [other for other in table.values()
             if other.ppid == snap.ppid and _SPAWN_CHILD in other.line and other.is_python]
    return [other.pid for other in sorted(found, key=lambda o: (o.create_time, o.pid))]


def _has_rank_below(pid: int, children: Children) -> bool:
    for child in with_descendants(children.get(pid, []), children):
        env = read_environ(child)
        if isinstance(env, dict) and env_int(env.get("RANK")) is not None:
            return True
    return False
