"""Rule completed-past-peer (analysis/detectors/seq_divergence.py) on watchdog lines in torch
2.4+'s wording (ProcessGroupNCCL.cpp: "Watchdog caught collective operation timeout: WorkNCCL(...)"
and "[PG ID n PG GUID g(desc) Rank r] Exception (either an error or timeout) detected by watchdog at
work: S, last enqueued NCCL work: E, last completed NCCL work: C."). Numbers and groups are made
up, not the corpus's."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import findings_of


def _lines(rank: int, seq: int, op: str, numel: int, enqueued: int, completed: int,
           pg: str = "1 PG GUID 1(tp_group)") -> str:
    return (f"[rank{rank}]:[E305 10:00:0{rank}.000000000 ProcessGroupNCCL.cpp:632] [Rank {rank}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
            f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for 600010 milliseconds "
            "before timing out.\n"
            f"[rank{rank}]:[E305 10:00:0{rank}.000100000 ProcessGroupNCCL.cpp:2168] [PG ID {pg} "
            f"Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: "
            f"{seq}, last enqueued NCCL work: {enqueued}, last completed NCCL work: {completed}.\n")


def _findings(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    return findings_of(tmp_path, text, "job.log")


def test_a_rank_that_completed_what_another_is_stuck_in_is_a_divergence(tmp_path: Path) -> None:
    # rank 2 completed #57 and #58 that rank 0 is stuck in; rank 0 enqueued more than rank 2
    text = (_lines(0, 57, "ALLREDUCE", 1 << 20, 61, 56) + _lines(1, 57, "ALLREDUCE", 1 << 20, 61, 56)
            + _lines(2, 59, "ALLGATHER", 12, 59, 58))
    root = _findings(tmp_path, text)[0]
    assert (root.kind.value, root.culprit_ranks) == ("collective_mismatch", [])
    assert root.measures["rule"] == "completed-past-peer"


def test_a_rank_behind_in_issuing_too_stays_a_missing_rank(tmp_path: Path) -> None:
    # rank 0 enqueued only to #58, rank 1 to #62: rank 0 is behind; the divergence is said second
    text = _lines(0, 57, "ALLREDUCE", 4096, 58, 56) + _lines(1, 60, "ALLREDUCE", 4096, 62, 59)
    findings = _findings(tmp_path, text)
    assert (findings[0].kind.value, findings[0].culprit_ranks) == ("missing_rank", [0])
    alternative = [f for f in findings if f.measures.get("rule") == "completed-past-peer"]
    assert alternative and alternative[0].confidence < findings[0].confidence


def test_ranks_stuck_at_one_seq_are_not_a_divergence(tmp_path: Path) -> None:
    text = _lines(0, 57, "ALLREDUCE", 4096, 58, 56) + _lines(1, 57, "ALLREDUCE", 4096, 58, 56)
    assert not any(f.measures.get("rule") == "completed-past-peer"
                   for f in _findings(tmp_path, text))


def test_point_to_point_seqs_are_not_compared(tmp_path: Path) -> None:
    text = _lines(0, 57, "SEND", 4096, 61, 56) + _lines(1, 59, "RECV", 4096, 61, 58)
    assert not any(f.measures.get("rule") == "completed-past-peer"
                   for f in _findings(tmp_path, text))


def test_two_groups_counters_are_not_compared(tmp_path: Path) -> None:
    text = (_lines(0, 57, "ALLREDUCE", 4096, 61, 56, pg="1 PG GUID 1(tp)")
            + _lines(1, 59, "ALLREDUCE", 4096, 61, 58, pg="2 PG GUID 2(dp)"))
    assert not any(f.measures.get("rule") == "completed-past-peer"
                   for f in _findings(tmp_path, text))
