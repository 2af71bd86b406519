"""Other tools' output read as evidence: Horovod stall reports, torch's FR analyzer text, NCCL INFO
COLL lines and users' own prints (the format-agnostic tier), other launchers' death reports, and the
heads container runtimes and launchers put before a line. Lines are quoted from public threads."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.model import JobEvidence
from hangscope.sources.logs import scan_log
from hangscope.sources.logs.common import Context, parse_line
from hangscope.sources.logs.loader import load_log_file


def _events(text: str, kind: str) -> list[dict[str, object]]:
    return [dict(e.fields, rank=e.rank) for e in scan_log("paste.log", data=text.encode())
            if e.kind == kind]


def _verdict(tmp_path: Path, text: str) -> tuple[str, list[int]]:
    path = tmp_path / "paste.log"
    path.write_text(text)
    evidence = JobEvidence()
    load_log_file(str(path), None, evidence, [])
    verdict, _ = analyze(evidence)
    first = verdict.findings[0] if verdict.findings else None
    return (first.kind.value, sorted(first.culprit_ranks)) if first else ("none", [])


HOROVOD_MISSING = """\
[1,0]<stderr>:[2019-04-13 13:53:31.851506: W horovod/common/operations.cc:588] HorovodBroadcast_dense_1_bias_Momentum_0 [missing ranks: 1]
[1,0]<stderr>:[2019-04-13 13:53:31.851527: W horovod/common/operations.cc:588] HorovodBroadcast_global_step_0 [missing ranks: 1]
"""

HOROVOD_SPLIT = """\
Stalled ops: HorovodAllreduce_loss_Mean_0 [ready ranks: 3], DistributedMomentumOptimizer_Allreduce/HorovodAllreduce_gradients_Conv_0 [ready ranks: 2, 0, 1],
"""

HOROVOD_STALLED_RANKS = """\
[1,0]<stderr>:Stalled ranks:
[1,0]<stderr>:6: [horovod_allreduce.0, horovod_allreduce.1, horovod_allreduce.10 ...]
"""

# Horovod >= 0.21 (horovod/common/stall_inspector.cc) heads the per-rank block "Missing ranks:"
HOROVOD_MISSING_BLOCK = """\
[2021-03-02 10:00:00.000000: W horovod/common/stall_inspector.cc:107] One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock.
Missing ranks:
2: [allreduce.fc1.weight, allreduce.fc1.bias]
"""

# two ranks, each lacking what the other submitted: different collectives
HOROVOD_CROSSED = """\
[1,0]<stderr>:Stalled ranks:
[1,0]<stderr>:0: [HorovodBroadcast_w_0, HorovodBroadcast_b_0]
[1,0]<stderr>:1: [HorovodAllreduce_grad_w_0, HorovodAllreduce_grad_b_0]
"""

FR_TRACE = """\
Not all ranks joining collective: sequence number: 31117
internal record id: 31116
group info: 0:default_pg
collective: nccl:all_reduce
missing ranks: {3, 4, 5, 6, 7}
world size: 8
"""

NCCL_COLL = "".join(
    f"learnfair062:{32615 + 2 * r}:{32615 + 2 * r} [{r}] NCCL INFO Broadcast: opCount 0 sendbuff "
    f"0x7f88e4000000 recvbuff 0x7f88e4000000 count {25503912 if r == 0 else 53} datatype "
    f"{6 if r == 0 else 4} op 0 root 0 comm 0x7f88e005a260 [nranks=8] stream 0x55f20d2f5db0\n"
    for r in range(5))

USER_PRINTS = "".join(f"Rank {r} tensor before allreduce: torch.Size([{409600 if r == 0 else 32768000}]) 1.0\n"
                      for r in (7, 6, 4, 0, 5, 3, 2, 1))


def test_horovod_missing_ranks_are_read_per_op() -> None:
    found = _events(HOROVOD_MISSING, "stall_report")
    assert [(f["op"], f["missing"], f["rank"]) for f in found] == [
        ("HorovodBroadcast_dense_1_bias_Momentum_0", "1", 0),
        ("HorovodBroadcast_global_step_0", "1", 0)]


def test_horovod_stall_names_the_absent_rank(tmp_path: Path) -> None:
    assert _verdict(tmp_path, HOROVOD_MISSING) == ("missing_rank", [1])
    assert _verdict(tmp_path, HOROVOD_STALLED_RANKS) == ("missing_rank", [6])


def test_newer_horovods_missing_ranks_block(tmp_path: Path) -> None:
    assert _verdict(tmp_path, HOROVOD_MISSING_BLOCK) == ("missing_rank", [2])


def test_crossed_submissions_are_a_mismatch(tmp_path: Path) -> None:
    assert _verdict(tmp_path, HOROVOD_CROSSED) == ("collective_mismatch", [])
    # a third rank with rank 1: rank 0 alone is in the other collective, the odd one out
    three = HOROVOD_CROSSED + "[1,0]<stderr>:2: [HorovodAllreduce_grad_w_0]\n"
    assert _verdict(tmp_path, three) == ("collective_mismatch", [0])


def test_disjoint_ready_lists_are_a_mismatch(tmp_path: Path) -> None:
    assert _verdict(tmp_path, HOROVOD_SPLIT) == ("collective_mismatch", [3])


def test_fr_analyzer_missing_ranks(tmp_path: Path) -> None:
    (found,) = _events(FR_TRACE, "stall_report")
    assert (found["seq"], found["op"], found["missing"], found["world_size"]) == \
        (31117, "all_reduce", "3,4,5,6,7", 8)
    assert _verdict(tmp_path, FR_TRACE) == ("missing_rank", [3, 4, 5, 6, 7])


def test_odd_arguments_at_one_op(tmp_path: Path) -> None:
    assert _verdict(tmp_path, NCCL_COLL) == ("size_mismatch", [0])
    assert _verdict(tmp_path, USER_PRINTS) == ("size_mismatch", [0])
    # every rank with the same arguments: nothing to say
    same = USER_PRINTS.replace("409600", "32768000")
    assert _verdict(tmp_path, same)[0] != "size_mismatch"


def test_old_torch_exception_and_elided_watchdog_record() -> None:
    (old,) = _events("RuntimeError: [Rank 1] Caught collective operation timeout: WorkNCCL("
                     "SeqNum=143, OpType=BROADCAST, TensorShape=[1], Timeout(ms)=3600000) ran for "
                     "3600089 milliseconds before timing out.\n", "nccl_watchdog_timeout")
    assert (old["seq"], old["op"], old["timeout_ms"], old["rank"]) == (143, "BROADCAST", 3600000, 1)
    (elided,) = _events("Watchdog caught collective operation timeout: WorkNCCL(... "
                        "OpType=BROADCAST ...)\n", "nccl_watchdog_timeout")
    assert elided["op"] == "BROADCAST" and "seq" not in elided


def test_other_launchers_report_deaths(tmp_path: Path) -> None:
    vllm = ("eap-llm-server-on-arc  | ERROR 11-08 11:01:29 [multiproc_executor.py:135] Worker proc "
            "VllmWorker-3 died unexpectedly, shutting down executor.\n")
    assert _verdict(tmp_path, vllm) == ("rank_died", [3])
    table = ("  rank      : 0 (local_rank: 0)\n  exitcode  : -11 (pid: 3304209)\n"
             "  error_file: <N/A>\n  traceback : Signal 11 (SIGSEGV) received by PID 3304209\n")
    assert _verdict(tmp_path, table) == ("rank_died", [0])


def test_heads_before_the_process_prefix() -> None:
    ctx = Context(path="x", year=2024, now=0.0)
    line = parse_line("12: [E ProcessGroupNCCL.cpp:458] boom", 1, ctx)
    assert (line.rank, line.body) == (12, "boom")
    line = parse_line("1469.worker.1  | [rank2]: boom", 1, ctx)
    assert (line.rank, line.body) == (2, "boom")
    line = parse_line("E       RuntimeError: boom", 1, ctx)
    assert line.body == "RuntimeError: boom"
    line = parse_line("[] [rank=3] || RuntimeError: boom", 1, ctx)  # Determined's head
    assert (line.rank, line.body) == (3, "RuntimeError: boom")
    line = parse_line("loss | 0.5", 1, ctx)  # a plain word before a pipe is not a head
    assert line.body == "loss | 0.5"


def test_container_runtime_and_inference_server_heads_name_the_rank() -> None:
    """CRI's node log head (what kubectl reads) is peeled; sglang's and vLLM's heads carry the
    process's tensor-parallel rank, which is its rank only where no DP/PP rank but 0 is named."""
    ctx = Context(path="x", year=2025, now=0.0)
    line = parse_line("2025-07-25T07:53:08.21748708+08:00 stdout F [2025-07-25 07:53:08 TP2] "
                      "Scheduler hit an exception: Traceback", 1, ctx)
    assert (line.rank, line.rank_source, line.body) == (2, "prefix",
                                                        "Scheduler hit an exception: Traceback")
    assert line.time is not None
    line = parse_line("[2025-07-25 07:53:08 DP1 TP3] boom", 1, ctx)
    assert (line.rank, line.local_rank, line.body) == (None, 3, "boom")
    line = parse_line("[2025-07-25 07:53:08 DP0 TP3 EP3] boom", 1, ctx)
    assert (line.rank, line.body) == (3, "boom")
    line = parse_line("(VllmWorker TP1 pid=4312) ERROR 03-01 10:00:00 boom", 1, ctx)
    assert line.rank == 1
    line = parse_line("(VllmWorker rank=5 pid=4312) boom", 1, ctx)
    assert (line.rank, line.body) == (5, "boom")
    line = parse_line("(Worker_PP1_TP0 pid=4312) boom", 1, ctx)
    assert (line.rank, line.local_rank) == (None, 0)
    line = parse_line("(RayWorkerWrapper pid=4009) boom", 1, ctx)
    assert (line.rank, line.body) == (None, "boom")
    # torchrun's --log-line-prefix-template "[${role_name}${local_rank}|${rank}]:" style
    line = parse_line("[trainer0|0]:1|25|Loss: 1.26:  26%|", 1, ctx)
    assert (line.local_rank, line.body) == (0, "1|25|Loss: 1.26:  26%|")


