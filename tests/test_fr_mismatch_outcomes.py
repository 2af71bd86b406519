"""FR verdicts beyond "all ranks pending in one collective": collectives that failed or completed
with mismatched arguments, ranks still inside a collective their peers completed, and how the
verdict shows who waits. GIVEN / WHEN / THEN, one scenario per test."""

from __future__ import annotations

import json
from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Kind, Status
from hangscope.options import LoadOptions
from hangscope.report.text import format_verdict
from hangscope.sources.load import load_paths

from frdumps import history, make_dump, make_entry, write_dumps

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"


def verdict_for(paths: list[str]):
    evidence, _ = load_paths(paths, LoadOptions())
    return analyze(evidence)[0]


def dumps_verdict(tmp_path, dumps, **kw):
    write_dumps(str(tmp_path / "d"), dumps, **kw)
    return verdict_for([str(tmp_path / "d")])


def gloo_dump(entries, ranks_slot: str) -> dict:
    """A gloo dump: pg_config has one '' slot (the default group's ranks, or '[]')."""
    return {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": ranks_slot}},
            "pg_status": {}, "comm_lib_version": "", "entries": entries}


def gloo_history(n: int, last_sizes=None, retired_last: bool = True) -> list[dict]:
    entries = [make_entry(i, seq=i + 1, backend="gloo", state="scheduled", retired=True)
               for i in range(n - 1)]
    entries.append(make_entry(n - 1, seq=n, backend="gloo", state="scheduled",
                              sizes=last_sizes, retired=retired_last))
    return entries


# --- class 3: a mismatch that made the backend fail ----------------------------------------


def test_recorded_gloo_failure_from_fr_alone_names_the_ragged_rank() -> None:
    # GIVEN what eval_class_counts left: dumps of ranks 0, 2, 3 (rank 1 aborted without one);
    # seq 11 retired everywhere, rank 2's confusion matrix [6,6], the others' [5,5]
    truth = json.loads((RECORDED / "eval_class_counts" / "expected.json").read_text())
    for form in ("pickle", "json"):
        # WHEN analyzing the dumps alone
        verdict = verdict_for([str(RECORDED / "eval_class_counts" / "fr" / form)])
        root = verdict.root
        # THEN the size mismatch names rank 2, and says the collective failed rather than hung
        assert (root.kind.value, root.culprit_ranks) == (truth["kind"], truth["culprit_ranks"])
        assert (root.collective.pg, root.collective.seq) == ("0", truth["collective"]["seq"])
        assert verdict.status.value == truth["status"] == "crashed"
        assert "failed rather than hung" in root.summary
        assert "[[6, 6]]" in root.summary and "[[5, 5]]" in root.summary
        # AND the world size comes from the dumps' default group, not from the file names
        assert verdict.world_size == 4 and verdict.ranks_missing == [1]


def test_recorded_gloo_failure_with_logs_beats_the_rank_that_aborted_first() -> None:
    # GIVEN FR and logs: rank 1 aborted (SIGABRT) first, torchrun names rank 0
    folder = RECORDED / "eval_class_counts"
    verdict = verdict_for([str(folder / "fr" / "pickle"), str(folder / "logs")])
    # THEN the FR mismatch is the root cause, and the rank that aborted is not named as culprit
    assert (verdict.root.kind, verdict.root.culprit_ranks) == (Kind.SIZE_MISMATCH, [2])
    assert verdict.status is Status.CRASHED
    roles = {r: c.role for c in verdict.rank_classes for r in c.ranks}
    assert roles[2] == "culprit" and roles[1] != "culprit" and roles[0] == "waiting"


def test_older_recording_fails_the_same_way() -> None:
    folder = RECORDED / "size_mismatch"
    verdict = verdict_for([str(folder / "fr" / "pickle"), str(folder / "logs")])
    assert (verdict.root.kind, verdict.root.culprit_ranks) == (Kind.SIZE_MISMATCH, [1])
    assert verdict.status is Status.CRASHED


