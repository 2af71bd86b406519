"""Reports other tools print about a job (a straggler detector, NCCL's RAS, nccl-tests) and a
job's own per-rank completion lines, read as verdicts. Each text is in the wording the named
software writes (sources cited beside it), not a corpus log."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

# torch >= 2.2's watchdog record, on the rank it names
WATCHDOG = ("[rank{r}]:[E603 17:48:01.005271823 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=2398459, OpType=ALLREDUCE, "
            "NumelIn=8652160, NumelOut=8652160, Timeout(ms)=1800000) ran for 1800068 milliseconds "
            "before timing out.")


def _verdict(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    log = tmp_path / "log.txt"
    log.write_text(text)
    evidence, _ = load_paths([str(log)], LoadOptions())
    return analyze(evidence)[0]


def _root(tmp_path: Path, text: str) -> tuple[str | None, list[int], str]:
    verdict = _verdict(tmp_path, text)
    if not verdict.findings:
        return None, [], verdict.status.value
    root = verdict.findings[0]
    return root.kind.value, root.culprit_ranks, str(root.measures.get("rule", ""))


# NVIDIA Resiliency Extension's straggler detector (ptl_resiliency / NeMo callback)
NVRX_SCORES = """GPU relative performance:
  Rank=0 Node=node-a Score={s0}
  Rank=1 Node=node-a Score=1.00
  Rank=2 Node=node-b Score=0.97
GPU individual performance:
  Rank=0 Node=node-a Score=0.99
  Rank=1 Node=node-a Score=0.98
  Rank=2 Node=node-b Score=0.99
"""


def test_a_straggler_warning_names_its_ranks(tmp_path: Path) -> None:
    text = (NVRX_SCORES.format(s0="0.41") + "STRAGGLER DETECTION WARNING: Some GPUs have worse "
            "relative performance. Affected ranks: {0}\n")
    assert _root(tmp_path, text) == ("straggler", [0], "straggler-report")


def test_a_score_under_the_threshold_is_a_straggler(tmp_path: Path) -> None:
    assert _root(tmp_path, NVRX_SCORES.format(s0="0.41")) == ("straggler", [0], "low-perf-score")


def test_scores_all_near_the_best_are_a_healthy_run(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, NVRX_SCORES.format(s0="0.95"))
    assert verdict.status == Status.HEALTHY and not verdict.findings


def test_a_clean_report_does_not_hide_a_timeout(tmp_path: Path) -> None:
    # FlagScale's all-clear, then a rank's watchdog timing out: not healthy
    text = "=== Straggler Report at Step 10 ===\nNo stragglers detected.\n" + WATCHDOG.format(r=3)
    verdict = _verdict(tmp_path, text + "\n")
    assert verdict.status != Status.HEALTHY


def test_no_stragglers_detected_is_healthy_and_not_a_slowness_cue(tmp_path: Path) -> None:
    text = "[default0]:=== Straggler Report at Step 10 ===\n[default0]:No stragglers detected.\n"
    verdict = _verdict(tmp_path, text)
    assert verdict.status == Status.HEALTHY and not verdict.findings


@pytest.mark.parametrize(("lines", "healthy"), [
    # every rank of 0..3 says it is through
    ([f"[MPI Rank {r}] runCount: 10000 Success" for r in (2, 0, 3, 1)], True),
    ([f"rank {r} finished successfully" for r in range(4)], True),
    # rank 2 never said so, and its lines are here
    ([f"[rank{r}]: finished successfully" for r in (0, 1, 3)] + ["[rank2]: step 40 loss 2.1"],
     False),
    # only the ranks the paste shows said so: every rank whose lines are here finished
    ([f"[rank{r}]: finished successfully" for r in (0, 3, 5)], True),
    # a completion line that is a failure
    ([f"rank {r} finished with errors" for r in range(2)], False),
    (["rank 0 completed", "rank 1 failed: not completed"], False),
])
def test_every_rank_saying_it_finished_is_a_finished_run(tmp_path: Path, lines: list[str],
                                                         healthy: bool) -> None:
    verdict = _verdict(tmp_path, "\n".join(lines) + "\n")
    assert (verdict.status == Status.HEALTHY) is healthy


# nccl-tests' src/common.cu output
TESTS_HEAD = """# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  21284 on     host-a device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  21284 on     host-a device  1 [0x0b] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
TESTS_ROWS = """           8             2     float     sum      -1    24.11    0.00    0.00      0    23.87    0.00    0.00      0
          16             4     float     sum      -1    24.02    0.00    0.00      0    23.95    0.00    0.00      0
"""


