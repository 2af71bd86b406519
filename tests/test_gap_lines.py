"""Evidence gaps grouped: one line per cause with its ranks; the gloo send/recv caveat only where a
point-to-point wait could matter."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.correlate import GLOO_P2P_NOTE
from hangscope.analysis.engine import analyze
from hangscope.analysis.gap_lines import group_rank_gaps
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"


def test_per_rank_lines_of_one_cause_become_one_line_in_place() -> None:
    gaps = ["rank 0: no flight-recorder dump at /tmp/nccl_trace_rank_0",
            "the launcher's log was not found",
            "rank 3: stdout goes to the launcher's output file",
            "rank 1: no flight-recorder dump at /tmp/nccl_trace_rank_1",
            "rank 1: stdout goes to the launcher's output file",
            "the launcher's log was not found",
            "rank 12: no stack (py-spy timed out after 10 s)"]
    assert group_rank_gaps(gaps) == [
        "ranks 0,1: no flight-recorder dump at /tmp/nccl_trace_rank_N",
        "the launcher's log was not found",
        "ranks 1,3: stdout goes to the launcher's output file",
        "rank 12: no stack (py-spy timed out after 10 s)"]


def _gaps(*parts: str) -> list[str]:
    evidence, _ = load_paths([str(RECORDED / part) for part in parts], LoadOptions())
    return analyze(evidence)[0].evidence_gaps


def test_the_gloo_p2p_caveat_only_where_it_could_matter() -> None:
    # a confident culprit from gloo dumps, no stack in send/recv: the caveat is noise
    assert GLOO_P2P_NOTE not in _gaps("missing_rank/fr/pickle", "missing_rank/stacks")
    # a p2p deadlock: the caveat says why the dumps show nothing of it
    assert GLOO_P2P_NOTE in _gaps("p2p_deadlock/fr/pickle")
