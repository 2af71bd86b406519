"""Flight-recorder dump pickup and the dump pipe, against a fake pipe reader (a real process
that behaves like ProcessGroupNCCL's monitor thread: see tests/procs/fake_fr_pipe.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from procs.procutil import HERE, started

from hangscope.collect.fr_trigger import (
    DEFAULT_PREFIX,
    collect_fr,
    collect_frs,
    dump_paths,
    find_dumps,
    pipe_path,
    poke_pipe,
    trigger_dump,
)
from hangscope.discover import RankProcess


def rank_proc(pid: int, env: dict[str, str], rank: int = 3,
              create_time: float = 0.0) -> RankProcess:
    return RankProcess(pid=pid, rank=rank, local_rank=rank, world_size=4, local_world_size=4,
                       group_rank=0, run_id="r", master_addr=None, master_port=None, env=env,
                       cmdline=["python"], workers=[], create_time=create_time)


def fake_reader(tmp_path: Path, mode: str = "dump", rank: int = 3):  # noqa: ANN201
    ready = tmp_path / f"ready_{rank}"
    args = [str(HERE / "fake_fr_pipe.py"), str(tmp_path / f"pipe_{rank}.pipe"),
            str(tmp_path / f"trace_{rank}"), str(ready), mode]
    return started(args, ready)


ENV_NAMES = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "pipe_", "TORCH_FR_DUMP_TEMP_FILE": "trace_"}


def env_in(tmp_path: Path) -> dict[str, str]:
    return {name: str(tmp_path / value) for name, value in ENV_NAMES.items()}


class TestTrigger:
    def test_poke_makes_the_rank_dump_and_we_wait_for_the_whole_file(self, tmp_path: Path
                                                                       ) -> None:
        # GIVEN a rank reading its dump pipe, with an old dump already on disk
        (tmp_path / "trace_3").write_bytes(b"old")
        os.utime(tmp_path / "trace_3", (1, 1))
        with fake_reader(tmp_path) as reader:
            rank = rank_proc(reader.pid, env_in(tmp_path))
            # WHEN we trigger a dump
            result = trigger_dump(rank, timeout_s=8)
        # THEN the fresh, complete dump comes back, marked as triggered
        assert result.notes == []
        [dump] = result.files
        assert (dump.rank, dump.path, dump.triggered) == (3, str(tmp_path / "trace_3"), True)
        assert dump.data.endswith(b'"pokes": 1}') and dump.data.startswith(b'{"version"')
        assert dump.mtime > 1

    def test_every_pipe_is_poked_before_any_dump_is_waited_for(self, tmp_path: Path) -> None:
        # GIVEN two ranks reading their dump pipes (each takes a while to write its dump)
        with fake_reader(tmp_path, rank=2) as first, fake_reader(tmp_path, rank=3) as second:
            ranks = [rank_proc(first.pid, env_in(tmp_path), rank=2),
                     rank_proc(second.pid, env_in(tmp_path), rank=3)]
            # WHEN both are asked for dumps
            results = collect_frs(ranks, timeout_s=8)
        # THEN both dumps come back, and the second rank was asked before the first rank's dump
        # was even finished: a live job's ranks are caught as close to one moment as they can be
        assert [r.notes for r in results] == [[], []]
        [a], [b] = (r.files for r in results)
        assert (a.rank, b.rank) == (2, 3)
        poked_b = float(b.data.split(b'"poked_at": ')[1].split(b",")[0])
        assert poked_b < a.mtime

    def test_collect_fr_prefers_a_fresh_dump(self, tmp_path: Path) -> None:
        with fake_reader(tmp_path) as reader:
            result = collect_fr(rank_proc(reader.pid, env_in(tmp_path)), timeout_s=8)
        assert [f.triggered for f in result.files] == [True]

    def test_reader_that_never_dumps_times_out_and_old_dump_is_used(self, tmp_path: Path
                                                                      ) -> None:
        (tmp_path / "trace_3").write_bytes(b"old dump")
        with fake_reader(tmp_path, mode="ignore") as reader:
            started_at = time.monotonic()
            result = collect_fr(rank_proc(reader.pid, env_in(tmp_path)), timeout_s=0.5)
            assert time.monotonic() - started_at < 3
        assert [(f.data, f.triggered) for f in result.files] == [(b"old dump", False)]
        assert "none appeared" in result.notes[0] and "within 0.5 s" in result.notes[0]

    def test_pipe_without_reader_is_enxio_and_never_blocks(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "pipe_3.pipe")
        started_at = time.monotonic()
        result = trigger_dump(rank_proc(os.getpid(), env_in(tmp_path)), timeout_s=5)
        assert time.monotonic() - started_at < 1
        assert result.files == [] and "nobody reads the dump pipe" in result.notes[0]
        assert "ENXIO" in result.notes[0]

    def test_missing_pipe(self, tmp_path: Path) -> None:
        result = trigger_dump(rank_proc(os.getpid(), env_in(tmp_path)))
        assert "does not exist" in result.notes[0]

    def test_regular_file_at_the_pipe_path_is_left_alone(self, tmp_path: Path) -> None:
        (tmp_path / "pipe_3.pipe").write_bytes(b"")
        assert "not a FIFO" in (poke_pipe(str(tmp_path / "pipe_3.pipe")) or "")
        assert (tmp_path / "pipe_3.pipe").read_bytes() == b""

    def test_no_pipe_configured(self, tmp_path: Path) -> None:
        result = trigger_dump(rank_proc(os.getpid(), {}))
        assert "TORCH_NCCL_DEBUG_INFO_PIPE_FILE is not set" in result.notes[0]


class TestPaths:
    def test_default_prefix(self) -> None:
        rank = rank_proc(os.getpid(), {}, rank=12)
        assert dump_paths(rank) == [f"{DEFAULT_PREFIX}12"] and pipe_path(rank) is None

    def test_old_variable_name_and_dynamic_file_name(self) -> None:
        rank = rank_proc(os.getpid(), {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/d/t_",
                                       "TORCH_FR_DUMP_DYNAMIC_FILE_NAME": "1"})
        assert dump_paths(rank) == ["/d/t_", "/d/t_3"]

    def test_relative_names_are_relative_to_the_rank_cwd(self, tmp_path: Path) -> None:
        ready = tmp_path / "ready"
        env = {"TORCH_FR_DUMP_TEMP_FILE": "dumps/fr_", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "p_"}
        args = [str(HERE / "family.py"), str(ready), "none", "0"]
        (tmp_path / "dumps").mkdir()
        (tmp_path / "dumps" / "fr_3").write_bytes(b"dump")
        with started(args, ready, cwd=tmp_path) as proc:
            rank = rank_proc(proc.pid, env)
            assert dump_paths(rank) == [str(tmp_path / "dumps" / "fr_3")]
            assert pipe_path(rank) == str(tmp_path / "p_3.pipe")
            result = find_dumps(rank)
        assert [(f.data, f.triggered) for f in result.files] == [(b"dump", False)]

    def test_a_dump_older_than_the_process_is_an_earlier_runs_and_is_not_read(
            self, tmp_path: Path) -> None:
        # GIVEN a dump at the rank's path written an hour before the rank's process started
        # (the default /tmp/nccl_trace_rank_<N> outlives the job that wrote it)
        (tmp_path / "trace_3").write_bytes(b"last week's job")
        started_at = time.time()
        os.utime(tmp_path / "trace_3", (started_at - 3600, started_at - 3600))
        # WHEN the rank's dumps are picked up
        result = find_dumps(rank_proc(os.getpid(), env_in(tmp_path), create_time=started_at))
        # THEN it is passed over, and the note says why
        assert result.files == []
        assert "before this rank's process started" in result.notes[0]
        assert "3600 s" in result.notes[0]
        # and a dump written after the process started is read
        os.utime(tmp_path / "trace_3", (started_at + 5, started_at + 5))
        fresh = find_dumps(rank_proc(os.getpid(), env_in(tmp_path), create_time=started_at))
        assert [f.data for f in fresh.files] == [b"last week's job"]

    def test_no_dump_is_a_note(self, tmp_path: Path) -> None:
        result = find_dumps(rank_proc(os.getpid(), env_in(tmp_path)))
        assert result.files == [] and "no flight-recorder dump at" in result.notes[0]
