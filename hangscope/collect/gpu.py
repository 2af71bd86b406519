"""GPU readings during ``attach``: ``nvidia-smi`` asked twice, bounded by the budget.

Where ``nvidia-smi`` is on ``PATH`` it is run for ``--query-gpu`` (index, uuid, bus id, utilization,
power, memory, SM clock) and ``--query-compute-apps`` (pid, GPU uuid, memory), twice about a second
apart (a GPU at 0% with flat power while its peers draw is only visible across readings), each
call with a timeout capped by ``--timeout`` and killed past it. The raw CSV goes to the bundle as
``job/gpu.json`` (kind ``"gpu"``, read by ``sources/nvsmi.py``); the analysis maps GPUs to ranks
by pid. The kernel log's NVRM lines (``dmesg --kernel``, where permitted) go to
``job/kernel-nvrm.log``. Without ``nvidia-smi``: one gap for the job, not one per rank, and no
kernel log read (a host without the NVIDIA driver has no Xid lines).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time

from hangscope.bundle import BundleWriter, CollectionRecord
from hangscope.collect.budget import Budget
from hangscope.discover import RankProcess
from hangscope.sources.nvsmi import APPS_FIELDS, QUERY_FIELDS, SCHEMA

CALL_TIMEOUT_S = 5.0
READINGS = 2
APART_S = 1.0
KERNEL_LINES = 400  # the newest NVRM lines kept
NO_SMI = ("no GPU readings: nvidia-smi is not on PATH (a CPU-only host, or a container without "
          "the NVIDIA utilities)")


def _run(argv: list[str], timeout: float) -> tuple[str, str]:
    """(stdout, problem): ``problem`` is empty when the call succeeded."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        return "", f"{argv[0]} {argv[1]} timed out after {timeout:.1f}s"
    except OSError as exc:
        return "", f"{argv[0]}: {exc.strerror}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()[:1]
        return done.stdout, f"{argv[0]} {argv[1]} exited {done.returncode}" + \
            (f": {why[0][:200]}" if why else "")
    return done.stdout, ""


def _kernel_lines(writer: BundleWriter, gaps: list[str], budget: Budget) -> None:
    """The driver's NVRM lines (Xid, fallen off the bus) of this node's kernel log, where this
    user may read it (``kernel.dmesg_restrict``), as ``job/kernel-nvrm.log`` (kind ``"log"``)."""
    exe = shutil.which("dmesg")
    if exe is None:
        gaps.append("no kernel log: dmesg is not on PATH, so NVRM Xid lines were not read")
        return
    out, problem = _run([exe, "--kernel"], budget.cap(CALL_TIMEOUT_S))
    if problem:
        gaps.append(f"kernel log not read ({problem}), so NVRM Xid lines were not: run as root, "
                    "or set kernel.dmesg_restrict=0")
        return
    lines = [line for line in out.splitlines() if "NVRM" in line][-KERNEL_LINES:]
    if lines:
        writer.add_job_file("log", "kernel-nvrm.log", ("\n".join(lines) + "\n").encode(),
                            source_path=f"{exe} --kernel")


def collect(writer: BundleWriter, gaps: list[str], budget: Budget,
            ranks: list[RankProcess] | None = None) -> None:
    """Take the readings and add ``job/gpu.json``; problems go to ``gaps``. ``ranks``: the live
    ranks, whose ``CUDA_VISIBLE_DEVICES`` and ``LOCAL_RANK`` go along (which GPU each may use)."""
    began = time.time()
    exe = shutil.which("nvidia-smi")
    if exe is None:
        gaps.append(NO_SMI)
        writer.collection.append(CollectionRecord(source="nvidia-smi", rank=None,
                                                  status="skipped", detail="not on PATH",
                                                  started_at=began, seconds=0.0))
        return
    samples: list[dict[str, object]] = []
    problems: list[str] = []
    for n in range(READINGS):
        if n:
            if not budget.room_for(APART_S + 0.5):
                budget.cut("second nvidia-smi reading")
                break
            time.sleep(APART_S)
        if not budget.room_for(0.3):
            budget.cut("nvidia-smi readings")
            break
        cap = budget.cap(CALL_TIMEOUT_S, 2 * (READINGS - n))
        taken = time.time()
        query, problem = _run([exe, "--query-gpu=" + ",".join(QUERY_FIELDS),
                               "--format=csv,noheader,nounits"], cap)
        apps, apps_problem = _run([exe, "--query-compute-apps=" + ",".join(APPS_FIELDS),
                                   "--format=csv,noheader,nounits"], cap)
        problems += [p for p in (problem, apps_problem) if p]
        if query.strip():
            samples.append({"taken_at": taken, "fields": list(QUERY_FIELDS), "query_gpu": query,
                            "apps_fields": list(APPS_FIELDS), "compute_apps": apps})
    gaps.extend(f"GPU readings: {problem}" for problem in dict.fromkeys(problems))
    if samples:
        visible = {str(r.rank): {"cuda_visible_devices": r.env["CUDA_VISIBLE_DEVICES"],
                                 "local_rank": r.local_rank}
                   for r in ranks or [] if r.env.get("CUDA_VISIBLE_DEVICES")}
        doc = {"schema": SCHEMA, "host": socket.gethostname(), "samples": samples,
               "ranks": visible}
        writer.add_job_file("gpu", "gpu.json", json.dumps(doc, sort_keys=True).encode(),
                            source_path=exe)
    if budget.room_for(0.5):
        _kernel_lines(writer, gaps, budget)
    else:
        budget.cut("kernel log (Xid lines)")
    writer.collection.append(CollectionRecord(
        source="nvidia-smi", rank=None, status="ok" if samples else "failed",
        detail=f"{len(samples)} reading(s)" + (f"; {problems[0]}" if problems else ""),
        started_at=began, seconds=round(time.time() - began, 3)))
