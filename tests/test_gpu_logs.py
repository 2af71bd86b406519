"""GPU-side evidence read postmortem: NVRM Xid lines, CUDA errors, Slurm OOM lines and nvidia-smi
outputs (fixtures/logs/gpu, built from the public formats, each case's expected.json saying from
which), and the verdict they give: the rank whose GPU failed is the culprit."""

from __future__ import annotations

import glob
import json
import os

import pytest

from hangscope.analysis.engine import analyze
from hangscope.analysis.gpu_ranks import rank_gpus
from hangscope.options import LoadOptions
from hangscope.sources import nvsmi
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log

HERE = os.path.dirname(__file__)
GPU = os.path.join(HERE, "..", "fixtures", "logs", "gpu")
CASES = sorted(os.path.basename(os.path.dirname(p))
               for p in glob.glob(os.path.join(GPU, "*", "expected.json")))
SMI = os.path.join(GPU, "nvsmi")


def _read(name: str) -> str:
    with open(os.path.join(SMI, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.parametrize("case", CASES)
def test_gpu_case_verdict(case: str) -> None:
    with open(os.path.join(GPU, case, "expected.json"), encoding="utf-8") as handle:
        meta = json.load(handle)
    assert meta["provenance"].startswith("built"), "no GPU was lent: fixtures say they are built"
    expected = meta["expected"]
    evidence, _ = load_paths([os.path.join(GPU, case)], LoadOptions())
    verdict, _ = analyze(evidence)
    root = verdict.root
    assert root is not None, verdict.evidence_gaps
    assert root.kind.value == expected["kind"], root.summary
    assert sorted(root.culprit_ranks) == expected["culprit_ranks"], root.summary
    for words in expected.get("summary_has", []):
        assert words in root.summary
    assert all(item.where for item in root.evidence if item.source == "log")


def test_xid_variants() -> None:
    data = (b"[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
            b"fallen off the bus.\n"
            b"[ 13.25] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.\n"
            b"NVRM: Xid (0000:03:00): 14, Channel 00000001\n"
            b"NVRM: Xid (PCI:0000:ca:00): 95, pid=3210, name=python, Uncontained: FBHUB. RST: Yes\n"
            b"NVRM: Xid (PCI:0000:ca:00): 45, pid=3210, name=python, Ch 00000008\n"
            b"NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7\n"
            b"Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
            b"Unable to determine the device handle for gpu 0000:18:00.0: Unknown Error\n")
    events = scan_log("dmesg", data=data)
    got = [(e.kind, e.fields.get("xid"), e.fields.get("pci"), e.fields.get("pid"),
            e.fields.get("fatal")) for e in events]
    assert got == [("gpu_xid", 79, "0000:3b:00", None, 1), ("gpu_xid", 79, "0000:44:00", None, 1),
                   ("gpu_xid", 14, "0000:03:00", None, 0), ("gpu_xid", 95, "0000:ca:00", 3210, 1),
                   ("gpu_xid", 45, "0000:ca:00", 3210, 0), ("gpu_uuid", None, "0000:3b:00", None,
                                                            None),
                   ("gpu_xid", 79, "0000:3b:00", None, 1), ("gpu_xid", 79, "0000:18:00", None, 1)]
    assert events[0].fields["uptime_s"] == 12.5 and events[0].rank is None
    assert events[3].fields["process"] == "python"


def test_srun_label_prefix_and_cuda_errors() -> None:
    data = (b"48: [rank48]:[E1124 10:00:00.1 ProcessGroupNCCL.cpp:1595] Process group watchdog "
            b"thread terminated with exception: CUDA error: an illegal memory access was "
            b"encountered\n"
            b" 7: terminate called after throwing an instance of 'c10::Error'\n"
            b" 7:   what():  CUDA error: unspecified launch failure\n"
            b"12:00:00 CUDA error: out of memory\n")
    events = scan_log("slurm.out", data=data)
    errors = [(e.kind, e.rank, e.fields.get("error")) for e in events if e.kind == "cuda_error"]
    assert errors == [("cuda_error", 48, "an illegal memory access was encountered"),
                      ("cuda_error", 7, "unspecified launch failure")]
    # a clock at the start of a line is not a task label
    assert [e.rank for e in events if e.kind == "cuda_oom"] == [None]


def test_query_csv_with_header_and_units() -> None:
    readings = nvsmi.parse_query(_read("query_gpu.csv"))
    assert [(r.index, r.pci, r.util_pct, r.power_w, r.mem_used_mib, r.sm_clock_mhz)
            for r in readings] == [(0, "0000:18:00", 100.0, 512.31, 74213.0, 1980.0),
                                   (1, "0000:2a:00", 0.0, 71.02, 74213.0, 1980.0),
                                   (2, "0000:3a:00", None, None, 74213.0, None)]


def test_query_csv_noheader_with_apps() -> None:
    readings = nvsmi.parse_query(_read("query_gpu_noheader.csv"),
                                 apps=_read("compute_apps_noheader.csv"))
    assert [(r.index, r.uuid[:12], r.pids, r.power_w) for r in readings] == [
        (0, "GPU-0b7d3f0e", (51234,), 512.31), (1, "GPU-1c8e4a1f", (51235,), 71.02)]


def test_q_report_equals_csv() -> None:
    q = nvsmi.parse_q(_read("q.txt"))
    csv = nvsmi.parse_query(_read("query_gpu_noheader.csv"), apps=_read("compute_apps_noheader.csv"))
    fields = ("pci", "index", "uuid", "util_pct", "power_w", "mem_used_mib", "mem_total_mib",
              "sm_clock_mhz", "pids")
    assert [[getattr(r, f) for f in fields] for r in q] == \
        [[getattr(r, f) for f in fields] for r in csv]
    with open(os.path.join(SMI, "q.txt"), "rb") as handle:
        assert nvsmi.sniff(handle.read(4096))


def test_q_xml_equals_csv_and_is_sniffed() -> None:
    xml = nvsmi.parse_xml(_read("q.xml"))
    csv = nvsmi.parse_query(_read("query_gpu_noheader.csv"), apps=_read("compute_apps_noheader.csv"))
    assert xml == csv
    with open(os.path.join(SMI, "q.xml"), "rb") as handle:
        assert nvsmi.sniff(handle.read(4096))


def test_table_maps_pid_to_gpu_and_rank() -> None:
    path = os.path.join(GPU, "ecc_xid48_nvsmi_table", "nvidia-smi.txt")
    with open(path, encoding="utf-8") as handle:
        table = nvsmi.parse_table(handle.read())
    assert [(r.index, r.pci, r.power_w, r.util_pct, r.pids) for r in table][:2] == [
        (0, "0000:07:00", 312.0, 97.0, (218842,)), (1, "0000:0f:00", 298.0, 98.0, (218843,))]
    evidence, _ = load_paths([path, os.path.join(GPU, "ecc_xid48_nvsmi_table", "train.log")],
                             LoadOptions())
    gpus = rank_gpus(evidence)
    # no rank pid is known here: GPU index = local rank, and it says it assumed so
    assert {r: g.pci for r, g in gpus.items()}[1] == "0000:0f:00"
    assert "assumed" in gpus[1].describe()


def test_rocm_hsa_gpu_hang_is_a_gpu_fault_with_no_rank() -> None:
    data = (b" 41%|####5     | 366/903 [5:15:39<6:53:09, 46.16s/it]HW Exception by GPU node-9 "
            b"(Agent handle: 0x631351bb5a20) reason :GPU Hang\n"
            b"HW Exception by GPU node-9 (Agent handle: 0x64ff272d8ab0) reason :GPU Hang\n")
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "hangscope-test-hsa.log")
    with open(path, "wb") as handle:
        handle.write(data)
    try:
        events = scan_log(path)
        assert [(e.kind, e.fields["gpu"], e.fields["reason"]) for e in events] == [
            ("gpu_fault", "node-9", "GPU Hang")] * 2
        verdict, _ = analyze(load_paths([path], LoadOptions())[0])
    finally:
        os.unlink(path)
    assert verdict.root is not None and verdict.root.kind.value == "rank_died"
    assert verdict.root.culprit_ranks == [] and "node-9" in verdict.root.summary


def test_xid_pid_tied_through_the_launchers_failure_table(tmp_path) -> None:
    # GIVEN torchrun's failure table (rank 2 is pid 30512) and a dmesg Xid 13 naming pid 30512
    (tmp_path / "torchrun.log").write_text(
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        "  <NO_OTHER_FAILURES>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2024-05-01_12:00:00\n"
        "  host      : node1\n"
        "  rank      : 2 (local_rank: 2)\n"
        "  exitcode  : -6 (pid: 30512)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 6 (SIGABRT) received by PID 30512\n"
        "============================================================\n")
    (tmp_path / "dmesg.log").write_text(
        "[ 77.125] NVRM: Xid (PCI:0000:4c:00): 13, pid=30512, name=python, Graphics Exception: "
        "ESR 0x504648=0x1000e\n")
    verdict, _ = analyze(load_paths([str(tmp_path)], LoadOptions())[0])
    # THEN the Xid is rank 2's own GPU fault
    assert verdict.root is not None and verdict.root.kind.value == "rank_died"
    assert verdict.root.culprit_ranks == [2]
    assert any("Xid 13" in item.detail for item in verdict.root.evidence)


def test_nccl_unhandled_cuda_error_is_the_ranks_gpu_fault(tmp_path) -> None:
    (tmp_path / "rank3.log").write_text(
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
        "version 2.21.5\n"
        "[rank3]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "[rank3]: Last error:\n"
        "[rank3]: Cuda failure 'an illegal memory access was encountered'\n")
    (tmp_path / "rank0.log").write_text(
        "[rank0]:[E1124 10:32:41.7 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 0]"
        " Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing "
        "out.\n")
    verdict, _ = analyze(load_paths([str(tmp_path)], LoadOptions())[0])
    assert verdict.root is not None
    assert (verdict.root.kind.value, verdict.root.culprit_ranks) == ("rank_died", [3])
    assert verdict.root.summary.startswith("rank 3 died first")