def _timeouts(ranks: list[int], op: str = "ALLREDUCE", seq: int = 4178) -> str:
    """torch <= 2.3's watchdog line (ProcessGroupNCCL.cpp) for each of ``ranks``."""
    return "".join(f"[E ProcessGroupNCCL.cpp:821] [Rank {r}] Watchdog caught collective operation "
                   f"timeout: WorkNCCL(SeqNum={seq}, OpType={op}, Timeout(ms)=1800000) ran for "
                   f"18033{r}0 milliseconds before timing out.\n" for r in ranks)


def test_rank0_silent_names_rank_0(tmp_path: Path) -> None:
    # GIVEN every rank but 0 timing out in one all_reduce, and rank 0 saying nothing
    assert _verdict(tmp_path, "Evaluating the results...\n" + _timeouts([3, 1, 2])) == \
        ("missing_rank", [0])
    # one rank's paste, rank 0 silent: rank 0 as the likeliest absent rank, a prior (rule
    # rank0-silent's lone form, 0.3; see test_rank0_silent_lone_is_a_prior)
    assert _verdict(tmp_path, _timeouts([1])) == ("missing_rank", [0])
    # rank 0 timed out too: it was in the collective
    assert _verdict(tmp_path, _timeouts([0, 1, 2]))[1] != [0]
    # a gap in the waiting ranks (rank 2 said nothing either): not rank 0 alone
    assert _verdict(tmp_path, _timeouts([1, 3]))[1] != [0]
    # two different collectives: not one the others wait in
    two = _timeouts([1]) + _timeouts([2], op="BROADCAST", seq=4179)
    assert _verdict(tmp_path, two)[1] != [0]


