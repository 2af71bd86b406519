"""Rule known-benign: a log of warnings known to be harmless, and nothing else, shows no fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

# huggingface/tokenizers (src/utils/parallelism.rs), as every forked DataLoader worker prints it
TOKENIZERS = [
    "huggingface/tokenizers: The current process just got forked, after parallelism has already "
    "been used. Disabling parallelism to avoid deadlocks...",
    "To disable this warning, you can either:",
    "\t- Avoid using `tokenizers` before the fork if possible",
    "\t- Explicitly set the environment variable TOKENIZERS_PARALLELISM=(true | false)",
]
# ProcessGroupNCCL.cpp (torch 2.4+), hard-wrapped by a terminal behind Ray's prefix
DEVICE_UNKNOWN = [
    "(TrainerProcess pid=1720) [rank0]:[W1003 20:49:10.123654124",
    "  ProcessGroupNCCL.cpp:4715] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 as device used by this "
    "process is currently",
    "  unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect. You "
    "can specify device_id in",
    "  init_process_group() to force use of a particular device.",
]


def _verdict(tmp_path: Path, lines: list[str]):
    log = tmp_path / "job.log"
    log.write_text("\n".join([*lines, ""]))
    verdict, _ = analyze(load_paths([str(log)], LoadOptions())[0])
    return verdict


@pytest.mark.parametrize("lines", [TOKENIZERS, DEVICE_UNKNOWN, TOKENIZERS + DEVICE_UNKNOWN],
                         ids=["tokenizers", "device-unknown", "both"])
def test_known_harmless_warnings_alone_read_healthy(tmp_path: Path, lines: list[str]) -> None:
    verdict = _verdict(tmp_path, lines)
    assert verdict.status is Status.HEALTHY and not verdict.findings
    note = " ".join(verdict.evidence_gaps)
    assert "rule known-benign" in note and "A warning alone shows no hang" in note


@pytest.mark.parametrize("extra", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "[rank1]:[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600123 milliseconds",
    "the job has been stuck here for an hour",  # anything the list does not know
])
def test_a_benign_warning_beside_anything_else_is_not_all_clear(tmp_path: Path,
                                                                 extra: str) -> None:
    verdict = _verdict(tmp_path, [*TOKENIZERS, extra])
    assert verdict.status is not Status.HEALTHY


def test_nccl_info_set_up_that_connected_reads_healthy(tmp_path: Path) -> None:
    # GIVEN NCCL < 2.19's INFO lines as its channels connect, nothing else
    verdict = _verdict(tmp_path, [
        f"host:261724:36{d} [{d}] NCCL INFO {line}" for d in range(2) for line in (
            "Connected all trees", "threadThresholds 8/8/64 | 64/8/64 | 8/8/512",
            "2 coll channels, 2 p2p channels, 2 p2p channels per peer")])
    assert verdict.status is Status.HEALTHY
    assert any("nccl-setup-clean" in gap for gap in verdict.evidence_gaps)


def test_nccl_error_returns_after_a_cuda_failure_are_a_death(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, ["NCCL version 2.18.5+cuda12.2", "...",
                                  "transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'",
                                  "NCCL INFO transport/nvls.cc:324 -> 1",
                                  "NCCL INFO init.cc:1093 -> 1"])
    assert verdict.root is not None and verdict.root.kind.value == "rank_died"


# the exit warnings of ProcessGroupNCCL's destructor (torch 2.4+: 2.3's wording first), DeepSpeed's
# backend notice with its next line, and torch.cuda.nccl's import warning on a build without NCCL
EXIT_AND_NOTICES = [
    "[rank0]:[W227 10:54:51.986111855 ProcessGroupNCCL.cpp:1374] Warning: WARNING: process group "
    "has NOT been destroyed before we destruct ProcessGroupNCCL. On normal program exit, the "
    "application should call destroy_process_group to ensure that any pending NCCL operations have "
    "finished in this process.",
    "[rank1]:[W730 15:32:14.298860965 ProcessGroupNCCL.cpp:1479] Warning: WARNING: "
    "destroy_process_group() was not called before program exit, which can leak resources. For "
    "more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function "
    "operator())",
    "[WARNING] [comm.py:152:init_deepspeed_backend] NCCL backend in DeepSpeed not yet implemented",
    " [INFO] [comm.py:594:init_distributed] cdb=None",
    "D:\\envs\\t2\\lib\\site-packages\\torch\\cuda\\nccl.py:15: UserWarning: PyTorch is not "
    "compiled with NCCL support",
    "  warnings.warn('PyTorch is not compiled with NCCL support')",
]


@pytest.mark.parametrize("line", range(0, len(EXIT_AND_NOTICES)))
def test_exit_warnings_and_backend_notices_alone_are_healthy(tmp_path: Path, line: int) -> None:
    lines = EXIT_AND_NOTICES[line:line + 2] if line in (2, 4) else [EXIT_AND_NOTICES[line]]
    if line in (3, 5):
        return  # (a follow-up line, read with its warning)
    assert _verdict(tmp_path, lines).status is Status.HEALTHY


def test_exit_warnings_beside_a_timeout_are_no_health(tmp_path: Path) -> None:
    timeout = ("[rank0]:[E1128 03:06:23.070814391 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog "
               "caught collective operation timeout: WorkNCCL(SeqNum=26, OpType=ALLREDUCE, "
               "NumelIn=4096, NumelOut=4096, Timeout(ms)=20000) ran for 20039 milliseconds before "
               "timing out.")
    assert _verdict(tmp_path, [timeout, EXIT_AND_NOTICES[1]]).status is not Status.HEALTHY


# torch.distributed.launch's deprecation notice as torch >= 1.10 prints it (launch.py), the
# job's start-up chatter around it, and torch 1.9's barrier notice (ProcessGroupNCCL.cpp)
LAUNCH_NOTICE = [
    "/opt/conda/lib/python3.10/site-packages/torch/distributed/launch.py:181: FutureWarning: The "
    "module torch.distributed.launch is deprecated",
    "and will be removed in future. Use torchrun.",
    "Note that --use-env is set by default in torchrun.",
    "If your script expects `--local-rank` argument to be set, please",
    "change it to read from `os.environ['LOCAL_RANK']` instead. See ",
    "https://pytorch.org/docs/stable/distributed.html#launch-utility for ",
    "further instructions",
    "",
    "  warnings.warn(",
    "INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:",
    "  nproc_per_node   : 4",
    "  rdzv_configs     : {'rank': 0, 'timeout': 900}",
]
BEST_GUESS = [
    "user@gpu-node-3:~/proj$ CUDA_VISIBLE_DEVICES=2,3 torchrun --nproc_per_node 2 train.py",
    "[W ProcessGroupNCCL.cpp:1569] Rank 1 using best-guess GPU 1 to perform barrier as devices "
    "used by this process are currently unknown. This can potentially cause a hang if this rank "
    "to GPU mapping is incorrect.Specify device_ids in barrier() to force use of a particular "
    "device.",
    "Epoch 1:   0%|          | 0/625 [00:00<?, ?it/s]",
]


@pytest.mark.parametrize("lines", [LAUNCH_NOTICE, BEST_GUESS], ids=["launch", "best-guess"])
def test_launch_notices_prompts_and_an_unmoved_bar_beside_harmless_warnings_are_healthy(
        tmp_path: Path, lines: list[str]) -> None:
    assert _verdict(tmp_path, lines).status is Status.HEALTHY


def test_a_prompt_and_an_unmoved_bar_alone_are_no_health(tmp_path: Path) -> None:
    # no warning the list knows: a bar that never moved may be a job stuck in its first step
    lines = [BEST_GUESS[0], BEST_GUESS[2]]
    assert _verdict(tmp_path, lines).status is not Status.HEALTHY
