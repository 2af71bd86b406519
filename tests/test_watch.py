"""Unit tests of ``hangscope watch``'s cheap checks: the stall logic on built inputs, log tailing
and alarm lines, the stall cap read from the ranks' environment, and signal handling."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hangscope.cli import main
from hangscope.collect.nbsample import Sampler
from hangscope.discover import JobProcesses, RankProcess
from hangscope.watch import (
    Check,
    LogTail,
    StallTracker,
    Stopped,
    WatchOptions,
    _Watcher,
    cpu_seconds,
    effective_stall,
    scan_new,
    stop_on_signals,
)

STUCK = ((("wait", "threading.py", 320), ("next_batch", "train.py", 40)))
MOVED = ((("forward", "model.py", 12), ("train", "train.py", 55)))
NCCL_LINE = (b"[rank3]:[E501 12:30:09.871234567 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
             b"collective operation timeout: WorkNCCL(SeqNum=4512, OpType=_ALLGATHER_BASE, "
             b"NumelIn=65536000, NumelOut=524288000, Timeout(ms)=1800000) ran for 1800081 "
             b"milliseconds before timing out.\n")
GLOO_LINE = (b"[default0]:[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/"
             b"unbound_buffer.cc:81] Timed out waiting 30000ms for recv operation to complete\n")


def idle_checks(tracker: StallTracker, start: float, until: float, step: float = 1.0,
                cpu: float = 5.0) -> str | None:
    """Feed checks in which nothing moves; return the first reason to fire."""
    t = start
    while t <= until:
        reason = tracker.update(Check(t, {0: cpu, 1: cpu}, {0: STUCK, 1: STUCK}))
        if reason:
            return reason
        t += step
    return None


def test_stall_fires_after_stall_seconds_of_nothing() -> None:
    tracker = StallTracker(stall=10, cpu_share=0.02, start=100.0)
    assert idle_checks(tracker, 100.0, 109.0) is None
    reason = tracker.update(Check(110.0, {0: 5.0, 1: 5.0}, {0: STUCK, 1: STUCK}))
    assert reason is not None and reason.startswith("no progress for 10s")
    assert "stack" in reason and "2% of a core" in reason


def test_cpu_above_share_is_progress_and_below_is_not() -> None:
    tracker = StallTracker(stall=5, cpu_share=0.02, start=0.0)
    cpu = 1.0
    for t in range(0, 20):  # rank 1 burns 10% of a core: never a stall
        cpu += 0.1
        assert tracker.update(Check(float(t), {0: 1.0, 1: cpu})) is None
    assert tracker.last_seen == ["rank 1 used 10% of a core"]
    tracker = StallTracker(stall=5, cpu_share=0.02, start=0.0)
    cpu = 1.0
    fired = None
    for t in range(0, 20):  # 1% of a core, like a hung rank's helper threads: a stall
        cpu += 0.01
        fired = fired or (t if tracker.update(Check(float(t), {0: cpu})) else None)
    assert fired == 5


def test_stack_change_and_progress_line_reset_the_clock() -> None:
    tracker = StallTracker(stall=5, cpu_share=0.02, start=0.0)
    assert idle_checks(tracker, 0.0, 4.0) is None
    assert tracker.update(Check(4.5, {0: 5.0, 1: 5.0}, {0: STUCK, 1: MOVED})) is None
    assert tracker.last_seen == ["rank 1's main-thread stack changed"]
    assert idle_checks(tracker, 5.0, 9.0) is None  # 4.5 s since the change: not yet
    assert tracker.update(Check(9.2, {0: 5.0, 1: 5.0}, progress=["rank0.log:7"])) is None
    assert tracker.last_seen == ["progress line rank0.log:7"]
    assert idle_checks(tracker, 10.0, 13.0) is None
    assert idle_checks(tracker, 14.2, 14.2) is not None


def test_first_reading_of_a_rank_is_no_progress_by_itself() -> None:
    tracker = StallTracker(stall=3, cpu_share=0.02, start=0.0)
    # huge absolute CPU and a first stack: no earlier reading to compare with
    assert tracker.update(Check(0.0, {0: 1000.0}, {0: MOVED})) is None
    assert tracker.last_seen == []
    assert tracker.update(Check(3.0, {0: 1000.0}, {0: MOVED})) is not None


def test_scan_new_finds_alarms_with_the_files_line_and_progress(tmp_path: Path) -> None:
    path = str(tmp_path / "rank3.stderr.log")
    progress: list[str] = []
    data = b"[rank3] step 41 loss 0.5\nsome other line\n" + NCCL_LINE
    alarm = scan_new(path, data, 100, 3, progress)
    assert alarm is not None and alarm.startswith(f"{path}:103: ")
    assert progress == [f"{path}:101"]
    progress = []
    alarm = scan_new(path, b"hello\n" + GLOO_LINE, 0, 0, progress)
    assert alarm is not None and alarm.startswith(f"{path}:2: ") and progress == []
    assert scan_new(path, b"max_steps is 4 steps\nloading shard 3\n", 0, 0, progress) is None
    assert progress == []


def test_log_tail_reads_only_new_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "rank0.stdout.log"
    log.write_bytes(b"[rank0] step 1 loss 3\n[rank0] step 2 loss 2\n")
    tail = LogTail(str(log), 0, "rank0.stdout.log")
    tail.skip_to_end()
    seen: list[str] = []
    assert tail.poll(seen) is None and seen == []  # old lines are not news
    with log.open("ab") as handle:
        handle.write(b"[rank0] step 3 lo")  # half a line: wait for the rest
    assert tail.poll(seen) is None and seen == []
    with log.open("ab") as handle:
        handle.write(b"ss 1\n")
    assert tail.poll(seen) is None and seen == [f"{log}:3"]
    with log.open("ab") as handle:
        handle.write(GLOO_LINE)
    alarm = tail.poll([])
    assert alarm is not None and alarm.startswith(f"{log}:4: ")
    log.write_bytes(b"[rank0] step 1 loss 3\n")  # truncated (a restart): read from the start
    seen = []
    assert tail.poll(seen) is None and seen == [f"{log}:1"]


def rank(env: dict[str, str], number: int = 0) -> RankProcess:
    return RankProcess(pid=1000 + number, rank=number, local_rank=number, world_size=2,
                       local_world_size=2, group_rank=0, run_id=None, master_addr=None,
                       master_port=None, env=env, cmdline=["python", "train.py"], workers=[],
                       create_time=0.0)


def test_stall_capped_below_the_heartbeat_timeout_the_ranks_set() -> None:
    job = JobProcesses([], [rank({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "100"}), rank({}, 1)],
                       "test", "host")
    stall, notes = effective_stall(300, job)
    assert stall == 50 and "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=100" in notes[0]
    assert effective_stall(30, job) == (30, [])
    off = JobProcesses([], [rank({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "100",
                                  "TORCH_NCCL_ENABLE_MONITORING": "0"})], "test", "host")
    assert effective_stall(300, off) == (300, [])
    junk = JobProcesses([], [rank({"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "ten"})], "test", "host")
    assert effective_stall(300, junk) == (300, [])


def test_signals_raise_stopped_and_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(Stopped) as info, stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
    assert info.value.exit_code == 143
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_cpu_seconds_of_live_and_gone_processes() -> None:
    assert cpu_seconds(os.getpid()) is not None
    assert cpu_seconds(2**22 + 12345) is None


def test_watch_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--out", str(tmp_path / "o")]) == 2
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    assert main(["watch", "--pid", str(os.getpid()), "--out", str(busy)]) == 2
    assert f"{busy}: --out is not empty" in capsys.readouterr().err


def test_ranks_not_up_yet_are_waited_for_until_the_deadline(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from hangscope import watch
    from hangscope.errors import CollectError

    tries: list[float] = []
    found = object()

    def discover_later(options: watch.WatchOptions) -> object:
        tries.append(time.monotonic())
        if len(tries) < 3:
            raise CollectError("no rank found")
        return found

    monkeypatch.setattr(watch, "_discover", discover_later)
    options = watch.WatchOptions(match="train.py", stall=60, interval=0.1)
    assert watch._discover_waiting(options, time.monotonic() + 10) is found
    assert len(tries) == 3 and tries[2] - tries[0] >= 0.2
    # and gives up at the deadline with the discovery's own error
    tries.clear()
    monkeypatch.setattr(watch, "_discover", lambda options: (_ for _ in ()).throw(
        CollectError("no rank found")))
    started = time.monotonic()
    with pytest.raises(CollectError, match="no rank found"):
        watch._discover_waiting(options, started + 0.5)
    assert time.monotonic() - started < 1.0


def test_the_checks_keep_which_rank_outlived_which(tmp_path: Path) -> None:
    # GIVEN two "ranks" (plain sleeping processes): rank 1 is killed first, rank 0 a while later
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
             for _ in range(2)]
    try:
        job = JobProcesses([], [dataclasses.replace(rank({}, n), pid=p.pid)
                                for n, p in enumerate(procs)], "test", "host")
        watcher = _Watcher(job, WatchOptions(interval=0.2, stack_every=1000), 60.0)

        def kill_in_order() -> None:
            time.sleep(0.8)
            procs[1].kill()
            procs[1].wait()
            time.sleep(1.0)
            procs[0].kill()
            procs[0].wait()

        killer = threading.Thread(target=kill_in_order)
        killer.start()
        # WHEN watched until both are gone
        outcome, _ = watcher.loop(Sampler(), time.monotonic() + 30)
        killer.join()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    # THEN each rank has its last check alive and its first check gone, and rank 0 was seen
    # alive after rank 1 was first seen gone
    assert outcome == "exited"
    states = watcher.states()
    assert [s.status for s in states[0]] == ["unknown", "gone"] == [s.status for s in states[1]]
    assert states[0][0].sampled_at >= states[1][1].sampled_at
    assert states[1][0].cpu_time_s is not None and states[1][1].pid == procs[1].pid
