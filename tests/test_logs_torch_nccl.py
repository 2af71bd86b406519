"""torch ProcessGroupNCCL / c10d messages: watchdog variants, desync report, DETAIL fingerprint
mismatch (recorded), monitored barrier (recorded), heartbeat, NCCL errors, FR dump notices."""

from __future__ import annotations

import time

from _logs_helpers import of_kind, scan, strip_source


def test_watchdog_torch21_no_numel_rank_from_message() -> None:
    events = scan("watchdog_torch21_rank0.log")
    wd = of_kind(events, "nccl_watchdog_timeout")
    assert [e.line_no for e in wd] == [1, 2]
    assert strip_source(wd[0].fields) == {"ran_ms": 1800617, "pg": "", "seq": 96120, "op": "ALLREDUCE",
                                          "timeout_ms": 1800000, "group_rank": 0}
    assert "numel_in" not in wd[0].fields
    assert wd[0].rank == 0 and wd[0].fields["rank_source"] == "message"
    assert wd[0].time is None and wd[0].severity == "error"


def test_watchdog_torch23_rank_prefix_and_repeat() -> None:
    events = scan("watchdog_torch23.log")
    wd = of_kind(events, "nccl_watchdog_timeout")
    assert [(e.line_no, e.rank) for e in wd] == [(1, 7), (5, 7)]
    assert strip_source(wd[0].fields) == {"ran_ms": 600017, "pg": "", "seq": 1, "op": "BROADCAST",
                                          "numel_in": 1, "numel_out": 1, "timeout_ms": 600000,
                                          "group_rank": 7}
    assert wd[0].fields["rank_source"] == "prefix"
    assert wd[1].fields["repeat"] == 1 and wd[1].fields["pg"] == "0"
    status = of_kind(events, "nccl_work_status")[0]
    assert strip_source(status.fields) == {"seq": 1, "last_enqueued": 1, "last_completed": -1,
                                           "timeout": 1, "pg": "0", "group_rank": 7}
    hb = of_kind(events, "nccl_heartbeat_stuck")
    assert [(e.line_no, e.rank, e.severity) for e in hb] == [(8, 25, "fatal"), (10, 25, "fatal")]
    assert hb[0].fields["work_list_size"] == 2 and hb[1].fields["stuck_s"] == 600
    assert of_kind(events, "fr_dump_notice")[0].fields["action"] == "preparing"


def test_watchdog_torch26_pg_guid_prefix_and_time() -> None:
    events = scan("watchdog_torch26.log")
    wd = of_kind(events, "nccl_watchdog_timeout")
    assert [(e.rank, e.fields["seq"], e.fields["op"]) for e in wd] == [
        (1, 808, "ALLREDUCE"), (0, 808, "ALLREDUCE"), (4, 610, "COALESCED")]
    assert wd[2].fields["numel_in"] == 56320 and wd[2].fields["numel_out"] == 450560
    assert wd[0].time is not None
    t = time.localtime(wd[0].time)
    assert (t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec) == (6, 26, 6, 24, 44)
    assert abs(wd[0].time % 1 - 0.903881913) < 1e-5
    status = of_kind(events, "nccl_work_status")
    assert [(e.fields["pg"], e.fields["last_completed"]) for e in status] == [
        ("0:default_pg", 807), ("0:default_pg", 807), ("2", 609)]
    dumps = of_kind(events, "fr_dump_notice")
    assert [e.fields["action"] for e in dumps] == [
        "first_to_signal", "signal", "signal", "preparing", "written"]
    assert dumps[1].fields["from"] == "local" and dumps[2].fields["from"] == "7"
    assert dumps[2].rank == 6 and dumps[2].fields["last_enqueued"] == 56116
    assert dumps[4].fields["dump_path"] == "/tmp/nccl_trace_rank_0"


