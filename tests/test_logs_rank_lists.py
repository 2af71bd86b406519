"""Lines other tools and people write that name ranks and what they wait for: Horovod's per-rank
"Missing ranks:" list, NCCL's "Mismatched collective detected ... around rank N", and wait chains
("rank 4 -> waiting on rank 5 (...)"). The texts are built from the tools' sources, not the corpus."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import root_of

from hangscope.sources.logs import scan_log


def _events(text: str, kind: str) -> list[dict[str, object]]:
    return [dict(e.fields, rank=e.rank) for e in scan_log("paste.log", data=text.encode())
            if e.kind == kind]


def _root(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    return root_of(tmp_path, text)


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


# Wait chains written out by hand, as issue and PR descriptions state them (wordings varied on
# purpose: "->", "is waiting for", "waits on")
def test_a_written_p2p_wait_cycle_is_a_p2p_deadlock(tmp_path: Path) -> None:
    root = _root(tmp_path, "Rank 0 is waiting for rank 1 (recv from 1)\n"
                           "Rank 1 -> waits on rank 0 (send to 0, blocked in isend)\n"
                           "rank 1 waiting for rank 0 (irecv)\n")
    assert (root.kind.value, root.culprit_ranks) == ("p2p_deadlock", [0, 1])
    assert root.measures["rule"] == "stated-wait-cycle"


def test_a_written_cycle_over_other_groups_is_a_pg_order_deadlock(tmp_path: Path) -> None:
    root = _root(tmp_path, "rank 0 -> waiting on rank 2 (barrier on pg 3)\n"
                           "rank 2 -> waiting on rank 0 (barrier on pg 1)\n")
    assert (root.kind.value, root.culprit_ranks) == ("pg_order_deadlock", [0, 2])


def test_a_written_cycle_in_different_ops_is_a_mismatch(tmp_path: Path) -> None:
    root = _root(tmp_path, "rank 3 waits on rank 1 (all_reduce)\n"
                           "rank 1 waits on rank 3 (broadcast)\n")
    assert root.kind.value == "collective_mismatch"


def test_rank_zero_first_prints_are_not_a_deadlock(tmp_path: Path) -> None:
    # the common "rank 0 does it, the others wait" pattern prints one edge per rank, no cycle
    text = "".join(f"Rank {r} is waiting for rank 0 to finish LMDB preprocessing.\n"
                   for r in range(1, 8))
    assert len(_events(text, "stated_wait")) == 7
    assert _root(tmp_path, text) is None


def test_edges_far_apart_do_not_make_a_cycle(tmp_path: Path) -> None:
    text = ("rank 0 waiting on rank 1 (step 3 barrier)\n" + "training...\n" * 20
            + "rank 1 waiting on rank 0 (step 9 barrier)\n")
    root = _root(tmp_path, text)
    assert root is None or root.measures.get("rule") != "stated-wait-cycle"


# NCCL src/transport/net_socket.cc: "NET/Socket : peer %s message truncated : receiving %d bytes
# instead of %d. If you believe your socket network is in a healthy state, there may be a mismatch
# in collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks"
INIT = ("node7:4411:4411 [3] NCCL INFO comm 0x5501 rank 11 nranks 16 cudaDev 3 busId 61000 - "
        "Init COMPLETE\n")
TRUNCATED = ("node7:4411:4470 [3] transport/net_socket.cc:561 NCCL WARN NET/Socket : peer "
             "10.1.2.3<52011> message truncated : receiving 1048576 bytes instead of 65536. If you "
             "believe your socket network is in a healthy state, there may be a mismatch in "
             "collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks\n")


def test_truncation_fields() -> None:
    [found] = _events(INIT + TRUNCATED, "nccl_transport_error")
    assert (found["truncated"], found["got_bytes"], found["want_bytes"], found["rank"]) == \
        (1, 1048576, 65536, 11)


def test_truncation_is_a_size_mismatch(tmp_path: Path) -> None:
    root = _root(tmp_path, INIT + TRUNCATED)
    assert root.kind.value == "size_mismatch"


def test_truncation_without_a_rank_is_a_size_mismatch_with_no_culprit(tmp_path: Path) -> None:
    root = _root(tmp_path, TRUNCATED)
    assert (root.kind.value, root.culprit_ranks, root.measures["rule"]) == \
        ("size_mismatch", [], "truncated-is-size")


def test_a_closed_connection_stays_a_network_fault(tmp_path: Path) -> None:
    closed = ("node7:4411:4470 [3] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed "
              "by remote peer node2<42830>\n")
    assert _root(tmp_path, INIT + closed).kind.value == "network_fault"


# ncclras's text report (NCCL src/ras/client_support.cc): the small group of a MISMATCH is listed
RAS = """\
Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         8        16        16   RUNNING  MISMATCH

Errors
======

Warnings
========

#0-0 (0123456789abcdef) MISMATCH
  Communicator ranks have different AllReduce operation counts
  {big} ranks have launched up to operation {n}
  Rank 5 has launched up to operation {m} -- GPU 5 managed by process 8812 on node 10.0.0.2
"""


def test_ras_one_rank_ahead_names_no_culprit(tmp_path: Path) -> None:
    root = _root(tmp_path, RAS.format(big=15, n=1045, m=1046))
    assert (root.kind.value, root.culprit_ranks, root.measures["rule"]) == \
        ("missing_rank", [], "ras-few-ahead")
    assert 5 in root.waiting_ranks


def test_ras_one_rank_behind_is_not_ahead(tmp_path: Path) -> None:
    root = _root(tmp_path, RAS.format(big=15, n=1045, m=1044))
    assert root is None or root.measures.get("rule") != "ras-few-ahead"
