"""GPU readings during a live attach: a stand-in ``nvidia-smi`` on PATH prints the recorded CSV
format with the live job's real pids; attach stores it in the bundle, and the verdict and the
report show each rank's GPU, tied by pid. Without nvidia-smi: one gap for the job."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from hangscope.analysis.gpu_ranks import rank_gpus
from hangscope.bundle import BundleWriter
from hangscope.collect import gpu
from hangscope.collect.budget import Budget
from hangscope.model import GpuReading, JobEvidence
from hangscope.sources.nvsmi import load_gpu_file

# The stand-in: answers the two queries attach makes, in nvidia-smi's csv,noheader,nounits
# layout, from pids.json beside it ({"pids": [pid of GPU 0, pid of GPU 1, ...]}). GPU i's bus
# is 0x18 + 0x11*i; GPU 1 idles at 0% with flat power, the others draw more on each call.
STAND_IN = r'''#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
pids = json.load(open(os.path.join(here, "pids.json")))["pids"]
count_file = os.path.join(here, "calls")
calls = int(open(count_file).read()) if os.path.exists(count_file) else 0
args = " ".join(sys.argv[1:])
if "--query-gpu=" in args:
    open(count_file, "w").write(str(calls + 1))
    for i, _ in enumerate(pids):
        idle = i == 1
        print(f"{{i}}, GPU-{{i:08x}}-1111-2222-3333-444444444444, 00000000:{{0x18 + 0x11 * i:02X}}:00.0, "
              f"{{0 if idle else 100}}, {{70.0 if idle else 500.0 + 7 * calls}}, 1234, 81559, 1980")
elif "--query-compute-apps=" in args:
    for i, pid in enumerate(pids):
        print(f"{{pid}}, GPU-{{i:08x}}-1111-2222-3333-444444444444, 1234")
else:
    sys.exit(2)
'''


def _stand_in(folder: Path, pids: list[int]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (folder / "pids.json").write_text(json.dumps({"pids": pids}))
    return script


def test_without_nvidia_smi_one_gap_and_no_file(tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    writer = BundleWriter(str(tmp_path / "bundle"))
    gaps: list[str] = []
    gpu.collect(writer, gaps, Budget())
    writer.close()
    assert gaps == [gpu.NO_SMI]
    assert not (tmp_path / "bundle" / "job").exists()


def test_readings_twice_within_the_budget(tmp_path: Path, monkeypatch) -> None:
    _stand_in(tmp_path / "bin", [4242, 4343])
    dmesg = tmp_path / "bin" / "dmesg"  # a kernel log with one Xid among other lines
    dmesg.write_text("#!/bin/sh\necho '[ 5.1] eth0: link up'\necho '[ 9.75] NVRM: Xid "
                     "(PCI:0000:29:00): 79, pid=4343, name=python, GPU has fallen off the bus.'\n")
    dmesg.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    writer = BundleWriter(str(tmp_path / "bundle"))
    gaps: list[str] = []
    # a budget with room to spare on a loaded machine (the stand-ins are Python processes, four
    # of them, each a second or more to start under load): what is under test is that both
    # readings are taken and kept, not how fast
    began = time.monotonic()
    gpu.collect(writer, gaps, Budget(deadline=time.monotonic() + 60.0, limit_s=60.0))
    writer.close()
    assert time.monotonic() - began < 60.0 and gaps == []
    evidence = JobEvidence()
    load_gpu_file(str(tmp_path / "bundle" / "job" / "gpu.json"), None, evidence, [])
    kernel = (tmp_path / "bundle" / "job" / "kernel-nvrm.log").read_text()
    assert kernel == ("[ 9.75] NVRM: Xid (PCI:0000:29:00): 79, pid=4343, name=python, GPU has "
                      "fallen off the bus.\n")
    assert [(r.index, r.pci, r.pids, r.power_w) for r in evidence.gpus] == [
        (0, "0000:18:00", (4242,), 500.0), (1, "0000:29:00", (4343,), 70.0),
        (0, "0000:18:00", (4242,), 507.0), (1, "0000:29:00", (4343,), 70.0)]


def test_cuda_visible_devices_ties_a_rank_to_its_gpu_by_index_or_uuid() -> None:
    # GIVEN readings with no pids; rank 0 sees GPU 1 by index, rank 1 sees "GPU-00000000" (a
    # uuid prefix) and rank 2 sees "0,1" with LOCAL_RANK 1
    evidence = JobEvidence()
    evidence.gpus = [GpuReading(pci="0000:18:00", index=0, uuid="GPU-00000000-1111"),
                     GpuReading(pci="0000:29:00", index=1, uuid="GPU-00000001-1111")]
    evidence.gpu_visible = {0: ("1", 0), 1: ("GPU-00000000", 1), 2: ("0,1", 1), 3: ("0,1", None)}
    gpus = rank_gpus(evidence)
    # THEN each is tied by its environment; rank 3 (two GPUs, no LOCAL_RANK) by nothing
    assert {r: (g.index, g.how) for r, g in gpus.items()} == {
        0: (1, "CUDA_VISIBLE_DEVICES"), 1: (0, "CUDA_VISIBLE_DEVICES"),
        2: (1, "CUDA_VISIBLE_DEVICES")}


def test_a_hung_stand_in_is_killed_at_its_cap(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
    writer = BundleWriter(str(tmp_path / "bundle"))
    gaps: list[str] = []
    began = time.monotonic()
    gpu.collect(writer, gaps, Budget(deadline=time.monotonic() + 3.0, limit_s=3.0))
    writer.close()
    assert time.monotonic() - began < 3.5
    readings = [g for g in gaps if g.startswith("GPU readings:")]
    assert readings and all("timed out" in g for g in readings)
    assert "dmesg is not on PATH" in gaps[-1]


torch = pytest.importorskip("torch")
from live_jobs import attach_quietly, copy_of_jobs  # noqa: E402

from fixtures.jobrunner import JOBS_DIR, running_job  # noqa: E402


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
def test_live_attach_maps_gpus_to_ranks_by_pid(tmp_path: Path, monkeypatch) -> None:
    # GIVEN a real 4-rank gloo job that hangs, and a stand-in nvidia-smi listing its ranks'
    # real pids on GPUs in REVERSE order (rank r on GPU 3-r: an index=local-rank guess is wrong)
    jobs = copy_of_jobs(tmp_path, JOBS_DIR)
    out = tmp_path / "out"
    with running_job("missing_rank", ready_dir=tmp_path / "ready", jobs_dir=jobs,
                     env={"CUDA_VISIBLE_DEVICES": "3,2,1,0"}) as job:
        pids = [job.rank_pids[r] for r in sorted(job.rank_pids, reverse=True)]
        _stand_in(tmp_path / "bin", pids)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
        # WHEN attached live
        _, verdict = attach_quietly(job.pgid, out)
    # THEN each rank's GPU is the one its pid runs on, tied by pid
    n = len(pids)
    gpus = verdict["gpus"]
    assert sorted(gpus) == [str(r) for r in range(n)]
    for rank in range(n):
        index = n - 1 - rank
        assert gpus[str(rank)].startswith(f"GPU {index} (0000:{0x18 + 0x11 * index:02x}:00)")
        assert "nvidia-smi lists the rank's pid on it" in gpus[str(rank)]
    assert not any("nvidia-smi" in gap for gap in verdict["evidence_gaps"])
    # AND the culprit's GPU line is in the root finding's evidence
    root = verdict["findings"][0]
    cited = {item["rank"]: item["detail"] for item in root["evidence"] if item["source"] == "gpu"}
    assert root["culprit_ranks"] and set(root["culprit_ranks"][:4]) <= set(cited)
    assert all(cited[r] == gpus[str(r)] for r in cited)
    # AND the report's ranks table has the GPU column; the bundle keeps both readings
    html = (out / "report.html").read_text()
    assert f"GPU {n - 1} (0000:{0x18 + 0x11 * (n - 1):02x}:00)" in html
    doc = json.loads((out / "bundle" / "job" / "gpu.json").read_text())
    assert len(doc["samples"]) == 2
    # AND each rank's CUDA_VISIBLE_DEVICES and LOCAL_RANK went along
    assert {r: v["cuda_visible_devices"] for r, v in doc["ranks"].items()} == {
        str(r): "3,2,1,0" for r in range(n)}
