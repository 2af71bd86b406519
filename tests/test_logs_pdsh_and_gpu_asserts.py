"""Rules written after blind batch 27's first look, each in the general form the software's own
wording allows (pdsh's relay head, NCCL's alloc.h, a CUDA kernel's assert, Open MPI's rank tag
without a stream; none is a corpus log): a node's relayed lines are read under pdsh's ``HOST: ``
head, NCCL failing to allocate a few bytes of GPU memory is an out-of-memory, the assert each
failing GPU thread prints is a GPU fault, and ``[1,2]:`` names rank 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from _logs_helpers import kind_and_culprits, verdict_of

from hangscope.sources.logs.normalize import normalize

_OOM = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 79.15 GiB total "
        "capacity; 75.02 GiB already allocated; 1.02 GiB free; 76.10 GiB reserved in total by "
        "PyTorch)")


@pytest.mark.parametrize("host", ["10.0.3.17", "worker-1", "gpu-node12", "node3.cluster.local"])
def test_pdsh_head_is_peeled_and_the_oom_read(tmp_path: Path, host: str) -> None:
    # DeepSpeed's multi-node runner relays each node's lines through pdsh: "HOST: <line>"
    text = "".join(f"{host}: {line}\n" for line in [
        "[2024-05-01 12:00:00,123] [INFO] [launch.py:138:main] WORLD INFO DICT: {'a': [0, 1]}",
        "Traceback (most recent call last):",
        '  File "train.py", line 88, in <module>',
        "    loss.backward()",
        _OOM,
    ])
    assert kind_and_culprits(verdict_of(tmp_path, text))[0] == "rank_oom"


def test_words_and_ranks_before_a_colon_are_no_host_head() -> None:
    # a paste whose lines start "rank3: ..." names ranks; "Error: " is a message: both stay
    # (normalize returns None where it leaves a paste as it is)
    text = "".join(f"rank{r}: step 10 loss 1.5\n" for r in range(4)) * 3
    assert normalize(text.encode()) is None
    text = "Error: NCCL timeout\nError: NCCL timeout\nError: NCCL timeout\n"
    assert normalize(text.encode()) is None
    headed = normalize(b"worker-1: Error: NCCL timeout\nworker-1: Error: NCCL timeout\n")
    assert headed is not None and headed.data.rstrip(b"\n") == b"Error: NCCL timeout\nError: NCCL timeout"


@pytest.mark.parametrize("last", ["Failed to CUDA calloc 10485760 bytes",
                                  "Failed to CUDA calloc async 1920 bytes"])
def test_nccl_failing_to_allocate_is_out_of_memory(tmp_path: Path, last: str) -> None:
    # torch's NCCL error names NCCL's last WARN: cudaMalloc failed for NCCL's own buffers
    text = ("RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1269, internal error, NCCL version 2.14.3\n"
            "ncclInternalError: Internal check failed.\nLast error:\n" + last + "\n")
    assert kind_and_culprits(verdict_of(tmp_path, text))[0] == "rank_oom"


def test_a_kernels_own_assert_is_a_gpu_fault(tmp_path: Path) -> None:
    # what each failing GPU thread prints (CUDA's device assert), with no rank and no
    # "device-side assert triggered" after it (the paste stops there)
    line = ("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1141: indexSelectLargeIndex: block: "
            "[{b},0,0], thread: [{t},0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n")
    text = "".join(line.format(b=b, t=t) for b in range(2) for t in (96, 97))
    assert kind_and_culprits(verdict_of(tmp_path, text))[0] == "rank_died"


def test_mpi_rank_tag_without_its_stream(tmp_path: Path) -> None:
    # some MPI wrappers print "[1,2]:" where Open MPI's --tag-output prints "[1,2]<stderr>:"
    text = ("[1,2]:RuntimeError: DataLoader worker (pid 1219) is killed by signal: Bus error. It "
            "is possible that dataloader's workers are out of shared memory. Please try to raise "
            "your shared memory limit.\n")
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("dataloader_stall", [2])
