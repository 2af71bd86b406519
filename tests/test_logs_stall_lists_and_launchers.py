"""Rules written after blind batch 26's first look, each in the general form the software's own
wording allows (Horovod's stall inspector and horovodrun's timestamped output, Polyaxon's log
head, torch's ncclUniqueId exchange and dump-signal lines, torch.multiprocessing.spawn, Ray's
memory monitor, XLA's allocator, gloo's pair.cc; none is a corpus log): a per-rank stall list
names the rank that submitted something else, or never submitted; the launchers' and collectors'
heads are peeled; a rank's stream at a peer's dump signal says whether it is behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from _logs_helpers import kind_and_culprits, verdict_of

_STALL = ("[2024-03-02 10:00:01.123456: W horovod/common/stall_inspector.cc:105] One or more "
          "tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
          "are waiting for remainder of ranks for more than 60 seconds. This may indicate that "
          "different ranks are trying to submit different tensors or that only subset of ranks "
          "is submitting tensors, which will cause deadlock.")


def _ctime(rank: int) -> str:
    """horovodrun --prefix-output-with-timestamp's head, glued to the rank tag."""
    return f"Sat Mar  2 10:00:01 2024[{rank}]<stderr>:"


# --- Horovod's per-rank stall list ---------------------------------------------------------------

def test_the_rank_missing_other_tensors_than_the_rest_is_named(tmp_path: Path) -> None:
    # ranks 0-4 have not submitted the state broadcast only rank 5 sent; rank 5 has not submitted
    # the gradients' allreduces the others sent: rank 5 runs something else
    lines = [_ctime(0) + _STALL, _ctime(0) + "Missing ranks:"]
    lines += [_ctime(0) + f"{r}: [broadcast_object_fn.sz]" for r in range(5)]
    lines.append(_ctime(0) + "5: [DistributedSGD_Allreduce/HorovodAllreduce_grads_0, "
                 "DistributedSGD_Allreduce/HorovodAllreduce_grads_1]")
    verdict = verdict_of(tmp_path, "\n".join(lines) + "\n")
    assert kind_and_culprits(verdict) == ("collective_mismatch", [5])


def test_a_list_whose_head_was_cut_off_is_still_read(tmp_path: Path) -> None:
    # only the per-rank lines were pasted (TensorFlow's op names after "R: [")
    text = ("[0]<stderr>:0: [HorovodBroadcast_global_step_0]\n"
            "[0]<stderr>:1: [HorovodBroadcast_global_step_0]\n"
            "[0]<stderr>:2: [HorovodAllreduce_loss_0, HorovodAllreduce_acc_0]\n")
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("collective_mismatch", [2])


def test_polyaxon_heads_and_blank_lines_between_records(tmp_path: Path) -> None:
    # Polyaxon's "<time> UTC <replica> -- " before mpirun's tag, a blank line after each record:
    # one rank, alone, has not submitted the allreduce
    head = "2024-03-02 10:00:01 UTC master.0 -- [1,0]<stderr>:"
    text = f"{head}{_STALL}\n\n{head}Stalled ranks:\n\n{head}3: [HorovodAllreduce]\n\n"
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("missing_rank", [3])


def test_a_lone_stall_warning_says_a_rank_is_behind_and_no_more(tmp_path: Path) -> None:
    verdict = verdict_of(tmp_path, _STALL + "\n")
    assert kind_and_culprits(verdict) == ("straggler", [])
    assert verdict.root.confidence < 0.5


# --- set-up --------------------------------------------------------------------------------------

@pytest.mark.parametrize("line", [
    # torch before 2.1 spelled it so; the paste starts where the "[1] is " was cut
    "setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value store "
    "by key '0', but store->get('0') got error: Socket Timeout",
    "[1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value "
    "store by key '0', but store->get('0') got error: Socket Timeout",
])
def test_a_rank_waiting_for_the_nccl_id_waits_on_its_owner(tmp_path: Path, line: str) -> None:
    verdict = verdict_of(tmp_path, line + "\n")
    assert kind_and_culprits(verdict) == ("init_hang", [0])


def test_a_launch_script_that_cannot_resolve_the_master_is_set_up(tmp_path: Path) -> None:
    text = ("nslookup: can't resolve 'job-abc-master-0': Name does not resolve\n"
            "waiting for master\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/bin/torchrun", line 8, in <module>\n'
            "    sys.exit(main())\n")
    assert kind_and_culprits(verdict_of(tmp_path, text))[0] == "init_hang"


def test_gloos_connect_error_with_its_address_on_the_next_line(tmp_path: Path) -> None:
    text = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect \n"
            "[10.0.0.7]:45123: Connection refused\n")
    assert kind_and_culprits(verdict_of(tmp_path, text))[0] == "init_hang"


