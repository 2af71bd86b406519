"""Rules written after blind batch 31's first look, each in the general form the software's own
output allows (none is a corpus log): a fault the job went on past (its stream's progress moving
on twice after it) is one it recovered from; the kernel's report of a memory cgroup at its limit
is an out-of-memory kill; and where that report names no process, the one rank killed by SIGKILL
is the one it killed; torchelastic's etcd rendezvous giving a round up is set-up that does not
complete."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, verdict_of

# NCCL's remote-allocator service thread failing on a stray request (bootstrap.cc, alloc.h),
# the lines NVIDIA/nccl#555's maintainer calls harmless where the job goes on
_REM_ALLOC = """gpu-node-1:39:298 [0] include/socket.h:423 NCCL WARN Net : Connection closed by remote peer 10.0.0.4<52638>
gpu-node-1:39:298 [0] NCCL INFO bootstrap.cc:229 -> 2
gpu-node-1:39:298 [0] bootstrap.cc:279 NCCL WARN [Rem Allocator] Allocation failed (segment 0, fd 130)
gpu-node-1:39:298 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'
gpu-node-1:39:298 [0] NCCL INFO bootstrap.cc:231 -> 1
"""


def _steps(first: int, count: int) -> str:
    return "".join(f"Train Epoch: 1 [{n * 100}/50000 ({n * 100 * 100 // 50000}%)]\tLoss: 0.{90 - n}\n"
                   for n in range(first, first + count))


def test_a_fault_the_job_went_on_past_is_recovered(tmp_path: Path) -> None:
    # GIVEN the allocator's WARNs, then training that moves on for several steps
    verdict = verdict_of(tmp_path, _REM_ALLOC + _steps(0, 6))
    assert verdict.status.value == "healthy"
    assert any("outlived-fault" in gap for gap in verdict.evidence_gaps)
    # AND the same WARNs after training's last step are the log's last word: not outlived
    assert verdict_of(tmp_path, _steps(0, 6) + _REM_ALLOC).status.value != "healthy"
    # AND one step after them is no proof (a rank that died stops the others within a step)
    assert verdict_of(tmp_path, _steps(0, 3) + _REM_ALLOC + _steps(3, 1)).status.value \
        != "healthy"


_CGROUP = ("[  812.123456] memory: usage 134217728kB, limit 134217728kB, failcnt 9312\n"
           "[  812.123460] memory+swap: usage 134217728kB, limit 9007199254740988kB, failcnt 0\n")


def test_a_memory_cgroup_at_its_limit_is_an_oom_kill(tmp_path: Path) -> None:
    assert kind_and_culprits(verdict_of(tmp_path, _CGROUP)) == ("rank_oom", [])
    # AND a cgroup under its limit says nothing
    under = _CGROUP.replace("usage 134217728kB, limit 134217728kB", "usage 4096kB, limit 8192kB")
    assert kind_and_culprits(verdict_of(tmp_path, under.splitlines()[0] + "\n")) is None


def test_the_one_rank_killed_by_sigkill_is_the_one_the_oom_report_names(tmp_path: Path) -> None:
    # GIVEN torch.multiprocessing's report of process 2 killed, as a user quotes it, and the
    # kernel's cgroup report with no pid
    text = ('DDP on 4 GPUs stopped: "process 2 terminated with signal SIGKILL"\n'
            "dmesg shows:\n" + _CGROUP)
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("rank_oom", [2])


def test_an_etcd_rendezvous_round_given_up_is_set_up_that_does_not_complete(
        tmp_path: Path) -> None:
    # GIVEN torchelastic's etcd rendezvous (its own spelling): a node's keep-alive lapses and the
    # round is destroyed, again and again
    rounds = "".join(
        f"INFO 2020-08-18 05:27:1{v},490 Keep-alive key /torchelastic/p2p/run/rdzv/v_{v}/rank_1 "
        f"is not renewed.\nINFO 2020-08-18 05:27:1{v},490 Rendevous version {v} is incomplete.\n"
        f"INFO 2020-08-18 05:27:1{v},491 Destroyed rendezvous version {v} successfully.\n"
        for v in (4, 5))
    assert kind_and_culprits(verdict_of(tmp_path, rounds)) == ("init_hang", [])


def test_a_launcher_sigkill_beside_a_cgroup_report_names_the_launchers_rank(
        tmp_path: Path) -> None:
    # GIVEN DeepSpeed's launcher naming the worker it lost by its command line (the rank is
    # the launcher's, not the line's) and the kernel's cgroup report with no pid
    text = ("[2023-03-08 23:09:10,911] [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/"
            "python', '-u', 'train.py', '--local_rank=1', '--deepspeed', 'ds.json'] exits with "
            "return code = -9\n" + _CGROUP.splitlines()[0] + "\n")
    findings = verdict_of(tmp_path, text).findings
    # THEN the out-of-memory kill is rank 1's (it read the rank off the line, and failed, before)
    assert ("rank_oom", [1]) in [(f.kind.value, f.culprit_ranks) for f in findings]