def test_the_peer_side_of_a_monitored_barrier(tmp_path: Path) -> None:
    # ProcessGroupGloo.cpp's message on a non-zero rank whose barrier recv from rank 0 failed
    peer = ("RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors "
            "while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n")
    (found,) = _events(peer, "monitored_barrier_failure")
    assert (found["rank"], found["failed_ranks"], found["peer_side"]) == (1, "0", 1)
    assert _verdict(tmp_path, peer) == ("missing_rank", [0])
    # beside rank 0's own report, which names who failed, the echo names nobody
    own = "[E ProcessGroupGloo.cpp:138] [Rank 0]: Rank 2 failed to pass monitoredBarrier in 30000 ms\n"
    assert _verdict(tmp_path, peer + own) == ("missing_rank", [2])


def test_rank0_silent_with_a_phase_left_unfinished(tmp_path: Path) -> None:
    # GIVEN only two of eight ranks' timeouts, after a dataset scan that stopped at 6%
    scan = "train: Scanning 'labels/train' images and labels...113162 found:   6%|▋ "
    assert _verdict(tmp_path, scan + _timeouts([7, 2], seq=2)) == ("missing_rank", [0])
    # the same timeouts with no phase before them, deep in training: who they wait for is not
    # said (at seq 2 they would be the set-up barrier: test_rank0_silent_at_an_early_barrier)
    assert _verdict(tmp_path, _timeouts([7, 2], seq=48213)) == ("missing_rank", [])
    # a phase line alone is no hang
    assert _verdict(tmp_path, "Evaluating the results...\n") == ("none", [])


