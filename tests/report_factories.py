"""Evidence factories for the report tests: small jobs built from ``hangscope.model`` objects.

``job(world, culprit)`` is a missing-rank hang: every rank but ``culprit`` waits in all_reduce
seq 10 of the default group, ``culprit`` finished seq 9 and sits elsewhere. Each rank has a
py-spy sample, process states, log lines and (rank 0) a DataLoader worker, so every part of the
report has something to show. ``hostile`` puts markup in every string a job controls.
"""

from __future__ import annotations

import os

from hangscope.model import (
    Frame,
    FrDump,
    FrEntry,
    JobEvidence,
    LogEvent,
    ProcessGroupInfo,
    ProcessState,
    StackSample,
    ThreadStack,
)
from hangscope.options import OutputOptions
from hangscope.pipeline import Result, analyze_evidence

HOSTILE = '</script><img src=x onerror=alert(1)>'
HOSTILE_ATTR = '"><img src=y onerror=alert(2)>'
SECRET_URL = "https://alice:hunter2secret@hub.example.com/v1"
T0 = 1_700_000_000_000_000_000
C10D = "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _frames(user: str, line: int) -> tuple[Frame, ...]:
    return (Frame("all_reduce", C10D, 3245), Frame(user, "/job/train.py", line),
            Frame("main", "/job/train.py", 300), Frame("<module>", "/job/train.py", 310))


def _entry(rank: int, seq: int, completed: bool, frames: tuple[Frame, ...],
           pg_desc: str = "default_pg") -> FrEntry:
    t = T0 + seq * 5_000_000 + rank * 1000
    return FrEntry(
        record_id=seq - 1, pg_name="0", pg_desc=pg_desc, collective_seq_id=seq, p2p_seq_id=0,
        op="all_reduce", backend="nccl", is_p2p=False,
        state="completed" if completed else "started", completed=completed,
        input_sizes=((4, 4),), input_dtypes=("Float",), output_sizes=((4, 4),),
        output_dtypes=("Float",), time_created_ns=t, time_started_ns=t + 1000,
        time_completed_ns=t + 900_000 if completed else None, frames=frames,
        thread_name="pt_main_thread")


def evidence(world: int = 4, culprit: int = 2, hostile: bool = False,
             samples: bool = True) -> JobEvidence:
    bad = f"{HOSTILE}{HOSTILE_ATTR}" if hostile else ""
    ev = JobEvidence(world_size=world, inputs=["synthetic"])
    wait_frames = _frames("train_step" + bad, 42)
    done_frames = _frames("log_metrics", 77)
    pg_desc = "default_pg" + bad
    for rank in range(world):
        r = ev.rank(rank)
        r.host, r.pid = f"node{rank // 8}", 1000 + rank
        entries = [_entry(rank, seq, True, done_frames, pg_desc) for seq in range(1, 10)]
        if rank != culprit:
            entries.append(_entry(rank, 10, False, wait_frames, pg_desc))
        r.fr = FrDump(rank=rank, path=f"dumps/nccl_trace_rank_{rank}", version="2.10",
                      backend="nccl",
                      process_groups={"0": ProcessGroupInfo("0", pg_desc, tuple(range(world)))},
                      pg_status={}, entries=entries)
        if samples:
            user = ("load_batch" + bad, 88) if rank == culprit else ("train_step" + bad, 42)
            # blocked in a C call made from the job's own frame (py-spy shows no frame for it)
            main = ThreadStack(1, (Frame(user[0], "/job/train.py", user[1]),
                                   Frame("main", "/job/train.py", 300),
                                   Frame("<module>", "/job/train.py", 310)),
                               name="MainThread" + bad, is_main=True, active=False)
            helper = ThreadStack(2, (Frame("_worker", "/usr/lib/python3.11/threading.py", 90),),
                                 name="pin_memory", active=False)
            r.samples.append(StackSample(pid=r.pid, taken_at=1_700_000_100.0,
                                         threads=(main, helper), path=f"stacks/rank{rank}.json"))
        r.proc.append(ProcessState(pid=r.pid, sampled_at=1_700_000_100.0, status="S",
                                   cpu_time_s=12.5, rss_bytes=2 << 30, num_threads=9,
                                   wchan="futex_wait" + bad))
        r.logs.append(LogEvent(kind="nccl_watchdog_timeout" + bad, severity="error",
                               message=f"[rank{rank}] Watchdog caught collective timeout {bad}"
                                       f" pulling from {SECRET_URL}",
                               path=f"logs/rank{rank}.log", line_no=120 + rank, rank=rank))
        if rank == 0:
            r.worker_pids.append(2000)
            r.worker_proc[2000] = [ProcessState(pid=2000, sampled_at=1_700_000_100.0,
                                                status="D")]
    ev.unattributed_logs.append(LogEvent(kind="launcher" + bad, message="torchrun: " + bad,
                                         path="logs/torchrun.log", line_no=7, severity="warning"))
    return ev


