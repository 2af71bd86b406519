"""Rules from blind batch 51's first look, on wordings other than the cases they were written for,
each with a log that must not trip it: NCCL's WARN lines that name their function after the source
line (``file.cc:431 (fn) NCCL WARN``), a WARN raised in NCCL's network code whatever its words,
and NCCL's NVLS multicast failure (an NVSwitch resource, not the GPU's memory)."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, verdict_of, write_paste

from hangscope.sources.logs import scan_log


def _kinds(path: Path) -> list[tuple[str, str]]:
    return [(e.kind, str(e.fields.get("src", ""))) for e in scan_log(str(path))
            if e.kind in ("nccl_warn", "nccl_transport_error", "cuda_error")]


def test_a_warn_from_nccls_network_code_is_a_transport_error_whatever_its_words(
        tmp_path: Path) -> None:
    # GIVEN WARNs that name their function after the source line: one from the IB transport's
    # code with a vendor's status word, the benign libibverbs one, one from init
    text = ("node3:5512:5530 [2] transport/net_ib.cc:720 (ncclIbCreateQp) NCCL WARN mlx5 status 12\n"
            "node3:5512:5531 [2] misc/ibvwrap.cc:63 (wrap_ibv_symbols) NCCL WARN Failed to open "
            "libibverbs.so[.1]\n"
            "node3:5512:5512 [2] init.cc:1410 (ncclCommInitRankFunc) NCCL WARN bad config value\n"
            "node3:5512:5512 [2] NCCL INFO transport/net_ib.cc:722 (ncclIbCreateQp) -> 2\n")
    path = write_paste(tmp_path / "a", text)
    # THEN the transport's one is a transport error, the others plain WARNs, the INFO no WARN
    assert _kinds(path) == [("nccl_transport_error", "transport/net_ib.cc:720 (ncclIbCreateQp)"),
                            ("nccl_warn", "misc/ibvwrap.cc:63 (wrap_ibv_symbols)"),
                            ("nccl_warn", "init.cc:1410 (ncclCommInitRankFunc)")]
    verdict = verdict_of(tmp_path / "v", text)
    assert verdict.root is not None and verdict.root.kind.value == "network_fault"


def test_nccls_nvls_multicast_failure_is_the_fabric_not_a_gpus_memory(tmp_path: Path) -> None:
    # GIVEN NCCL's NVLS WARN with its head, on two ranks of a node
    warn = ("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 4194304 : CUDA error 2 "
            "'out of memory'.")
    text = "".join(f"gpu-node-7:{400 + r}:{500 + r} [{r}] NCCL WARN {warn}\n" for r in (0, 1))
    verdict = verdict_of(tmp_path / "a", text)
    # THEN a network fault that sends the reader to the NVSwitches, not a rank's OOM
    root = verdict.root
    assert root is not None and root.kind.value == "network_fault"
    assert "NVSwitches" in root.summary and "NCCL_NVLS_ENABLE=0" in root.summary
    # and quoted without its head, as torch's exception prints NCCL's last error
    quoted = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
              "NCCLUtils.hpp:317, unhandled cuda error, NCCL version 2.21.5\n"
              "ncclUnhandledCudaError: Call to CUDA function failed.\n"
              "Last error:\n" + warn + "\n")
    verdict = verdict_of(tmp_path / "b", quoted)
    assert verdict.root is not None and verdict.root.kind.value == "network_fault"


def test_a_cuda_oom_elsewhere_stays_a_ranks_oom(tmp_path: Path) -> None:
    text = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 "
            "has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n")
    assert kind_and_culprits(verdict_of(tmp_path / "a", text)) == ("rank_oom", [3])
