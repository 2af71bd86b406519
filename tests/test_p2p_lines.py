"""Rule p2p-one-sided (analysis/detectors/p2p_lines.py) on NCCL_DEBUG_SUBSYS=COLL point-to-point
lines in NCCL's enqueue.cc format ("%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d
op %d root %d comm %p [nranks=%d] stream %p"), with a full host:pid:tid head; the numbers are made
up, not the corpus's."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import root_of


def _coll(op: str, count: int, peer: int, comm: str, stream: str = "0x55aa00", dev: int = 2,
          seq: int = 7) -> str:
    return (f"trainer-5:30211:30399 [{dev}] NCCL INFO {op}: opCount {seq:x} sendbuff 0x7f10 "
            f"recvbuff 0x7f20 count {count} datatype 7 op 0 root {peer} comm {comm} [nranks=2] "
            f"stream {stream}\n")


def _root(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    return root_of(tmp_path, text)


def test_receives_only_on_one_comm_and_sends_on_another(tmp_path: Path) -> None:
    text = (_coll("Recv", 4096, 1, "0xaa01", "0x51", seq=10) + _coll("Recv", 4096, 1, "0xaa01",
                                                                     "0x51", seq=11)
            + _coll("Send", 4096, 0, "0xbb02", "0x52", seq=3))
    root = _root(tmp_path, text)
    assert (root.kind.value, root.culprit_ranks) == ("p2p_deadlock", [])
    assert root.measures["rule"] == "p2p-one-sided" and root.confidence == 0.5


def test_both_directions_on_one_comm_are_not_read(tmp_path: Path) -> None:
    # a pipeline stage sends activations and receives gradients on one communicator
    text = "".join(_coll("Send", 8192, 1, "0xaa01", seq=s) + _coll("Recv", 8192, 1, "0xaa01",
                                                                   seq=s + 1)
                   for s in range(0, 8, 2))
    root = _root(tmp_path, text)
    assert root is None or root.measures.get("rule") != "p2p-one-sided"


def test_a_single_send_is_not_read(tmp_path: Path) -> None:
    root = _root(tmp_path, _coll("Send", 8192, 1, "0xaa01"))
    assert root is None or root.measures.get("rule") != "p2p-one-sided"


def test_a_collective_after_the_sends_is_progress(tmp_path: Path) -> None:
    text = (_coll("Send", 8192, 1, "0xaa01", seq=1) + _coll("Send", 8192, 1, "0xaa01", seq=2)
            + _coll("AllReduce", 1024, 0, "0xcc03", seq=9))
    root = _root(tmp_path, text)
    assert root is None or root.measures.get("rule") != "p2p-one-sided"


def test_p2p_counts_are_not_an_argument_skew(tmp_path: Path) -> None:
    # three ranks' sends at one opCount with other counts: per-peer sizes differ by design
    text = "".join(_coll("Send", 1000 * (r + 1), (r + 1) % 3, f"0xaa0{r}", dev=r, seq=5)
                   + _coll("Recv", 1000 * (r + 1), (r + 2) % 3, f"0xaa0{(r + 2) % 3}", dev=r,
                           seq=5) for r in range(3))
    root = _root(tmp_path, text)
    assert root is None or root.measures.get("rule") != "odd-arguments-at-same-op"


# torch.distributed.pipelining _Action reprs ("{stage}{type}{microbatch}", schedules.py), printed
# per rank under torch's own "[rankN]:" prefix
def test_two_ranks_that_both_send_first_deadlock(tmp_path: Path) -> None:
    text = ("[rank2]: actions: [3F0, 3SEND_F0, 3F1, 3SEND_F1, 7RECV_F0, 7F0]\n"
            "[rank3]: actions: [4RECV_F0, 4F0, 4RECV_F1, 4F1, 4SEND_F1, 4RECV_F2]\n")
    # stage 3 (rank 2) sends to stage 4 (rank 3) and then receives F for stage 7 from stage 6;
    # only two ranks are listed, so stage 6 is rank 6 mod 2 = 0 here: not rank 3, no cycle
    root = _root(tmp_path, text)
    assert root is None or root.measures.get("rule") != "pp-send-first"
    text = ("[rank0]: [0F0, 0SEND_F0, 0F1, 0SEND_F1, 2RECV_F0, 2F0]\n"
            "[rank1]: [1RECV_F0, 1F0, 1RECV_F1, 1F1, 1SEND_F0, 1RECV_F1]\n")
    root = _root(tmp_path, text)
    assert (root.kind.value, root.culprit_ranks, root.measures["rule"]) == \
        ("p2p_deadlock", [0, 1], "pp-send-first")


def test_a_whole_healthy_1f1b_schedule_is_not_a_deadlock(tmp_path: Path) -> None:
    text = ("[rank0]: [0F0, 0SEND_F0, 0F1, 0SEND_F1, 0RECV_B0, 0B0, 0RECV_B1, 0B1]\n"
            "[rank1]: [1RECV_F0, 1F0, 1B0, 1SEND_B0, 1RECV_F1, 1F1, 1B1, 1SEND_B1]\n")
    root = _root(tmp_path, text)
    assert root is None or root.measures.get("rule") != "pp-send-first"