def _barrier_timeout(rank: int, seq: int, numel: int = 1, op: str = "ALLREDUCE") -> str:
    """torch 2.0-2.3's watchdog line with the element counts (ProcessGroupNCCL.cpp)."""
    return (f"[E ProcessGroupNCCL.cpp:828] [Rank {rank}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
            "Timeout(ms)=1800000) ran for 1800437 milliseconds before timing out.\n")


def test_rank0_silent_at_an_early_barrier(tmp_path: Path) -> None:
    # GIVEN one rank's timeout in a one-element all_reduce among the job's first collectives
    # (torch's NCCL barrier: main_process_first while rank 0 tokenizes), rank 0 silent
    assert _verdict(tmp_path, _barrier_timeout(1, seq=2)) == ("missing_rank", [0])
    assert _verdict(tmp_path, _barrier_timeout(5, seq=1, op="BARRIER")) == ("missing_rank", [0])
    # several ranks with a gap among them (neither every rank but 0, nor one rank alone):
    # early and one-element, the set-up barrier waits for rank 0
    gap = _barrier_timeout(1, seq=3) + _barrier_timeout(5, seq=3)
    assert _verdict(tmp_path, gap) == ("missing_rank", [0])
    # torch < 2.0 printed no sizes: an early all_reduce is still the barrier
    old = _timeouts([2, 5], seq=3)
    assert _verdict(tmp_path, old) == ("missing_rank", [0])
    # a one-element all_reduce deep into training is a metric or a flag, not the set-up barrier
    late = _barrier_timeout(1, seq=48213) + _barrier_timeout(5, seq=48213)
    assert _verdict(tmp_path, late) == ("missing_rank", [])
    # early, but a gradient-sized all_reduce: not a barrier
    big = _barrier_timeout(1, seq=2, numel=4194304) + _barrier_timeout(5, seq=2, numel=4194304)
    assert _verdict(tmp_path, big) == ("missing_rank", [])
    # rank 0 timed out in it too: rank 0 was there
    both = _barrier_timeout(0, seq=2) + _barrier_timeout(1, seq=2)
    assert _verdict(tmp_path, both)[1] != [0]


