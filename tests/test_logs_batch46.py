"""Rules from blind batch 46's first look, on wordings other than the cases they were written for,
each with a log that must not trip it: torch 2.3's unset completed counter, every member of the
job timed out in one collective (the default group named on some lines only), NCCL's abort of
every communicator at a clean exit, a console log that starts with nvidia-smi's table, and a
traceback whose indentation was lost that starts in a multiprocessing queue's feeder thread."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, write_paste

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log

_write = write_paste


def _verdict(path: Path):  # type: ignore[no-untyped-def]
    return analyze(load_paths([str(path)], LoadOptions())[0])[0]


def _timeout(rank: int, seq: int = 1, numel: int = 1048576, done: str = "0") -> str:
    """torch 2.3's three lines of a rank whose watchdog gave up (the first names no group)."""
    return (f"[rank{rank}]:[E ProcessGroupNCCL.cpp:563] [Rank {rank}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, "
            f"NumelOut={numel}, Timeout(ms)=120000) ran for 120012 milliseconds before timing "
            "out.\n"
            f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rank}] Timeout at NCCL "
            f"work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {done}.\n"
            f"[rank{rank}]:[E ProcessGroupNCCL.cpp:583] [Rank {rank}] To avoid data "
            "inconsistency, we are taking the entire process down.\n")


def _inits(ranks: range) -> str:
    return "".join(f"node{r // 2}:{2000 + r}:{2100 + r} [{r % 2}] NCCL INFO comm 0x55c54d44a{r:03d} "
                   f"rank {r} nranks 4 cudaDev {r % 2} nvmlDev {r % 2} busId 7000 commId 0xd1f1 "
                   "- Init COMPLETE\n" for r in ranks)


def test_a_completed_counter_past_the_last_enqueued_work_is_not_read(tmp_path: Path) -> None:
    # GIVEN torch 2.3's status line before any work completed: its counter printed unset
    path = _write(tmp_path / "a", _timeout(0, done="1225212205848461568"))
    status = [e for e in scan_log(str(path)) if e.kind == "nccl_work_status"]
    # THEN the line says what was enqueued and nothing about what completed
    assert status and status[0].fields["last_enqueued"] == 1
    assert "last_completed" not in status[0].fields
    # AND a counter at or below the enqueued one is read as written
    path = _write(tmp_path / "b", _timeout(0, seq=41, done="40"))
    status = [e for e in scan_log(str(path)) if e.kind == "nccl_work_status"]
    assert status[0].fields["last_completed"] == 40


def test_every_rank_of_a_stated_world_in_its_first_collective_is_a_stall(tmp_path: Path) -> None:
    # GIVEN NCCL's word that the communicator has four ranks and all four timed out in ALLREDUCE
    # #1, the garbage counter on two of them (once read as a rank that completed past its peers)
    text = _inits(range(4))
    text += "".join(_timeout(r, done="1081146416430583048" if r % 2 else "0") for r in range(4))
    verdict = _verdict(_write(tmp_path / "a", text))
    # THEN no rank is missing: the collective itself stalled
    assert kind_and_culprits(verdict) == ("network_fault", [])
    assert "no rank is missing" in verdict.findings[0].summary
    # AND with rank 3 absent from the timeouts, rank 3 is the one waited for
    text = _inits(range(4)) + "".join(_timeout(r) for r in range(3))
    assert kind_and_culprits(_verdict(_write(tmp_path / "b", text)))[0] == "missing_rank"


_NCCL_END = ("node{node}:{pid}:{tid} [{dev}] NCCL INFO comm 0x55c54d44a{r:03d} rank {r} nranks 4 "
             "cudaDev {dev} busId 7000 - {how} COMPLETE\n")


