"""``hangscope attach`` on real NCCL jobs while they hung or ran: torch 2.11 + NCCL 2.28.9 on an
H200, four ranks sharing the card (fixtures/recorded_nccl/live/, README in recorded_nccl), each
folder the bundle attach wrote there, its terminal output and the fault the job was built with.

The bundles are analyzed again here as they are. Three of them taught the analysis something,
and the tests below pin it: ``pg_order`` (NCCL's FR says ``completed`` for an all_reduce its rank
is still inside; ``pg_status`` says it was never launched), ``healthy`` and ``straggler`` (dumps
of a moving job taken moments apart read as a rank that never reached a collective)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.fr_corrections import correct, misread
from hangscope.sources.load import load_paths

LIVE = Path(__file__).resolve().parent.parent / "fixtures" / "recorded_nccl" / "live"
# the same jobs attached to again after the fixes, by the fixed attach (gpu_stuck with timing)
LIVE2 = LIVE.parent / "live2"
# and once more with eight ranks a job (the faults on the same ranks)
LIVE3 = LIVE.parent / "live3"
# a DataLoader whose reads never return, a lock a thread never releases, and a straggler again
LIVE4 = LIVE.parent / "live4"


def _verdict(bundle: Path):  # type: ignore[no-untyped-def]
    evidence, _ = load_paths([str(bundle)], LoadOptions())
    return analyze(evidence)[0]


def _as_attach_keeps_it(scenario: str, tmp_path: Path, root: Path = LIVE) -> Path:
    """The bundle with each dump's file time set to when torch wrote it, as attach keeps it
    now; the manifest recorded that moment (trigger start + seconds until the file was done).
    A git checkout gives every file the time of the checkout."""
    bundle = tmp_path / scenario
    shutil.copytree(root / scenario / "bundle", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    for record in manifest["collection"]:
        if record["source"] == "flight_recorder":
            written = record["started_at"] + record["seconds"]
            os.utime(bundle / "ranks" / str(record["rank"]) / "fr_dump", (written, written))
    return bundle


def _assert_verdict(verdict, status: str, kind: str | None,  # type: ignore[no-untyped-def]
                    culprits: list[int]) -> None:
    """The verdict's status, and where a kind is expected its root finding's kind and culprits."""
    assert verdict.status.value == status, verdict.evidence_gaps
    if kind is not None:
        first = verdict.findings[0]
        assert (first.kind.value, sorted(first.culprit_ranks)) == (kind, culprits), first.summary


@pytest.mark.parametrize(("scenario", "kind", "culprits"), [
    ("missing_rank", "missing_rank", [2]),
    ("collective_mismatch", "collective_mismatch", [3]),
    ("p2p_deadlock", "p2p_deadlock", [0, 1]),
    ("pg_order", "pg_order_deadlock", [0]),
])
def test_live_hang_is_named(scenario: str, kind: str, culprits: list[int]) -> None:
    expected = json.loads((LIVE / scenario / "expected.json").read_text())
    assert expected["culprit_ranks"] == culprits  # the fault the job was built with
    _assert_verdict(_verdict(LIVE / scenario / "bundle"), "hang", kind, culprits)


def test_pg_order_records_said_completed_are_read_as_not_launched() -> None:
    # GIVEN rank 0's real dump: its newest record, all_reduce seq 1 of pg 2, says completed,
    # while pg_status says pg 2 launched nothing (its rank sat inside that very call)
    verdict = _verdict(LIVE / "pg_order" / "bundle")
    # THEN the record is read as not launched, and the verdict says so
    assert any("says completed, but pg_status says the group launched nothing past seq -1" in g
               for g in verdict.evidence_gaps)
    assert "rank 0 issued collectives of different process groups" in verdict.findings[0].summary


def test_healthy_job_dumped_moments_apart_is_no_hang(tmp_path: Path) -> None:
    # GIVEN a running job's dumps, asked for one rank after another (0.7-1.1 s apart): their
    # completion frontiers differ by tens of collectives
    verdict = _verdict(_as_attach_keeps_it("healthy", tmp_path))
    # THEN nobody is named missing: each rank completed collectives up to its dump
    assert not [f for f in verdict.findings if f.kind.value == "missing_rank"], \
        [f.summary for f in verdict.findings]
    assert verdict.status.value != "hang"
    assert any("snapshots of a job that was moving" in g for g in verdict.evidence_gaps)


def test_straggler_dumped_moments_apart_is_the_slow_rank(tmp_path: Path) -> None:
    verdict = _verdict(_as_attach_keeps_it("straggler", tmp_path))
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("straggler", [2]), first.summary


def test_a_later_file_time_keeps_the_finding(tmp_path: Path) -> None:
    # a dump whose file time says nothing of when it was taken (a checkout, a copy: now) keeps
    # the frontier as evidence: the rule only drops a finding on a dump written moments after
    # the rank's last completion
    bundle = tmp_path / "healthy"
    shutil.copytree(LIVE / "healthy" / "bundle", bundle)
    for dump in bundle.glob("ranks/*/fr_dump"):
        os.utime(dump)  # now
    verdict = _verdict(bundle)
    assert verdict.findings and verdict.findings[0].kind.value == "missing_rank"


def test_gpu_stuck_is_still_inconclusive() -> None:
    # rank 1's stream sits behind a kernel that never ends: every rank has launched the same
    # all_reduce and none completed it, and FR without TORCH_NCCL_ENABLE_TIMING has no
    # 'started' to tell them apart (known limit; the job's own log names the step)
    verdict = _verdict(LIVE / "gpu_stuck" / "bundle")
    assert verdict.status.value == "inconclusive"
    assert any("nothing tells the ranks apart" in g for g in verdict.evidence_gaps)


def _record(seq: int, state: str = "completed", name: str = "nccl:all_reduce",
            pg: int = 2) -> dict:
    # pg_status is keyed by pg_id (the group's local id), not by its name
    return {"record_id": seq, "pg_id": pg, "process_group": (f"name{pg}", "dp"),
            "collective_seq_id": seq, "profiling_name": name, "state": state,
            "is_p2p": " " in name}


def test_unlaunched_reads_only_completed_collectives_past_the_launched_seq() -> None:
    raw = {"pg_status": {"2": {"last_enqueued_collective": 3}, "0": {"last_enqueued_collective": 9}}}
    entries = [_record(3), _record(4), _record(5, "scheduled"), _record(6, name="nccl:send 0->1"),
               _record(7, name="gloo:all_reduce"), _record(9, pg=0), _record(10, pg=7)]
    assert [i for i, _, _ in misread(raw, entries)] == [1]
    assert misread({}, entries) == []  # no pg_status (FR before 2.3): nothing to compare
    assert misread({"pg_status": {"2": {"last_enqueued_collective": "x"}}}, entries) == []
    notes = correct(raw, entries)
    assert entries[1]["state"] == "scheduled" and len(notes) == 1
    assert "seq 4 of pg name2" in notes[0] and "past seq 3" in notes[0]


def test_an_op_completed_a_timeout_after_it_was_created_and_never_retired_was_aborted() -> None:
    def rec(seq: int, took_s: float, retired: bool, name: str = "nccl:recv 0<-1") -> dict:
        record = _record(seq, name=name)
        record.update(time_created_ns=10**18, time_discovered_completed_ns=10**18 + int(
            took_s * 1e9), timeout_ms=20000, retired=retired, p2p_seq_id=seq)
        return record

    # GIVEN a recv that "completed" 20.6 s after its creation with a 20 s timeout, not retired
    # (recorded_nccl/p2p_deadlock), beside ops that finished in time or were retired
    entries = [rec(1, 1.4, True, "nccl:all_reduce"), rec(2, 20.6, True), rec(3, 19.0, False),
               rec(4, 20.6, False)]
    assert [(i, state) for i, state, _ in misread({}, entries)] == [(3, "started")]
    [note] = correct({}, entries)
    assert entries[3]["state"] == "started" and "past its 20 s timeout" in note


def test_the_recorded_p2p_deadlock_reads_as_one() -> None:
    # the recording's own dumps: each of ranks 0 and 1 in a recv from the other, both marked
    # completed at the watchdog's abort
    recorded = LIVE.parent / "p2p_deadlock"
    evidence, _ = load_paths([str(recorded / "fr")], LoadOptions())
    first = analyze(evidence)[0].findings[0]
    assert (first.kind.value, sorted(first.culprit_ranks)) == ("p2p_deadlock", [0, 1]), \
        first.summary


@pytest.mark.parametrize(("scenario", "status", "kind", "culprits"), [
    ("missing_rank", "hang", "missing_rank", [2]),
    ("gpu_stuck", "hang", "missing_rank", [1]),
    ("pg_order", "hang", "pg_order_deadlock", [0]),
    ("healthy", "healthy", None, []),
    ("straggler", "slow", "straggler", [2]),
])
def test_second_live_run_after_the_fixes(scenario: str, status: str, kind: str | None,
                                         culprits: list[int], tmp_path: Path) -> None:
    # the dumps' write times as the attach that took them kept them (a checkout loses them)
    _assert_verdict(_verdict(_as_attach_keeps_it(scenario, tmp_path, LIVE2)), status, kind,
                    culprits)
    # and what attach printed there, on the GPU machine, said the same
    printed = (LIVE2 / scenario / "attach.txt").read_text()
    assert f"hangscope: {status.upper()}" in printed


def test_one_rank_whose_completions_stopped_keeps_the_job_from_reading_healthy(
        tmp_path: Path) -> None:
    # GIVEN the healthy job's dumps, but rank 2's completions all a minute older than its dump
    # (what a rank stuck for a minute shows): the others still complete up to their dumps
    import pickle

    bundle = _as_attach_keeps_it("healthy", tmp_path, LIVE2)
    path = bundle / "ranks" / "2" / "fr_dump"
    written = path.stat().st_mtime
    dump = pickle.loads(path.read_bytes())
    for entry in dump["entries"]:
        if entry.get("time_discovered_completed_ns"):
            entry["time_discovered_completed_ns"] -= 60 * 10**9
    path.write_bytes(pickle.dumps(dump))
    os.utime(path, (written, written))
    # THEN the job is not called healthy: one rank's frontier is no longer explained by skew
    verdict = _verdict(bundle)
    assert verdict.status.value != "healthy"
    assert not any("the job was moving when it was looked at" in g
                   for g in verdict.evidence_gaps)


@pytest.mark.parametrize(("scenario", "status", "kind", "culprits"), [
    ("missing_rank", "hang", "missing_rank", [2]),
    ("collective_mismatch", "hang", "collective_mismatch", [3]),
    ("gpu_stuck", "hang", "missing_rank", [1]),
    ("healthy", "healthy", None, []),
    # a rank that issues every collective last (FR creation times), where CPU shares tell
    # nothing (waiting NCCL ranks spin) and the log has too few step lines
    ("straggler", "slow", "straggler", [2]),
])
def test_eight_ranks(scenario: str, status: str, kind: str | None, culprits: list[int],
                     tmp_path: Path) -> None:
    expected = json.loads((LIVE3 / scenario / "expected.json").read_text())
    assert expected["world_size"] == 8
    _assert_verdict(_verdict(_as_attach_keeps_it(scenario, tmp_path, LIVE3)), status, kind,
                    culprits)


@pytest.mark.parametrize(("scenario", "status", "kind", "culprits"), [
    ("dataloader_stall", "hang", "dataloader_stall", [2]),
    ("python_deadlock", "hang", "python_deadlock", [1]),
    ("straggler", "slow", "straggler", [2]),
])
def test_waits_outside_nccl(scenario: str, status: str, kind: str, culprits: list[int],
                            tmp_path: Path) -> None:
    _assert_verdict(_verdict(_as_attach_keeps_it(scenario, tmp_path, LIVE4)), status, kind,
                    culprits)
    assert f"hangscope: {status.upper()}" in (LIVE4 / scenario / "attach.txt").read_text()
