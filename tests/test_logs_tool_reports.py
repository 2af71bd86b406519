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
    # rank 2 never said so
    ([f"rank {r} finished successfully" for r in (0, 1, 3)], False),
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