def test_nccl_tests_that_never_printed_a_row_stalled_in_flight(tmp_path: Path) -> None:
    assert _root(tmp_path, TESTS_HEAD) == ("network_fault", [], "tests-no-result")


def test_nccl_tests_that_finished_is_no_fault(tmp_path: Path) -> None:
    text = TESTS_HEAD + TESTS_ROWS + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.00\n"
    kind, _, _ = _root(tmp_path, text)
    assert kind != "network_fault"


# NCCL RAS text report (src/ras/client_support.cc)
RAS_CLEAN = """Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      2          4            1          8        8

Communicators... (0.01s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         4         8         8   RUNNING      OK

Errors
======

Warnings
========

"""
RAS_MISMATCH = RAS_CLEAN.replace("""Warnings
========
""", """Warnings
========

#0-0 (9e6f2a1c3b5d7f80) MISMATCH
  Communicator ranks have different AllReduce operation counts
  7 ranks have launched up to operation 1045
  Rank 5 has launched up to operation 1044 -- GPU 5 managed by process 8812 on node 10.0.0.2
""")


def test_a_clean_ras_report_beside_a_timeout_is_a_stall_in_flight(tmp_path: Path) -> None:
    assert _root(tmp_path, RAS_CLEAN + WATCHDOG.format(r=6) + "\n") == \
        ("network_fault", [], "ras-clean-timeout")


def test_a_ras_report_with_a_rank_behind_is_not_a_stall_in_flight(tmp_path: Path) -> None:
    _, _, rule = _root(tmp_path, RAS_MISMATCH + WATCHDOG.format(r=6) + "\n")
    assert rule != "ras-clean-timeout"


def test_horovodrun_rank_tags_name_the_rank(tmp_path: Path) -> None:
    # horovodrun tags each line "[R]<stderr>:" (Open MPI's --tag-output writes "[J,R]<stderr>:")
    text = ("[0]<stderr>:RuntimeError: check_rank and exit\n[0]<stderr>:Killed\n"
            "[1]<stderr>:terminate called after throwing an instance of 'gloo::IoException'\n"
            "[1]<stderr>:  what():  [../gloo/transport/tcp/pair.cc:589] Read error "
            "[127.0.0.1]:3977: Connection reset by peer\n[1]<stderr>:Aborted (core dumped)\n")
    kind, culprits, _ = _root(tmp_path, text)
    assert (kind, culprits) == ("rank_died", [0])


def test_the_newest_stall_report_says_who_is_still_missing(tmp_path: Path) -> None:
    # Horovod's stall inspector reprints its warning; rank 3 arrived in between
    op = "MetricAverageCallback/HorovodAllreduce_MetricAverageCallback_acc_0"
    text = (f"{op} [missing ranks: 0, 1, 3, 4]\n" * 3) + (f"{op} [missing ranks: 0, 1, 4]\n" * 2)
    kind, culprits, _ = _root(tmp_path, text)
    assert (kind, culprits) == ("missing_rank", [0, 1, 4])


