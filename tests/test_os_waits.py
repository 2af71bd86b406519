"""Waits through the operating system: a rank blocked on a file lock another rank holds, read from
/proc/locks, named with the resource and the holder, live and from the bundle afterwards."""

from __future__ import annotations

import json
import shutil
import time

import psutil
import pytest
from live_jobs import attach_quietly, bundle_verdict_moved_away, copy_of_jobs

from hangscope.analysis.os_waits import os_edges
from hangscope.collect import oswaits
from hangscope.errors import ExitCode
from hangscope.model import JobEvidence
from hangscope.sources.oswaits import load_oswaits


def _snapshot(tmp_path, locks, processes):
    path = tmp_path / "oswaits.json"
    path.write_text(json.dumps({"schema": "hangscope.oswaits/1", "taken_at": 1.0,
                                "locks": locks, "processes": processes}))
    evidence = JobEvidence()
    problems: list[str] = []
    load_oswaits(str(path), None, evidence, problems)
    assert not problems
    return evidence


def _proc(pid, rank=None, worker_of=None, syscall="", wchan=None, fds=None):
    return {"pid": pid, "rank": rank, "worker_of": worker_of, "cmdline": f"python job{pid}.py",
            "syscall": syscall, "wchan": wchan, "ppid": 1, "fds": fds or {}}


def test_a_blocked_lock_request_points_at_the_holder_and_names_the_file(tmp_path) -> None:
    lock = {"kind": "FLOCK", "mode": "WRITE", "dev_ino": "fe:00:77"}
    evidence = _snapshot(tmp_path, [
        {**lock, "pid": 11, "blocked": False, "line": "1: FLOCK ADVISORY WRITE 11 fe:00:77 0 EOF"},
        {**lock, "pid": 10, "blocked": True, "line": "1: -> FLOCK ADVISORY WRITE 10 fe:00:77 0 EOF"},
    ], {"10": _proc(10, rank=0, fds={"3": {"target": "/data/results.txt", "flags": 0o2001,
                                           "dev_ino": "fe:00:77"}}),
        "11": _proc(11, rank=1)})
    (edge,) = os_edges(evidence)
    assert (edge.waiter, edge.holder) == (10, 11)
    assert edge.resource == "file lock on /data/results.txt (FLOCK WRITE)"
    assert edge.who(11) == "rank 1 (pid 11)"


def test_a_reader_blocked_on_a_pipe_waits_for_its_writer_not_for_itself(tmp_path) -> None:
    # GIVEN rank 0 blocked in read(5) on pipe:[9], whose write end a helper holds (and rank 0
    # holds a read end only); the helper blocked reading pipe:[8], written by rank 0
    evidence = _snapshot(tmp_path, [], {
        "10": _proc(10, rank=0, syscall="0 0x5 0x7f 0x1000", wchan="pipe_read",
                    fds={"5": {"target": "pipe:[9]", "flags": 0o2000000},
                         "6": {"target": "pipe:[8]", "flags": 0o1}}),
        "20": _proc(20, worker_of=0, syscall="0 0x0 0x7f 0x1000", wchan="pipe_read",
                    fds={"0": {"target": "pipe:[8]", "flags": 0o0},
                         "1": {"target": "pipe:[9]", "flags": 0o1}})})
    edges = sorted((e.waiter, e.holder, e.resource) for e in os_edges(evidence))
    # THEN each reader points at the other end's writer
    assert edges == [(10, 20, "pipe:[9]"), (20, 10, "pipe:[8]")]


def test_a_reading_taken_while_py_spy_holds_the_process_stopped_is_read_again(tmp_path) -> None:
    # GIVEN a /proc where rank 0's first reading is what a process held by a blocking py-spy dump
    # shows (``running``, wchan ptrace_stop), and every later one its read of a pipe
    proc = tmp_path / "proc"
    (proc / "10" / "fd").mkdir(parents=True)
    (proc / "10" / "fd" / "5").symlink_to("pipe:[9]")
    (proc / "10" / "fdinfo").mkdir()
    (proc / "10" / "fdinfo" / "5").write_text("pos:\t0\nflags:\t02000000\n")
    (proc / "10" / "status").write_text("PPid:\t1\n")
    (proc / "10" / "syscall").write_text("running\n")
    (proc / "10" / "wchan").write_text("ptrace_stop")
    (proc / "locks").write_text("")
    resumed = iter([None])

    def resume_after_the_first_read(path: str, limit: int = 4096) -> str | None:
        if path.endswith("/locks") and next(resumed, "done") is None:
            (proc / "10" / "syscall").write_text("0 0x5 0x7f 0x1000 0x0 0x0 0x0 0x7ffd 0x7f\n")
            (proc / "10" / "wchan").write_text("anon_pipe_read")
        return read(path, limit)

    read = oswaits._read
    oswaits._read = resume_after_the_first_read
    try:
        # WHEN the snapshot is taken
        doc = json.loads(oswaits.snapshot({10: 0}, {}, proc_root=str(proc)))
    finally:
        oswaits._read = read
    # THEN it keeps the reading of the process's own wait
    taken = doc["processes"]["10"]
    assert (taken["syscall"].split()[:2], taken["wchan"]) == (["0", "0x5"], "anon_pipe_read")