# --- deaths and memory ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    # torch.multiprocessing.spawn's word for which process died
    ("Traceback (most recent call last):\n"
     '  File "train.py", line 90, in <module>\n'
     "    mp.spawn(main_worker, nprocs=4, args=(cfg,))\n"
     "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with "
     "signal SIGKILL\n", ("rank_died", [2])),
    # Ray's memory monitor names the task it killed
    ("(head, rank=1, pid=4503) step 140/143\n"
     "Memory on the node (IP: 10.0.0.5, ID: 3fa2) where the task (task ID: 9e1f, "
     "name=head, rank=1, pid=4503, memory used=180.2GB) was running was 470.1GB / "
     "495.0GB (0.95), which exceeds the memory usage threshold of 0.95. Ray killed this "
     "worker (ID: 77ab) because it was the most recently scheduled task\n", ("rank_oom", [1])),
    # text-generation-inference's launcher names the tensor-parallel shard it started
    ("RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 23.69 GiB total "
     "capacity; 22.80 GiB already allocated; 301.06 MiB free; 22.90 GiB reserved in total by "
     "PyTorch)\n"
     "2024-02-01T08:12:44.120021Z ERROR text_generation_launcher: Shard 0 failed to start\n"
     "2024-02-01T08:12:44.120037Z  INFO text_generation_launcher: Shutting down shards\n"
     "2024-02-01T08:12:44.180441Z  INFO shard-manager: text_generation_launcher: Shard "
     "terminated rank=1\n", ("rank_oom", [0])),
    ("KeyError: 'lm_head.weight'\n"
     "2024-02-01T09:00:01.000001Z ERROR text_generation_launcher: Shard 2 crashed\n",
     ("rank_died", [2])),
], ids=["spawn", "ray-memory-monitor", "tgi-shard-oom", "tgi-shard-crashed"])
def test_a_launchers_word_names_the_process_that_died(tmp_path: Path, text: str,
                                                      expected: tuple[str, list[int]]) -> None:
    assert kind_and_culprits(verdict_of(tmp_path, text)) == expected


@pytest.mark.parametrize(("line", "oom"), [
    ("OP_REQUIRES failed at tpu_execute_op.cc:266 : RESOURCE_EXHAUSTED: Attempting to reserve "
     "10.51G at the bottom of memory. That was not possible. There are 8.97G free.", True),
    # gRPC's limit on a message's size is no memory of the job's
    ("grpc: RESOURCE_EXHAUSTED: Received message larger than max (8388608 vs. 4194304)", False),
])
def test_xlas_allocator_running_out_is_out_of_memory(tmp_path: Path, line: str, oom: bool) -> None:
    found = kind_and_culprits(verdict_of(tmp_path, line + "\n"))
    assert (found is not None and found[0] == "rank_oom") == oom


# --- a rank's own stream at a peer's dump signal -------------------------------------------------

def test_the_rank_that_never_enqueued_the_timed_out_collective_is_behind(tmp_path: Path) -> None:
    head = "ProcessGroupNCCL.cpp:{line}] [PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    text = "".join(f"[rank{rank}]:[E1006 15:30:19.94 {head.format(line=line, rank=rank)} {rest}\n"
                   for rank, line, rest in [
        (2, 655, "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=17, "
                 "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 "
                 "milliseconds before timing out."),
        (2, 2299, "failure detected by watchdog at work sequence id: 17 PG status: last "
                  "enqueued work: 17, last completed work: 16"),
        (0, 1772, "Received a dump signal due to a collective timeout from  rank 2 and we will "
                  "try our best to dump the debug info. Last enqueued NCCL work: 17, last "
                  "completed NCCL work: 16."),
        (1, 1772, "Received a dump signal due to a collective timeout from  rank 2 and we will "
                  "try our best to dump the debug info. Last enqueued NCCL work: 16, last "
                  "completed NCCL work: 16."),
    ])
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("missing_rank", [1])


def test_sagemakers_mpi_head_names_the_rank(tmp_path: Path) -> None:
    # SageMaker's distributed training relays each process's lines under
    # "[1,mpirank:N,algo-H]<stream>:": the rank is N, whatever the host
    text = ("[1,mpirank:0,algo-1]<stderr>:INFO:root:Reducer buckets have been rebuilt in this "
            "iteration.\n"
            "[1,mpirank:5,algo-2]<stderr>:Traceback (most recent call last):\n"
            '[1,mpirank:5,algo-2]<stderr>:  File "/opt/ml/code/train.py", line 88, in <module>\n'
            "[1,mpirank:5,algo-2]<stderr>:    loss.backward()\n"
            "[1,mpirank:5,algo-2]<stderr>:torch.OutOfMemoryError: CUDA out of memory. Tried to "
            "allocate 2.00 GiB. GPU 1 has a total capacity of 39.39 GiB of which 1.02 GiB is "
            "free.\n")
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("rank_oom", [5])
