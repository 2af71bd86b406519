"""Numbering an exited, unreaped rank by elimination (``discover/zombies.py``): on tables built
by hand, the cases where the number is told and those where it must not be guessed. The live
case (a real Popen job whose rank 2 is a zombie) is in test_attach_live_causes.py."""

from __future__ import annotations

import psutil

from hangscope.discover.job import RankProcess
from hangscope.discover.proctree import ProcSnap
from hangscope.discover.zombies import zombie_ranks

LAUNCHER = 100


def _rank(pid: int, rank: int, started: float, *, world: int = 4, local: int | None = None,
          local_world: int | None = None) -> RankProcess:
    return RankProcess(pid=pid, rank=rank, local_rank=local, world_size=world,
                       local_world_size=local_world, group_rank=None, run_id=None,
                       master_addr=None, master_port=None, env={}, cmdline=[], workers=[],
                       create_time=started)


def _table(ranks: list[RankProcess], zombies: dict[int, float]):  # type: ignore[no-untyped-def]
    table = {LAUNCHER: ProcSnap(LAUNCHER, 1, LAUNCHER, "python3", 0.0, psutil.STATUS_SLEEPING)}
    for r in ranks:
        table[r.pid] = ProcSnap(r.pid, LAUNCHER, LAUNCHER, "python3", r.create_time,
                                psutil.STATUS_SLEEPING)
    for pid, started in zombies.items():
        table[pid] = ProcSnap(pid, LAUNCHER, LAUNCHER, "python3", started, psutil.STATUS_ZOMBIE)
    children = {LAUNCHER: sorted([r.pid for r in ranks] + list(zombies))}
    return table, children


def _told(ranks: list[RankProcess], zombies: dict[int, float],
          exited: frozenset[int] = frozenset()) -> dict[int, int]:
    table, children = _table(ranks, zombies)
    return {rank: pid for rank, (pid, _) in
            zombie_ranks(ranks, table, children, set(exited)).items()}


def test_one_zombie_for_one_missing_number_is_that_rank() -> None:
    alive = [_rank(11, 0, 1.0), _rank(12, 1, 1.1), _rank(14, 3, 1.3)]
    assert _told(alive, {13: 1.2}) == {2: 13}
    # whatever the start order (a launcher that starts its ranks in any order)
    assert _told(alive, {19: 9.0}) == {2: 19}


def test_several_zombies_are_matched_in_start_order_only_when_the_ranks_started_in_order(
        ) -> None:
    in_order = [_rank(11, 0, 1.0), _rank(14, 3, 1.3)]
    assert _told(in_order, {12: 1.1, 13: 1.2}) == {1: 12, 2: 13}
    out_of_order = [_rank(11, 3, 1.0), _rank(14, 0, 1.3)]
    assert _told(out_of_order, {12: 1.1, 13: 1.2}) == {}


def test_no_guess_where_the_counts_disagree() -> None:
    alive = [_rank(11, 0, 1.0), _rank(12, 1, 1.1)]
    # two numbers missing, one zombie: a helper that exited, or one rank never started
    assert _told(alive, {13: 1.2}) == {}
    # every number held: the zombie is no rank (a preprocessing child that finished)
    full = [_rank(11, 0, 1.0), _rank(12, 1, 1.1), _rank(13, 2, 1.2), _rank(14, 3, 1.3)]
    assert _told(full, {15: 1.4}) == {}
    # a number already told gone by an orphan is not missing again
    assert _told([_rank(11, 0, 1.0), _rank(12, 1, 1.1), _rank(14, 3, 1.3)], {13: 1.2},
                 exited=frozenset({2})) == {}


def test_a_node_of_a_larger_job_numbers_its_zombie_by_the_local_offset() -> None:
    # node 1 of two (torchrun-style LOCAL_RANK / LOCAL_WORLD_SIZE): ranks 4-7, local 0-3
    alive = [_rank(11, 4, 1.0, world=8, local=0, local_world=4),
             _rank(12, 5, 1.1, world=8, local=1, local_world=4),
             _rank(14, 7, 1.3, world=8, local=3, local_world=4)]
    assert _told(alive, {13: 1.2}) == {6: 13}
    # without local numbering, a world larger than what one launcher runs: no guess
    plain = [_rank(11, 4, 1.0, world=8), _rank(12, 5, 1.1, world=8), _rank(14, 7, 1.3, world=8)]
    assert _told(plain, {13: 1.2}) == {}
