"""``batch_isend_irecv`` blocks in NCCL flight-recorder dumps (``sources.fr_blocks``).

torch records each send/receive of a block without events (``scheduled`` forever) and the
block's state on a ``nccl:coalesced`` end (torch's test_c10d_nccl.py ``test_batched_send_recv``).
Read as written, a finished pipeline-parallel job's every send/receive is pending and its ends
are collectives at stale seqs; these tests pin that they are read in the block's state."""

from __future__ import annotations

import copy
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources import (
    flight_recorder,
    fr_blocks,
    fr_blocks_native,
    fr_columns,
    fr_native,
    fr_reduce,
)
from hangscope.sources.load import load_paths

from fixtures import fr_shapes

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded_nccl"


def _p2p(name: str, seq: int, rid: int) -> dict[str, Any]:
    return {"record_id": rid, "process_group": ("1", "pp"), "profiling_name": name,
            "collective_seq_id": 0, "p2p_seq_id": seq, "op_id": rid + 1, "is_p2p": True,
            "state": "scheduled", "retired": False, "time_created_ns": 1000 + rid,
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
            "input_sizes": [[4]], "output_sizes": [[4]]}


def _end(seq: int, rid: int, state: str = "completed", **more: Any) -> dict[str, Any]:
    return {"record_id": rid, "process_group": ("1", "pp"), "profiling_name": "nccl:coalesced",
            "collective_seq_id": 0, "p2p_seq_id": seq, "op_id": rid, "is_p2p": False,
            "state": state, "retired": state == "completed", "time_created_ns": 1000 + rid,
            "time_discovered_started_ns": 5000 + rid,
            "time_discovered_completed_ns": 6000 + rid if state == "completed" else None,
            "duration_ms": 1.5, "input_sizes": [], "output_sizes": [], **more}


def _collective(name: str, seq: int, rid: int, group: str = "1") -> dict[str, Any]:
    return {"record_id": rid, "process_group": (group, "pp"), "profiling_name": name,
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": rid, "is_p2p": False,
            "state": "completed", "retired": True, "input_sizes": [[4]], "output_sizes": [[4]]}


def test_a_finished_block_reads_completed_and_its_end_is_dropped() -> None:
    # GIVEN a block of a send and a receive, and its end that completed
    records = [_p2p("nccl:send 0->1", 1, 0), _p2p("nccl:recv 0<-1", 1, 1), _end(1, 2)]
    # WHEN resolved
    got = fr_blocks.resolve(records)
    # THEN the send and receive carry the block's state, times and duration; the end is gone
    assert [r["profiling_name"] for r in got] == ["nccl:send 0->1", "nccl:recv 0<-1"]
    for record in got:
        assert (record["state"], record["retired"], record["duration_ms"],
                record["time_discovered_completed_ns"]) == ("completed", True, 1.5, 6002)
        assert record["time_created_ns"] < 1002  # its own creation time is kept


def test_a_block_still_running_reads_started() -> None:
    # GIVEN two finished blocks, then one whose end started and never completed
    records = [_p2p("nccl:send 0->1", 1, 0), _end(1, 1), _p2p("nccl:recv 0<-1", 2, 2),
               _end(2, 3), _p2p("nccl:send 0->1", 3, 4), _p2p("nccl:recv 0<-1", 3, 5),
               _end(3, 6, state="started")]
    got = fr_blocks.resolve(records)
    # THEN the last block's ops are started (pending), the others completed; no end is left
    assert [(r["p2p_seq_id"], r["state"]) for r in got] == [
        (1, "completed"), (2, "completed"), (3, "started"), (3, "started")]
    assert "duration_ms" not in got[-1] or got[-1]["duration_ms"] == 1.5


def test_a_block_without_its_end_is_left_as_written() -> None:
    # GIVEN a rank still inside batch_isend_irecv (its end not recorded yet)
    records = [_p2p("nccl:send 0->1", 1, 0), _end(1, 1), _p2p("nccl:send 0->1", 2, 2)]
    got = fr_blocks.resolve(records)
    # THEN that block's send stays scheduled: it never started
    assert [r["state"] for r in got] == ["completed", "scheduled"]


