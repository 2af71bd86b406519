"""Lines other tools and people write that name ranks and what they wait for: Horovod's per-rank
"Missing ranks:" list, NCCL's "Mismatched collective detected ... around rank N", and wait chains
("rank 4 -> waiting on rank 5 (...)"). The texts are built from the tools' sources, not the corpus."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.model import JobEvidence
from hangscope.sources.logs import scan_log
from hangscope.sources.logs.loader import load_log_file


def _events(text: str, kind: str) -> list[dict[str, object]]:
    return [dict(e.fields, rank=e.rank) for e in scan_log("paste.log", data=text.encode())
            if e.kind == kind]


def _root(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "paste.log"
    path.write_text(text)
    evidence = JobEvidence()
    load_log_file(str(path), None, evidence, [])
    verdict, _ = analyze(evidence)
    return verdict.findings[0] if verdict.findings else None


# horovod/common/stall_inspector.cc (>= 0.21): "Missing ranks:" then "R: [names]" per rank,
# "R!: [...]" for a rank past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, then the shutdown sentence
HOROVOD_NEW = """\
[2021-03-01 10:00:00.000001: E /horovod/common/stall_inspector.cc:107] One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock.
Missing ranks:
2!: [allreduce.noname.7, allreduce.noname.8]
3: [allreduce.noname.8]
One or more rank (marked by "!") is stalled for longer than 120 seconds. Will shutdown.
"""


def test_horovod_missing_ranks_list() -> None:
    found = _events(HOROVOD_NEW, "stall_report")
    assert [(f["missing"], f["op"], f["ops"]) for f in found] == [
        ("2", "allreduce.noname.7", 2), ("3", "allreduce.noname.8", 1)]


def test_horovod_missing_ranks_names_them(tmp_path: Path) -> None:
    root = _root(tmp_path, HOROVOD_NEW)
    assert root.kind.value == "missing_rank" and 2 in root.culprit_ranks


def test_a_missing_ranks_heading_with_no_rank_lines_is_nothing() -> None:
    assert _events("Missing ranks:\nsome other text\n", "stall_report") == []


# NCCL src/init.cc ncclCommGetAsyncError (2.4+): WARN("Mismatched collective detected, please check
# your collective calls at and around rank %d. ...", comm->rank), here with its full host head
NCCL_MISMATCH = (
    "gpu-node-3:40211:40530 [2] NCCL INFO comm 0x55d1 rank 10 nranks 16 cudaDev 2 busId 3b000 - "
    "Init COMPLETE\n"
    "gpu-node-3:40211:40530 [2] enqueue.cc:2012 NCCL WARN Mismatched collective detected, please "
    "check your collective calls at and around rank 10. You can use NCCL_DEBUG=INFO and "
    "NCCL_DEBUG_SUBSYS=COLL to see the collective logs\n")


def test_nccl_device_mismatch_is_read() -> None:
    [found] = _events(NCCL_MISMATCH, "nccl_device_mismatch")
    assert (found["around_rank"], found["rank"], found["pid"]) == (10, 10, 40211)


def test_nccl_device_mismatch_is_a_mismatch_without_a_culprit(tmp_path: Path) -> None:
    root = _root(tmp_path, NCCL_MISMATCH)
    assert (root.kind.value, root.culprit_ranks) == ("collective_mismatch", [])
    assert "rank 10" in root.summary


def test_other_nccl_warns_are_not_a_mismatch() -> None:
    text = ("gpu-node-3:40211:40530 [2] misc/socket.cc:71 NCCL WARN socketProgress: Connection "
            "closed by remote peer node2<42830>\n")
    assert _events(text, "nccl_device_mismatch") == []
