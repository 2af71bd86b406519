"""One stack sample per rank cannot tell slow from stuck: the verdict says so, and adds how far
each rank's log got. On the recorded ``ddp_imbalanced`` job (a straggler that keeps moving)."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "ddp_imbalanced"


def _gaps(*parts: Path) -> tuple[Status, list[str]]:
    evidence, _ = load_paths([str(p) for p in parts], LoadOptions())
    verdict, _ = analyze(evidence)
    return verdict.status, verdict.evidence_gaps


def test_one_sample_says_what_it_cannot_tell_and_what_the_logs_show() -> None:
    status, gaps = _gaps(RECORDED / "stacks", RECORDED / "logs")
    assert status is Status.INCONCLUSIVE
    (gap,) = [g for g in gaps if g.startswith("one stack sample per rank")]
    assert "a slow rank cannot be told from a stuck one" in gap
    assert "Their logs show progress: ranks 0-3 reached step 1" in gap


def test_without_logs_it_says_only_what_it_cannot_tell() -> None:
    _, gaps = _gaps(RECORDED / "stacks")
    (gap,) = [g for g in gaps if g.startswith("one stack sample per rank")]
    assert "logs" not in gap.split("apart)")[-1]