def test_failed_even_where_a_rank_dumped_before_retiring_it(tmp_path) -> None:
    # GIVEN gloo dumps where rank 2's all_reduce seq 10 has other sizes; ranks 1, 2 retired it
    # (gloo raised), rank 0 dumped in the moment after its error, before retiring it; nothing
    # follows on any rank
    dumps = {r: gloo_dump(gloo_history(10), "[0, 1, 2]") for r in (1,)}
    dumps[2] = gloo_dump(gloo_history(10, last_sizes=[[6, 6]]), "[0, 1, 2]")
    dumps[0] = gloo_dump(gloo_history(10, retired_last=False), "[0, 1, 2]")
    verdict = dumps_verdict(tmp_path, dumps)
    # THEN it failed rather than hung, and rank 2 is the culprit
    assert (verdict.root.kind, verdict.root.culprit_ranks) == (Kind.SIZE_MISMATCH, [2])
    assert verdict.status is Status.CRASHED
    assert "failed rather than hung" in verdict.root.summary


def test_a_failed_mismatch_with_no_majority_still_outranks_the_first_death(tmp_path) -> None:
    # GIVEN what eval_class_counts leaves when ranks 1 and 3 exit before they dump: only rank 0
    # ([5, 5]) and rank 2 ([6, 6]) recorded seq 10, both retired it (gloo raised), and the
    # launcher says rank 1 ended on SIGABRT first
    dumps = {0: gloo_dump(gloo_history(10), "[0, 1, 2, 3]"),
             2: gloo_dump(gloo_history(10, last_sizes=[[6, 6]]), "[0, 1, 2, 3]")}
    write_dumps(str(tmp_path / "d"), dumps)
    (tmp_path / "torchrun.log").write_text(
        "E1127 01:20:11.000000 900 torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -6) local_rank: 1 (pid: 31562) of binary: /usr/bin/python3\n")
    verdict = verdict_for([str(tmp_path / "d"), str(tmp_path / "torchrun.log")])
    # THEN the mismatch is the root cause (it explains the deaths), said with its tie
    root = verdict.root
    assert root.kind is Kind.SIZE_MISMATCH, [(f.kind, f.culprit_ranks) for f in verdict.findings]
    assert "failed rather than hung" in root.summary and "no majority" in root.summary
    assert 1 not in root.culprit_ranks
    assert verdict.status is Status.CRASHED


def test_a_mismatch_the_ranks_hang_in_is_a_hang(tmp_path) -> None:
    # GIVEN the same, but no rank retired seq 10: they are all still in it
    dumps = {r: gloo_dump(gloo_history(10, retired_last=False), "[0, 1, 2]") for r in (0, 1)}
    dumps[2] = gloo_dump(gloo_history(10, last_sizes=[[6, 6]], retired_last=False), "[0, 1, 2]")
    verdict = dumps_verdict(tmp_path, dumps)
    assert (verdict.root.kind, verdict.root.culprit_ranks) == (Kind.SIZE_MISMATCH, [2])
    assert verdict.status is Status.HANG
    assert "failed" not in verdict.root.summary


def test_mismatch_at_an_earlier_completed_seq_is_found(tmp_path) -> None:
    # GIVEN NCCL dumps where seq 3 completed with rank 1's all_reduce on [8] floats, the others'
    # on [4], and every rank went on to complete seq 4 and 5
    def ranks_history(sizes):
        return [make_entry(i, seq=i + 1, sizes=sizes if i == 2 else None) for i in range(5)]

    dumps = {r: make_dump(ranks_history([[4]]), 3) for r in (0, 2)}
    dumps[1] = make_dump(ranks_history([[8]]), 3)
    # WHEN
    root = dumps_verdict(tmp_path, dumps).root
    # THEN the mismatch is reported at seq 3, with what became of it
    assert (root.kind, root.culprit_ranks, root.collective.seq) == (Kind.SIZE_MISMATCH, [1], 3)
    assert "completed it and went on" in root.summary


