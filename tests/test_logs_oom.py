"""CUDA OOM (recorded OutOfMemoryError with [rank1]: prefix; older format via Lightning) and kernel
OOM kills."""

from __future__ import annotations

from _logs_helpers import of_kind, scan, strip_source

GIB = 1 << 30
MIB = 1 << 20


def test_cuda_oom_new_format_recorded() -> None:
    (oom,) = of_kind(scan("recorded_cuda_oom_rank_prefix.log"), "cuda_oom")
    assert (oom.line_no, oom.rank) == (10, 1)
    fields = strip_source(oom.fields)
    assert fields.pop("exc_message").startswith("CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert fields == {
        "exc_type": "torch.OutOfMemoryError", "tried_bytes": 2 * GIB, "gpu": 1,
        "capacity_bytes": int(79.15 * GIB), "free_bytes": int(1.02 * GIB),
        "in_use_bytes": int(78.12 * GIB), "allocated_bytes": int(75.40 * GIB),
        "reserved_bytes": int(1.21 * GIB), "local_rank": 1}


def test_cuda_oom_old_format_lightning_prefix() -> None:
    events = scan("lightning_rank_prefixed.log")
    (oom,) = of_kind(events, "cuda_oom")
    assert (oom.line_no, oom.rank, oom.fields["rank_source"]) == (7, 1, "prefix")
    fields = strip_source(oom.fields)
    assert fields.pop("exc_message").startswith("CUDA out of memory. Tried to allocate 20.00 MiB")
    assert fields == {
        "exc_type": "RuntimeError", "tried_bytes": 20 * MIB, "gpu": 1,
        "capacity_bytes": int(15.78 * GIB), "allocated_bytes": int(14.12 * GIB),
        "free_bytes": int(3.19 * MIB), "reserved_bytes": int(14.58 * GIB)}
    (tb,) = of_kind(events, "traceback")
    assert tb.line_no == 4 and tb.rank == 1 and tb.fields["last_frame"] == "/workspace/train.py:54"


def test_kernel_oom_kill() -> None:
    events = scan("kernel_oom_dmesg.log")
    assert [(e.kind, e.line_no) for e in events] == [("host_oom_kill", 3), ("host_oom_kill", 4),
                                                     ("host_oom_kill", 6)]
    summary, killed, global_kill = events
    assert summary.fields == {
        "pid": 40123, "process": "python", "constraint": "CONSTRAINT_MEMCG", "memcg": 1,
        "cgroup": "/kubepods.slice/kubepods-burstable.slice/pod1/cri-containerd-4f1c.scope",
        "summary": 1, "uptime_s": 8123.456789}
    assert killed.fields == {"pid": 40123, "process": "python", "memcg": 1,
                             "total_vm_kb": 98765432, "anon_rss_kb": 45678912,
                             "uptime_s": 8123.456901}
    assert global_kill.fields["memcg"] == 0 and global_kill.fields["process"] == "pt_data_worker"
    assert all(e.time is None and e.rank is None and e.severity == "fatal" for e in events)


def test_an_oom_finding_quotes_the_message_and_is_not_also_a_death(tmp_path) -> None:
    from hangscope.analysis.engine import analyze
    from hangscope.options import LoadOptions
    from hangscope.sources.load import load_paths
    # GIVEN torch < 2.1's CUDA OOM: a RuntimeError, its traceback behind [rank0]:
    log = tmp_path / "rank0.log"
    log.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/x/train.py", line 3, in <module>\n'
        "[rank0]:     step()\n"
        "[rank0]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB "
        "total capacity; 75.01 GiB already allocated; 1.20 GiB free; 76.50 GiB reserved in total "
        "by PyTorch)\n")
    verdict, _ = analyze(load_paths([str(log)], LoadOptions())[0])
    # THEN the OOM finding quotes what it says, and the same exception is no second finding
    root = verdict.findings[0]
    assert (root.kind.value, root.culprit_ranks) == ("rank_oom", [0])
    assert "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" in root.summary
    assert [f.kind.value for f in verdict.findings] == ["rank_oom"]
