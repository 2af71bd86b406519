"""NCCL RAS reports (text and JSON) written from nccl src/ras/client_support.cc."""

from __future__ import annotations

import json
from pathlib import Path

from _logs_helpers import FIXTURES, scan, strip_source

from hangscope.sources.logs import scan_log


def test_ras_text_report() -> None:
    events = scan("ras_report.txt")
    assert [(e.kind, e.line_no) for e in events] == [("nccl_ras", 20), ("nccl_ras", 23),
                                                     ("nccl_ras", 30)]
    dead, incomplete, mismatch = (strip_source(e.fields) for e in events)
    assert dead == {"comm": "job", "state": "DEAD", "missing": 1, "ranks": "", "pids": "8813",
                    "nodes": "10.0.0.2", "procs": "8813@10.0.0.2"}
    # size: "Ranks per comm" of group #0 in the Communicators table
    assert incomplete == {"comm": "9e6f2a1c3b5d7f80", "state": "INCOMPLETE", "missing": 1,
                          "ranks": "6", "pids": "8813", "nodes": "10.0.0.2", "size": 8,
                          "procs": "6=8813@10.0.0.2"}
    assert mismatch == {"comm": "9e6f2a1c3b5d7f80", "state": "MISMATCH", "ranks": "5",
                        "pids": "8812", "nodes": "10.0.0.2", "op_counts": "5:1044",
                        "ops": "AllReduce", "majority_count": 1045, "size": 8,
                        "procs": "5=8812@10.0.0.2", "behind": "5"}
    assert all(e.rank is None for e in events)


def test_ras_json_report() -> None:
    events = scan("ras_report.json")
    assert [e.fields["state"] for e in events] == ["DEAD", "MISMATCH"]
    dead, mismatch = events
    assert dead.line_no == 9 and dead.time is not None
    assert strip_source(dead.fields) == {"comm": "9e6f2a1c3b5d7f80", "size": 4, "state": "DEAD",
                                         "ranks": "3", "pids": "8804", "nodes": "10.0.0.2",
                                         "missing": 1, "procs": "3=8804@10.0.0.2"}
    assert strip_source(mismatch.fields) == {
        "comm": "9e6f2a1c3b5d7f80", "size": 4, "state": "MISMATCH", "ranks": "2", "pids": "8803",
        "nodes": "10.0.0.2", "ops": "AllReduce", "majority_count": 1045, "op_counts": "2:1044",
        "procs": "2=8803@10.0.0.2", "behind": "2"}


def scan_text(text: str) -> list[dict[str, object]]:
    return [strip_source(e.fields) for e in scan_log("nccl_ras.txt", data=text.encode())]


# the NCCL docs' MISMATCH example (troubleshooting/ras.rst): a group of 6 outliers, listed without
# their counts after "6 ranks have launched up to operation 6649"
DOCS_MISMATCH = """#0-0 (27a079b828ff1a75) MISMATCH
  Communicator ranks have different collective operation counts
  26 ranks have launched up to operation 6650
  6 ranks have launched up to operation 6649
  Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210
  Rank 2 -- GPU 2 managed by process 483074 on node 172.16.64.210
  Rank 3 -- GPU 3 managed by process 483075 on node 172.16.64.210
  Rank 4 -- GPU 4 managed by process 483076 on node 172.16.64.210
  Rank 5 -- GPU 5 managed by process 483077 on node 172.16.64.210
  Rank 7 -- GPU 7 managed by process 483079 on node 172.16.64.210
"""


def test_grouped_outliers_get_their_group_count() -> None:
    (fields,) = scan_text(DOCS_MISMATCH)
    assert fields["behind"] == "0,2,3,4,5,7" and fields["majority_count"] == 6650
    assert fields["op_counts"] == "0:6649,2:6649,3:6649,4:6649,5:6649,7:6649"
    assert fields["ops"] == "collective"  # NCCL 2.24-2.26: one count for all collectives


def test_status_outliers_are_not_behind() -> None:
    # hand-written (rasClientRunComms): a status section before an op-count section; rank 4
    # ahead, ranks 1 and 6 behind
    (fields,) = scan_text("""#0-0 (27a079b828ff1a75) MISMATCH
  Communicator ranks have different status
  7 ranks have status RUNNING
  Rank 3 has status ABORT -- GPU 3 managed by process 11 on node n1
  Communicator ranks have different AllGather operation counts
  5 ranks have launched up to operation 12
  2 ranks have launched up to operation 11
  Rank 1 -- GPU 1 managed by process 9 on node n1
  Rank 6 -- GPU 6 managed by process 14 on node n1
  Rank 4 has launched up to operation 13 -- GPU 4 managed by process 12 on node n1
""")
    assert fields["ranks"] == "3,1,6,4" and fields["behind"] == "1,6"
    assert fields["op_counts"] == "1:11,6:11,4:13"
    assert fields["procs"] == "3=11@n1,1=9@n1,6=14@n1,4=12@n1"


def test_nccl_2_24_missing_rank_list() -> None:
    (fields,) = scan_text("#1-0 (cf264af53edbe986) INCOMPLETE\n"
                          "  Missing communicator data from 2 ranks\n"
                          "  The missing ranks: 3,5\n")
    assert fields["ranks"] == "3,5" and fields["missing"] == 2 and "size" not in fields


def test_error_names_and_phase() -> None:
    (fields,) = scan_text("""#0-0 (9e6f2a1c3b5d7f80) ERROR
  Initialization error on 1 rank
  Rank 2 reported System error -- GPU 2 managed by process 1002 on node node0
  Asynchronous errors on 2 ranks
  2 ranks reported Remote process error
  Rank 1 -- GPU 1 managed by process 1001 on node node0
  Rank 3 -- GPU 3 managed by process 1003 on node node0
""")
    assert fields["errors"] == "System error;Remote process error"
    assert fields["phase"] == "init,async" and fields["ranks"] == "2,1,3"


def test_entry_without_its_table_has_no_size() -> None:
    # entries whose table is not in the same report keep no size: their ranks stay
    # communicator ranks that only a pid can map
    events = scan_text("#0-0 (9e6f2a1c3b5d7f80) INCOMPLETE\n  Rank 6 -- GPU 6\n")
    assert events == [{"comm": "9e6f2a1c3b5d7f80", "state": "INCOMPLETE", "ranks": "6",
                       "pids": "", "nodes": ""}]


def test_json_errors_and_missing_ranks(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "ras_report.json").read_text())
    comm = doc["communicators"][0]
    comm["ranks"][1]["status"]["async_error"] = 1  # ncclUnhandledCudaError
    comm["missing_ranks"][0]["status"] = {"unresponsive": False, "considered_dead": False}
    path = tmp_path / "ras.json"
    path.write_text(json.dumps(doc))
    events = scan_log(str(path))
    # the missing rank answered RAS: it left the communicator (NOCOMM), it is not missing data
    assert [e.fields["state"] for e in events] == ["ERROR", "MISMATCH"]
    assert events[0].fields["errors"] == "Unhandled CUDA error"
    assert events[0].fields["phase"] == "async" and events[0].fields["ranks"] == "1"