def test_output_size_and_dtype_differences_are_seen(tmp_path) -> None:
    # GIVEN rank 2's all_gather outputs Half where ranks 0, 1, 3 output Float
    def ranks_history(dtype):
        last = make_entry(5, "all_gather", seq=6, state="started")
        last["output_sizes"] = [[16, 4]]
        last["output_dtypes"] = [dtype]
        return history(5) + [last]

    dumps = {r: make_dump(ranks_history("Float"), 4) for r in (0, 1, 3)}
    dumps[2] = make_dump(ranks_history("Half"), 4)
    root = dumps_verdict(tmp_path, dumps).root
    assert (root.kind, root.culprit_ranks) == (Kind.SIZE_MISMATCH, [2])
    assert "Half" in root.summary


def test_mismatch_inside_a_completed_coalesced_block(tmp_path) -> None:
    # GIVEN a completed coalesced block at seq 6 (two broadcasts, then the end entry); rank 3's
    # second broadcast has other sizes
    def block(sizes):
        return history(5) + [make_entry(5, "broadcast", seq=6),
                             make_entry(6, "broadcast", seq=6, sizes=sizes),
                             make_entry(7, "coalesced", seq=6, sizes=[])]

    dumps = {r: make_dump(block([[4, 4]]), 4) for r in range(3)}
    dumps[3] = make_dump(block([[2, 4]]), 4)
    root = dumps_verdict(tmp_path, dumps).root
    assert (root.kind, root.culprit_ranks, root.collective.seq) == (Kind.SIZE_MISMATCH, [3], 6)
    assert "op 2 of its coalesced block" in root.summary


def test_send_and_recv_sizes_are_compared(tmp_path) -> None:
    # GIVEN rank 0 sends [4, 4] to rank 1, which receives into [4, 8] (both pending)
    send = make_entry(5, "send", p2p_seq=1, peer="0->1", state="started", sizes=[[4, 4]])
    recv = make_entry(5, "recv", p2p_seq=1, peer="1<-0", state="started", sizes=[[4, 8]])
    dumps = {0: make_dump(history(5) + [send], 2), 1: make_dump(history(5) + [recv], 2)}
    root = dumps_verdict(tmp_path, dumps).root
    assert (root.kind, root.culprit_ranks) == (Kind.SIZE_MISMATCH, [0, 1])
    assert "[[4, 4]]" in root.summary and "[[4, 8]]" in root.summary


# --- a rank still inside a collective its peers completed ------------------------------------


def sixteen_ranks(stuck: int, absent: int) -> dict[int, dict]:
    """16 NCCL ranks: ``stuck`` enqueued seqs 18-22 but shows them all scheduled (its stream is
    stuck in 18); ``absent`` completed 19 and never issued 20; the others completed 18 and 19
    and are started in 20."""
    dumps = {}
    for rank in range(16):
        if rank == stuck:
            entries = history(17) + [make_entry(17 + i, seq=18 + i, state="scheduled")
                                     for i in range(5)]
        elif rank == absent:
            entries = history(19)
        else:
            entries = history(19) + [make_entry(19, seq=20, state="started")]
        dumps[rank] = make_dump(entries, 16)
    return dumps


def test_both_faulty_ranks_of_sixteen_are_named(tmp_path) -> None:
    # GIVEN rank 11 stuck in seq 18 its peers completed (it enqueued up to 22) and rank 5 absent
    verdict = dumps_verdict(tmp_path, sixteen_ranks(stuck=11, absent=5))
    named = {r for f in verdict.findings for r in f.culprit_ranks}
    # THEN both are culprits of the root finding, and the stuck one is said to be stuck
    assert verdict.root.kind is Kind.MISSING_RANK
    assert verdict.root.culprit_ranks == [5, 11] and named == {5, 11}
    assert "rank 11 is still in all_reduce seq 18" in verdict.root.summary
    assert "never entered all_reduce seq 20" in verdict.root.summary