# NCCL >= 2.19's INFO lines bracketing a communicator's setup (init.cc)
def _nccl_init(pid: int, dev: int, comm: str, what: str) -> str:
    return (f"node-a:{pid}:{pid} [{dev}] NCCL INFO comm {comm} rank {dev} nranks 2 cudaDev {dev} "
            f"nvmlDev {dev} busId {dev + 1}b000 commId 0xfdb9a1387c96bf27 - Init {what}")


def test_a_communicator_started_and_never_completed_is_an_init_hang(tmp_path: Path) -> None:
    lines = [_nccl_init(291, 0, "0x560e1ab19ab0", "START"),
             _nccl_init(291, 0, "0x560e1ab19ab0", "COMPLETE"),
             _nccl_init(291, 0, "0x560e24f599a0", "START")]
    assert _root(tmp_path, "\n".join(lines) + "\n") == \
        ("init_hang", [], "nccl-init-started-not-completed")


def test_nccl_setup_lines_alone_are_a_healthy_run(tmp_path: Path) -> None:
    lines = ["node-a:291:291 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
             "node-a:291:291 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.",
             _nccl_init(291, 0, "0x560e1ab19ab0", "START"),
             _nccl_init(291, 0, "0x560e1ab19ab0", "COMPLETE")]
    verdict = _verdict(tmp_path, "\n".join(lines) + "\n")
    assert verdict.status == Status.HEALTHY and not verdict.findings
    warned = lines + ["node-a:291:300 [0] NCCL WARN NET/IB : Got completion with error 12"]
    assert _verdict(tmp_path, "\n".join(warned) + "\n").status != Status.HEALTHY


def test_torchs_exit_warning_of_an_undestroyed_group_is_a_finished_run(tmp_path: Path) -> None:
    line = ("[rank0]:[W515 07:06:42.829549331 ProcessGroupNCCL.cpp:1117] WARNING: process group "
            "has NOT been destroyed before it is being destructed. On normal program exit, the "
            "application should call destroy_process_group to ensure that any pending NCCL data "
            "transfers have finished in this process.")
    assert _verdict(tmp_path, line + "\n").status == Status.HEALTHY


def test_gloos_preamble_check_is_a_size_mismatch(tmp_path: Path) -> None:
    text = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
            "  what():  [enforce fail at /opt/pytorch/third_party/gloo/gloo/transport/tcp/"
            "pair.cc:446] op.preamble.length <= op.nbytes. 256000 vs 128000\n")
    kind, _, _ = _root(tmp_path, text)
    assert kind == "size_mismatch"


def test_one_local_rank_closed_by_all_its_neighbours_died(tmp_path: Path) -> None:
    # NCCL proxy.cc's service thread, at INFO, on every other process of the node
    lines = [f"gpu-50:{338 + d}:{1200 + d} [{d}] NCCL INFO [Service thread] Connection closed by "
             "localRank 7" for d in range(7)]
    assert _root(tmp_path, "\n".join(lines) + "\n") == ("rank_died", [], "closed-by-local-rank")
    teardown = lines + ["gpu-50:345:1300 [7] NCCL INFO [Service thread] Connection closed by "
                        "localRank 0"]
    assert _root(tmp_path, "\n".join(teardown) + "\n")[2] != "closed-by-local-rank"
    # the named process logged its own watchdog timeout first: its closing is the teardown the
    # timeout started, not a death
    timeout = ("[rank7]:[E ProcessGroupNCCL.cpp:523] [Rank 7] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, "
               "Timeout(ms)=1800000) ran for 1800013 milliseconds before timing out.")
    assert _root(tmp_path, "\n".join([timeout, *lines]) + "\n")[2] != "closed-by-local-rank"


