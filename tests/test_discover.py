"""discover(): real processes (a real torchrun gloo job, real multiprocessing children)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from procs.procutil import family_args, started, torchrun_job

from hangscope.discover import discover, filter_env, launcher_kind
from hangscope.discover.proctree import snapshot
from hangscope.errors import CollectError, ExitCode, UsageError

RANK_ENV = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "2", "TORCHELASTIC_RUN_ID": "run-xyz", "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500"}


@pytest.mark.live
class TestTorchrunJob:
    def test_pid_group_finds_ranks_and_dataloader_workers(self, tmp_path: Path) -> None:
        # GIVEN a 2-rank gloo job whose ranks each run a DataLoader with 2 workers
        with torchrun_job(tmp_path, nproc=2, workers=2) as job:
            # WHEN we search from the launcher's process group (it holds only the launcher)
            found = discover(pid_group=job.pid)

            # THEN both ranks are found through the process tree, with their identity
            assert [r.rank for r in found.ranks] == [0, 1]
            for r in found.ranks:
                assert r.pid == job.ready[r.rank]["pid"]
                assert os.getpgid(r.pid) != job.pid  # torchrun: a new session per worker
                assert (r.local_rank, r.world_size, r.local_world_size) == (r.rank, 2, 2)
                assert r.group_rank == 0 and r.run_id
                assert (r.master_addr, r.master_port) == ("127.0.0.1", r.master_port)
                assert r.master_port and r.master_port > 0
                assert sorted(r.workers) == sorted(job.ready[r.rank]["workers"])
                assert len(r.workers) == 2
                assert "RANK" in r.env and "PATH" not in r.env and "HOME" not in r.env
                assert r.env["TORCHELASTIC_ERROR_FILE"].endswith(f"/{r.local_rank}/error.json")
            assert [p.pid for p in found.launchers] == [job.pid]
            assert found.launchers[0].kind == "torch.distributed.run"
            assert found.expected_local_ranks == {0, 1}
            assert found.missing_local_ranks == []

    def test_one_rank_pid_finds_its_launcher_and_names_the_other_rank(self, tmp_path: Path
                                                                       ) -> None:
        with torchrun_job(tmp_path, nproc=2) as job:
            found = discover(pids=[job.ready[1]["pid"]])

            assert [r.rank for r in found.ranks] == [1]
            assert [p.pid for p in found.launchers] == [job.pid]
            assert found.missing_local_ranks == []  # rank 0 runs; it just was not searched
            assert any(f"runs as pid {job.ready[0]['pid']}" in n for n in found.notes)
            # AND --match over command lines finds the same job from its script name
            matched = discover(match=r"gloo_hang\.py")
            assert {r.rank for r in matched.ranks} == {0, 1}
            assert job.pid in [p.pid for p in matched.launchers]


class TestWorkers:
    @pytest.mark.parametrize("mode", ["fork", "spawn", "forkserver"])
    def test_multiprocessing_children_are_workers_not_ranks(self, tmp_path: Path, mode: str
                                                            ) -> None:
        # GIVEN a rank with 2 multiprocessing children (which inherit RANK in their environment)
        ready = tmp_path / "ready"
        with started(family_args(ready, mode, 2), ready, env=RANK_ENV) as proc:
            # WHEN
            found = discover(pids=[proc.pid])
            # THEN one rank, its children are its workers (not the forkserver or resource tracker)
            assert len(found.ranks) == 1
            rank = found.ranks[0]
            assert (rank.pid, rank.rank, rank.local_rank, rank.world_size) == (proc.pid, 5, 1, 8)
            assert (rank.group_rank, rank.run_id, rank.master_port) == (2, "run-xyz", 29500)
            assert sorted(rank.workers) == sorted(proc.ready["children"])

    def test_process_group_search_starts_from_the_topmost_process(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready, "fork", 2), ready, env=RANK_ENV) as proc:
            found = discover(pid_group=proc.pid)  # the children are in the same group
            assert [r.pid for r in found.ranks] == [proc.pid]
            assert sorted(found.ranks[0].workers) == sorted(proc.ready["children"])


class TestIdentity:
    def test_slurm_task_without_rank_uses_slurm_procid(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        env = {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4",
               "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_ID": "777", "SLURM_NODEID": "1"}
        with started(family_args(ready), ready, env=env) as proc:
            found = discover(pids=[proc.pid])
            rank = found.ranks[0]
            assert (rank.rank, rank.local_rank, rank.world_size, rank.identity_from) == (
                3, 1, 4, "SLURM_PROCID")
            assert rank.run_id == "777" and rank.env["SLURM_JOB_ID"] == "777"

    def test_missing_local_rank_is_reported(self, tmp_path: Path) -> None:
        # GIVEN local rank 0 of 2 alone, no launcher
        ready = tmp_path / "ready"
        env = {**RANK_ENV, "RANK": "4", "LOCAL_RANK": "0"}
        with started(family_args(ready), ready, env=env) as proc:
            found = discover(pids=[proc.pid])
            assert found.expected_local_ranks == {0, 1}
            assert found.missing_local_ranks == [1]
            assert any("no launcher is alive" in n for n in found.notes)

    def test_environment_keeps_only_the_allow_list(self) -> None:
        env = {"RANK": "0", "AWS_SECRET_ACCESS_KEY": "x", "PATH": "/bin", "NCCL_DEBUG": "INFO",
               "SLURM_JOB_ID": "1", "SLURM_API_TOKEN": "t", "TORCH_FR_BUFFER_SIZE": "2000",
               "NCCL_RAS_ADDR": "localhost:28100", "NCCL_IB_HCA": "mlx5"}
        assert filter_env(env) == {"RANK": "0", "NCCL_DEBUG": "INFO", "SLURM_JOB_ID": "1",
                                   "TORCH_FR_BUFFER_SIZE": "2000",
                                   "NCCL_RAS_ADDR": "localhost:28100", "NCCL_IB_HCA": "mlx5"}

    @pytest.mark.parametrize("cmdline,kind", [
        (["/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc-per-node", "8", "t.py"],
         "torchrun"),
        (["python", "-m", "torch.distributed.run", "t.py"], "torch.distributed.run"),
        (["python", "-m", "torch.distributed.launch", "t.py"], "torch.distributed.run"),
        (["mpirun", "-np", "4", "python", "t.py"], "mpirun"),
        (["/opt/slurm/bin/srun", "python", "t.py"], "srun"),
        (["/usr/bin/python", "/usr/bin/deepspeed", "t.py"], "deepspeed"),
        (["/usr/bin/python", "/usr/bin/accelerate", "launch", "t.py"], "accelerate"),
        (["python", "train.py", "--torchrun-like"], ""),
    ], ids=["torchrun", "m-run", "m-launch", "mpirun", "srun", "deepspeed", "accelerate", "none"])
    def test_launcher_kinds(self, cmdline: list[str], kind: str) -> None:
        assert launcher_kind(cmdline) == kind


class TestSpawnedRanks:
    def test_spawn_children_without_rank_are_ranks_in_start_order(self, tmp_path: Path) -> None:
        # GIVEN a python process that started 3 spawn children and set no RANK anywhere, as
        # torch.multiprocessing.spawn does (it passes each child its index as an argument)
        ready = tmp_path / "ready"
        with started(family_args(ready, "spawn", 3), ready, clear_env=True) as proc:
            found = discover(pid_group=proc.pid)
            children = proc.ready["children"]
        # THEN the children are ranks 0-2 in the order they were started, the parent their
        # launcher, and a note says where the numbers come from
        assert [(r.rank, r.pid) for r in found.ranks] == list(enumerate(children))
        assert {(r.world_size, r.local_world_size, r.identity_from) for r in found.ranks} == {
            (3, 3, "spawn order")}
        assert [p.pid for p in found.launchers] == [proc.pid]
        assert any("torch.multiprocessing.spawn" in note for note in found.notes)


class TestNothingFound:
    def test_a_child_a_dead_rank_left_behind_is_no_rank(self, tmp_path: Path) -> None:
        # GIVEN a launcher's three ranks, of which rank 2 forked a helper (it keeps RANK=2 in
        # its environment) and then exited
        ready = tmp_path / "ready"
        with started([str(Path(__file__).parent / "procs" / "left_behind.py"), str(ready)],
                     ready) as proc:
            helper = proc.ready["helper"]
            assert psutil.Process(helper).ppid() != proc.pid  # handed to init or a subreaper
            # WHEN the job is searched by its process group (the helper is still in it)
            found = discover(pid_group=proc.pid)
        # THEN ranks 0 and 1 are found; the helper is not taken for rank 2, and a note says why
        assert [r.rank for r in found.ranks] == [0, 1]
        assert helper not in [r.pid for r in found.ranks]
        assert any(f"pid {helper} carries rank 2's identity but is no rank" in note
                   for note in found.notes), found.notes
        # AND rank 2 is known to have exited, told by that helper (not just absent)
        assert list(found.exited_ranks) == [2]
        assert found.exited_ranks[2].startswith(f"pid {helper}, which carries rank 2's identity")

    def test_python_without_rank_says_so(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready), ready, clear_env=True) as proc:
            with pytest.raises(CollectError) as info:
                discover(pid_group=proc.pid)
        message = str(info.value)
        assert "\n" not in message
        assert f"process group {proc.pid}" in message and "looked at 1 process;" in message
        assert f"pid {proc.pid} is a python process but has no RANK" in message
        assert info.value.exit_code == ExitCode.COULD_NOT_COLLECT

    def test_pid_that_does_not_exist(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready), ready) as proc:
            pass  # stopped and reaped: its pid is free now
        with pytest.raises(CollectError, match=f"pid {proc.pid} does not exist"):
            discover(pids=[proc.pid])

    def test_pattern_that_matches_nothing_ignores_our_own_command_line(self) -> None:
        pattern = "no-such-job-[0-9]{6}"
        with pytest.raises(CollectError, match=re.escape(f"no command line matches {pattern!r}")):
            discover(match=pattern)

    def test_usage_errors(self) -> None:
        with pytest.raises(UsageError, match="nothing to search"):
            discover()
        with pytest.raises(UsageError, match="not a valid regular expression"):
            discover(match="(")


def test_snapshot_reads_proc_as_psutil_does(tmp_path: Path) -> None:
    # GIVEN a process whose name is built to confuse a naive /proc/PID/stat parser
    code = ("open('/proc/self/comm', 'w').write('a) R 9 9 (b'); "
            "print('ready', flush=True); import time; time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, "two words"], stdout=subprocess.PIPE,
                             start_new_session=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        proc = psutil.Process(child.pid)
        # on a loaded machine it may still run on from print() into time.sleep(): wait for it
        deadline = time.monotonic() + 20
        while proc.status() != psutil.STATUS_SLEEPING and time.monotonic() < deadline:
            time.sleep(0.02)
        # WHEN the table is taken
        snap = snapshot()[child.pid]
        # THEN every field is what psutil reads, the name whole
        assert snap.name == "a) R 9 9 (b" == proc.name()
        assert (snap.ppid, snap.pgid) == (os.getpid(), child.pid)
        assert snap.cmdline == proc.cmdline() == [sys.executable, "-c", code, "two words"]
        assert snap.exe == proc.exe()
        assert abs(snap.create_time - proc.create_time()) < 0.02
        assert snap.status == proc.status() == psutil.STATUS_SLEEPING
        assert abs(snap.create_time - time.time()) < 60
    finally:
        child.kill()
        child.wait()


def test_match_never_finds_a_copy_of_us_we_forked() -> None:
    import os as _os
    import re as _re

    from hangscope.discover.proctree import find_roots, snapshot
    # GIVEN a forked copy of this process (as attach forks an analyzer): its command line is
    # ours, so it matches whatever pattern ours does
    own = " ".join(open(f"/proc/{_os.getpid()}/cmdline").read().split("\0")).strip()
    pattern = _re.compile(_re.escape(own.split()[-1]))
    read, write = _os.pipe()
    child = _os.fork()
    if child == 0:  # pragma: no cover - the child only waits to be killed
        _os.close(write)
        _os.read(read, 1)
        _os._exit(0)
    try:
        _os.close(read)
        reasons: list[str] = []
        roots = find_roots(snapshot(), None, [], pattern, reasons)
    finally:
        _os.close(write)  # the child's read returns: it exits
        _os.waitpid(child, 0)
    # THEN neither it nor we are candidates
    assert child not in roots and _os.getpid() not in roots
