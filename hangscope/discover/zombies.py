"""Ranks that exited and wait to be reaped: a zombie child of the process that started the ranks.

A launcher that waits on its ranks one by one (``for p in procs: p.wait()``, the plain Popen
job) reaps a rank that died only when its turn comes: until then the rank is a zombie, with no
environment left to read its rank number from. Its number is told by elimination: the ranks its
launcher should have started, less those alive under it. One zombie for one missing number is
that rank; several are matched in start order, only where the living ranks were started in
rank order too."""

from __future__ import annotations

import psutil

from hangscope.discover.job import RankProcess
from hangscope.discover.proctree import Children, ProcTable


def zombie_ranks(ranks: list[RankProcess], table: ProcTable, children: Children,
                 exited: set[int]) -> dict[int, tuple[int, str]]:
    """rank -> (its zombie's pid, what tells that it is that rank), for the launchers' zombie
    children whose rank numbers elimination decides. ``exited``: ranks already told gone."""
    siblings: dict[int, list[RankProcess]] = {}
    for rank in ranks:
        if rank.pid in table:
            siblings.setdefault(table[rank.pid].ppid, []).append(rank)
    found: dict[int, tuple[int, str]] = {}
    taken = {r.rank for r in ranks} | exited
    for parent, started in siblings.items():
        zombies = sorted((pid for pid in children.get(parent, [])
                          if (snap := table.get(pid)) is not None
                          and snap.status == psutil.STATUS_ZOMBIE),
                         key=lambda pid: (table[pid].create_time, pid))
        wanted = _missing(started, taken) if zombies else []
        if not wanted or len(wanted) != len(zombies):
            continue
        if len(zombies) > 1 and not _started_in_rank_order(started, zombies, wanted, table):
            continue
        for pid, rank_no in zip(zombies, wanted, strict=True):
            others = ", ".join(str(r.rank) for r in sorted(started, key=lambda r: r.rank))
            found[rank_no] = (pid, (
                f"pid {pid}, an unreaped (zombie) child of pid {parent}, which started ranks "
                f"{others}: of the {len(started) + len(zombies)} ranks it should run, rank "
                f"{rank_no} is the one with no live process, so this exited process was rank "
                f"{rank_no}"))
    return found


def _missing(started: list[RankProcess], taken: set[int]) -> list[int]:
    """The global rank numbers the launcher of ``started`` should also have started, in order;
    [] where they cannot be told (the siblings disagree on their sizes or offset)."""
    local_sizes = {r.local_world_size for r in started}
    world_sizes = {r.world_size for r in started}
    if len(local_sizes) != 1 or len(world_sizes) != 1:
        return []
    local_size, world_size = local_sizes.pop(), world_sizes.pop()
    if local_size is None:
        # no local numbering (a plain Popen of N copies): the launcher runs the whole world
        return sorted(set(range(world_size or 0)) - taken)
    offsets = {r.rank - r.local_rank for r in started if r.local_rank is not None}
    if len(offsets) != 1 or any(r.local_rank is None for r in started):
        return []
    offset = offsets.pop()
    return sorted(set(range(offset, offset + local_size)) - taken)


def _started_in_rank_order(started: list[RankProcess], zombies: list[int], wanted: list[int],
                           table: ProcTable) -> bool:
    """With the zombies given the missing numbers in start order, every process the launcher
    started has a higher rank than the one before it (a launcher that starts ranks in order)."""
    order = sorted([(r.create_time, r.pid, r.rank) for r in started]
                   + [(table[pid].create_time, pid, rank_no)
                      for pid, rank_no in zip(zombies, wanted, strict=True)])
    numbers = [rank_no for _, _, rank_no in order]
    return numbers == sorted(numbers)
