"""Named rules from blind batches 22 and 23's first looks (issue 18), each on wordings other than
the case it was written for, and each with a log that must not trip it: a run stopped by hand
after it finished, cross-rank checks (DeepSpeed's, Accelerate's), ranks at one sequence number
with other sizes and no majority, a counter named "oom" at zero, fp16 overflow steps as progress,
NCCL's network transport as an error's "Last error", a C++ abort whose exception is a store's
timeout, a job the scheduler ended at its time limit, Megatron's straggler detector's line."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, verdict_of

# --- stopped-after-finish -----------------------------------------------------------------------

HF_DONE = ("{'loss': 0.4127, 'learning_rate': 1e-05, 'epoch': 2.99}\n"
           "{'train_runtime': 812.3, 'train_samples_per_second': 35.1, 'epoch': 3.0}\n"
           "\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n"
           "\n\n")
INTERRUPT = ("^CTraceback (most recent call last):\n"
             '  File "/opt/conda/lib/python3.10/threading.py", line 1567, in _shutdown\n'
             "    lock.acquire()\n"
             "KeyboardInterrupt\n")


def test_a_run_interrupted_by_hand_after_it_finished_hung_at_exit(tmp_path: Path) -> None:
    verdict = verdict_of(tmp_path, HF_DONE + INTERRUPT)
    assert kind_and_culprits(verdict) == ("python_deadlock", [])
    assert verdict.root.measures["rule"] == "stopped-after-finish"
    assert "never exited" in verdict.root.summary
    # the KeyboardInterrupt line alone (no ^C echo) reads the same
    verdict = verdict_of(tmp_path / "bare", HF_DONE + INTERRUPT.replace("^C", ""))
    assert kind_and_culprits(verdict) == ("python_deadlock", [])


def test_a_finished_run_not_interrupted_or_interrupted_before_its_end_is_no_exit_hang(
        tmp_path: Path) -> None:
    assert verdict_of(tmp_path / "done", HF_DONE).status.value == "healthy"
    before = INTERRUPT + HF_DONE  # stopped, then (another run in the same file) finished
    verdict = verdict_of(tmp_path / "before", before)
    assert verdict.root is None or verdict.root.measures.get("rule") != "stopped-after-finish"


# --- ranks-disagree ---------------------------------------------------------------------------

DISAGREE = (
    "[rank3]: Traceback (most recent call last):\n"
    '[rank3]:   File "/usr/lib/python3/site-packages/deepspeed/runtime/zero/'
    'partitioned_param_coordinator.py", line 305, in fetch_sub_module\n'
    "[rank3]:     assert_ints_same_as_other_ranks([p.ds_id for p in params_to_fetch])\n"
    '[rank3]:   File "/usr/lib/python3/site-packages/deepspeed/runtime/utils.py", line 857, '
    "in assert_ints_same_as_other_ranks\n"
    '[rank3]:     raise RuntimeError(f"disagreement between rank0 and rank{dist.get_rank()}: "\n'
    "[rank3]: RuntimeError: disagreement between rank0 and rank3: rank0: [12, 13, 14], "
    "rank3: [12, 40, 41]\n")


def test_deepspeeds_cross_rank_check_is_a_mismatch_not_a_death(tmp_path: Path) -> None:
    verdict = verdict_of(tmp_path, DISAGREE)
    assert kind_and_culprits(verdict) == ("collective_mismatch", [])
    assert verdict.root.measures["rule"] == "ranks-disagree"
    assert "disagreement between rank0 and rank3" in verdict.root.summary


def test_another_runtime_error_in_the_same_place_is_still_the_rank_dying(tmp_path: Path) -> None:
    other = DISAGREE.replace("RuntimeError: disagreement between rank0 and rank3: rank0: "
                             "[12, 13, 14], rank3: [12, 40, 41]",
                             "RuntimeError: CUDA error: an illegal memory access was encountered")
    assert kind_and_culprits(verdict_of(tmp_path, other)) == ("rank_died", [3])


# --- arguments-differ-at-same-op -------------------------------------------------------------

def test_two_ranks_at_one_seq_with_other_sizes_are_a_size_mismatch(tmp_path: Path) -> None:
    text = ("both ranks time out at one SeqNum:\n"
            "[rank0] all_reduce SeqNum=812 NumelIn=1 dtype=float32\n"
            "[rank1] all_reduce SeqNum=812 NumelIn=65536 dtype=float32\n")
    verdict = verdict_of(tmp_path, text)
    assert kind_and_culprits(verdict) == ("size_mismatch", [])
    assert verdict.root.measures["rule"] == "arguments-differ-at-same-op"
    # the same arguments on both: nothing differs
    same = text.replace("NumelIn=65536", "NumelIn=1")
    verdict = verdict_of(tmp_path / "same", same)
    assert verdict.root is None or verdict.root.measures.get("rule") != \
        "arguments-differ-at-same-op"


def test_other_sizes_at_other_seqs_are_no_mismatch(tmp_path: Path) -> None:
    text = ("[rank0] all_reduce SeqNum=812 NumelIn=1\n"
            "[rank1] all_reduce SeqNum=813 NumelIn=65536\n")
    verdict = verdict_of(tmp_path, text)
    assert verdict.root is None or verdict.root.measures.get("rule") != \
        "arguments-differ-at-same-op"


# --- a counter named oom, fp16 overflow steps ---------------------------------------------------

FAIRSEQ = "".join(
    f"| epoch 002:   {n:4d} / 9000 loss=7.1{n % 7}, wps=31000, ups=1, num_updates={9000 + n}, "
    f"lr=0.0005, gnorm=0.4, clip=0.000, oom={oom}, loss_scale=8.000, wall={2000 + n}\n"
    for n, oom in ((100, "0.000"), (200, "0.000"), (300, "0.000")))


def test_an_oom_counter_at_zero_is_no_oom(tmp_path: Path) -> None:
    assert verdict_of(tmp_path, FAIRSEQ).status.value == "healthy"
    # a real OOM after the same lines still reads as one
    oom = FAIRSEQ + ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 "
                     "GiB total capacity; 75.01 GiB already allocated)\n")
    assert verdict_of(tmp_path / "oom", oom).root.kind.value == "rank_oom"


OVERFLOWS = "".join(
    f"[2024-05-02 10:0{i}:1{i},120] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] "
    f"OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {1 << (20 - i)}, reducing to "
    f"{1 << (19 - i)}\n" for i in range(4))


def test_fp16_overflow_steps_are_a_run_that_moves(tmp_path: Path) -> None:
    verdict = verdict_of(tmp_path, OVERFLOWS)
    assert verdict.status.value == "healthy"
    assert "fp16 overflow (loss scale down to 65536)" in verdict.evidence_gaps[0]
    # the same warm-up, then a watchdog timeout: not healthy
    timeout = OVERFLOWS + (
        "[rank0]:[E502 10:40:11.1 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=90, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600001 milliseconds before timing out.\n")
    assert verdict_of(tmp_path / "hang", timeout).status.value != "healthy"


# --- NCCL's network transport as Last error; an abort on a store's timeout -----------------------

def test_an_nccl_error_whose_last_error_is_the_network_transport_is_a_network_fault(
        tmp_path: Path) -> None:
    text = ("[rank5]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
            "c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO "
            "for details), NCCL version 2.21.5\n"
            "[rank5]: ncclSystemError: System call (e.g. socket, malloc) or external library call "
            "failed or device error.\n"
            "[rank5]: Last error:\n"
            "[rank5]: NET/IB : Got completion from peer 10.0.3.17<52021> with status=12 opcode=0 "
            "len=0 vendor err 129 (Recv) localGid ::ffff:10.0.3.12 remoteGidsfe80::1\n")
    assert verdict_of(tmp_path, text).root.kind.value == "network_fault"
    # a Last error that is the rank's own GPU stays the rank's
    gpu = text.replace("NET/IB : Got completion from peer 10.0.3.17<52021> with status=12 "
                       "opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.3.12 "
                       "remoteGidsfe80::1", "Cuda failure 'an illegal memory access was "
                                            "encountered'")
    assert verdict_of(tmp_path / "gpu", gpu).root.kind.value == "rank_died"


def test_an_abort_whose_exception_is_a_store_wait_timeout_is_set_up(tmp_path: Path) -> None:
    text = ("[1,3]<stderr>:terminate called after throwing an instance of 'gloo::IoException'\n"
            "[1,3]<stderr>:  what():  [gloo/rendezvous/prefix_store.cc:52] Wait timeout for "
            "key(s): 3\n"
            "[1,3]<stderr>:*** Received signal 6 ***\n")
    assert verdict_of(tmp_path, text).root.kind.value == "init_hang"
    # an abort whose exception is something else is the process's own death
    other = text.replace("Wait timeout for key(s): 3", "bad_alloc")
    assert verdict_of(tmp_path / "other", other).root.kind.value == "rank_died"


# --- own-death: a traceback cut before its exception, under torch's rank prefix ----------------

def test_the_one_ranks_own_traceback_under_its_rank_prefix_names_it(tmp_path: Path) -> None:
    text = ("      Epoch    GPU_mem   box_loss   cls_loss\n"
            "   204/3000      4.58G      3.062      1.759\n"
            "[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/work/train.py", line 13, in <module>\n'
            "[rank1]:     results = trainer.train()\n")
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("rank_died", [1])
    # the same lines with no rank prefix name nobody
    bare = text.replace("[rank1]: ", "")
    verdict = verdict_of(tmp_path / "bare", bare)
    assert verdict.root is None or verdict.root.culprit_ranks == []


# --- scheduler-stop, and a SLURM job step's id is no training step --------------------------------

MEGATRON = "".join(
    f" iteration {n:8d}/    1000 | consumed samples: {n * 4:10d} | elapsed time per iteration "
    f"(ms): 6{700 + n % 7}.5 | learning rate: 1.500E-04 |\n" for n in (10, 20, 30, 40))
KILLS = ("srun: Job step aborted: Waiting up to 62 seconds for job step to finish.\n"
         "Killing subprocess 43950\nKilling subprocess 43951\n")
STEP_CANCELLED = ("slurmstepd: error: *** STEP 1809655.0 ON r6i4n3 CANCELLED AT "
                  "2021-05-24T09:50:34 DUE TO TIME LIMIT ***\n")
SIGTERM = "Main process received SIGTERM, exiting\n"
JOB_CANCELLED = ("slurmstepd: error: *** JOB 1809655 ON r6i4n3 CANCELLED AT 2021-05-24T09:50:34 "
                 "DUE TO TIME LIMIT ***\n")
TIME_LIMIT = KILLS + STEP_CANCELLED + SIGTERM + JOB_CANCELLED


def test_a_job_the_scheduler_ended_at_its_time_limit_is_no_rank_death(tmp_path: Path) -> None:
    verdict = verdict_of(tmp_path, MEGATRON + TIME_LIMIT)
    assert verdict.status.value == "healthy"
    assert "The scheduler ended the job itself" in verdict.evidence_gaps[0]
    assert "iter 40/1000" in verdict.evidence_gaps[0]  # not "step 1809655"
    # the same teardown without the scheduler's line: the kills are read as deaths
    alone = MEGATRON + KILLS + SIGTERM
    assert verdict_of(tmp_path / "alone", alone).status.value != "healthy"
    # a segfault before the time limit is still a death
    crash = MEGATRON + "Segmentation fault (core dumped)\n" + TIME_LIMIT
    assert verdict_of(tmp_path / "crash", crash).root.kind.value == "rank_died"


# --- Accelerate's shape check; Megatron's straggler detector ---------------------------------------

def test_accelerates_shape_check_is_a_mismatch(tmp_path: Path) -> None:
    text = ("[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/work/train.py", line 15, in main\n'
            "[rank1]:     gathered = gather(tensor)\n"
            "[rank1]: accelerate.utils.operations.DistributedOperationException: Cannot apply "
            "desired operation due to shape mismatches. All shapes across devices must be "
            "valid.\n")
    verdict = verdict_of(tmp_path, text)
    assert kind_and_culprits(verdict) == ("collective_mismatch", [])
    assert "Accelerate's debug-mode check" in verdict.root.summary


def _rtt(mn: float, mn_rank: int, mx: float, mx_rank: int) -> str:
    return (f"INFO:megatron.core.utils:[2024-03-14 23:07:56] | MnRtt/Rnk: {mn}ms/{mn_rank} | "
            f"MxRtt/Rnk: {mx}ms/{mx_rank} | MnPwr/Rnk: 601796W/8 | MxPwr/Rnk: 683801W/18\n")


def test_megatrons_straggler_line_reads_even_or_names_the_slow_rank(tmp_path: Path) -> None:
    even = verdict_of(tmp_path / "even", _rtt(3453.08, 8, 3468.20, 0))
    assert even.status.value == "healthy"
    slow = verdict_of(tmp_path / "slow", _rtt(3453.08, 8, 6120.5, 13))
    assert kind_and_culprits(slow) == ("straggler", [13])


# --- no-break spaces, as a web page or a chat client gives them ------------------------------------

def test_a_paste_with_no_break_spaces_between_its_words_is_read(tmp_path: Path) -> None:
    text = ("[rank1]:[E1124 10:32:41.7 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
            "Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 "
            "milliseconds before timing out.\n")
    plain = verdict_of(tmp_path / "plain", text)
    for space in ("\u00a0", "\u202f"):
        pasted = verdict_of(tmp_path / f"nbsp{ord(space)}", text.replace(" ", space))
        assert kind_and_culprits(pasted) == kind_and_culprits(plain) and pasted.root is not None


def test_ranks_interrupted_by_hand_did_not_die(tmp_path: Path) -> None:
    # Ctrl-C on a job: every rank's KeyboardInterrupt traceback is the stop, not a death
    stops = "".join(
        f"[rank{r}]: Traceback (most recent call last):\n"
        f'[rank{r}]:   File "/work/train.py", line 88, in <module>\n'
        f"[rank{r}]:     dist.barrier()\n"
        f"[rank{r}]: KeyboardInterrupt\n" for r in (0, 1))
    verdict = verdict_of(tmp_path, stops)
    assert verdict.root is None or verdict.root.kind.value != "rank_died"
    # after a finished run, the same stop is the exit that never came
    verdict = verdict_of(tmp_path / "done", HF_DONE + stops)
    assert kind_and_culprits(verdict)[0] == "python_deadlock"
