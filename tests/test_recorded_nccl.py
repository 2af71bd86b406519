"""hangscope on real NCCL output: torch 2.11 + NCCL 2.28.9 jobs recorded on an H200
(fixtures/recorded_nccl/, README there), each analyzed from its console log alone and from its
whole folder (the log, the watchdog's flight-recorder dumps, torch's own FR analyzer output).

The ground truth is the fault each job was built with. Where hangscope is still wrong the case
is an expected failure with what it gives and why; a case that becomes right fails the strict
xfail, so this list stays true."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded_nccl"
SCENARIOS = sorted(p.name for p in RECORDED.iterdir() if (p / "expected.json").is_file())
FAMILY = {"size_mismatch": "collective_mismatch"}

# (scenario, what is read) -> what hangscope gives and why it is wrong
KNOWN_MISSES = {
    ("healthy", "dir"): "inconclusive: the dumps the job wrote at its end hold its last "
                        "all_reduces not yet marked completed (the watchdog had not polled them), "
                        "so every rank reads as waiting in the same collective; the logs' "
                        "'training finished' on every rank does not outweigh them",
    ("straggler", "dir"): "missing_rank [0,1,3]: each rank dumped at its own end of training, so "
                          "the dumps stop at different collectives (0,1,3 at seq 181, rank 2 at "
                          "188) and read as ranks that never reached rank 2's; the dumps of a "
                          "finished job are not told from a hung one's",
    ("p2p_deadlock", "log"): "missing_rank [0,1]: ranks 2,3 time out in ALLREDUCE and 0,1 log "
                             "nothing; the log does not say they wait in recv (culprits right)",
    ("pg_order", "log"): "inconclusive: the sub-groups keep the default 10 min timeout, so the "
                         "log holds only steps and the recorder's SIGTERM (no evidence of order)",
    ("pg_order", "dir"): "inconclusive: no dump was written (no timeout fired before the stop)",
}


def _case(scenario: str, what: str):  # type: ignore[no-untyped-def]
    folder = RECORDED / scenario
    path = folder / "console.log" if what == "log" else folder
    evidence, _ = load_paths([str(path)], LoadOptions())
    return json.loads((folder / "expected.json").read_text()), analyze(evidence)[0]


@pytest.mark.parametrize("what", ["log", "dir"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_recorded_nccl_verdict(scenario: str, what: str, request: pytest.FixtureRequest) -> None:
    miss = KNOWN_MISSES.get((scenario, what))
    if miss:
        request.applymarker(pytest.mark.xfail(reason=miss, strict=True))
    expected, verdict = _case(scenario, what)
    first = verdict.findings[0] if verdict.findings else None
    if expected["kind"] is None:
        assert verdict.status.value == "healthy", verdict.status
        return
    assert first is not None, f"{scenario}/{what}: no finding ({verdict.status.value})"
    got = FAMILY.get(first.kind.value, first.kind.value)
    assert got == FAMILY.get(expected["kind"], expected["kind"]), first.summary
    if expected["culprit_ranks"]:
        assert sorted(first.culprit_ranks) == expected["culprit_ranks"], first.summary


def test_every_scenario_is_recorded_with_its_truth() -> None:
    # the recording is whole: every scenario's log, and the dumps the watchdog wrote where a
    # timeout fired
    assert len(SCENARIOS) == 13
    for scenario in SCENARIOS:
        assert (RECORDED / scenario / "console.log").stat().st_size > 0
    for scenario in ("missing_rank", "collective_mismatch", "p2p_deadlock", "size_mismatch"):
        assert len(list((RECORDED / scenario / "fr").iterdir())) == 4
