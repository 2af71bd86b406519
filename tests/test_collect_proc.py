"""Process-state sampling on real processes, and the ``proc`` bundle file kind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from procs.procutil import family_args, kill_groups, started

from hangscope.bundle import BundleWriter, load_bundle
from hangscope.collect.procstate import (
    from_json,
    load_proc_file,
    sample_many,
    sample_process,
    to_json,
)
from hangscope.errors import BadInputError
from hangscope.model import JobEvidence, ProcessState
from hangscope.sources.registry import FILE_LOADERS


def poll_status(pid: int, want: str, timeout: float = 10.0,
                also: Callable[[ProcessState], bool] = lambda state: True) -> ProcessState:
    """Sample until the process is in state ``want`` (and ``also`` holds), or the deadline: on a
    busy machine one sample can catch it between states (status R, or wchan 0 while it is being
    woken)."""
    deadline = time.monotonic() + timeout
    while True:
        state = sample_process(pid)
        if (state.status == want and also(state)) or time.monotonic() > deadline:
            return state
        time.sleep(0.01)


class TestSample:
    def test_sleeping_process_with_children(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready, "fork", 2), ready) as proc:
            # just after writing its ready file it may still be running on a busy machine
            state = poll_status(proc.pid, "S", also=lambda state: bool(state.wchan))
            assert state.pid == proc.pid and state.status == "S"
            assert state.cpu_time_s is not None and state.cpu_time_s >= 0
            assert state.rss_bytes and state.rss_bytes > 1 << 20
            assert state.num_threads and state.num_threads >= 1
            assert state.wchan  # e.g. hrtimer_nanosleep / do_nanosleep
            assert sorted(state.children) == sorted(proc.ready["children"])
            assert abs(state.sampled_at - time.time()) < 5

    def test_busy_process_is_running_and_burns_cpu(self) -> None:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                start_new_session=True)
        try:
            first = poll_status(busy.pid, "R")
            assert first.status == "R"
            second = sample_process(busy.pid)
            deadline = time.monotonic() + 5
            while second.cpu_time_s == first.cpu_time_s and time.monotonic() < deadline:
                second = sample_process(busy.pid)
            assert (second.cpu_time_s or 0) > (first.cpu_time_s or 0)
        finally:
            kill_groups([busy.pid], busy)

    def test_voluntary_switches_count_the_main_threads_wake_ups_only(self) -> None:
        # GIVEN two processes whose busy helper thread never blocks: one whose main thread
        # sleeps 50 ms at a time, one whose main thread blocks for good in a read of a pipe
        helper = "import threading\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)]," \
            " daemon=True).start()\n"
        waking = subprocess.Popen([sys.executable, "-c", helper +
                                   "import time\nwhile True: time.sleep(0.05)"],
                                  start_new_session=True)
        read_end, write_end = os.pipe()
        blocked = subprocess.Popen([sys.executable, "-c", helper +
                                    f"import os\nos.read({read_end}, 1)"],
                                   start_new_session=True, pass_fds=(read_end,))
        try:
            time.sleep(1.0)  # both settled in their loop / read
            before = {p.pid: sample_process(p.pid) for p in (waking, blocked)}
            time.sleep(1.0)
            after = {p.pid: sample_process(p.pid) for p in (waking, blocked)}
            woke = {pid: (after[pid].voluntary_switches or 0) -
                    (before[pid].voluntary_switches or 0) for pid in before}
            # THEN the sleeper's main thread woke about 20 times; the reader's not once, though
            # its other thread runs all the while (/proc/PID/status is the main thread's own)
            assert before[waking.pid].voluntary_switches is not None
            assert woke[waking.pid] >= 5, woke
            assert woke[blocked.pid] == 0, woke
        finally:
            os.close(read_end)
            os.close(write_end)
            kill_groups([waking.pid], waking)
            kill_groups([blocked.pid], blocked)

    def test_stopped_process(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready), ready) as proc:
            os.kill(proc.pid, signal.SIGSTOP)
            assert poll_status(proc.pid, "T").status == "T"
            os.kill(proc.pid, signal.SIGCONT)

    def test_zombie_carries_its_exit_signal(self) -> None:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 start_new_session=True)
        try:
            os.kill(child.pid, signal.SIGKILL)
            state = poll_status(child.pid, "Z")  # we are its parent and have not reaped it
            assert (state.status, state.exit_signal, state.exit_code) == ("Z", 9, None)
        finally:
            kill_groups([child.pid], child)

    def test_gone_process_is_a_state_not_an_error(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready), ready) as proc:
            pass
        state = sample_process(proc.pid)
        assert state.status == "gone" and state.cpu_time_s is None

    def test_sample_many(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready, "fork", 1), ready) as proc:
            worker = proc.ready["children"][0]
            poll_status(worker, "S")  # a child just forked may still be running
            states = sample_many([proc.pid, worker, proc.pid])
            deadline = time.monotonic() + 10
            while states[worker].status != "S" and time.monotonic() < deadline:
                states = sample_many([proc.pid, worker, proc.pid])
            assert list(states) == [proc.pid, worker]
            assert states[proc.pid].children == (worker,)
            assert states[worker].status == "S"


def make_state(pid: int, at: float, status: str = "S") -> ProcessState:
    return ProcessState(pid=pid, sampled_at=at, status=status, cpu_time_s=1.5,  # type: ignore[arg-type]
                        rss_bytes=4096, num_threads=3, wchan="futex_wait_queue",
                        children=(11, 12), voluntary_switches=int(at * 100))


class TestProcFile:
    def test_round_trip(self) -> None:
        states = [make_state(10, 1.0), make_state(10, 2.0, "gone")]
        assert from_json(to_json(10, states, worker_of=3), "x.json") == (10, 3, states)

    def test_a_process_gone_before_the_look_keeps_what_told_it(self) -> None:
        told = "pid 77, which carries rank 2's identity (RANK=2), was handed to pid 1"
        gone = [ProcessState(pid=0, sampled_at=5.0, status="gone", told_by=told)]
        assert from_json(to_json(0, gone), "x.json") == (0, None, gone)
        # (a hostile file's tale is cut, not trusted to be short)
        long = to_json(0, [ProcessState(0, 5.0, "gone", told_by="x" * 5000)])
        assert len(from_json(long, "x.json")[2][0].told_by or "") == 500

    @pytest.mark.parametrize("data,error", [
        (b"{", "not JSON"),
        (b"[]", "no 'states' list"),
        (b'{"pid": "1", "states": []}', "'pid' is not an integer"),
        (b'{"pid": 1, "states": [{"pid": 1, "sampled_at": 1, "status": "Q"}]}',
         "states[0]: unknown status 'Q'"),
        (b'{"pid": 1, "states": [{"pid": 1, "status": "S"}]}',
         "states[0]: missing field 'sampled_at'"),
    ], ids=["garbage", "list", "pid-type", "status", "no-time"])
    def test_bad_input_names_the_file(self, data: bytes, error: str) -> None:
        with pytest.raises(BadInputError) as info:
            from_json(data, "ranks/0/proc.json")
        assert error in str(info.value)
        assert str(info.value).startswith("ranks/0/proc.json: ")

    def test_loader_is_registered_and_fills_rank_and_workers(self, tmp_path: Path) -> None:
        assert FILE_LOADERS["proc"] is load_proc_file
        writer = BundleWriter(str(tmp_path / "bundle"))
        writer.add_file(2, "proc", "proc-100.json", to_json(100, [make_state(100, 2.0),
                                                                   make_state(100, 1.0)]))
        writer.add_file(2, "proc", "proc-101.json", to_json(101, [make_state(101, 1.0)], 2))
        writer.add_file(2, "proc", "proc-bad.json", b"not json")
        writer.close()
        evidence, problems = JobEvidence(), []
        load_bundle(str(tmp_path / "bundle"), evidence, problems)
        rank = evidence.rank(2)
        assert rank.pid == 100 and [s.sampled_at for s in rank.proc] == [1.0, 2.0]
        assert rank.worker_pids == [101] and len(rank.worker_proc[101]) == 1
        assert len(problems) == 1 and "proc-bad.json: not JSON" in problems[0]

    def test_to_json_is_plain_json(self) -> None:
        doc = json.loads(to_json(7, [make_state(7, 1.0)]))
        assert doc["pid"] == 7 and doc["worker_of"] is None
        assert doc["states"][0]["children"] == [11, 12]