def _comm_lines(how: str, ranks: range = range(4)) -> str:
    return "".join(
        _inits(range(r, r + 1))
        + f"[{r}] Python: Elapsed time in each iter for all_reduce : 0.00010)\n"
        + _NCCL_END.format(node=r // 2, pid=2000 + r, tid=2200 + r, dev=r % 2, r=r, how=how)
        for r in ranks)


def test_every_member_aborting_its_communicator_with_no_failure_is_an_end(tmp_path: Path) -> None:
    # GIVEN four ranks that set up, ran, and aborted their communicator at exit (torch's process
    # group does so when the program never destroyed it), nothing failing anywhere
    verdict = _verdict(_write(tmp_path / "a", _comm_lines("Abort")))
    # THEN the run ended: healthy
    assert verdict.status.value == "healthy", [f.summary for f in verdict.findings]
    # AND with one rank's watchdog timeout before the aborts, the aborts are its end, not the run's
    failed = _timeout(2, seq=7) + _comm_lines("Abort")
    assert _verdict(_write(tmp_path / "b", failed)).status.value != "healthy"
    # AND three of four aborting is no whole communicator's end
    assert _verdict(_write(tmp_path / "c", _comm_lines("Abort", range(3)))).status.value \
        != "healthy"


_SMI = """Sun Dec 29 17:58:42 2024
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.127.05             Driver Version: 550.127.05     CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA A10G                    On  |   00000000:00:1B.0 Off |                    0 |
|  0%   25C    P8             16W /  300W |       1MiB /  23028MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""


def test_a_console_log_that_starts_with_nvidia_smis_table_is_read_as_a_log(
        tmp_path: Path) -> None:
    # GIVEN a job's console log: nvidia-smi's table first (the job script ran it), then training
    # and a watchdog timeout
    text = "GPU available: True (cuda), used: True\n" + _SMI + \
        "Epoch 0:  15%| | 189/1252 [03:11<17:55,  0.99it/s]\n" + \
        "HPU available: False, using: 0 HPUs\n" + _timeout(1, seq=3120)
    verdict = _verdict(_write(tmp_path / "a", text))
    # THEN its lines are read (the timeout is seen), and the table's idle GPU is no GPU state
    assert verdict.findings, "the log's lines were not read"
    evidence, _ = load_paths([str(tmp_path / "a" / "paste.log")], LoadOptions())
    assert not evidence.gpus
    # AND a table of eight GPUs and their processes (more than a sniff's head) read first
    rows = _SMI.split("|=====")[1].split("\n", 1)[1]
    big = _SMI + rows * 7 + "".join(
        f"|    {g}   N/A  N/A   {4000 + g}      C   python{' ' * 60}18304MiB |\n"
        for g in range(8)) * 3
    assert len(big.encode()) > 4096
    path = _write(tmp_path / "c", big + "Epoch 0:  15%| | 189/1252 [03:11<17:55]\n"
                  + "HPU available: False, using: 0 HPUs\n" + _timeout(1, seq=3120))
    assert _verdict(path).findings, "a log under a long table was not read"
    # AND nvidia-smi's output alone, a prompt above it, is still read as GPU state
    alone = _write(tmp_path / "b", "$ nvidia-smi\n" + _SMI, name="nvidia-smi.txt")
    evidence, _ = load_paths([str(alone)], LoadOptions())
    assert len(evidence.gpus) == 1


_FEEDER = """Epoch 9:   0%|          | 0/1252 [00:00<?, ?it/s, v_num=ovtl]Traceback (most recent call last):
File "/opt/conda/lib/python3.11/multiprocessing/queues.py", line 244, in _feed
obj = _ForkingPickler.dumps(obj)
^^^^^^^^^^^^^^^^^^^^^^^^^^
File "/opt/conda/lib/python3.11/multiprocessing/reduction.py", line 51, in dumps
cls(buf, protocol).dump(obj)
File "/opt/conda/lib/python3.11/tempfile.py", line 385, in mkdtemp
_os.mkdir(file, 0o700)
OSError: [Errno 28] No space left on device: '/tmp/pymp-m_olac7h'
"""


def test_a_flush_left_traceback_from_a_queues_feeder_is_a_lost_batch(tmp_path: Path) -> None:
    # GIVEN a traceback whose indentation a README lost, glued to a bar's last drawing, starting
    # in a multiprocessing queue's feeder thread (a DataLoader worker's batch it could not send)
    path = _write(tmp_path / "a", _FEEDER + _timeout(2, seq=5) + _timeout(3, seq=5))
    blocks = [e for e in scan_log(str(path)) if e.kind == "traceback"]
    # THEN it is one traceback of eleven lines' frames, marked as the feeder's
    assert [(e.fields["exc_type"], e.fields["frames"], e.fields.get("queue_feeder"))
            for e in blocks] == [("OSError", 3, 1)]
    assert kind_and_culprits(_verdict(path))[0] == "dataloader_stall"
    # AND the same exception raised in the main thread's own frames is no feeder's
    main = _FEEDER.replace("multiprocessing/queues.py\", line 244, in _feed",
                           "train.py\", line 88, in save_checkpoint")
    blocks = [e for e in scan_log(str(_write(tmp_path / "b", main))) if e.kind == "traceback"]
    assert blocks and "queue_feeder" not in blocks[0].fields
    # AND a flush-left line after an indented traceback's exception is not read as its frame
    indented = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                "    main()\nValueError: bad\nFile \"x.py\", line 1, in f\n")
    blocks = [e for e in scan_log(str(_write(tmp_path / "c", indented)))
              if e.kind == "traceback"]
    assert [(e.fields["exc_type"], e.fields["frames"]) for e in blocks] == [("ValueError", 1)]