def test_desync_report_is_one_event_per_report() -> None:
    events = scan("desync_report.log")
    desync = of_kind(events, "nccl_desync")
    assert [(e.line_no, e.rank) for e in desync] == [(3, 0), (13, 2)]
    assert strip_source(desync[0].fields) == {
        "timed_out_rank": 0, "op": "ALLREDUCE", "seq": 5, "joined_not_finished": "0,1",
        "finished_not_joined_next": "2,3", "lagging_ranks": "0,1,2,3", "joined_seq": 5,
        "finished_seq": 5}
    assert strip_source(desync[1].fields) == {
        "timed_out_rank": 2, "op": "BROADCAST", "seq": 1, "never_joined": "3",
        "lagging_ranks": "3"}


def test_detail_fingerprint_mismatch_recorded() -> None:
    events = scan("recorded_detail_fingerprint_mismatch.log")
    fp = of_kind(events, "collective_fingerprint_mismatch")
    assert [(e.line_no, e.rank) for e in fp] == [(14, 0), (28, 1)]
    assert strip_source(fp[0].fields) == {
        "rank_a": 0, "rank_b": 1, "seq_a": 1, "op_a": "ALLREDUCE", "shape_a": "[20, 10]",
        "dtype_a": "Float", "seq_b": 1, "op_b": "BROADCAST", "shape_b": "[20, 10]",
        "dtype_b": "Double", "local_rank": 0,
        "differ": "Op type: ALLREDUCEvs BROADCAST Tensor Tensor dtypes: Floatvs Double"}


def test_monitored_barrier_recorded() -> None:
    events = scan("recorded_monitored_barrier.log")
    mb = of_kind(events, "monitored_barrier_failure")
    assert [e.line_no for e in mb] == [1, 12]
    assert mb[0].fields["failed_ranks"] == "1" and mb[0].fields["timeout_ms"] == 2000
    assert mb[0].rank == 0 and mb[0].time is not None  # c10 [E1121 ...] prefix
    assert of_kind(events, "gloo_timeout")[0].fields["timeout_ms"] == 2000


def test_nccl_error_with_last_error() -> None:
    events = scan("nccl_error_remote.log")
    err = of_kind(events, "nccl_error")
    assert len(err) == 1 and err[0].line_no == 7 and err[0].rank == 3
    assert strip_source(err[0].fields) == {
        "where": "/opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317",
        "error": "remote process exited or there was a network error", "nccl_version": "2.21.5",
        "code": "ncclRemoteError",
        "last_error": "NET/IB : Got completion from peer 10.0.0.2<53249> with status=12 opcode=0 "
                      "len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2"}
    tb = of_kind(events, "traceback")[0]
    assert tb.fields["exc_type"] == "torch.distributed.DistBackendError"


def test_deepspeed_prefixed_log() -> None:
    events = scan("deepspeed_prefixed.log")
    assert [e.kind for e in events] == ["nccl_watchdog_timeout", "elastic_child_failed"]
    # DeepSpeed's launcher names the rank only in the wrapped command line (--local_rank=3)
    assert events[1].fields["local_rank"] == 3 and events[1].fields["signal"] == "SIGABRT"
    wd = events[0]
    assert wd.rank == 3 and wd.fields["op"] == "_ALLGATHER_BASE" and wd.fields["seq"] == 4512
    assert wd.fields["numel_out"] == 524288000 and wd.time is not None


def test_a_lagging_rank_is_quoted_at_its_own_seq_not_the_timed_out_one() -> None:
    from pathlib import Path

    from hangscope.analysis.engine import analyze
    from hangscope.options import LoadOptions
    from hangscope.sources.load import load_paths
    # GIVEN rank 0 timed out at #315 and its report says rank 7 finished #182, not #183
    real = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "real"
    log = real / "a_pytorch_152623_desync_rank7_lagging.log"
    verdict, _ = analyze(load_paths([str(log)], LoadOptions())[0])
    # THEN the finding quotes the log's own numbers
    root = verdict.findings[0]
    assert root.culprit_ranks == [7]
    assert "rank 7 completed a collective #182" in root.summary, root.summary
    assert "completed ALLREDUCE #315" not in root.summary
    assert "rank 0 waits in" in root.summary
