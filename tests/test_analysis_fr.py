"""Detectors on synthetic FR dumps: one scenario per test, GIVEN / WHEN / THEN."""

from __future__ import annotations

import pytest

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Kind, Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

from frdumps import history, make_dump, make_entry, write_dumps


def verdict_for(tmp_path, dumps, world=None, **kw):
    write_dumps(str(tmp_path / "d"), dumps, **kw)
    evidence, _ = load_paths([str(tmp_path / "d")], LoadOptions(world_size=world))
    verdict, _ = analyze(evidence)
    return verdict


def hung_at(n, op="all_reduce", sizes=None, pg=("0", "default_pg"), start=0):
    return history(n, pg=pg, start_record=start) + [
        make_entry(start + n, op, seq=n + 1, sizes=sizes, state="started", pg=pg)]


def test_collective_mismatch_names_the_odd_rank(tmp_path) -> None:
    # GIVEN ranks 0-2 in all_reduce seq 6 and rank 3 in all_gather seq 6
    dumps = {r: make_dump(hung_at(5), 4) for r in range(3)}
    dumps[3] = make_dump(hung_at(5, op="all_gather"), 4)
    # WHEN
    verdict = verdict_for(tmp_path, dumps)
    # THEN
    root = verdict.root
    assert verdict.status is Status.HANG
    assert root.kind is Kind.COLLECTIVE_MISMATCH
    assert root.culprit_ranks == [3]
    assert root.waiting_ranks == [0, 1, 2]
    assert (root.collective.pg, root.collective.seq, root.collective.op) == ("0", 6, "all_gather")
    assert "rank 3 entered all_gather" in root.summary and "ranks 0-2 expect all_reduce" in root.summary
    assert root.evidence[0].where == "/job/train.py:42"


def test_size_mismatch_states_both_sides(tmp_path) -> None:
    dumps = {r: make_dump(hung_at(5), 4) for r in (0, 2, 3)}
    dumps[1] = make_dump(hung_at(5, sizes=[[5, 4]]), 4)
    root = verdict_for(tmp_path, dumps).root
    assert root.kind is Kind.SIZE_MISMATCH
    assert root.culprit_ranks == [1]
    assert "[[5, 4]]" in root.summary and "[[4, 4]]" in root.summary


def test_missing_rank_with_its_dump(tmp_path) -> None:
    # GIVEN rank 2 completed seq 5 and is in no collective, the others wait in seq 6
    dumps = {r: make_dump(hung_at(5), 4) for r in (0, 1, 3)}
    dumps[2] = make_dump(history(5), 4)
    root = verdict_for(tmp_path, dumps).root
    assert root.kind is Kind.MISSING_RANK
    assert root.culprit_ranks == [2]
    assert root.waiting_ranks == [0, 1, 3]
    assert root.collective.seq == 6
    assert "last completed there: rank 2: all_reduce seq 5" in root.summary
    assert root.confidence >= 0.85


def test_missing_dump_is_the_likely_culprit(tmp_path) -> None:
    dumps = {r: make_dump(hung_at(5), 4) for r in (0, 1, 3)}
    verdict = verdict_for(tmp_path, dumps)
    root = verdict.root
    assert root.kind is Kind.MISSING_RANK
    assert root.culprit_ranks == [2]
    assert root.confidence < 0.7
    assert verdict.ranks_missing == [2]
    assert any("no flight-recorder dump for rank 2" in gap for gap in verdict.evidence_gaps)


def test_missing_last_rank_needs_world_size(tmp_path) -> None:
    # the last rank's absence is invisible from file names; the pg_config ranks reveal it
    dumps = {r: make_dump(hung_at(5), 4) for r in (0, 1, 2)}
    assert verdict_for(tmp_path, dumps).root.culprit_ranks == [3]


def test_healthy_when_nothing_is_pending(tmp_path) -> None:
    verdict = verdict_for(tmp_path, {r: make_dump(history(5), 4) for r in range(4)})
    assert verdict.status is Status.HEALTHY
    assert verdict.findings == []


def test_all_in_same_collective_is_inconclusive(tmp_path) -> None:
    verdict = verdict_for(tmp_path, {r: make_dump(hung_at(5), 4) for r in range(4)})
    assert verdict.status is Status.INCONCLUSIVE
    assert any("cannot tell a slow collective" in gap for gap in verdict.evidence_gaps)


