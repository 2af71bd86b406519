"""Rules written after blind batch 30's first look, each in the general form torch's own output
allows (none is a corpus log): an exception raised inside process-group set-up is set-up failing,
and the launcher's record of that process ending follows from it; a paste that begins inside a
traceback (its header cut off) is still that traceback; a traceback that ends in the DataLoader's
own report of its workers is the loader's failure; a monitoredBarrier that reached the barrier but
heard errors from another rank is that rank's echo; vLLM's message queue finding no block its
workers freed is a worker that stopped reading."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, verdict_of

from hangscope.sources.logs import scan_log

_SITE = "/opt/conda/lib/python3.10/site-packages"

# torch < 2.3's init_process_group waits in the store-based barrier; a store that went away
# (its host restarted, a firewall cut the connection) raises there
_SETUP_FRAMES = f"""  File "train.py", line 41, in <module>
    dist.init_process_group("nccl")
  File "{_SITE}/torch/distributed/distributed_c10d.py", line 786, in init_process_group
    _store_based_barrier(rank, store, timeout)
  File "{_SITE}/torch/distributed/distributed_c10d.py", line 318, in _store_based_barrier
    store.add(store_key, 1)
RuntimeError: Connection reset by peer
"""
# DeepSpeed's launcher reports the worker that exited; the paste is cut inside its command list
_DS_EXIT = ("[2023-03-08 23:09:10,911] [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python',"
            " '-u', 'train.py', '--local_rank=1', '--deepspeed', 'ds_config.json', '--per_device\n")


def test_an_exception_in_process_group_set_up_is_init_not_a_death(tmp_path: Path) -> None:
    text = "Traceback (most recent call last):\n" + _SETUP_FRAMES + \
        "[2023-03-08 23:09:10,901] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 15884\n" \
        + _DS_EXIT
    assert kind_and_culprits(verdict_of(tmp_path, text))[0] == "init_hang"
    # AND the same exception raised in a collective after set-up stays a rank's own failure
    later = text.replace("line 318, in _store_based_barrier", "line 2405, in all_reduce")
    assert kind_and_culprits(verdict_of(tmp_path, later))[0] != "init_hang"


def test_a_paste_that_starts_inside_a_traceback_is_that_traceback(tmp_path: Path) -> None:
    # GIVEN the tail of the traceback above, its header and first frame cut off by the paste
    headless = "    dist.init_process_group(\"nccl\")\n" + _SETUP_FRAMES.split("\n", 2)[2]
    (tmp_path / "cut.log").write_text(headless)
    tracebacks = [e for e in scan_log(str(tmp_path / "cut.log")) if e.kind == "traceback"]
    assert [(e.fields["exc_type"], e.fields["last_function"], e.fields.get("headless"))
            for e in tracebacks] == [("RuntimeError", "_store_based_barrier", 1)]
    # AND a whole traceback is read once, not once more from its first frame
    (tmp_path / "whole.log").write_text("Traceback (most recent call last):\n" + _SETUP_FRAMES)
    assert len([e for e in scan_log(str(tmp_path / "whole.log")) if e.kind == "traceback"]) == 1
    # AND frames cut at both ends (no exception) say too little
    (tmp_path / "both.log").write_text(_SETUP_FRAMES.rsplit("\n", 2)[0] + "\n")
    assert not [e for e in scan_log(str(tmp_path / "both.log")) if e.kind == "traceback"]
    # AND frames further down a log are no paste's start
    (tmp_path / "later.log").write_text("step 1\nstep 2\nstep 3\n" + _SETUP_FRAMES)
    assert not [e for e in scan_log(str(tmp_path / "later.log")) if e.kind == "traceback"]


def test_a_traceback_ending_in_the_loaders_report_is_the_loaders_failure(tmp_path: Path) -> None:
    text = f"""[rank0]: Traceback (most recent call last):
[rank0]:   File "train.py", line 88, in <module>
[rank0]:     for batch in loader:
[rank0]:   File "{_SITE}/torch/utils/data/dataloader.py", line 1144, in _try_get_data
[rank0]:     raise RuntimeError(f'DataLoader worker (pid(s) {{pids_str}}) exited unexpectedly') from e
[rank0]: RuntimeError: DataLoader worker (pid(s) 8864) exited unexpectedly
"""
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("dataloader_stall", [0])


def test_a_monitored_barrier_that_heard_errors_from_a_rank_is_an_echo(tmp_path: Path) -> None:
    # GIVEN rank 3's traceback: it reached monitored_barrier and heard errors from rank 0
    text = f"""[rank3]: Traceback (most recent call last):
[rank3]:   File "{_SITE}/torch/distributed/distributed_c10d.py", line 4130, in monitored_barrier
[rank3]:     return group_to_use.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
[rank3]: RuntimeError: Rank 3 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.
"""
    # THEN rank 3 is not the culprit: it names rank 0
    kind, culprits = kind_and_culprits(verdict_of(tmp_path, text))
    assert 3 not in culprits


def test_vllms_message_queue_waiting_on_its_readers_is_a_wait(tmp_path: Path) -> None:
    # GIVEN vLLM's engine cores, each writer finding no block its workers had read for a minute
    line = ("(EngineCore_DP{dp} pid=145{dp}) INFO 05-28 14:4{m}:2{dp} [shm_broadcast.py:681] No "
            "available shared memory broadcast block found in 60 seconds. This typically happens "
            "when some processes are hanging or doing some time-consuming work (e.g. compilation,"
            " weight/kv cache quantization).")
    text = "\n".join(line.format(dp=dp, m=m) for m in (4, 5) for dp in (0, 1)) + "\n"
    # THEN a worker is read as not reading (a wait, weak: who is not said)
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("missing_rank", [])