def test_a_rank_whose_fingerprints_trail_the_others_never_issued_the_collective(
        tmp_path: Path) -> None:
    # torch's ProcessGroupWrapper under TORCH_DISTRIBUTED_DEBUG=DETAIL
    def fp(rank: int, seq: int) -> str:
        return (f"[I ProcessGroupWrapper.cpp:562] [Rank {rank}] Running collective: "
                f"CollectiveFingerPrint(SequenceNumber={seq}, OpType=ALLREDUCE, TensorShape=[], "
                "TensorDtypes=Float)")
    text = "\n".join([fp(2, 1276), fp(0, 1277), fp(1, 1277), fp(3, 1277)]) + "\n"
    assert _root(tmp_path, text) == ("missing_rank", [2], "fingerprint-behind")


def test_a_store_socket_timeout_glued_to_a_progress_bar_is_a_wait(tmp_path: Path) -> None:
    # rank 0's tqdm bar (no newline) then rank 1's c10d store client timing out
    text = ("Tokenizing Prompts (num_proc=64):  92%|#########1| 328986/359152 [29:58<12:05, "
            "41.59 examples/s][rank1]:[W516 14:34:56.854597329 socket.cpp:489] [c10d] "
            "waitForInput: socket SocketImpl(fd=79, addr=[localhost]:41170, "
            "remote=[localhost]:29500) timed out after 1800000ms\n"
            "[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/opt/axolotl/cli/train.py", line 124, in <module>\n')
    kind, _, _ = _root(tmp_path, text)
    assert kind not in ("network_fault", "rank_died")


def test_a_rank_timed_out_past_its_peers_collective_means_the_sequences_diverged(
        tmp_path: Path) -> None:
    # rank 0 timed out at #532341, so it completed #532339, which ranks 1 and 2 are stuck in
    def wd(rank: int, seq: int, op: str, numel: int) -> str:
        return (f"[rank{rank}]:[E513 13:25:57.714781669 ProcessGroupNCCL.cpp:616] [Rank {rank}] "
                f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                f"OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)=1800000) ran for "
                "1800042 milliseconds before timing out.")
    text = "\n".join([wd(2, 532339, "ALLREDUCE", 5164000), wd(1, 532339, "ALLREDUCE", 5164000),
                      wd(0, 532341, "_ALLGATHER_BASE", 513)]) + "\n"
    assert _root(tmp_path, text) == ("collective_mismatch", [0], "timed-out-past-peer")


def test_a_watchdog_record_cut_by_another_process_is_still_read(tmp_path: Path) -> None:
    line = ("[rank1]:[E616 13:41:10.909476913 ProcessGroupNCCL.cpp:565] [Rank 1] Watchdog caught "
            "collective operatMERS_CACHE` is deprecated and will be removed in v5 of Transform"
            "ion timeout: WorkNCCL(SeqNum=2109, OpType=_ALLGATHER_BASE, NumelIn=262711296, "
            "NumelOut=525422592, Timeout(ms)=1800000) ran for 1800007 milliseconds before timing "
            "out.\n")
    log = tmp_path / "log.txt"
    log.write_text(line)
    from hangscope.sources.logs import scan_log
    (event,) = [e for e in scan_log(str(log)) if e.kind == "nccl_watchdog_timeout"]
    assert (event.rank, event.fields["seq"], event.fields["numel_in"]) == (1, 2109, 262711296)


def test_nccl_tests_with_wrong_results_is_data_corrupted_in_flight(tmp_path: Path) -> None:
    row = ("      524288        131072     float     sum      -1    663.1    0.79    0.79  237858"
           "    569.4    0.92    0.92  238038\n")
    assert _root(tmp_path, TESTS_HEAD + TESTS_ROWS + row) == \
        ("network_fault", [], "tests-wrong-results")


def test_nccl_tests_that_finished_clean_is_healthy_even_without_its_header(tmp_path: Path) -> None:
    text = TESTS_ROWS + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 84.8558\n"
    assert _verdict(tmp_path, text).status == Status.HEALTHY


def test_nccl_init_timings_of_every_rank_are_a_clean_setup(tmp_path: Path) -> None:
    # NCCL >= 2.21 prints each rank's init phases when its communicator is ready
    lines = [f"host:{1000 + r}:{1100 + r} [0] NCCL INFO Init timings: rank {r} nranks 2 total 2.46 "
             "(kernels 0.18, bootstrap 1.60, allgathers 0.00, topo 0.52, graphs 0.01, "
             "connections 0.15, rest 0.00)" for r in range(2)]
    assert _verdict(tmp_path, "\n".join(lines) + "\n").status == Status.HEALTHY


# nccl-tests' result table as pasted: no "nThread" head, no closing bandwidth line, the paste
# starting at the header's second line (NVIDIA/nccl-tests#293's shape)
def _rows(n: int, wrong: int = 0) -> str:
    rows = ["#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
            "            (us)  (GB/s)  (GB/s)"]
    for i in range(n):
        size = 8 << i
        rows.append(f"{size:>12}  {size // 4:>12}     float     sum      -1    17.08    0.00    "
                    f"0.00      {wrong if i == n - 1 else 0}    16.76    0.00    0.00      0")
    return "\n".join(rows) + "\n"


def test_many_clean_result_rows_are_a_healthy_table_cut_short(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, _rows(10))
    assert verdict.status.value == "healthy" and not verdict.findings
    # AND a table that stops after a few rows is still a test that did not finish
    kind, _, rule = _root(tmp_path, "#  size count type redop root time algbw busbw #wrong\n"
                          + _rows(3))
    assert (kind, rule) == ("network_fault", "tests-no-result")
    # AND a row counted wrong is never healthy
    assert _verdict(tmp_path, _rows(10, wrong=4)).status.value != "healthy"


# DeepSpeed's comms logger (deepspeed/utils/comms_logging.py, verbose): one line per collective
# it timed after it completed
COMMS = ("[2022-06-26 01:39:5{i},722] [INFO] [logging.py:69:log_dist] [Rank 0] rank=0 | comm op: "
         "{op} | time (ms): 9.46 | msg size: 678.86 MB | algbw (Gbps): 1204.52  | busbw (Gbps): "
         "1129.23")


def test_comms_logger_lines_of_completed_collectives_are_healthy(tmp_path: Path) -> None:
    text = "\n".join(COMMS.format(i=i, op=op) for i, op in
                     enumerate(("reduce_scatter_tensor", "all_gather_into_tensor",
                                "all_gather_into_tensor"))) + "\n"
    assert _verdict(tmp_path, text).status.value == "healthy"
    # AND the same lines beside a timeout are no health
    timeout = ("[rank0]:[E1128 03:06:23.070814391 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog "
               "caught collective operation timeout: WorkNCCL(SeqNum=26, OpType=ALLREDUCE, "
               "NumelIn=524288, NumelOut=524288, Timeout(ms)=20000) ran for 20039 milliseconds "
               "before timing out.\n")
    assert _verdict(tmp_path, text + timeout).status.value != "healthy"


# an all_reduce sweep's table (the shape Megatron-style benchmark scripts print: a header naming
# bandwidth, then one row of numbers per size measured)
SWEEP_HEADER = ("size(MB)   tavg(usec)    tmin(usec)    tmax(usec)  avgbw(GB/sec)  maxbw(GB/sec)  "
                "minbw(GB/sec)")


def _sweep(rows: int) -> str:
    lines = [SWEEP_HEADER]
    for i in range(rows):
        size = 0.1 * 2 ** i
        lines.append(f"{size:<9.2f} {120.0 + i:<13.1f} {110.0 + i:<13.1f} {150.0 + i:<13.1f} "
                     f"{size * 8:<13.2f} {size * 9:<13.2f} {size * 7:.2f}")
    return "\n".join(lines) + "\n"


def test_a_benchmark_table_of_many_measured_sizes_is_healthy(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, _sweep(10))
    assert verdict.status.value == "healthy"
    assert any("bench-rows-clean" in gap for gap in verdict.evidence_gaps)
    # AND a table cut after two sizes is no table (a benchmark that stopped early reads the same)
    assert _verdict(tmp_path, _sweep(2)).status.value != "healthy"
    # AND the same table before an error is no health
    error = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error\n"
    assert _verdict(tmp_path, _sweep(10) + error).status.value != "healthy"


def test_per_host_busbw_measurements_are_healthy(tmp_path: Path) -> None:
    # GIVEN all_reduce_bench.py's one block per host and trial (stas00/ml-engineering)
    block = "hf-dgx-01:{r}:\n duration: 0.88{r} sec\n busbw: 54.{r}442  Gbps\n"
    text = "".join(block.format(r=r) for r in range(4))
    assert _verdict(tmp_path, text).status.value == "healthy"
    # AND one measurement alone says too little
    assert _verdict(tmp_path, block.format(r=0)).status.value != "healthy"


# CUDA samples' p2pBandwidthLatencyTest (huggingface/transformers#20438's shape)
def _matrix(off: float) -> str:
    lines = ["    P2P=Enabled Latency (P2P Writes) Matrix (us)",
             "      GPU     0      1      2      3"]
    for gpu in range(4):
        cells = ["2.10" if col == gpu else f"{off:.2f}" for col in range(4)]
        lines.append(f"        {gpu}   " + " ".join(cells))
    return "\n".join(lines) + "\n"


def test_a_p2p_latency_matrix_of_tens_of_milliseconds_is_a_broken_path(tmp_path: Path) -> None:
    assert _root(tmp_path, _matrix(49206.6)) == ("network_fault", [], "p2p-latency-matrix")
    # AND NVLink-speed peer writes say nothing is wrong
    assert _root(tmp_path, _matrix(2.9))[0] is None


def test_nccl_error_returns_of_system_calls_are_a_network_fault(tmp_path: Path) -> None:
    # GIVEN NCCL set-up over a container's bridge address and its socket calls returning
    # ncclSystemError (2) back up the stack (NVIDIA/nccl#1381's shape)
    lines = ["c39f5cf046aa:4533:4533 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.3<0>",
             "c39f5cf046aa:4533:4667 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.3<0>",
             "c39f5cf046aa:4533:4667 [0] NCCL INFO misc/socket.cc:568 -> 2",
             "c39f5cf046aa:4534:4588 [1] NCCL INFO misc/socket.cc:568 -> 2",
             "c39f5cf046aa:4533:4667 [0] NCCL INFO misc/socket.cc:619 -> 2"]
    assert _root(tmp_path, "\n".join(lines) + "\n")[0] == "network_fault"
    # AND the same set-up with no error return reads healthy (set-up lines only)
    verdict = _verdict(tmp_path, "\n".join(lines[:2]) + "\n")
    assert verdict.status.value == "healthy"


def test_watchdogs_stuck_each_in_another_group_are_a_group_order_deadlock(tmp_path: Path) -> None:
    # GIVEN three ranks' heartbeat monitors, each stuck in another process group (NVIDIA/Fuser
    # issue 3055: groups destroyed in different orders; torch 2.5 prints an empty GUID)
    line = ("[F930 15:23:07.686401350 ProcessGroupNCCL.cpp:1309] [PG ID {pg} PG GUID  Rank {r}] "
            "[PG ID {pg} PG GUID  Rank {r}] Terminating the process after attempting to dump "
            "debug info, due to ProcessGroupNCCL watchdog hang.")
    text = "\n".join(line.format(pg=pg, r=r) for pg, r in ((6, 0), (3, 1), (5, 3))) + "\n"
    assert _root(tmp_path, text) == ("pg_order_deadlock", [], "stuck-in-different-groups")
    # AND ranks stuck in one group are not read so
    same = "\n".join(line.format(pg=6, r=r) for r in (0, 1)) + "\n"
    assert _root(tmp_path, same)[2] != "stuck-in-different-groups"