def test_collective_blocks_and_other_groups_are_not_touched() -> None:
    # GIVEN a collective block's end (named after its op), an end right after a collective
    # (older torch named every block's end "nccl:coalesced"), and p2p in another group
    records = [_collective("nccl:all_reduce", 1, 0), _collective("nccl:all_reduce", 1, 1),
               _collective("nccl:ALLREDUCE_coalesced", 1, 2),
               _collective("nccl:all_reduce", 2, 3), _end(0, 4),
               {**_p2p("nccl:send 0->1", 1, 5), "process_group": ("2", "pp2")}, _end(1, 6)]
    got = fr_blocks.resolve(copy.deepcopy(records))
    # THEN only nothing changes: the p2p end of group 1 has no send of its group before it
    assert got == records


def test_an_end_whose_block_the_ring_buffer_dropped_is_dropped() -> None:
    # GIVEN a dump whose oldest record is a block's end (its sends overwritten)
    records = [_end(7, 10), _p2p("nccl:send 0->1", 8, 11), _end(8, 12)]
    # THEN it is left out too
    assert [r["record_id"] for r in fr_blocks.resolve(records)] == [11]


def test_hostile_records_pass_through() -> None:
    # GIVEN records of every wrong form among a block
    odd: list[Any] = [None, 3, "x", {"profiling_name": 5}, {"profiling_name": ["a", "b"]},
                      {"profiling_name": "nccl:coalesced"},
                      {"profiling_name": "nccl:coalesced", "process_group": []},
                      {"profiling_name": "coalesced", "pg_id": 1, "p2p_seq_id": "1"}]
    records = [*odd, _p2p("nccl:send 0->1", 1, 0), _end(1, 1)]
    got = fr_blocks.resolve(records)
    # THEN they are kept as they are, and the block is still resolved
    assert got[:len(odd)] == odd
    assert [r["state"] for r in got[len(odd):]] == ["completed"]


def test_may_hold_is_a_cheap_prefilter() -> None:
    assert fr_blocks.may_hold(pickle.dumps({"profiling_name": "nccl:coalesced"}))
    assert fr_blocks.may_hold(pickle.dumps({"profiling_name": "nccl:ALLGATHER_coalesced"}))
    assert not fr_blocks.may_hold(pickle.dumps({"profiling_name": "nccl:all_gather"}))


def test_a_collective_blocks_ops_take_its_state_and_the_end_stays() -> None:
    # GIVEN an all_gather of uneven sizes as torch records it (FR 2.7+): broadcasts without
    # events sharing the block's seq, then the block's end; then a block whose end is not yet
    # recorded
    records = [_collective("nccl:all_reduce", 1, 0),
               *({**_collective("nccl:_broadcast_oop", 2, 1 + i), "state": "scheduled",
                  "retired": False} for i in range(3)),
               {**_collective("nccl:ALLGATHER_coalesced", 2, 4), "input_sizes": [],
                "time_discovered_completed_ns": 77},
               *({**_collective("nccl:_broadcast_oop", 3, 5 + i), "state": "scheduled",
                  "retired": False} for i in range(2))]
    got = fr_blocks.resolve(copy.deepcopy(records))
    # THEN the finished block's broadcasts are completed, its end kept; the open block's not
    assert [(r["profiling_name"], r["state"]) for r in got] == [
        ("nccl:all_reduce", "completed"), *[("nccl:_broadcast_oop", "completed")] * 3,
        ("nccl:ALLGATHER_coalesced", "completed"), *[("nccl:_broadcast_oop", "scheduled")] * 2]
    assert got[1]["time_discovered_completed_ns"] == 77 and got[1]["retired"] is True
    # AND a fused op (one record, its own seq) after a collective is no block's end
    fused = [_collective("nccl:all_reduce", 1, 0),
             {**_collective("nccl:allreduce_coalesced", 2, 1), "state": "started"}]
    assert fr_blocks.resolve(copy.deepcopy(fused)) == fused


