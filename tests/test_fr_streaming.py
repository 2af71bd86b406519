"""Streaming (reduced, pooled) flight-recorder analysis gives the answers of the full analysis.

Every FR fixture (recorded gloo jobs with their stacks and logs, built NCCL-shaped dumps), torch's
analyzer cases of test_fr_conformance, and the benchmark's injected faults at small sizes are
analyzed three ways: every record held in full, each dump reduced to a digest in this process,
and reduced by a pool of worker processes. The verdicts (kind, culprits, evidence citing file
and record id, summaries, gaps) and the report's data must be identical.
"""

from __future__ import annotations

import json
import pickle
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions, OutputOptions
from hangscope.pipeline import Result
from hangscope.report.payload import build_payload
from hangscope.report.timeline import timeline_svg
from hangscope.sources import fr_lazy, fr_reduce, fr_stream
from hangscope.sources.fr_lazy import DumpEntries
from hangscope.sources.load import load_paths

from fixtures import fr_shapes, synth_fr

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def _fr_fixture_dirs() -> list[Path]:
    dirs = sorted(p for p in (FIXTURES / "nccl").iterdir() if p.is_dir())
    dirs += sorted(p for p in (FIXTURES / "recorded").iterdir() if (p / "fr").is_dir())
    return dirs


def _analyze(paths: list[str], mode: str, monkeypatch: pytest.MonkeyPatch,
             jobs: int | None = None) -> tuple[dict[str, Any], Result]:
    """Verdict JSON and result of one way of reading: "full", "reduced" or "pool"."""
    # the pool is used only where no other thread runs (see fr_stream.load_reduced)
    assert mode != "pool" or threading.active_count() == 1
    with monkeypatch.context() as patch:
        patch.setattr(fr_stream, "STREAM_FROM", 10**9 if mode == "full" else 0)
        patch.setattr(fr_stream, "POOL_FROM", 0 if mode == "pool" else 10**9)
        evidence, _ = load_paths(paths, LoadOptions(jobs=jobs or (2 if mode == "pool" else 1)))
        verdict, ctx = analyze(evidence)
    dumps = evidence.fr_dumps()
    reduced = [isinstance(d.entries, DumpEntries) for d in dumps.values()]
    assert all(reduced) if mode != "full" else not any(reduced), (mode, reduced)
    result = Result(verdict=verdict, context=ctx, evidence=evidence, out_dir=None)
    return verdict.to_json(), result


def _payload(result: Result) -> str:
    """The report's data and its timeline (drawn from the newest records' times)."""
    return json.dumps(build_payload(result), sort_keys=True, default=str) + \
        str(timeline_svg(result))


def _assert_same(paths: list[str], monkeypatch: pytest.MonkeyPatch,
                 modes: tuple[str, ...] = ("reduced", "pool")) -> dict[str, Any]:
    full, full_result = _analyze(paths, "full", monkeypatch)
    for mode in modes:
        got, result = _analyze(paths, mode, monkeypatch)
        assert got == full, (mode, paths)
        assert _payload(result) == _payload(full_result), (mode, paths)
    return full


