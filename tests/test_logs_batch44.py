"""Rules from blind batch 44's first look, each on wordings other than the case it was written
for, and each with a log that must not trip it: a collector's stamp with a colon over mpirun's
prefix; torch.multiprocessing.spawn's header naming the process of the traceback under it;
Horovod's shutdown as an echo; DDP's parameter-shape check as a mismatch; store methods in c10's
C++ backtrace and the heartbeat monitor's poll of a store that went away are no set-up failure;
torch_xla's rendezvous losing a peer's socket, and its mesh client never connecting; every stack
waiting on its GPU (all-wait-on-gpu)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from _logs_helpers import kind_and_culprits, write_paste

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log


def _verdict(folder: Path, text: str, name: str = "train.log"):  # type: ignore[no-untyped-def]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return analyze(load_paths([str(folder)], LoadOptions())[0])[0]


def _kind(verdict) -> str | None:  # type: ignore[no-untyped-def]
    return verdict.root.kind.value if verdict.root is not None else None


# --- a collector's stamp with a colon, over mpirun's prefix ---------------------------------------

_MPI_TRACEBACK = [
    '[1,2]<stderr>:  File "train.py", line 77, in run_epoch',
    "[1,2]<stderr>:    for images, labels in loader:",
    '[1,2]<stderr>:  File "/usr/lib/python3/site-packages/torch/_utils.py", line 461, in reraise',
    "[1,2]<stderr>:    raise exception",
    "[1,2]<stderr>:ValueError: Caught ValueError in DataLoader worker process 1.",
]


def test_stamped_mpirun_lines_keep_their_rank_and_their_traceback(tmp_path: Path) -> None:
    # GIVEN a paste cut inside rank 2's traceback, every line stamped by a log store with a
    # colon after the zone ("2023-05-02T08:14:09.120Z: "), mpirun's prefix after it, the frames
    # indented after the prefix's colon and the exception not
    text = "".join(f"2023-05-02T08:14:09.{120 + i}Z: {line}\n"
                   for i, line in enumerate(_MPI_TRACEBACK))
    events = scan_log(str(_write(tmp_path / "a", text)))
    # THEN the traceback is read whole, as rank 2's
    tracebacks = [e for e in events if e.kind == "traceback"]
    assert [(e.rank, e.fields["exc_type"]) for e in tracebacks] == [(2, "ValueError")]
    # AND the same lines unstamped read the same
    events = scan_log(str(_write(tmp_path / "b", "\n".join(_MPI_TRACEBACK) + "\n")))
    assert [(e.rank, e.fields["exc_type"]) for e in events if e.kind == "traceback"] == \
        [(2, "ValueError")]


def test_a_program_stamp_followed_by_its_level_is_not_peeled(tmp_path: Path) -> None:
    # a logger's own records ("<stamp>: ERROR ...") keep their time and level for the parser
    text = ("2023-05-02T08:14:09Z: ERROR could not read shard 3\n"
            "2023-05-02T08:14:10Z: INFO retrying shard 3\n")
    events = scan_log(str(_write(tmp_path / "a", text)))
    assert all(e.rank is None for e in events)


_write = partial(write_paste, name="job.log")


# --- spawn's header names the process of the traceback under it -----------------------------------

def _spawned(n: int, exc: str) -> str:
    return (f"-- Process {n} terminated with the following error:\n"
            "Traceback (most recent call last):\n"
            '  File "/opt/venv/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", '
            "line 69, in _wrap\n"
            "    fn(i, *args)\n"
            '  File "/work/fit.py", line 140, in worker\n'
            "    trainer.fit()\n"
            f"{exc}\n")


def test_the_traceback_under_spawns_header_is_that_process(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path / "a", _spawned(3, "KeyError: 'labels'"))
    assert kind_and_culprits(verdict) == ("rank_died", [3])
    # AND a traceback after other lines than the header is not given the header's process
    text = ("-- Process 3 terminated with the following error:\n"
            "see the worker's log for details\n"
            + _spawned(3, "KeyError: 'labels'").split("\n", 1)[1])
    verdict = _verdict(tmp_path / "b", text)
    assert verdict.root is None or verdict.root.culprit_ranks != [3]


# --- Horovod's shutdown is an echo -----------------------------------------------------------------

def test_horovods_shutdown_message_is_the_echo_of_another_ranks_failure(tmp_path: Path) -> None:
    text = ("[1,0]<stderr>:Traceback (most recent call last):\n"
            '[1,0]<stderr>:  File "fit.py", line 51, in <module>\n'
            "[1,0]<stderr>:    loss.backward()\n"
            "[1,0]<stderr>:RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "[1,1]<stderr>:Traceback (most recent call last):\n"
            '[1,1]<stderr>:  File "fit.py", line 53, in <module>\n'
            "[1,1]<stderr>:    hvd.allreduce(metric)\n"
            "[1,1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an "
            "exception on one of the ranks or an attempt to allreduce, allgather or broadcast a "
            "tensor after one of the ranks finished execution.\n")
    verdict = _verdict(tmp_path / "a", text)
    assert verdict.root is not None and verdict.root.culprit_ranks == [0]


# --- DDP's parameter-shape check --------------------------------------------------------------------

def test_ddps_parameter_shape_check_is_a_mismatch_without_a_culprit(tmp_path: Path) -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "main.py", line 88, in <module>\n'
            "    model = DDP(model, device_ids=[local_rank])\n"
            '  File "/usr/lib/python3/site-packages/torch/nn/parallel/distributed.py", line 798, '
            "in __init__\n"
            "    _verify_param_shape_across_processes(self.process_group, parameters)\n"
            "RuntimeError: params[12] in this process with sizes [32001, 4096] appears not to "
            "match sizes of the same param in process 0.\n")
    verdict = _verdict(tmp_path / "a", text)
    assert kind_and_culprits(verdict) == ("collective_mismatch", [])
    assert "built different models" in verdict.root.summary
    # AND a shape error inside one rank's own model is no cross-rank check
    own = text.replace("params[12] in this process with sizes [32001, 4096] appears not to "
                       "match sizes of the same param in process 0.",
                       "mat1 and mat2 shapes cannot be multiplied (8x4096 and 4095x4096)")
    verdict = _verdict(tmp_path / "b", own)
    assert _kind(verdict) != "collective_mismatch"


# --- store methods in c10's backtrace; the heartbeat monitor's poll at the end -------------------

_CXX = ("frame #3: c10d::TCPStore::check(std::vector<std::string> const&) + 0x1d2 (0x7f in "
        "libtorch_cpu.so)\n"
        "frame #4: c10d::ProcessGroupNCCL::{name}() + 0x371 (0x7f in libtorch_cuda.so)\n")


def test_finished_job_whose_ranks_lost_the_store_at_exit_is_healthy(tmp_path: Path) -> None:
    lines = [f"[rank{r}]: step 500/500 loss 2.{r}1" for r in range(4)]
    lines += ["Training complete! Final step: 500"]
    for r in (1, 2, 3):
        lines += [f"[rank{r}]:[W1102 07:29:49.557558286 TCPStore.cpp:125] [c10d] recvValue "
                  "failed on SocketImpl(fd=28, addr=n2:50952, remote=n1:3442): failed to recv, got "
                  "0 bytes",
                  "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/"
                  "Utils.hpp:678 (most recent call first):",
                  *_CXX.format(name="heartbeatMonitor").splitlines(),
                  f"[rank{r}]:[W1102 07:29:49.561572371 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG "
                  f"GUID 0(default_pg) Rank {r}] Failed to check the \"should dump\" flag on "
                  "TCPStore, (maybe TCPStore server has shut down too early), with error: failed "
                  "to recv, got 0 bytes"]
    verdict = _verdict(tmp_path / "a", "\n".join(lines) + "\n")
    assert verdict.status.value == "healthy", [f.summary for f in verdict.findings]


def test_a_stack_waiting_for_the_nccl_id_is_still_set_up(tmp_path: Path) -> None:
    # the caller's frame says where the process waits: the NCCL id's exchange through the store
    text = (_CXX.format(name="broadcastUniqueNCCLID").replace("frame #3", "frame #5")
            .replace("frame #4", "frame #6"))
    verdict = _verdict(tmp_path / "a", text)
    assert _kind(verdict) == "init_hang"
    # AND the store's method alone says nothing
    verdict = _verdict(tmp_path / "b", text.splitlines()[0] + "\n")
    assert _kind(verdict) != "init_hang"


# --- torch_xla ----------------------------------------------------------------------------------------

def test_xla_rendezvous_that_lost_a_peers_socket_is_a_death(tmp_path: Path) -> None:
    text = ("Exception in device=TPU:2: tensorflow/compiler/xla/xla_client/mesh_service.cc:364 : "
            "Failed to meet rendezvous 'eval_metrics': Socket closed (14)\n"
            "Exception in device=TPU:4: tensorflow/compiler/xla/xla_client/mesh_service.cc:364 : "
            "Failed to meet rendezvous 'eval_metrics': Socket closed (14)\n")
    assert _kind(_verdict(tmp_path / "a", text)) == "rank_died"
    # AND a socket that closed on the network's side, not a rendezvous, is not read so
    other = "ERROR: socket closed: failed to send gradients over the network to 10.0.0.2\n"
    assert _kind(_verdict(tmp_path / "b", other)) != "rank_died"


def test_xla_mesh_client_that_never_connected_is_set_up(tmp_path: Path) -> None:
    text = _spawned(2, "RuntimeError: tensorflow/compiler/xla/xla_client/mesh_service.cc:172 : "
                       "Check failed: impl_->channel->WaitForConnected( std::chrono::system_clock"
                       "::now() + std::chrono::seconds(connect_wait_seconds))")
    assert _kind(_verdict(tmp_path / "a", text)) == "init_hang"


# --- all-wait-on-gpu ------------------------------------------------------------------------------

_GDB = ("Thread 1 (Thread 0x7f3a2c1b4740 (LWP 5120)):\n"
        "#0  0x00007f3a2bd1a9c3 in sched_yield () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "#1  0x00007f39f4c2e8a1 in ?? () from /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
        "#2  0x00007f39f4b0a2f7 in cuEventSynchronize () from /usr/lib/x86_64-linux-gnu/"
        "libcuda.so.1\n"
        "#3  0x00007f3a0e1c84a5 in cudaEventSynchronize () from /usr/local/cuda/lib64/"
        "libcudart.so.12\n")


def test_stacks_that_all_wait_on_their_gpu_point_at_a_peer(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path / "a", _GDB, "gdb_bt.txt")
    assert kind_and_culprits(verdict) == ("missing_rank", [])
    assert verdict.root.confidence <= 0.3


def test_a_gpu_wait_beside_a_failure_is_not_read_so(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "rank1.log").write_text(
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n")
    verdict = _verdict(tmp_path / "a", _GDB, "gdb_bt.txt")
    assert kind_and_culprits(verdict) == ("rank_oom", [1])
    # AND a stack blocked on a lock, not the GPU, is not this rule's
    locked = _GDB.replace("cuEventSynchronize", "pthread_mutex_lock").replace(
        "cudaEventSynchronize", "std::mutex::lock")
    verdict = _verdict(tmp_path / "b", locked, "gdb_bt.txt")
    assert not any(f.measures.get("rule") == "all-wait-on-gpu" for f in verdict.findings)
