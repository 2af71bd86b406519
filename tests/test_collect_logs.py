"""Log discovery on real processes: a real torchrun --log-dir job, fds that are files, pipes,
/dev/null or deleted files, NCCL_DEBUG_FILE substitution, error files; bounded reading."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from procs.procutil import family_args, started, torchrun_job

from hangscope.collect.logs import (
    SKIP_MARKER,
    collect_job_logs,
    fd_target,
    find_rank_logs,
    nccl_debug_path,
    read_bounded,
    torchrun_log_dir,
)
from hangscope.discover import discover

RANK = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}


@pytest.mark.live
def test_torchrun_log_dir_layout_and_launcher_output(tmp_path: Path) -> None:
    # GIVEN a torchrun job with --log-dir DIR --redirects 3 --tee 3
    with torchrun_job(tmp_path, nproc=2) as job:
        found = discover(pid_group=job.pid)
        wanted = [f"[default{r}]:rank {r} up (stdout)".encode() for r in (0, 1)]
        deadline = time.monotonic() + 10  # --tee copies rank output with a delay
        while not all(w in job.output.read_bytes() for w in wanted):
            assert time.monotonic() < deadline, job.output.read_text()
            time.sleep(0.05)
        # WHEN we collect every log of the job
        files, notes = collect_job_logs(found)
    # THEN each rank's stdout/stderr come from DIR/<run_id>_<random>/attempt_0/<local_rank>/
    by = {(f.rank, f.kind): f for f in files}
    run_id = found.ranks[0].run_id
    for rank in (0, 1):
        for kind in ("stdout", "stderr"):
            log = by[(rank, kind)]
            assert re.fullmatch(rf"{re.escape(str(job.log_dir))}/{re.escape(str(run_id))}_\w+"
                                rf"/attempt_0/{rank}/{kind}\.log", log.path), log.path
            # the rank's own line, after whatever its imports warned (torch without numpy,
            # as in a fresh .venv, warns on stderr)
            assert log.data.endswith(f"rank {rank} up ({kind})\n".encode()), log.data
            other = "stderr" if kind == "stdout" else "stdout"
            assert f"up ({other})".encode() not in log.data
            assert not log.truncated
    # AND the launcher's own output file, which --tee fills with prefixed rank lines
    launcher = by[(None, "launcher")]
    assert launcher.path == str(job.output)
    assert b"[default0]:rank 0 up (stdout)" in launcher.data
    assert len(files) == 5  # each file once
    assert not [n for n in notes if "rank" in n]  # nothing missing for the ranks


class TestFds:
    def test_stdout_file_and_deleted_file(self, tmp_path: Path) -> None:
        ready, out = tmp_path / "ready", tmp_path / "out.log"
        with open(out, "wb") as handle:
            handle.write(b"line one\n")
            handle.flush()
            with started(family_args(ready), ready, env=RANK, stdout=handle) as proc:
                rank = discover(pids=[proc.pid]).ranks[0]
                files, notes = find_rank_logs(rank)
                assert [(f.kind, f.path, f.data) for f in files] == [
                    ("stdout", str(out), b"line one\n")]  # stderr: same file, read once
                out.unlink()
                files, notes = find_rank_logs(rank)
        assert files[0].path == f"{out} (deleted)" and files[0].data == b"line one\n"
        assert any("deleted" in n for n in notes)

    def test_a_file_several_ranks_write_is_the_jobs_not_the_first_ranks(
            self, tmp_path: Path) -> None:
        # GIVEN two ranks whose stdout and stderr all go to one file their launcher opened
        ready, log = tmp_path / "ready", tmp_path / "job.log"
        script = Path(__file__).parent / "procs" / "shared_output.py"
        with started([str(script), str(ready), str(log)], ready) as proc:
            found = discover(pid_group=proc.pid)
            assert [r.rank for r in found.ranks] == [0, 1]
            # WHEN the job's logs are collected
            files, notes = collect_job_logs(found)
        # THEN the file is read once and filed as the job's shared output: a line in it that
        # names no rank is not rank 0's (nor rank 1's)
        assert [(f.rank, f.kind, f.path) for f in files] == [(None, "shared", str(log))]
        assert b"rank 0 up\n" in files[0].data and b"rank 1 up\n" in files[0].data
        assert any("rank 1: stdout is the same file as rank 0 stdout" in n for n in notes), notes

    def test_pipe_and_devnull_are_named_in_notes(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        with started(family_args(ready), ready, env=RANK, stdout=subprocess.PIPE) as proc:
            assert fd_target(proc.pid, 1)[0] == "pipe"
            rank = discover(pids=[proc.pid]).ranks[0]
            files, notes = find_rank_logs(rank)
            assert files == []
            assert f"rank 0 (pid {proc.pid}): stdout is a pipe (pipe:[" in notes[0]
        with started(family_args(ready), ready, env=RANK) as proc:
            _, notes = find_rank_logs(discover(pids=[proc.pid]).ranks[0])
            assert "stdout is /dev/null" in notes[0]

    def test_nccl_debug_file_and_error_file(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        env = {**RANK, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "nccl.%h.%p.log",
               "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json")}
        (tmp_path / "error.json").write_bytes(b'{"message": "boom"}')
        with started(family_args(ready), ready, env=env, cwd=tmp_path) as proc:
            rank = discover(pids=[proc.pid], host="node7").ranks[0]
            _, notes = find_rank_logs(rank, host="node7")
            assert any(f"nccl.node7.{proc.pid}.log does not exist" in n for n in notes)
            (tmp_path / f"nccl.node7.{proc.pid}.log").write_bytes(b"node7:1:1 NCCL INFO x\n")
            files, _ = find_rank_logs(rank, host="node7")
        kinds = {f.kind: f for f in files}
        assert kinds["nccl_debug"].data == b"node7:1:1 NCCL INFO x\n"
        assert kinds["nccl_debug"].path == str(tmp_path / f"nccl.node7.{proc.pid}.log")
        assert kinds["error_file"].data == b'{"message": "boom"}'
        assert kinds["error_file"].bundle_name() == "error_file.json"


class TestReadBounded:
    def test_small_file_whole(self, tmp_path: Path) -> None:
        path = tmp_path / "a.log"
        path.write_bytes(b"a\nb\n")
        assert read_bounded(str(path), head=4, tail=4) == (b"a\nb\n", False, 4, 0)

    def test_big_file_keeps_head_and_tail_at_line_bounds(self, tmp_path: Path) -> None:
        path = tmp_path / "big.log"
        lines = [f"line {i:05d}\n".encode() for i in range(10000)]  # 11 bytes each
        path.write_bytes(b"".join(lines))
        data, truncated, size, skipped = read_bounded(str(path), head=100, tail=200)
        assert truncated and size == 110000
        head, marker, tail = data.partition(SKIP_MARKER)
        assert head == b"".join(lines[:9])  # 99 bytes: the partial 10th line is dropped
        assert marker and tail.startswith(f"{skipped} bytes]\n".encode())
        assert tail.endswith(b"line 09999\n")
        kept = tail.split(b"]\n", 1)[1]
        assert kept == b"".join(lines[-18:]) and skipped == size - len(head) - len(kept)


@pytest.mark.parametrize("cmdline,expected", [
    (["torchrun", "--log-dir", "/x", "t.py"], "/x"),
    (["torchrun", "--log_dir=/y", "t.py"], "/y"),
    (["torchrun", "t.py"], None),
], ids=["space", "equals-underscore", "absent"])
def test_torchrun_log_dir_option(cmdline: list[str], expected: str | None) -> None:
    assert torchrun_log_dir(cmdline) == expected


def test_nccl_debug_path_substitution() -> None:
    assert nccl_debug_path("/l/nccl.%h.%p.%%.log", "n1", 42) == "/l/nccl.n1.42.%.log"
    assert os.path.basename(nccl_debug_path("plain.log", "n1", 42)) == "plain.log"
