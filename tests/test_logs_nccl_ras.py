"""NCCL RAS reports (text and JSON) written from nccl src/ras/client_support.cc."""

from __future__ import annotations

from _logs_helpers import scan, strip_source


def test_ras_text_report() -> None:
    events = scan("ras_report.txt")
    assert [(e.kind, e.line_no) for e in events] == [("nccl_ras", 20), ("nccl_ras", 23),
                                                     ("nccl_ras", 30)]
    dead, incomplete, mismatch = (strip_source(e.fields) for e in events)
    assert dead == {"comm": "job", "state": "DEAD", "missing": 1, "ranks": "", "pids": "8813",
                    "nodes": "10.0.0.2"}
    assert incomplete == {"comm": "9e6f2a1c3b5d7f80", "state": "INCOMPLETE", "missing": 1,
                          "ranks": "6", "pids": "8813", "nodes": "10.0.0.2"}
    assert mismatch == {"comm": "9e6f2a1c3b5d7f80", "state": "MISMATCH", "ranks": "5",
                        "pids": "8812", "nodes": "10.0.0.2", "op_counts": "5:1044",
                        "ops": "AllReduce", "majority_count": 1045}
    assert all(e.rank is None for e in events)


def test_ras_json_report() -> None:
    events = scan("ras_report.json")
    assert [e.fields["state"] for e in events] == ["DEAD", "MISMATCH"]
    dead, mismatch = events
    assert dead.line_no == 9 and dead.time is not None
    assert strip_source(dead.fields) == {"comm": "9e6f2a1c3b5d7f80", "size": 4, "state": "DEAD",
                                         "ranks": "3", "pids": "8804", "nodes": "10.0.0.2",
                                         "missing": 1}
    assert strip_source(mismatch.fields) == {
        "comm": "9e6f2a1c3b5d7f80", "size": 4, "state": "MISMATCH", "ranks": "2", "pids": "8803",
        "nodes": "10.0.0.2", "ops": "AllReduce", "majority_count": 1045, "op_counts": "2:1044"}