def _root(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "paste.log"
    path.write_text(text)
    evidence = JobEvidence()
    load_log_file(str(path), None, evidence, [])
    return analyze(evidence)[0].root


def test_rank0_silent_lone_is_a_prior(tmp_path: Path) -> None:
    # GIVEN one rank's timeout deep in training and no line of rank 0's
    root = _root(tmp_path, _timeouts([6], seq=48213))
    # THEN rank 0, named as a prior at low confidence, with what to fetch to confirm it
    assert root is not None and root.culprit_ranks == [0] and root.waiting_ranks == [6]
    assert root.confidence <= 0.3 and root.measures["form"] == "lone"
    assert "prior" in root.summary and "fetch rank 0's log" in root.summary
    # rank 0 logged a line of its own (not a wait): no prior about an absent rank 0
    root = _root(tmp_path, "[rank0]: step 48000 loss 1.0\n" + _timeouts([6], seq=48213))
    assert root is not None and root.measures.get("form") != "lone"


def test_a_block_of_ranks_missing_between_those_that_timed_out_is_named(tmp_path: Path) -> None:
    # GIVEN ranks 0, 1 and 3 time out in one all_reduce and rank 2 logged nothing (naver/dust3r
    # issue 192's shape)
    line = ("[rank{r}]:[E ProcessGroupNCCL.cpp:523] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=367201, OpType=ALLREDUCE, NumelIn=443012, "
            "NumelOut=443012, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.")
    root = _root(tmp_path, "\n".join(line.format(r=r) for r in (1, 0, 3)) + "\n")
    # THEN rank 2, the gap, is the one they waited for
    assert (root.kind.value, root.culprit_ranks, root.measures["rule"]) == \
        ("missing_rank", [2], "hole-in-timeouts")
    # AND with rank 2's own line there, no hole is read
    root = _root(tmp_path, "\n".join(line.format(r=r) for r in (1, 0, 3, 2)) + "\n")
    assert root is None or root.measures.get("rule") != "hole-in-timeouts"


def test_the_one_rank_of_a_paste_that_states_its_own_death_is_named(tmp_path: Path) -> None:
    # GIVEN only rank 0's prefixed lines: its steps, then a fatal interpreter error (pytorch/
    # torchtitan issue 1066's shape)
    steps = "".join(f"[rank0]:[titan] 2025-04-07 08:16:{10 + i},137 - root - INFO - step: "
                    f"{3800 + 10 * i}  loss:  4.77  memory:  4.99GiB(6.30%)\n" for i in range(4))
    text = steps + "[rank0]:Fatal Python error: none_dealloc: deallocating None\n" \
        "[rank0]:Python runtime state: initialized\n"
    assert _verdict(tmp_path, text) == ("rank_died", [0])


def test_nccls_cuda_device_above_0_is_the_local_rank_of_its_failure(tmp_path: Path) -> None:
    # GIVEN NCCL's own allocation failure on CUDA device 1, not isolated by CUDA_VISIBLE_DEVICES
    # (hiyouga/LLaMA-Factory issue 8036's shape), and nothing else naming the process
    text = ("[2025-05-12 17:31:38] AIS:2375:2649 [1] include/alloc.h:65 NCCL WARN Cuda failure 2 "
            "'out of memory'\nAIS:2375:2649 [1] NCCL INFO transport/shm.cc:534 -> 1\n")
    # THEN under one process per GPU, device 1 is local rank 1 on this one host
    assert _verdict(tmp_path, text) == ("rank_oom", [1])


def test_nccls_proxy_service_names_the_rank_of_its_process(tmp_path: Path) -> None:
    # GIVEN NCCL's allocation failure, then its proxy thread's line in the same process naming
    # rank 93 (NVIDIA/nccl issue 962's shape)
    text = ("node:2134736:2285781 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
            "node:2134736:2285781 [0] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 "
            "bytes\nnode:2134736:2285781 [0] proxy.cc:1518 NCCL WARN [Proxy Service 93] Failed to "
            "execute operation Setup from rank 93, retcode 1\n")
    assert _verdict(tmp_path, text) == ("rank_oom", [93])


def test_a_cuda_device_index_names_no_rank_in_lines_of_several_hosts(tmp_path: Path) -> None:
    # GIVEN two hosts' NCCL lines: both hosts' IB completions fail, then a process of gpu5 on
    # CUDA device 1 fails (NVIDIA/nccl-tests issue 24's shape)
    ib = ("{h}:{p}:{t} [0] transport/net_ib.cu:788 NCCL WARN NET/IB : Got completion with error "
          "12, opcode 1, len 0, vendor err 129\n")
    text = (ib.format(h="gpu5", p=35917, t=35994) + ib.format(h="gpu4", p=35902, t=35977)
            + "gpu5:35917:35917 [1] init.cu:194 NCCL WARN Cuda failure 'an illegal memory access "
            "was encountered'\n")
    # THEN device 1 is no rank of the job (each host has its own local rank 1): the fabric's
    # errors come first
    assert _verdict(tmp_path, text)[0] == "network_fault"
