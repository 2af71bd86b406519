"""MPI / Slurm / elastic launchers' reports of which rank ended first (sources/logs/mpi.py and the
elastic agent's line variants), and what the analysis makes of them.

The wordings below are not from the corpus: each is cited to the launcher's source or to a post
that quotes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.model import LogEvent
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log


def _scan(tmp_path: Path, text: str) -> list[LogEvent]:
    path = tmp_path / "job.log"
    path.write_text(text)
    return [e for e in scan_log(str(path))
            if e.kind in ("elastic_child_failed", "host_oom_kill", "elastic_closing_signal")]


def _verdict(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "job.log"
    path.write_text(text)
    evidence, _ = load_paths([str(path)], LoadOptions())
    return analyze(evidence)[0]


# Open MPI's help-errmgr-base.txt / PRRTE: "%s noticed that process rank %s with PID %s on node %s
# exited on signal %d (%s)."; 1.2's "job rank"; a mail client's wrap (users@open-mpi.org archive)
@pytest.mark.parametrize(("text", "rank", "signal"), [
    ("mpirun noticed that process rank 3 with PID 20177 on node gpu-07 exited on signal 11 "
     "(Segmentation fault).", 3, "SIGSEGV"),
    ("prterun noticed that process rank 0 with PID 881 on node a100-2 exited on signal 9 (Killed).",
     0, "SIGKILL"),
    ("mpirun noticed that job rank 2 with PID 3386 on node n1 exited on signal 15 (Terminated).",
     2, "SIGTERM"),
    ("mpiexec noticed that process rank 2 with PID 14699 on node burl-ct-\n"
     "v20z-13 exited on signal 6\n(Aborted).", 2, "SIGABRT"),
], ids=["ompi4", "prterun", "ompi12-job-rank", "wrapped"])
def test_open_mpi_noticed(tmp_path: Path, text: str, rank: int, signal: str) -> None:
    [event] = _scan(tmp_path, text + "\n")
    assert (event.rank, event.fields["signal"], event.fields["rank_source"]) == \
        (rank, signal, "content")


def test_open_mpi_signal_zero_is_no_signal(tmp_path: Path) -> None:
    # "exited on signal 0 (Unknown signal 0)": Open MPI's word for a process that vanished
    assert _scan(tmp_path, "mpirun noticed that process rank 1 with PID 13064 on node master "
                           "exited on signal 0 (Unknown signal 0).\n") == []


# Open MPI's "detected that one or more processes exited with non-zero status" block; PRRTE's
# process name "[prterun-host-147515@1,0]" (open-mpi/ompi issue threads quote both)
@pytest.mark.parametrize(("name", "code", "rank", "signal"), [
    ("[[44542,1],3]", 137, 3, "SIGKILL"),
    ("[prterun-ranma-147515@1,1]", 6, 1, None),
])
def test_open_mpi_first_process(tmp_path: Path, name: str, code: int, rank: int,
                                signal: str | None) -> None:
    text = ("mpirun detected that one or more processes exited with non-zero status, thus causing\n"
            "the job to be terminated. The first process to do so was:\n\n"
            f"  Process name: {name}\n  Exit code:    {code}\n")
    [event] = _scan(tmp_path, text)
    assert (event.rank, event.fields["exitcode"], event.fields.get("signal")) == (rank, code, signal)


def test_open_mpi_first_process_exit_zero_is_nothing(tmp_path: Path) -> None:
    text = ("mpirun detected that one or more processes exited with non-zero status, thus causing\n"
            "the job to be terminated. The first process to do so was:\n\n"
            "  Process name: [[1,1],0]\n  Exit code:    0\n")
    assert _scan(tmp_path, text) == []


# MPICH / Intel MPI Hydra's BAD TERMINATION banner (pm/hydra/ui/mpich/utils.c)
@pytest.mark.parametrize(("how", "signal"), [("KILLED BY SIGNAL: 9 (Killed)", "SIGKILL"),
                                             ("EXIT STATUS: 139", "SIGSEGV")])
def test_hydra_bad_termination(tmp_path: Path, how: str, signal: str) -> None:
    text = ("===================================================================================\n"
            "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
            "=   RANK 5 PID 12345 RUNNING AT node1\n"
            f"=   {how}\n")
    [event] = _scan(tmp_path, text)
    assert (event.rank, event.fields["signal"]) == (5, signal)


# Slurm's srun (src/srun/launch.c _task_finish: "%s: task%s %s: Exited with exit code %d",
# strsignal names, "Out Of Memory")
def test_srun_tasks(tmp_path: Path) -> None:
    events = _scan(tmp_path, "srun: error: node01: tasks 0-1: Exited with exit code 1\n"
                             "srun: error: node02: task 5: Out Of Memory\n")
    assert [(e.kind, e.rank) for e in events] == [
        ("elastic_child_failed", 0), ("elastic_child_failed", 1), ("host_oom_kill", 5)]


def test_srun_kills_after_its_teardown_notice_are_not_reported(tmp_path: Path) -> None:
    # srun kills the other tasks once one failed: the "Killed" after "Terminating" is its teardown
    events = _scan(tmp_path, "srun: error: node01: task 2: Exited with exit code 1\n"
                             "srun: Terminating StepId=1234.0\n"
                             "slurmstepd: error: *** STEP 1234.0 ON node01 CANCELLED AT "
                             "2024-04-01T10:00:00 ***\n"
                             "srun: error: node01: tasks 0-1,3: Killed\n")
    assert [(e.rank, e.fields.get("exitcode")) for e in events] == [(2, 1)]


# torch.distributed.elastic's agent line, in the order a fork writes it (PAI-DLC pods), and the
# survivors' "Sending process N the closing signal SIGTERM"
def test_elastic_failed_fields_in_either_order(tmp_path: Path) -> None:
    events = _scan(tmp_path,
                   "[2026-01-02 10:00:00,000] torch.distributed.elastic.multiprocessing.api: "
                   "[WARNING] Sending process 12 the closing signal SIGTERM\n"
                   "[2026-01-02 10:00:05,000] torch.distributed.elastic.multiprocessing.api: "
                   "[ERROR] failed (exitcode: -7) for binary located at /opt/py/bin/python with "
                   "local_rank: 3 (process ID: 15)\n")
    closing, failed = events
    assert (closing.kind, closing.fields["pid"]) == ("elastic_closing_signal", 12)
    assert (failed.fields["local_rank"], failed.fields["pid"], failed.fields["signal"],
            failed.fields["binary"]) == (3, 15, "SIGBUS", "/opt/py/bin/python")


def test_launcher_kill_names_the_rank_that_died(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "Primary job  terminated normally, but 1 process returned\n"
                                 "mpirun noticed that process rank 4 with PID 99 on node h2 "
                                 "exited on signal 9 (Killed).\n")
    assert (verdict.root.kind.value, verdict.root.culprit_ranks) == ("rank_died", [4])


def test_kill_after_the_ranks_own_timeout_is_an_echo(tmp_path: Path) -> None:
    # rank 1 logged its own watchdog timeout (alive, waiting in the collective) before the launcher
    # killed it: the kill is teardown, not why the job hung
    timeout = ("[rank{r}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog "
               "caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
               "NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600042 milliseconds before "
               "timing out.\n")
    verdict = _verdict(tmp_path, timeout.format(r=0) + timeout.format(r=1)
                       + "mpirun noticed that process rank 1 with PID 99 on node h2 exited on "
                         "signal 9 (Killed).\n")
    assert verdict.root is None or verdict.root.kind.value != "rank_died"


# torch/distributed/elastic/agent/server/api.py: logger.warning("Received %s death signal, shutting
# down workers", e.sigval); sigval prints as "15" or, torch >= 2.2, "Signals.SIGTERM"
AGENT = ("W0616 00:37:22.830000 4015698 torch/distributed/elastic/agent/server/api.py:719] "
         "Received {sig} death signal, shutting down workers\n"
         "W0616 00:37:22.831000 4015698 torch/distributed/elastic/multiprocessing/api.py:900] "
         "Sending process 4015788 closing signal SIGTERM\n")


@pytest.mark.parametrize("sig", ["Signals.SIGHUP", "9"])
def test_a_signalled_agent_is_a_node_that_died(tmp_path: Path, sig: str) -> None:
    verdict = _verdict(tmp_path, AGENT.format(sig=sig))
    assert (verdict.root.kind.value, verdict.root.culprit_ranks) == ("rank_died", [])
    assert verdict.root.measures["rule"] == "agent-signalled"


def test_ctrl_c_of_the_agent_is_not_a_death(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, AGENT.format(sig="2"))
    assert verdict.root is None or verdict.root.measures.get("rule") != "agent-signalled"


def test_an_agent_stopped_after_a_timeout_is_teardown(tmp_path: Path) -> None:
    timeout = ("[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog "
               "caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
               "NumelIn=4, NumelOut=4, Timeout(ms)=600000) ran for 600042 milliseconds before "
               "timing out.\n")
    verdict = _verdict(tmp_path, timeout + AGENT.format(sig="Signals.SIGTERM"))
    assert verdict.root is not None and verdict.root.kind.value != "rank_died"


def test_k2_icefall_logger_names_the_rank() -> None:
    # k2/icefall/lhotse recipes: "%(asctime)s %(levelname)s [%(filename)s:%(lineno)d]
    # (%(rank)s/%(world_size)s) %(message)s"
    from hangscope.sources.logs.common import Context, parse_line

    ctx = Context(path="train.log", year=2023, now=0.0)
    line = parse_line("2023-04-13 16:00:05,621 INFO [trainer.py:650] (5/8) Reaches end of "
                      "dataloader.", 1, ctx)
    assert (line.rank, line.severity) == (5, "info")
    plain = parse_line("2023-04-13 16:00:05,621 INFO [trainer.py:650] loaded (5/8) shards", 1,
                       ctx)
    assert plain.rank is None


def test_deepspeeds_failed_worker_whose_return_code_the_paste_cut(tmp_path: Path) -> None:
    # DeepSpeed's launcher/launch.py sigkill_handler: the failed worker's command, then
    # "exits with return code = -9"; a paste that ends inside the command still names the worker
    head = ("[2023-04-07 13:09:33,220] [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python3',"
            " '-u', 'run_clm.py', '--local_rank=3', '--deepspeed', 'ds_config.json', '--sav")
    (found,) = [e for e in scan_log("ds.log", data=(head + "\n").encode())
                if e.kind == "elastic_child_failed"]
    assert found.fields["local_rank"] == 3 and "unknown" in str(found.fields["signal"])
    whole = head + "e_steps', '10'] exits with return code = -9\n"
    (found,) = [e for e in scan_log("ds.log", data=whole.encode())
                if e.kind == "elastic_child_failed"]
    assert (found.fields["local_rank"], found.fields["exitcode"]) == (3, -9)
    # a command list quoted in prose (no handler head) is no failure
    quoted = "see ['/usr/bin/python3', '-u', 'run_clm.py', '--local_rank=3'\n"
    assert not [e for e in scan_log("ds.log", data=quoted.encode())
                if e.kind == "elastic_child_failed"]


def test_a_loggers_rank_tag_behind_torchruns_local_prefix_names_the_rank(tmp_path: Path) -> None:
    # GIVEN torchrun --tee 3 output ("[default2]:" gives only the local rank) of a job whose
    # logger prints "[rankN]" after its time and level, and rank 2's steps take 25x longer
    # (recorded on an H200: fixtures/recorded_nccl/straggler)
    lines = []
    for step in range(0, 40, 5):
        for rank in range(4):
            ms = 260 if rank == 2 else 10
            lines.append(f"[default{rank}]:2026-11-28 03:06:{10 + step:02d},470 INFO [rank{rank}] "
                         f"train: step {step}/40 loss 4.1851 step_time {ms}ms")
    verdict = _verdict(tmp_path, "\n".join(lines) + "\n")
    # THEN the lines are the ranks' own streams, and rank 2 is the straggler
    assert verdict.findings and verdict.findings[0].kind.value == "straggler"
    assert verdict.findings[0].culprit_ranks == [2]


def test_a_childs_traceback_inside_the_failure_table_is_read_for_its_cause(tmp_path: Path) -> None:
    # GIVEN torchrun's failure table whose traceback row holds the child's own traceback
    # (@record), ending in a DETAIL mismatch (pytorch/pytorch#148976's shape)
    text = """============================================================
bug.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-03-11_18:33:20
  host      : lenovo
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 340055)
  error_file: /tmp/torchelastic_ih8xk_wi/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/home/u/bug.py", line 16, in main
      dist.barrier()
    File "/home/u/.local/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", line 4551, in barrier
      work = group.barrier(opts=opts)
  RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=1OpType=BARRIER), but Rank 2 is running collective: CollectiveFingerPrint(SequenceNumber=0OpType=BARRIER).
"""
    verdict = _verdict(tmp_path, text)
    # THEN the mismatch it names is the finding, not the exit it caused
    assert verdict.findings[0].kind.value == "collective_mismatch"