def test_a_process_that_runs_stays_running(tmp_path) -> None:
    proc = tmp_path / "proc"
    (proc / "10" / "fd").mkdir(parents=True)
    (proc / "10" / "syscall").write_text("running\n")
    (proc / "10" / "wchan").write_text("0")
    (proc / "locks").write_text("")
    taken = json.loads(oswaits.snapshot({10: 0}, {}, proc_root=str(proc)))["processes"]["10"]
    assert (taken["syscall"], taken["wchan"]) == ("running", None)


def test_a_snapshot_of_another_format_is_one_problem(tmp_path) -> None:
    path = tmp_path / "oswaits.json"
    path.write_text("[]")
    problems: list[str] = []
    load_oswaits(str(path), None, JobEvidence(), problems)
    assert problems == [f"{path}: not a hangscope.oswaits/1 file"]


torch = pytest.importorskip("torch")
from fixtures.jobrunner import JOBS_DIR, SCENARIOS, running_job  # noqa: E402


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
def test_ranks_blocked_on_a_file_lock_name_the_rank_holding_it(tmp_path) -> None:
    # GIVEN the eval_summary_lock job, run from its own copy of the scripts: rank 1 holds the
    # results file's flock inside a barrier, ranks 0, 2, 3 wait for the flock
    jobs = copy_of_jobs(tmp_path, JOBS_DIR)
    truth = SCENARIOS["eval_summary_lock"]
    out = tmp_path / "out"
    results = tmp_path / "results"
    with running_job("eval_summary_lock", ready_dir=tmp_path / "ready", jobs_dir=jobs,
                     env={"RESULTS_DIR": str(results)}) as job:
        # a rank past its ready point may not have called flock yet on a loaded machine: the
        # hang is whole once the kernel lists the three waiters
        _wait_for_blocked_flocks(len(truth.waiting_ranks), deadline_s=60.0)
        time.sleep(1.0)
        # WHEN attached live with default options
        code, verdict = attach_quietly(job.pgid, out)
    live = verdict["findings"][0]
    # THEN the holder is the culprit, and the finding names the file and the holder
    assert code == ExitCode.HANG_FOUND
    assert (live["kind"], live["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        live["summary"]
    assert live["waiting_ranks"] == truth.waiting_ranks, (live["summary"],
                                                          verdict["rank_classes"])
    assert f"file lock on {results / 'results.txt'}" in live["summary"]
    assert live["measures"]["holder"].startswith("rank 1 (pid ")
    assert "barrier" in live["summary"]
    # AND from the bundle, after the job is gone and its scripts moved away, the same
    root = bundle_verdict_moved_away(out, jobs).findings[0]
    assert (root.kind.value, root.culprit_ranks, root.summary) == (
        live["kind"], live["culprit_ranks"], live["summary"])


def _wait_for_blocked_flocks(count: int, deadline_s: float) -> None:
    """Until /proc/locks lists ``count`` blocked flock waiters (its ``->`` lines), or the
    deadline: the test then attaches to what is there, and its assertions say what was missed."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with open("/proc/locks") as locks:
            blocked = sum(1 for line in locks if "->" in line and "FLOCK" in line)
        if blocked >= count:
            return
        time.sleep(0.1)


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
def test_a_rank_reading_its_helpers_pipe_names_the_helper_and_the_cycle(tmp_path) -> None:
    # GIVEN the tokenizer_pipe job: rank 2 blocks reading its helper's stdout while the helper
    # blocks reading the stdin rank 2 never flushed; the other ranks' helpers idle on their stdin
    jobs = copy_of_jobs(tmp_path, JOBS_DIR)
    truth = SCENARIOS["tokenizer_pipe"]
    out = tmp_path / "out"
    with running_job("tokenizer_pipe", ready_dir=tmp_path / "ready", jobs_dir=jobs) as job:
        time.sleep(1.0)
        helper = next(c.pid for c in psutil.Process(job.rank_pids[2]).children())
        # WHEN attached live with default options
        code, verdict = attach_quietly(job.pgid, out)
    live = verdict["findings"][0]
    # THEN rank 2, with its helper as the holder of the pipe it reads, and nothing about the
    # helpers that only wait for their next request
    assert code == ExitCode.HANG_FOUND
    assert (live["kind"], live["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        live["summary"]
    assert live["waiting_ranks"] == truth.waiting_ranks
    assert live["measures"]["holder"].startswith(f"pid {helper}, a child of rank 2")
    assert live["measures"]["resource"].startswith("pipe:[")
    assert "a cycle" in live["summary"]
    assert [f["culprit_ranks"] for f in verdict["findings"] if f["kind"] == truth.kind] == [[2]]
    # AND the bundle alone, with the scripts moved away, says the same
    root = bundle_verdict_moved_away(out, jobs).findings[0]
    assert (root.kind.value, root.culprit_ranks, root.measures) == (
        live["kind"], live["culprit_ranks"], live["measures"])