@pytest.mark.parametrize("folder", _fr_fixture_dirs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_verdict_and_report_do_not_change(folder: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a fixture with flight-recorder dumps (and, if recorded, its stacks and logs)
    # WHEN it is analyzed from full records, from digests, and from digests made by a pool
    verdict = _assert_same([str(folder)], monkeypatch)
    # THEN (checked above) the verdicts and report data are equal; FR evidence cites a record
    cited = [e for f in verdict["findings"] for e in f["evidence"]
             if e["source"] == "flight_recorder" and "[record " in e["detail"]]
    assert all("nccl_trace_rank_" in e["detail"] for e in cited)
    assert cited or not any(f["kind"] != "healthy" for f in verdict["findings"]) or \
        not any(e["source"] == "flight_recorder" for f in verdict["findings"]
                for e in f["evidence"])


def test_conformance_cases_do_not_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN torch's analyzer cases as dumps, for both backends
    from tests.test_fr_conformance import PAIR, cases

    checked = 0
    for backend in ("nccl", "gloo"):
        for index, case in enumerate(cases(backend)):
            folder = tmp_path / f"{backend}_{index}"
            folder.mkdir()
            for rank, entries in case.entries.items():
                dump = {"version": "2.8", "pg_config": case.pg_config.get(rank, PAIR),
                        "pg_status": {}, "entries": entries}
                (folder / f"dump_file_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
            # WHEN analyzed in full and from digests THEN the verdicts are equal
            full, _ = _analyze([str(folder)], "full", monkeypatch)
            reduced, _ = _analyze([str(folder)], "reduced", monkeypatch)
            assert reduced == full, (backend, case.id)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("fault", ["missing_rank", "none"])
@pytest.mark.parametrize("version", ["2.10", "2.2"])
def test_benchmark_faults_do_not_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        fault: str, version: str) -> None:
    # GIVEN the benchmark's layout at a small size (tp groups, dp groups, a full ring buffer)
    truth = synth_fr.write_large(tmp_path, 32, 300, version, fault=fault)
    # WHEN analyzed in full, reduced, and by a pool
    verdict = _assert_same([str(tmp_path)], monkeypatch)
    # THEN the injected culprit is named by all of them
    first = verdict["findings"][0] if verdict["findings"] else {"culprit_ranks": []}
    assert first["culprit_ranks"] == truth["culprit_ranks"], (first, truth)


@pytest.mark.parametrize("shape", sorted(fr_shapes.SHAPES))
def test_benchmark_shapes_do_not_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        shape: str) -> None:
    # GIVEN each of the benchmark's dump shapes at a small size (3D with p2p and an autograd
    # thread, plain data-parallel, long stacks, without times, older formats, JSON)
    truth = fr_shapes.write(tmp_path, shape, 32, 150)
    # WHEN analyzed in full, reduced, and by a pool
    verdict = _assert_same([str(tmp_path)], monkeypatch)
    # THEN the injected culprit is named by all of them
    assert verdict["findings"][0]["culprit_ranks"] == truth["culprit_ranks"], verdict


def test_ranks_share_histories(tmp_path: Path) -> None:
    # GIVEN 64 ranks of the benchmark layout, reduced
    synth_fr.write_large(tmp_path, 64, 200)
    tables = fr_stream.Tables()
    files = {r: str(tmp_path / f"{synth_fr.DEFAULT_PREFIX}{r}") for r in range(64)}
    dumps = [fr_stream.hydrate(fr_reduce.reduce_dump(path, rank), tables)
             for rank, path in files.items()]
    # THEN the groups' histories are few (classes of identical ranks), not one per rank
    per_rank = sum(len(d.entries.groups) for d in dumps if isinstance(d.entries, DumpEntries))
    assert per_rank == 64 * 3
    assert len(tables.histories) < 64
    # AND the report's records come from the digest, not from reading the dumps again
    assert all(isinstance(d.entries, DumpEntries) and d.entries.exact for d in dumps)


def test_unreadable_dump_is_one_problem_in_the_pool(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN 8 dumps, one of them garbage
    synth_fr.write_large(tmp_path, 8, 50)
    bad = tmp_path / f"{synth_fr.DEFAULT_PREFIX}3"
    bad.write_bytes(b"\x80\x02garbage")
    monkeypatch.setattr(fr_stream, "STREAM_FROM", 0)
    monkeypatch.setattr(fr_stream, "POOL_FROM", 0)
    # WHEN they are read by a pool
    evidence, report = load_paths([str(tmp_path)], LoadOptions(jobs=2))
    # THEN the other seven are analyzed and the bad one is a one-line problem naming it
    assert sorted(evidence.fr_dumps()) == [0, 1, 2, 4, 5, 6, 7]
    assert [p for p in report.problems if str(bad) in p] and \
        all("\n" not in p for p in report.problems)


def test_analyze_cli_takes_jobs(tmp_path: Path) -> None:
    # GIVEN the benchmark layout just above the streaming threshold
    truth = synth_fr.write_large(tmp_path / "dumps", fr_stream.STREAM_FROM, 60)
    from hangscope.cli import main

    # WHEN analyze runs with --jobs 2 and with --jobs 1
    verdicts = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}"
        code = main(["analyze", str(tmp_path / "dumps"), "--out", str(out), "--jobs", jobs, "-q"])
        assert code == 3
        verdicts.append(json.loads((out / "verdict.json").read_text()))
    # THEN both name the injected culprit, with the same verdict
    assert verdicts[0] == verdicts[1]
    assert verdicts[0]["findings"][0]["culprit_ranks"] == truth["culprit_ranks"]
    assert OutputOptions().write_html


def test_bad_records_are_the_same_problems(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN 4 ranks whose histories hold records that the loader must reject or repair:
    # not a mapping, no state, a record id that is no number, sizes that are no shape, a
    # duration too large for a float, a dtype given as a bare string
    from tests.frdumps import make_dump, make_entry, write_dumps

    dumps = {}
    for rank in range(4):
        entries: list[Any] = [make_entry(i) for i in range(120)]
        entries[5] = "garbage"
        del entries[6]["state"]
        entries[7]["record_id"] = "seven"
        entries[8]["input_sizes"] = [1, 2]
        entries[9]["duration_ms"] = 10**400
        entries[10]["input_dtypes"] = "Float"
        if rank == 2:
            entries[-1]["state"] = "started"  # the others completed it: rank 2 is behind
            entries[-1]["input_sizes"] = [[8, 8]]
        dumps[rank] = make_dump(entries, 4)
    write_dumps(str(tmp_path), dumps)
    # WHEN read in full and reduced
    seen = []
    for mode in ("full", "reduced"):
        with monkeypatch.context() as patch:
            patch.setattr(fr_stream, "STREAM_FROM", 10**9 if mode == "full" else 0)
            patch.setattr(fr_stream, "POOL_FROM", 10**9)
            evidence, report = load_paths([str(tmp_path)], LoadOptions(jobs=1))
            verdict, _ = analyze(evidence)
        seen.append((report.problems, verdict.to_json()))
    # THEN the problems (one line each, naming the file and entry) and the verdicts are equal
    assert seen[0] == seen[1]
    entries_named = [re.search(r": entry (\d+): ", p) for p in seen[0][0]]
    assert [int(m.group(1)) for m in entries_named if m][:4] == [5, 6, 7, 9]
    assert any("entry 9" in p for p in seen[0][0])  # the duration


def test_untimed_dumps_are_read_again_for_the_report(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the benchmark layout where some records have no creation time: a digest cannot stand
    # in for the records the report shows (which records have times decides which ones it shows)
    synth_fr.write_large(tmp_path, 16, 120)
    for path in tmp_path.glob(f"{synth_fr.DEFAULT_PREFIX}*"):
        dump = pickle.loads(path.read_bytes())
        for entry in dump["entries"][-60:]:  # the newest records: the report shows older ones
            entry["time_created_ns"] = 0
        path.write_bytes(pickle.dumps(dump, protocol=2))
    _, result = _analyze([str(tmp_path)], "reduced", monkeypatch)
    dumps = result.evidence.fr_dumps().values()
    assert not any(isinstance(d.entries, DumpEntries) and d.entries.exact for d in dumps)
    # WHEN the report's data is built THEN it reads the dumps again and equals the full path's
    _assert_same([str(tmp_path)], monkeypatch, modes=("reduced",))


def _pipeline(folder: Path, pairs: int) -> None:
    """Four ranks in two send/recv pairs (0 <-> 1, 2 <-> 3), whole histories from record 0: rank 0's
    tenth send is larger than the recv it feeds; rank 2 sends once more, and rank 3 receives
    from any source into a buffer of another dtype."""
    from tests.frdumps import make_dump, make_entry, write_dumps

    dumps: dict[int, dict[str, Any]] = {}
    for rank in range(4):
        peer = rank ^ 1
        entries: list[dict[str, Any]] = []
        for i in range(pairs):
            for op in (("send", "recv") if rank % 2 == 0 else ("recv", "send")):
                sizes = [[8, 4]] if (rank, op, i) == (0, "send", 9) else [[4, 4]]
                arrow = f"{rank}->{peer}" if op == "send" else f"{rank}<-{peer}"
                entries.append(make_entry(len(entries), op, sizes=sizes, peer=arrow,
                                          p2p_seq=len(entries) + 1))
        if rank == 2:
            entries.append(make_entry(len(entries), "send", peer="2->3",
                                      p2p_seq=len(entries) + 1))
        if rank == 3:
            entries.append(make_entry(len(entries), "recv", peer="3<-?", dtype="Half",
                                      p2p_seq=len(entries) + 1, state="started"))
        dumps[rank] = make_dump(entries, 4)
    write_dumps(str(folder), dumps)


def test_p2p_matching_over_columns_does_not_change(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN two send/recv pairs with 150 rounds each, a mismatched send among the oldest records
    # (so not kept whole in a digest) and a recv from any source
    _pipeline(tmp_path, 150)
    # WHEN analyzed in full, reduced, and by a pool
    verdict = _assert_same([str(tmp_path)], monkeypatch)
    # THEN (checked above) the same answers, and the old send's mismatch is found
    mismatches = [f for f in verdict["findings"] if f["kind"] == "size_mismatch"]
    assert mismatches, verdict["findings"]
    assert "rank 0 sent" in mismatches[0]["summary"] and "p2p seq 19" in mismatches[0]["summary"]
    assert "[record 18 in " in str(mismatches[0]["evidence"])
    # AND a digest holds that send as columns, not whole
    tables = fr_stream.Tables()
    dump = fr_stream.hydrate(fr_reduce.reduce_dump(str(tmp_path / "nccl_trace_rank_0"), 0), tables)
    groups = fr_lazy.rank_groups(dump)
    assert groups is not None
    p2p = groups["0"].p2p
    assert len(p2p) == 300 and 18 not in p2p.kept and len(p2p.kept) < 70
    assert p2p[18].input_sizes == ((8, 4),) and p2p[18].record_id == 18