def _uneven_all_gather_job(out: Path, world: int = 4, culprit: int = 2) -> None:
    """A job whose steps are an all_reduce and an all_gather of uneven sizes (broadcasts in a
    coalesced block, as torch 2.7+ records them), then ``culprit`` never issues the next
    all_reduce."""
    out.mkdir(parents=True, exist_ok=True)

    def record(rid: int, name: str, seq: int, sizes: list[Any], done: bool = True,
               scheduled: bool = False) -> dict[str, Any]:
        t = 10**18 + rid * 10**6
        return {"record_id": rid, "pg_id": 0, "process_group": ("0", "default_pg"),
                "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": rid + 1,
                "profiling_name": name, "time_created_ns": t, "input_sizes": sizes,
                "input_dtypes": ["Float"] * len(sizes), "output_sizes": sizes,
                "output_dtypes": ["Float"] * len(sizes),
                "state": "scheduled" if scheduled else "completed" if done else "started",
                "time_discovered_started_ns": None if scheduled else t + 1000,
                "time_discovered_completed_ns": t + 5000 if done and not scheduled else None,
                "retired": done and not scheduled, "timeout_ms": 600000, "is_p2p": False}

    for rank in range(world):
        entries: list[dict[str, Any]] = []
        seq = 0
        for _step in range(20):
            seq += 1
            entries.append(record(len(entries), "nccl:all_reduce", seq, [[4]]))
            seq += 1
            entries += [record(len(entries) + i, "nccl:_broadcast_oop", seq, [[i + 1, 2]],
                               scheduled=True) for i in range(world)]
            entries.append(record(len(entries), "nccl:ALLGATHER_coalesced", seq, []))
        if rank != culprit:
            entries.append(record(len(entries), "nccl:all_reduce", seq + 1, [[4]], done=False))
        dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                                       "ranks": str(list(range(world)))}},
                "entries": entries}
        (out / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


@pytest.mark.parametrize("native", [True, False])
def test_uneven_all_gather_history_is_not_a_hang(tmp_path: Path, native: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a job whose history holds coalesced broadcast blocks, rank 2 missing at the end
    _uneven_all_gather_job(tmp_path / "job")
    if not native:
        monkeypatch.setattr("hangscope.sources.fr_native.ENABLED", False)
    # WHEN analyzed
    evidence, _ = load_paths([str(tmp_path / "job")], LoadOptions())
    first = analyze(evidence)[0].findings[0]
    # THEN rank 2 is missing from the all_reduce (not every rank "still in" an old broadcast)
    assert (first.kind.value, first.culprit_ranks) == ("missing_rank", [2]), first.summary


def _as_blocks(dump: dict[str, Any]) -> dict[str, Any]:
    """The dump as torch writes it had every send/receive been a batch_isend_irecv of one op:
    the op without events, then an end with the op's state, times and seqs."""
    out: list[dict[str, Any]] = []
    for record in dump["entries"]:
        if not record.get("is_p2p"):
            out.append(record)
            continue
        end = {**record, "profiling_name": "nccl:coalesced", "is_p2p": False,
               "input_sizes": [], "input_dtypes": [], "output_sizes": [], "output_dtypes": [],
               "frames": []}
        out.append({**record, "state": "scheduled", "retired": False,
                    "time_discovered_started_ns": None, "time_discovered_completed_ns": None})
        out[-1].pop("duration_ms", None)
        out.append(end)
    for index, record in enumerate(out):
        record["record_id"] = index
    return {**dump, "entries": out}


@pytest.mark.parametrize("native", [True, False])
def test_recorded_p2p_deadlock_written_as_blocks(tmp_path: Path, native: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the recorded NCCL p2p deadlock (ranks 0 and 1 each in a recv from the other; torch
    # 2.11 on an H200), rewritten as torch writes the same ops sent by batch_isend_irecv
    src = RECORDED / "p2p_deadlock"
    shutil.copytree(src, tmp_path / "job")
    rewritten = 0
    for path in sorted((tmp_path / "job" / "fr").glob("nccl_trace_rank_*")):
        dump = pickle.loads(path.read_bytes())
        rewritten += any(r.get("is_p2p") for r in dump["entries"])
        path.write_bytes(pickle.dumps(_as_blocks(dump)))
    assert rewritten == 2
    if not native:
        monkeypatch.setattr("hangscope.sources.fr_native.ENABLED", False)
    # WHEN analyzed
    evidence, _ = load_paths([str(tmp_path / "job")], LoadOptions())
    verdict = analyze(evidence)[0]
    # THEN the same deadlock between ranks 0 and 1 as from the individual recvs
    first = verdict.findings[0]
    assert (first.kind.value, sorted(first.culprit_ranks)) == ("p2p_deadlock", [0, 1]), \
        first.summary


def test_pipeline_blocks_of_a_finished_job_are_history(tmp_path: Path) -> None:
    # GIVEN the benchmark's Megatron-style 1F1B job with batched p2p, one rank missing from a
    # dp reduce-scatter
    truth = fr_shapes.write(tmp_path, "3dbatch", 64, 400)
    # WHEN one dump is read
    dump, problems = flight_recorder.load_dump(str(tmp_path / "nccl_trace_rank_0"), 0)
    ops = [e.op for e in dump.entries]
    # THEN no end is left, every send/receive completed, and no problem is reported
    assert "coalesced" not in ops and {"send", "recv"} <= set(ops)
    assert all(e.completed for e in dump.entries if e.is_p2p)
    assert problems == []
    # AND the job's verdict names the culprit, with no p2p wait anywhere
    evidence, _ = load_paths([str(tmp_path)], LoadOptions())
    verdict = analyze(evidence)[0]
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("missing_rank", truth["culprit_ranks"])
    assert "p2p" not in " ".join(e.detail for e in first.evidence)


def test_the_c_readers_records_resolve_as_the_unpickled_ones(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the 3dbatch job's dumps and a job with collective blocks, as the C reader reads
    # them (where it was built)
    if not fr_native.ENABLED:
        pytest.skip("the C reader was not built here")
    fr_shapes.write(tmp_path, "3dbatch", 16, 300)
    _uneven_all_gather_job(tmp_path, world=4)
    monkeypatch.setattr(fr_reduce.Reducer, "by_record", _no_by_record)
    for path in sorted(tmp_path.glob("nccl_trace_rank_*")):
        data = path.read_bytes()
        native = fr_native.read(data)
        assert native is not None and fr_blocks.may_hold(data)
        # WHEN resolved on its columns, and as dicts
        top, view, cols = fr_blocks_native.resolve(*native)
        _raw, resolved = flight_recorder.read_raw(str(path), data)
        # THEN the same records, in the same order, with the columns scan gives them
        assert list(view) == resolved and top["entries"] is view
        assert all(view[i] is view[i] for i in range(len(view)))  # one object per record
        scanned = fr_columns.scan(resolved)
        assert scanned is not None
        assert (cols.record_ids, cols.seqs, cols.p2p_seqs, cols.created, cols.timed) == (
            scanned.record_ids, scanned.seqs, scanned.p2p_seqs, scanned.created, scanned.timed)
        # and records of one key class are equal in every keyed field
        for index, first in enumerate(cols.firsts):
            assert _key(view[index]) == _key(view[first])
        # AND the reducer reads it by its columns, never record by record
        fr_reduce.reduce_dump(str(path), 0)


def _no_by_record(self: Any) -> Any:
    raise AssertionError("read record by record")


def _key(record: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(record.get(field) for field in (
        "profiling_name", "process_group", "state", "is_p2p", "timeout_ms", "retired",
        "thread_name", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes"))


@pytest.mark.parametrize("fixture", ["healthy", "healthy_json"])
def test_the_healthy_nccl_fixture_reads_healthy(fixture: str) -> None:
    # GIVEN the built NCCL fixture of a healthy job that ends with a batch_isend_irecv block per
    # tp pair (sends/recvs scheduled, the block's end completed) and a barrier
    evidence, _ = load_paths([str(Path(__file__).resolve().parent.parent / "fixtures" / "nccl"
                                  / fixture)], LoadOptions())
    # WHEN analyzed THEN healthy (it read inconclusive, every rank "waiting in send p2p seq 1")
    verdict = analyze(evidence)[0]
    assert verdict.status.value == "healthy", verdict.evidence_gaps
