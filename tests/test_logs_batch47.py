"""Rules from blind batch 47's first look, on wordings other than the case they were written for,
each with a log that must not trip it: NCCL's last error as torch's exception quotes it (``Last
error:`` and, on the next line, the WARN's message without its head)."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, write_paste

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log

_write = write_paste


def _raised(rank: int, last: str) -> str:
    """torch's NCCL exception on one rank, quoting NCCL's last error on the line after."""
    return (f"[rank{rank}]: torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, internal error - please "
            "report this issue to the NCCL developers, NCCL version 2.20.5\n"
            f"[rank{rank}]: ncclInternalError: Internal check failed.\n"
            f"[rank{rank}]: Last error:\n"
            f"[rank{rank}]: {last}\n")


def test_nccls_last_error_quoted_alone_is_its_transport_failure(tmp_path: Path) -> None:
    # GIVEN a paste that kept only the end of torch's exception (pdsh's head on each line): NCCL's
    # last error, a socket whose peer refused the connection
    text = ("node2: Last error:\n"
            "node2: Net : Call to recv from 10.1.1.2<56843> failed : Connection refused\n"
            "node1: node1:15874:17284 [4] NCCL INFO Channel 00 : 4[61000] -> 3[42000] via SHM\n")
    path = _write(tmp_path / "a", text)
    events = [e for e in scan_log(str(path)) if e.kind == "nccl_transport_error"]
    # THEN it is a transport error naming the peer, at the line that says it
    assert [(e.fields.get("peer"), e.fields.get("last_error"), e.line_no) for e in events] == \
        [("10.1.1.2", 1, 2)]
    verdict = analyze(load_paths([str(path)], LoadOptions())[0])[0]
    assert kind_and_culprits(verdict) == ("network_fault", [])
    # AND the same error on the "Last error:" line itself, and a Cuda failure, are read alike
    same_line = _write(tmp_path / "b", "Last error: socketPollConnect: connect returned "
                                       "Connection refused, exceeded error retry count (35)\n")
    assert [e.kind for e in scan_log(str(same_line)) if e.fields.get("last_error")] == \
        ["nccl_transport_error"]
    cuda = _write(tmp_path / "c", "[rank1]: Last error:\n[rank1]: Cuda failure 'invalid "
                                  "argument'\n")
    assert [(e.kind, e.rank) for e in scan_log(str(cuda)) if e.fields.get("last_error")] == \
        [("cuda_error", 1)]
    # AND the whole exception is read once, as torch's NCCL error quoting it
    whole = _write(tmp_path / "d", _raised(3, "Net : Call to recv from 10.1.1.2<56843> failed "
                                              ": Connection refused"))
    assert [e.kind for e in scan_log(str(whole)) if e.kind.startswith(("nccl_", "cuda"))] == \
        ["nccl_error"]


def test_a_last_error_in_no_nccl_wording_is_not_a_transport_failure(tmp_path: Path) -> None:
    # a program's own "Last error:" (a retry loop's note), and NCCL's words without its heads
    # that only mention a timeout, are not read as a link failing
    path = _write(tmp_path / "a", "retrying upload (3/5). Last error:\n"
                                  "HTTP 503 timeout from the object store\n")
    assert not [e for e in scan_log(str(path)) if e.fields.get("last_error")]
    headed = _write(tmp_path / "b", "Last error:\nnode1:15874:17284 [4] NCCL WARN NET/Socket : "
                                    "Connection closed by remote peer 10.0.0.3<43110>\n")
    # (a WARN line with its head is read as that line, once)
    events = [e for e in scan_log(str(headed)) if e.kind == "nccl_transport_error"]
    assert len(events) == 1 and not events[0].fields.get("last_error")