def result_of(ev: JobEvidence) -> Result:
    return analyze_evidence(ev, OutputOptions(write_html=False), None)


def large_evidence(world: int = 4096, culprit: int = 2051, entries: int = 40) -> JobEvidence:
    """A 4096-rank missing-rank hang: everyone waits in seq ``entries + 1`` but ``culprit``;
    one py-spy sample per rank (shared frames, as the py-spy loader interns them)."""
    ev = JobEvidence(world_size=world, inputs=["synthetic-4096"])
    wait_frames = _frames("train_step", 42)
    done_frames = _frames("log_metrics", 77)
    info = {"0": ProcessGroupInfo("0", "default_pg", tuple(range(world)))}
    main_wait = ThreadStack(1, wait_frames, name="MainThread", is_main=True, active=False)
    main_culprit = ThreadStack(1, (Frame("read", "/job/data.py", 12),
                                   Frame("load_batch", "/job/train.py", 88),
                                   Frame("main", "/job/train.py", 300),
                                   Frame("<module>", "/job/train.py", 310)),
                               name="MainThread", is_main=True, active=True)
    for rank in range(world):
        r = ev.rank(rank)
        r.host, r.pid = f"node{rank // 8:04d}", 10_000 + rank
        rows = [_entry(rank, seq, True, done_frames) for seq in range(1, entries + 1)]
        if rank != culprit:
            rows.append(_entry(rank, entries + 1, False, wait_frames))
        r.fr = FrDump(rank=rank, path=os.path.join("dumps", f"nccl_trace_rank_{rank}"),
                      version="2.10", backend="nccl", process_groups=info, pg_status={},
                      entries=rows)
        thread = main_culprit if rank == culprit else main_wait
        r.samples.append(StackSample(pid=r.pid, taken_at=1_700_000_100.0, threads=(thread,)))
    return ev


def staircase_evidence(world: int = 4096, keep: int = 4) -> JobEvidence:
    """The payload's worst case: rank r completed seqs up to r and waits in seq r + 1, so every
    rank is a class of its own (each waits on all ranks below it). FR rings hold ``keep``."""
    ev = JobEvidence(world_size=world, inputs=["synthetic-staircase"])
    info = {"0": ProcessGroupInfo("0", "default_pg", tuple(range(world)))}
    done_frames, wait_frames = _frames("log_metrics", 77), _frames("train_step", 42)
    for rank in range(world):
        r = ev.rank(rank)
        rows = [_entry(rank, seq, True, done_frames) for seq in range(max(1, rank - keep), rank + 1)]
        rows.append(_entry(rank, rank + 1, False, wait_frames))
        r.fr = FrDump(rank=rank, path=f"dumps/nccl_trace_rank_{rank}", version="2.10",
                      backend="nccl", process_groups=info, pg_status={}, entries=rows)
    return ev
