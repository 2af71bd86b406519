"""Rules from blind batch 38's first look, each on wordings other than the case it was written
for, and each with a log that must not trip it: a launcher's record of a rank's end that came
after a peer had already waited out its timeout; an exit status of 134 (SIGABRT, the watchdog's
abort) on the rank rule rank0-silent would name; the size of a communicator NCCL set up as a
floor on the job's world size."""

from __future__ import annotations

import os
import time
from pathlib import Path

from _logs_helpers import kind_and_culprits

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

# glog lines carry no year: the file's mtime gives it (2026 here, as the launcher's table says)
_MTIME = time.mktime((2026, 11, 24, 12, 0, 0, 0, 0, -1))


def _load(folder: Path, text: str):  # type: ignore[no-untyped-def]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.log"
    path.write_text(text)
    os.utime(path, (_MTIME, _MTIME))
    return load_paths([str(folder)], LoadOptions())[0]


def _verdict(folder: Path, text: str):  # type: ignore[no-untyped-def]
    return analyze(_load(folder, text))[0]


# --- ended-after-the-timeouts -------------------------------------------------------------------

_TIMED_OUT = (
    "[rank1]:[E1124 10:00:01.100000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLGATHER, NumelIn=4096, "
    "NumelOut=16384, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"
    "[rank1]:[E1124 10:00:01.100500000 ProcessGroupNCCL.cpp:2063] [Rank 1] To avoid data "
    "inconsistency, we are taking the entire process down.\n")


def _table(rank2_time: str) -> str:
    rows = [(0, "-15", "SIGTERM", "10:00:06"), (1, "-6", "SIGABRT", "10:00:06"),
            (3, "-6", "SIGABRT", "10:00:06")]
    text = ("W1124 10:00:05.000000 5500 torch/distributed/elastic/multiprocessing/api.py:897] "
            "Sending process 5600 closing signal SIGTERM\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
            "============================================================\n"
            "train.py FAILED\n"
            "------------------------------------------------------------\n"
            "Failures:\n")
    for index, (rank, code, name, at) in enumerate(rows, start=1):
        text += (f"[{index}]:\n  time      : 2026-11-24_{at}\n  host      : node7\n"
                 f"  rank      : {rank} (local_rank: {rank})\n"
                 f"  exitcode  : {code} (pid: {5600 + rank})\n  error_file: <N/A>\n"
                 f"  traceback : Signal {code[1:]} ({name}) received by PID {5600 + rank}\n")
    return text + (
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n"
        f"  time      : 2026-11-24_{rank2_time}\n  host      : node7\n"
        "  rank      : 2 (local_rank: 2)\n  exitcode  : -6 (pid: 5602)\n  error_file: <N/A>\n"
        "  traceback : Signal 6 (SIGABRT) received by PID 5602\n"
        "============================================================\n")


def test_an_abort_after_a_peers_timeout_is_the_teardown_not_the_cause(tmp_path: Path) -> None:
    # rank 2 is the launcher's "root cause" only as the first process it saw end; it ended
    # minutes after rank 1 had waited out ten minutes: rank 0 (alive, only stopped) is awaited
    verdict = _verdict(tmp_path, _TIMED_OUT + _table("10:00:04"))
    assert kind_and_culprits(verdict) == ("missing_rank", [0]), verdict.root.summary


def test_an_abort_before_the_peers_timed_out_is_still_a_death(tmp_path: Path) -> None:
    # the same table with rank 2 ending nine minutes before rank 1 gave up: it died first
    # (the launcher's clock, unlike the watchdog's line, says when)
    verdict = _verdict(tmp_path, _TIMED_OUT + _table("09:51:00"))
    assert kind_and_culprits(verdict) == ("rank_died", [2]), verdict.root.summary


# --- exit status 134 and rule rank0-silent ------------------------------------------------------

_FIRST_COLLECTIVE = "".join(
    f"[rank{r}]:[E1124 10:02:00.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=262144, "
    "NumelOut=262144, Timeout(ms)=300000) ran for 300077 milliseconds before timing out.\n"
    for r in (1, 2, 3))


def test_rank0_aborted_with_134_is_no_rank_that_was_elsewhere(tmp_path: Path) -> None:
    # an MPI launcher's record: rank 0's process ended in SIGABRT (128 + 6), as torch's watchdog
    # ends a rank whose collective timed out: no sign that rank 0 was alive elsewhere
    text = _FIRST_COLLECTIVE + "gpu-a12: rank 0 exited with code 134\ngpu-a12: rank 3 died " \
        "from signal 15\n"
    verdict = _verdict(tmp_path, text)
    assert verdict.root is not None and verdict.root.culprit_ranks != [0], verdict.root.summary
    assert verdict.root.measures.get("rule") != "rank0-silent"
    assert verdict.root.measures.get("rule") != "broadcast-root-absent"
    # without that record, rank 0 is the broadcast's root that stayed away, as before
    quiet = _verdict(tmp_path / "quiet", _FIRST_COLLECTIVE)
    assert quiet.root is not None and quiet.root.measures.get("rule") == "broadcast-root-absent"
    assert kind_and_culprits(quiet) == ("missing_rank", [0])
    # and for an all-reduce, rule rank0-silent: there too the abort rules rank 0 out
    reduce = _FIRST_COLLECTIVE.replace("BROADCAST", "ALLREDUCE")
    quiet = _verdict(tmp_path / "quiet-reduce", reduce)
    assert quiet.root is not None and quiet.root.measures.get("rule") == "rank0-silent"
    aborted = _verdict(tmp_path / "aborted-reduce", reduce + "gpu-a12: rank 0 exited with code 134\n")
    assert aborted.root is not None and aborted.root.measures.get("rule") != "rank0-silent"


def test_exit_status_134_reads_as_an_abort_and_1_does_not(tmp_path: Path) -> None:
    from hangscope.sources.logs.cues import classify

    assert classify("node3: rank 5 exited with code 134").name == "abort"  # type: ignore[union-attr]
    assert classify("node3: rank 5 exited with code 1").name == "exit-nonzero"  # type: ignore[union-attr]


# --- a communicator's size ----------------------------------------------------------------------


def test_an_nccl_communicators_size_is_a_floor_on_the_world_size(tmp_path: Path) -> None:
    text = ("node4:88120:88301 [3] NCCL INFO comm 0x55d1c0a2f0e0 rank 11 nranks 16 cudaDev 3 "
            "nvmlDev 3 busId 4c000 commId 0x7d1e3f00aa12bc34 - Init COMPLETE\n" + _TIMED_OUT)
    evidence = _load(tmp_path, text)
    assert evidence.expected_world_size() == 16
    # a paste with no such line knows only the ranks it names
    assert _load(tmp_path / "bare", _TIMED_OUT).expected_world_size() == 2