def test_a_rank_still_inside_what_its_peer_completed(tmp_path) -> None:
    # GIVEN rank 0 started seq 6 and rank 1 completed it; nobody waits in a later one
    dumps = {0: make_dump(history(5) + [make_entry(5, seq=6, state="started")], 2),
             1: make_dump(history(6), 2)}
    verdict = dumps_verdict(tmp_path, dumps)
    # THEN rank 0 is named, and no gap claims every waiting rank is inside a matched collective
    assert (verdict.root.kind, verdict.root.culprit_ranks) == (Kind.MISSING_RANK, [0])
    assert "which rank 1 completed" in verdict.root.summary
    assert not any("every rank that waits" in gap for gap in verdict.evidence_gaps)


def test_gloo_retired_is_not_completed(tmp_path) -> None:
    # GIVEN gloo ranks 1, 2 retired seq 10 (it failed when rank 3 died), rank 0 still in it
    dumps = {r: gloo_dump(gloo_history(10), "[0, 1, 2, 3]") for r in (1, 2)}
    dumps[0] = gloo_dump(gloo_history(10, retired_last=False), "[0, 1, 2, 3]")
    verdict = dumps_verdict(tmp_path, dumps)
    # THEN rank 0 is not blamed for a collective its peers only retired; rank 3 is missing
    assert verdict.root.culprit_ranks == [3]
    assert verdict.world_size == 4


# --- how the verdict reads ------------------------------------------------------------------


def test_a_dump_with_no_entries_recorded_no_collective(tmp_path) -> None:
    dumps = {r: make_dump(history(5) + [make_entry(5, seq=6, state="started")], 4)
             for r in range(3)}
    dumps[3] = make_dump([], 4)
    root = dumps_verdict(tmp_path, dumps).root
    assert root.culprit_ranks == [3]
    details = [item.detail for item in root.evidence]
    assert "rank 3 recorded no collective" in details
    assert not any("is no collective" in d for d in details)


def test_ranks_a_second_finding_names_as_waiting_are_not_ok(tmp_path) -> None:
    # GIVEN two independent groups: rank 0 never entered pg 1's seq 3 (rank 1 waits), and rank
    # 3 never entered pg 2's seq 3 (rank 2 waits)
    groups = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("tp0", [0, 1]), "2": ("tp1", [2, 3])}

    def ranks(pg, waits):
        entries = history(2, pg=pg)
        if waits:
            entries.append(make_entry(2, seq=3, state="started", pg=pg))
        return make_dump(entries, 4, groups)

    dumps = {0: ranks(("1", "tp0"), False), 1: ranks(("1", "tp0"), True),
             2: ranks(("2", "tp1"), True), 3: ranks(("2", "tp1"), False)}
    verdict = dumps_verdict(tmp_path, dumps)
    roles = {r: c.role for c in verdict.rank_classes for r in c.ranks}
    assert len(verdict.findings) == 2
    # THEN both waiting ranks are shown waiting, both culprits as culprits; none is "ok"
    assert roles == {0: "culprit", 1: "waiting", 2: "waiting", 3: "culprit"}
    text = "\n".join(format_verdict(verdict))
    assert "[ok]" not in text


def test_world_size_from_the_default_group_not_file_names(tmp_path) -> None:
    # GIVEN gloo dumps from ranks 0-2 only, whose '' slot lists the default group [0, 1, 2, 3]
    dumps = {r: gloo_dump(gloo_history(10, retired_last=False), "[0, 1, 2, 3]") for r in range(3)}
    verdict = dumps_verdict(tmp_path, dumps)
    # THEN rank 3 exists, has no dump and is where the others wait
    assert verdict.world_size == 4 and verdict.ranks_missing == [3]
    assert verdict.root.culprit_ranks == [3]


def test_gloo_slot_of_a_job_with_sub_groups_says_nothing(tmp_path) -> None:
    # GIVEN the '' slot is '[]' (a sub-group exists): membership unknown, file names decide
    dumps = {r: gloo_dump(gloo_history(10, retired_last=False), "[]") for r in range(3)}
    assert dumps_verdict(tmp_path, dumps).world_size == 3
