"""FR dumps of a job that moves: a rank's stack inside the collective its own dump says it never
entered. On the recorded ``straggler`` job (a rank 5x slower, nothing hangs: one FR dump and one
stack per rank, written at different moments)."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Kind, Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "straggler"


def _verdict(*parts: str):  # type: ignore[no-untyped-def]
    evidence, _ = load_paths([str(RECORDED / part) for part in parts], LoadOptions())
    verdict, _ = analyze(evidence)
    return verdict


def test_dumps_alone_read_as_a_missing_rank() -> None:
    # what FR alone can say: ranks 0 and 2 had not entered seq 62 when they dumped
    root = _verdict("fr/pickle").findings[0]
    assert (root.kind, root.culprit_ranks) == (Kind.MISSING_RANK, [0, 2])


def test_a_stack_past_its_dump_shows_the_job_moving_and_leaves_the_rank_behind() -> None:
    # GIVEN the same dumps and one stack per rank: rank 0's is inside the all_reduce (called at
    # straggler.py:43) that its dump says it never entered; rank 2's computes
    verdict = _verdict("fr/pickle", "stacks")
    # THEN the job moved: rank 0 is no culprit, rank 2 is behind, slow or stuck (one snapshot)
    assert verdict.status is Status.SLOW
    root = verdict.findings[0]
    assert (root.kind, root.culprit_ranks) == (Kind.STRAGGLER, [2])
    assert root.confidence == 0.5
    assert "one snapshot cannot tell slow from stuck" in root.summary
    assert any(item.rank == 0 and item.where.endswith("straggler.py:43")
               for item in root.evidence)
    assert any(gap.startswith("the flight recorder says rank 0 never entered all_reduce seq 62")
               for gap in verdict.evidence_gaps)


def test_step_times_in_the_logs_add_the_slowdown_to_the_same_finding() -> None:
    # GIVEN also the ranks' logs, where every rank prints its compute time every 10 steps
    verdict = _verdict("fr/pickle", "stacks", "logs")
    # THEN one straggler finding: the logs' step times measure it, the dumps and stacks place it
    stragglers = [f for f in verdict.findings if f.kind is Kind.STRAGGLER]
    assert len(stragglers) == 1 and verdict.findings[0] is stragglers[0]
    root = stragglers[0]
    assert root.culprit_ranks == [2] and root.confidence == 0.65
    assert root.measures["timing"] == "compute" and root.measures["slowdown"] >= 2.0
    assert "rank 2's log reports compute" in root.summary
    assert "one snapshot cannot tell slow from stuck" in root.summary
    assert any(item.source == "log" and item.rank == 2 and "rank2.stdout.log" in item.where
               for item in root.evidence)
    assert any(item.rank == 0 and item.where.endswith("straggler.py:43")
               for item in root.evidence)