def test_p2p_deadlock_both_sending(tmp_path) -> None:
    # GIVEN rank 0 blocked in send to 1 and rank 1 blocked in send to 0
    dumps = {
        0: make_dump(history(3) + [make_entry(3, "send", peer="0->1", p2p_seq=1, state="started")], 2),
        1: make_dump(history(3) + [make_entry(3, "send", peer="1->0", p2p_seq=1, state="started")], 2),
    }
    root = verdict_for(tmp_path, dumps).root
    assert root.kind is Kind.P2P_DEADLOCK
    assert root.culprit_ranks == [0, 1]
    assert "send to rank 1" in root.summary and "send to rank 0" in root.summary


def test_matched_send_recv_is_not_a_deadlock(tmp_path) -> None:
    dumps = {
        0: make_dump(history(3) + [make_entry(3, "send", peer="0->1", p2p_seq=1, state="started")], 2),
        1: make_dump(history(3) + [make_entry(3, "recv", peer="1<-0", p2p_seq=1, state="started")], 2),
    }
    verdict = verdict_for(tmp_path, dumps)
    assert all(f.kind is not Kind.P2P_DEADLOCK for f in verdict.findings)


def test_pg_order_deadlock(tmp_path) -> None:
    # GIVEN groups A and B over ranks {0,1}; rank 0 waits in A seq 3, rank 1 waits in B seq 3
    groups = {"0": ("default_pg", [0, 1]), "1": ("A", [0, 1]), "2": ("B", [0, 1])}
    a, b = ("1", "A"), ("2", "B")
    rank0 = history(2, pg=a) + history(2, pg=b, start_record=2) + [
        make_entry(4, seq=3, pg=a, state="started")]
    rank1 = history(2, pg=a) + history(2, pg=b, start_record=2) + [
        make_entry(4, seq=3, pg=b, state="started")]
    verdict = verdict_for(tmp_path, {0: make_dump(rank0, 2, groups), 1: make_dump(rank1, 2, groups)})
    root = verdict.root
    assert root.kind is Kind.PG_ORDER_DEADLOCK
    assert root.culprit_ranks == [0, 1]
    assert "pg 1 (A)" in root.summary and "pg 2 (B)" in root.summary
    assert [f.kind for f in verdict.findings] == [Kind.PG_ORDER_DEADLOCK]


def test_ring_buffer_windows_are_aligned(tmp_path) -> None:
    # GIVEN rank 1 keeps only seq 50-59 and the others 40-60 (pending 61)
    full = hung_at(60)
    dumps = {0: make_dump(full[40:], 3), 2: make_dump(full[40:], 3),
             1: make_dump(history(59)[49:], 3)}
    root = verdict_for(tmp_path, dumps).root
    assert root.kind is Kind.MISSING_RANK
    assert root.culprit_ranks == [1]


def test_chain_points_at_the_end(tmp_path) -> None:
    # rank 1 waits in dp group on rank 3; ranks 0 and 2 wait in the default group on rank 1, 3
    groups = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("dp", [1, 3])}
    dp = ("1", "dp")
    dumps = {
        0: make_dump(hung_at(5), 4, groups),
        2: make_dump(hung_at(5), 4, groups),
        1: make_dump(history(4) + history(2, pg=dp, start_record=4)
                     + [make_entry(6, seq=3, pg=dp, state="started")], 4, groups),
        3: make_dump(history(4) + history(2, pg=dp, start_record=4), 4, groups),
    }
    root = verdict_for(tmp_path, dumps).root
    assert root.kind is Kind.MISSING_RANK
    assert root.culprit_ranks == [3]


@pytest.mark.parametrize("world", [64, 512])
def test_equivalence_classes_keep_the_graph_small(tmp_path, world) -> None:
    dumps = {r: make_dump(hung_at(20), world) for r in range(world) if r != 17}
    dumps[17] = make_dump(history(20), world)
    verdict = verdict_for(tmp_path, dumps)
    assert verdict.root.culprit_ranks == [17]
    assert len(verdict.rank_classes) == 2


def test_a_plurality_is_no_majority(tmp_path) -> None:
    # GIVEN ranks 0, 1 in all_reduce seq 6, rank 2 in all_gather, rank 3 in broadcast: the
    # largest side holds half the ranks, not more (the rule of analysis.majority)
    dumps = {r: make_dump(hung_at(5), 4) for r in range(2)}
    dumps[2] = make_dump(hung_at(5, op="all_gather"), 4)
    dumps[3] = make_dump(hung_at(5, op="broadcast"), 4)
    root = verdict_for(tmp_path, dumps).root
    # THEN the others are named, with less confidence and the reason
    assert (root.kind, root.culprit_ranks) == (Kind.COLLECTIVE_MISMATCH, [2, 3])
    assert root.confidence == 0.55
    assert "no majority" in root.summary
