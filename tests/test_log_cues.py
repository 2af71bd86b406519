"""The last tier (rule ``cue-words``): words that point at a kind where no record was read whole.

Each wording below is one that real software writes (the source is named beside it), not a line of
a corpus log; the negatives are lines every healthy job prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.detectors.weak_cues import _culprits
from hangscope.analysis.engine import analyze
from hangscope.model import LogEvent
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs.cues import classify


@pytest.mark.parametrize(("line", "kind"), [
    # c10d's socket.cpp when the store cannot open its socket (IPv6-less host)
    ("[W socket.cpp:401] [c10d] The server socket cannot be initialized on [::]:29501 (errno: 97 - "
     "Address family not supported by protocol).", "init_hang"),
    # NCCL's socket transport listing the interfaces it uses (net_socket.cc), a docker bridge
    ("[3]br-dd40dc616638:172.30.0.1<0>", "network_fault"),
    # NCCL init.cc's ncclInvalidUsage check
    ("host:2987:3398 [0] init.cc:497 NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both "
     "on CUDA device 1000", "config_skew"),
    # Linux kernel OOM killer (mm/oom_kill.c)
    ("Out of memory: Killed process 4121 (python) total-vm:98765kB, anon-rss:8765kB", "rank_oom"),
    # Kubernetes pod status
    ("Last State: Terminated  Reason: OOMKilled  Exit Code: 137", "rank_oom"),
    # glog's failure signal handler (used by torch's c10 and many C++ extensions)
    ("*** SIGSEGV (@0x0) received by PID 7 (TID 0x7f2b) from PID 0; stack trace: ***", "rank_died"),
    # Open MPI's launcher
    ("mpirun noticed that process rank 3 with PID 0 on node n1 exited on signal 9 (Killed).",
     "rank_died"),
    # torch elastic's ChildFailedError table
    ("  exitcode  : -11 (pid: 4242)", "rank_died"),
    # the CUDA runtime through torch
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "rank_died"),
    # NVRM kernel log: NVLink errors are the fabric's
    ("NVRM: Xid (PCI:0000:18:00): 74, pid=1234, NVLink: fatal error detected on link 3",
     "network_fault"),
    # NCCL's IB transport (net_ib.cc)
    ("host:1:2 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1234> with status="
     "IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129 localGid ::ffff:10.0.0.1", "network_fault"),
    # NCCL's IB transport of 2.19+ (net_ib.cc), any plugin that copies its wording
    ("NET/IB : Got completion from peer 10.0.0.2<5000> with status=12 opcode=0 len=0 vendor err "
     "129 (Send)", "network_fault"),
    # torch's heartbeat monitor (ProcessGroupNCCL.cpp): the watchdog blocked in a NCCL or CUDA
    # call, most often a collective a peer is not in (a GIL deadlock the rarer cause)
    ("[PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 "
     "seconds without making progress in monitoring enqueued collectives.", "missing_rank"),
    # torch's DataLoader (torch/utils/data/dataloader.py)
    ("RuntimeError: DataLoader timed out after 600 seconds", "dataloader_stall"),
    ("RuntimeError: DataLoader worker (pid(s) 4512) exited unexpectedly", "dataloader_stall"),
    # c10d's store and rendezvous
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 "
     "clients joined.", "init_hang"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "init_hang"),
    # gloo's transport when the other side went away (the peer died, not this rank)
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
     "peer [10.1.1.1]:5050", "rank_died"),
    # a watchdog line cut short by a paste, with the abort that follows it: read as the timeout
    ("[rank2]:[E] Watchdog caught collective operation timeout: WorkNCCL(...) ran for 600005 "
     "milliseconds before timing out. -> Signal 6 (SIGABRT)", "missing_rank"),
    # gloo's pair.cc connecting to an address the host name resolved to (Debian's 127.0.1.1)
    ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:769] connect "
     "[127.0.1.1]:25472: Connection refused", "init_hang"),
    # gloo's device.cc when the host name does not resolve
    ("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:127] rp != "
     "nullptr. Unable to find address for: dgx-1.ai", "init_hang"),
    # (but an unreachable route is the network's)
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:769] connect "
     "[10.0.0.2]:25472: No route to host", "network_fault"),
    # TensorFlow's and the CUDA driver API's out-of-memory codes (cuda_driver.cc; CUresult 2 as
    # torch_memory_saver prints it)
    ("E tensorflow/stream_executor/cuda/cuda_driver.cc:924] failed to allocate 13.83G "
     "(14851977216 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY", "rank_oom"),
    ("[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp "
     "func=cu_mem_create line=103", "rank_oom"),
    # torch_xla's mesh service (xla_client/mesh_service.cc), its rendezvous
    ("I 7449 tensorflow/compiler/xla/xla_client/mesh_service.cc:208] Waiting to connect to client "
     "mesh master (300 seconds) 10.164.15.199:8477", "init_hang"),
    ("RuntimeError: tensorflow/compiler/xla/xla_client/mesh_service.cc:172 : Check failed: "
     "impl_->channel->WaitForConnected( std::chrono::system_clock::now() + ...)", "init_hang"),
    # Accelerate's verify_operation before 0.22
    ("accelerate.utils.operations.DistributedOperationException: Impossible to apply the desired "
     "operation due to inadequate shapes. All shapes on the devices must be valid.",
     "collective_mismatch"),
])
def test_a_wording_points_at_its_kind(line: str, kind: str) -> None:
    cue = classify(line)
    assert cue is not None and cue.suggests == kind, cue


@pytest.mark.parametrize("line", [
    "host:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>",
    "host:1:1 [0] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v4 symbol.",
    "init_process_group(backend='nccl', timeout=timedelta(seconds=1800))",
    "epoch 3 step 120/500 loss 0.412 lr 3e-4",
    "NCCL_IB_TIMEOUT set by environment to 22.",
    # the head of Ascend CANN's own error-detail block (not Python's traceback: no exit in it)
    "        TraceBack (most recent call last):",
])
def test_lines_every_healthy_job_prints_are_no_cue(line: str) -> None:
    assert classify(line) is None


def _verdict(tmp_path: Path, text: str):
    log = tmp_path / "job.log"
    log.write_text(text)
    verdict, _ = analyze(load_paths([str(log)], LoadOptions())[0])
    return verdict


def test_the_strongest_cue_names_the_kind_and_the_rank(tmp_path: Path) -> None:
    # GIVEN a launcher's wording no family parser reads: rank 2 killed by the OOM killer, the
    # other ranks exiting after it
    verdict = _verdict(tmp_path, "\n".join([
        "[rank0]: step 10 loss 1.0", "[rank1]: step 10 loss 1.0", "[rank2]: step 10 loss 1.0",
        "[rank2]: launcher: worker ran out of memory, exit code 137",
        "[rank0]: exited with code 1", "[rank1]: exited with code 1", ""]))
    root = verdict.root
    assert root is not None and root.kind.value == "rank_oom"
    assert root.culprit_ranks == [2]
    assert root.confidence < 0.5 and "cue-words" in root.summary
    assert root.evidence and root.evidence[0].where.endswith(":4")


def test_a_warning_the_job_went_on_after_is_no_fault(tmp_path: Path) -> None:
    # GIVEN a network warning, then steps that go on
    verdict = _verdict(tmp_path, "\n".join([
        "WARNING: socket send to 10.0.0.2:29500 failed (errno 104), retrying",
        "step 1 loss 0.9", "step 2 loss 0.8", "step 3 loss 0.7", ""]))
    assert verdict.root is None


def test_a_ray_summary_of_repeats_after_an_error_is_no_going_on(tmp_path: Path) -> None:
    # GIVEN the driver's network error, then a workers' progress bar Ray relays as a summary
    # of repeats (buffered for seconds and printed after the fact, so it is no later step)
    error = ["ncclSystemError: System call (e.g. socket, malloc) or external library call "
             "failed or device error.", "Last error:",
             "socketStartConnect: Connect to 10.1.0.7<40815> failed : Connection refused"]
    relayed = "Loading checkpoint shards: 100%|##########| 4/4 [00:14<00:00,  3.59s/it]"
    verdict = _verdict(tmp_path, "\n".join(
        [*error, f"{relayed} [repeated 6x across cluster]", ""]))
    assert verdict.root is not None and verdict.root.kind.value == "network_fault"
    # the same bar printed as it happened, and steps after it: the job went on
    (tmp_path / "on").mkdir()
    verdict = _verdict(tmp_path / "on", "\n".join(
        [*error, relayed, "step 1 loss 0.9", "step 2 loss 0.8", ""]))
    assert verdict.root is None or verdict.root.kind.value != "network_fault"


def test_sole_peer_names_the_other_rank_of_two() -> None:
    # rank 1 of two says its peer went away: the culprit is rank 0, never rank 1 itself
    line = LogEvent(kind="cue", message="Connection closed by peer", path="x.log", line_no=3,
                    rank=1, fields={"cue": "peer-gone"})
    assert _culprits("peer-gone", [line], {0, 1}) == ([0], "sole-peer")
    assert _culprits("peer-gone", [line], {0, 1, 2}) == ([], None)  # which peer, it does not say


def test_a_cue_never_outranks_a_finding_read_in_full(tmp_path: Path) -> None:
    # GIVEN a watchdog timeout torch writes whole, and a Traceback line beside it
    verdict = _verdict(tmp_path, "\n".join([
        "[rank1]:[E ProcessGroupNCCL.cpp:1575] [PG 0 (default_pg) Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
        "[rank1]: Traceback (most recent call last):", ""]))
    assert all("cue-words" not in f.summary for f in verdict.findings)


def test_a_cause_comes_before_a_wait_no_record_names(tmp_path: Path) -> None:
    # GIVEN watchdog timeouts that name no culprit, and a pod OOM-killed that no rank claims
    verdict = _verdict(tmp_path, "\n".join([
        "[rank0]:[E ProcessGroupNCCL.cpp:1575] [PG 0 (default_pg) Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
        "[rank1]:[E ProcessGroupNCCL.cpp:1575] [PG 0 (default_pg) Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
        "pod trainer-worker-3 terminated: Reason: OOMKilled", ""]))
    kinds = [f.kind.value for f in verdict.findings]
    # THEN the OOM is the root: it explains the wait
    assert kinds[:1] == ["rank_oom"], kinds
    assert "cause-over-symptom" in verdict.findings[0].summary


def test_an_abort_does_not_explain_a_wait(tmp_path: Path) -> None:
    # GIVEN the same timeouts and torchrun's report that a worker ended on SIGABRT (what torch
    # does to a rank whose collective timed out)
    verdict = _verdict(tmp_path, "\n".join([
        "[rank0]:[E ProcessGroupNCCL.cpp:1575] [PG 0 (default_pg) Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
        "[rank1]:[E ProcessGroupNCCL.cpp:1575] [PG 0 (default_pg) Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.",
        "launcher: worker process exited with exitcode -6", ""]))
    assert verdict.findings and verdict.findings[0].kind.value != "rank_died"


def test_a_phase_line_behind_a_launcher_prefix_is_a_cue(tmp_path: Path) -> None:
    # GIVEN rank 0's evaluation line behind torch's ``[rank0]:`` head, and rank 1's timeout after
    from hangscope.sources.logs.cues import scan_cues
    log = tmp_path / "log.txt"
    log.write_text("[rank0]: Evaluating: 100 batches\n"
                   "[rank1]: RuntimeError: Timed out waiting for all ranks\n")
    # THEN the phase line is read as rank 0's (the cue anchored at the body's start still applies)
    cues = {(e.rank, e.fields["cue"]) for e in scan_cues(str(log))}
    assert (0, "busy-phase") in cues


def test_a_bar_tqdm_rounds_to_100_percent_is_unfinished_by_its_count(tmp_path: Path) -> None:
    from hangscope.sources.logs.cues import scan_cues
    log = tmp_path / "log.txt"
    log.write_text("Generation Evaluation: 100%|#########9| 497/499 [18:29:58<05:20, 160.10s/it]\n"
                   "Generation Evaluation: 100%|##########| 499/499 [18:35:18<00:00, 160.10s/it]\n")
    cues = [e.line_no for e in scan_cues(str(log)) if e.fields["cue"] == "busy-phase"]
    assert cues == [1]  # 497 of 499 is not done; 499 of 499 is


# c10d's socket.cpp (TCPStore server start-up) and torch elastic's agent, as they log set-up
_SETUP_LINES = [
    "[I socket.cpp:462] [c10d - debug] The server socket is attempting to listen on [::]:23456.",
    "[I socket.cpp:522] [c10d] The server socket has started to listen on [::]:23456.",
]


def test_a_log_that_stops_in_process_group_setup_is_an_init_hang(tmp_path: Path) -> None:
    # GIVEN a log whose last lines are the store's server starting to listen, nothing after
    verdict = _verdict(tmp_path, "\n".join(["Using distributed PyTorch with gloo backend",
                                            *_SETUP_LINES, ""]))
    # THEN rule cue-words reads it as set-up that never completed, naming no culprit
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("init_hang", [])
    assert first.measures.get("cue") == "setup-stops"
    assert "stops in process-group set-up" in first.summary


def test_setup_lines_followed_by_training_are_not_a_hang(tmp_path: Path) -> None:
    # GIVEN the same set-up lines, then the job's own output past them
    verdict = _verdict(tmp_path, "\n".join([*_SETUP_LINES, "Train Epoch: 1 [0/60000] loss: 2.30",
                                            "Train Epoch: 1 [640/60000] loss: 1.20",
                                            "Train Epoch: 1 [1280/60000] loss: 0.80", ""]))
    # THEN set-up is not what the log stops in
    assert all(f.measures.get("cue") != "setup-stops" for f in verdict.findings)
    # and a set-up line that says it completed is no set-up cue either
    assert classify("[c10d] Rank 0: Completed store-based barrier for key:store_based_barrier_key:1"
                    " with 2 nodes.") is None


# c10d's store client (socket.cpp's waitForInput) timing out on its rendezvous endpoint
_STORE_TIMEOUT = ("[W228 18:45:15.741177013 socket.cpp:487] [c10d] waitForInput: socket SocketImpl("
                  "fd=11, addr=[node1]:38674, remote=[10.0.0.1]:23456) timed out after 900000ms")


def test_a_store_timeout_before_any_training_is_setup(tmp_path: Path) -> None:
    # GIVEN torchrun's banner and the store client timing out, then its traceback: nothing trained
    verdict = _verdict(tmp_path, "\n".join([
        "*****************************************", _STORE_TIMEOUT,
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py", line 919, in main',
        "torch.distributed.DistNetworkError: failed to recv, got 0 bytes", ""]))
    # THEN set-up did not complete
    first = verdict.findings[0]
    assert first.kind.value == "init_hang" and first.measures.get("cue") in ("store-timeout", "init")


@pytest.mark.parametrize("before", [
    "ep 1 dev eval, step 99, min_wer 0.083, ce 0.286",  # training progress
    "Tokenizing Prompts (num_proc=64):  92%|#########2| 328986/359152 [29:58<12:05]",  # a phase
])
def test_a_store_timeout_after_the_job_began_is_a_rank_elsewhere(tmp_path: Path,
                                                                  before: str) -> None:
    # GIVEN a line showing the job had begun, then the store timing out (TCPStore::doWait)
    verdict = _verdict(tmp_path, "\n".join([
        before, "RuntimeError: Socket Timeout",
        "Exception raised from doWait at ../torch/csrc/distributed/c10d/TCPStore.cpp:445 "
        "(most recent call first):", ""]))
    # THEN rule store-wait: the store was a barrier, and a rank never wrote its key
    first = verdict.findings[0]
    assert first.kind.value == "missing_rank"
    assert first.measures.get("rule") == "store-wait" and "rule `store-wait`" in first.summary


@pytest.mark.parametrize("tail", [
    # llamafactory's launcher and vLLM's pynccl, as they start the job's communicators
    ["[INFO|2025-03-16 05:16:14] llamafactory.cli:157 >> Initializing 1 distributed tasks at: "
     "10.2.3.4:29500", "Multi-node training enabled: num nodes: 3, node rank: 0"],
    ["(VllmWorkerProcess pid=1153488) INFO 09-03 02:15:42 pynccl.py:63] vLLM is using "
     "nccl==2.21.5", "INFO 09-03 02:15:42 pynccl.py:63] vLLM is using nccl==2.21.5"],
])
def test_frameworks_setup_lines_at_the_end_are_setup_stops(tmp_path: Path, tail: list[str]) -> None:
    verdict = _verdict(tmp_path, "\n".join(["loading model", *tail, ""]))
    first = verdict.findings[0]
    assert first.kind.value == "init_hang" and first.measures.get("cue") == "setup-stops"


@pytest.mark.parametrize(("line", "kind"), [
    # NCCL's CUDACHECK (transport/nvls.cc) and its error-return trace of ncclUnhandledCudaError
    ("transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'", "rank_died"),
    ("node23:12098:12141 [2] NCCL INFO init.cc:1196 -> 1", "rank_died"),
    # gloo binding to loopback where the host name does not resolve (ProcessGroupGloo.cpp)
    ("[rank9]:[W ProcessGroupGloo.cpp:721] Warning: Unable to resolve hostname to a (local) "
     "address. Using the loopback address as fallback.", "init_hang"),
    # a traceback's last line with its head cut off
    ("[rank5]: IndexError: The shape of the mask [198] at index 0 does not match", "rank_died"),
    # NCCL's shmutils.cc when /dev/shm (host memory) is full
    ("node7:1201:1300 [3] misc/shmutils.cc:129 NCCL WARN Error while creating shared memory "
     "segment /dev/shm/nccl-a9Xk2f (size 9637888), error: No space left on device (28)",
     "rank_oom"),
    # Ascend CANN's EJ0001, as torch_npu's HCCL set-up raises it
    ("EJ0001: 2024-06-01-08:00:00.000.000 Failed to initialize the HCCP process. Reason: Maybe "
     "the last training process is running.", "init_hang"),
])
def test_more_wordings_point_at_their_kind(line: str, kind: str) -> None:
    cue = classify(line.split("]: ", 1)[-1] if line.startswith("[rank5]") else line)
    assert cue is not None and cue.suggests == kind, cue


def test_an_exception_line_is_filed_under_a_more_specific_cue_first() -> None:
    cue = classify("RuntimeError: Tensors must have the same shape: size mismatch in all_gather")
    assert cue is not None and cue.name == "mismatch-words"


def test_a_gloo_loopback_warning_names_its_rank(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "\n".join([
        "[rank8]:[W ProcessGroupGloo.cpp:721] Warning: Unable to resolve hostname to a (local) "
        "address. Using the loopback address as fallback.",
        "[rank0]:[E ProcessGroupGloo.cpp:144] Gloo connectFullMesh failed with timed out "
        "connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:14215", ""]))
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("init_hang", [8])


def test_set_up_lines_of_some_ranks_of_a_known_size_name_the_others(tmp_path: Path) -> None:
    # GIVEN Lightning's set-up line from ranks 0-3 of 8, and nothing after
    verdict = _verdict(tmp_path, "\n".join(
        ["GPU available: True, used: True"]
        + [f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in (1, 2, 0, 3)] + [""]))
    # THEN rule setup-missing-ranks: ranks 4-7 never reached set-up
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("init_hang", [4, 5, 6, 7])
    assert first.measures["rule"] == "setup-missing-ranks"


@pytest.mark.parametrize(("line", "kind"), [
    # NCCL's socket.cc retrying while it connects at set-up (ports blocked between nodes)
    ("hostname:26407:26474 NCCL INFO Call to connect returned Connection refused, retrying...",
     "init_hang"),
    # ibstat: an HCA port down
    ("                State: Down", "network_fault"),
    ("                Physical state: Disabled", "network_fault"),
    # ps aux: the job's children as zombies
    ("user+       58 51.7  0.0      0     0 ?        Z    14:27  26:20 [python] <defunct>",
     "dataloader_stall"),
])
def test_tool_output_wordings_point_at_their_kind(line: str, kind: str) -> None:
    cue = classify(line)
    assert cue is not None and cue.suggests == kind, cue


def test_a_paste_that_ends_with_one_shape_printed_differently_is_a_size_mismatch(
        tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "loading model\nCHOSEN LOGPS SHAPE: torch.Size([1])\n"
                                 "CHOSEN LOGPS SHAPE: torch.Size([5])\n")
    first = verdict.findings[0]
    assert first.kind.value == "size_mismatch" and first.measures["rule"] == "last-shapes-differ"


def test_last_shapes_that_name_their_ranks_name_the_odd_one(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "".join(f"rank {r} logits shape: torch.Size([8, {n}])\n"
                                         for r, n in ((0, 512), (1, 512), (2, 640), (3, 512))))
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("size_mismatch", [2])


def test_equal_last_shapes_are_nothing(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "rank 0 shape: torch.Size([8, 512])\n"
                                 "rank 1 shape: torch.Size([8, 512])\n")
    assert all(f.measures.get("rule") != "last-shapes-differ" for f in verdict.findings)


def test_set_up_lines_of_ranks_scattered_over_the_job_name_nobody(tmp_path: Path) -> None:
    # GIVEN an excerpt of a 32-rank job's set-up lines (Lightning prints each twice: its own INFO
    # line and the Python logger's glog-style line), ranks 6, 1, 4, 3 and 19: a trimmed paste
    lines = []
    for r in (6, 1, 4, 3, 19):
        lines += [f"INFO: Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/32",
                  f"I0411 01:28:10.3458{r:02d} 1406562983{r:02d} distributed.py:244] Initializing "
                  f"distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/32"]
    verdict = _verdict(tmp_path, "\n".join([*lines, ""]))
    first = verdict.findings[0]
    # THEN an init hang with no culprit: neither the missing ranks (the paste was cut) nor the
    # ranks whose line shows twice (one process, two log handlers: no duplicate rank)
    assert (first.kind.value, first.culprit_ranks) == ("init_hang", [])
    assert "duplicate" not in first.summary


def test_one_global_rank_claimed_by_two_processes_is_a_duplicate(tmp_path: Path) -> None:
    # GIVEN two nodes launched with the same NODE_RANK: rank 1 is claimed twice, by lines of one
    # shape (two processes), not by one process's two handlers
    verdict = _verdict(tmp_path, "\n".join(
        f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4" for r in (0, 1, 0, 1))
        + "\n")
    first = verdict.findings[0]
    assert first.kind.value == "init_hang" and "GLOBAL_RANK 1 was taken by 2" in first.summary


def test_a_gloo_mesh_whose_own_end_is_loopback_is_set_up_on_the_wrong_interface(
        tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "\n".join([
        "RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/"
        "transport/tcp/pair.cc:152]",
        "  timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:<port>",
        "  (rank=8, size=16, local=[127.0.0.1])", ""]))
    root = verdict.root
    assert root is not None and root.kind.value == "init_hang" and root.culprit_ranks == [8]
    # a mesh failure between real addresses says nothing of loopback
    (tmp_path / "real").mkdir()
    verdict = _verdict(tmp_path / "real", "RuntimeError: Gloo connectFullMesh failed ... "
                       "(rank=8, size=16, local=[10.0.3.7])\n")
    assert verdict.root is None or "loopback" not in verdict.root.summary


# torch_npu on Ascend (CANN): the exception's one line, then its detail, which says an HCCL task
# ran out of time in a collective; and the same traceback with a device fault as its detail
_NPU_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "train.py", line 88, in <module>',
    "    dist.all_reduce(loss)",
    '  File "/usr/local/lib/python3.9/site-packages/torch/distributed/distributed_c10d.py", line '
    "1536, in all_reduce",
    "    work.wait()",
    "RuntimeError: ACL stream synchronize failed.",
    "EI9999: Inner Error!",
]
_HCCL_TIMEOUT = (
    "EI9999: 2025-01-07-03:11:45.120.377  The error from device(chipId:5, dieId:0), serial number "
    "is 12, hccl fftsplus task timeout occurred during task execution, stream_id:3, sq_id:3, "
    "task_id:1021, stuck notify num:1, timeout:30min(default).[FUNC:ProcessStarsHcclFftsPlusTime"
    "outErrorInfo][FILE:device_error_proc.cc][LINE:1323]")
_CANN_TRACE = ["        TraceBack (most recent call last):",
               "        rtStreamSynchronize execute failed, reason=[task timeout][FUNC:FuncErrorReas"
               "on][FILE:error_message_manage.cc][LINE:53]"]


def test_an_exception_whose_detail_is_a_collective_timeout_is_the_wait(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, "\n".join([*_NPU_TRACEBACK, _HCCL_TIMEOUT, *_CANN_TRACE, ""]))
    root = verdict.root
    assert root is not None and root.kind.value == "missing_rank", root
    assert "hccl fftsplus task timeout" in root.summary


def test_an_exception_whose_detail_is_no_wait_stays_a_failure(tmp_path: Path) -> None:
    fault = ("EI9999: 2025-01-07-03:11:45.120.377  The error from device(chipId:5, dieId:0), "
             "serial number is 12, there is an aicore error exception, core id is 3.")
    verdict = _verdict(tmp_path, "\n".join([*_NPU_TRACEBACK, fault, ""]))
    root = verdict.root
    assert root is not None and root.kind.value == "rank_died", root


def test_a_shared_memory_segment_refused_for_another_reason_is_no_oom() -> None:
    cue = classify("node7:1201:1300 [3] misc/shmutils.cc:129 NCCL WARN Error while creating shared "
                   "memory segment /dev/shm/nccl-a9Xk2f (size 9637888), error: Permission denied")
    assert cue is None or cue.suggests != "rank_oom"


def test_a_fault_line_no_prefix_names_is_the_rank_whose_traceback_follows(tmp_path: Path) -> None:
    # GIVEN a CUDA kernel's device-side assert (printed by the runtime, no launcher prefix; the
    # text of ATen's _assert_async_cuda_kernel), then the head of rank 1's traceback, in a job
    # whose other ranks log their steps
    verdict = _verdict(tmp_path, "\n".join([
        "[rank0]: step 81 loss 0.52", "[rank1]: step 81 loss 0.50", "[rank2]: step 81 loss 0.51",
        "/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:112: _assert_async_cuda_kernel: "
        "block: [0,0,0], thread: [0,0,0] Assertion `probability tensor contains either `inf`, "
        "`nan` or element < 0` failed.",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/app/train.py", line 7, in <module>', ""]))
    # THEN rank 1 is the one that faulted (rule traceback-after)
    root = verdict.root
    assert root is not None and root.kind.value == "rank_died"
    assert root.culprit_ranks == [1]
    assert "traceback-after" in root.summary


def test_a_fault_line_followed_by_no_traceback_names_no_one(tmp_path: Path) -> None:
    # GIVEN the same assert, then another rank's line before rank 1's traceback
    verdict = _verdict(tmp_path, "\n".join([
        "[rank0]: step 81 loss 0.52", "[rank1]: step 81 loss 0.50", "[rank2]: step 81 loss 0.51",
        "/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:112: _assert_async_cuda_kernel: "
        "block: [0,0,0], thread: [0,0,0] Assertion `probability tensor contains either `inf`, "
        "`nan` or element < 0` failed.",
        "[rank2]: saving the checkpoint to /ckpt/step_81",
        "[rank1]: Traceback (most recent call last):", ""]))
    # THEN the fault is read, but it is nobody's in particular
    root = verdict.root
    assert root is not None and root.kind.value == "rank_died"
    assert root.culprit_ranks == [] and "traceback-after" not in root.summary
