"""Which GPU is which rank's, and so which rank a GPU fault in a kernel log belongs to.

A kernel log's Xid line names a bus id (and sometimes a pid), never a rank. Ways to tie a GPU to a
rank, strongest first:

* ``pid``: ``nvidia-smi`` lists the rank's pid (or a descendant's: a DataLoader worker, a pid under
  the rank in the /proc snapshot) among the GPU's compute processes;
* ``CUDA_VISIBLE_DEVICES``: the rank's environment (read by attach) names one GPU, or several and
  its ``LOCAL_RANK`` picks one;
* ``nccl``: the rank's NCCL init line (``cudaDev 3 nvmlDev 3 busId 3b000 ... Init COMPLETE``,
  ``nccl_device`` events) names the GPU's bus id;
* ``local rank``: on one host, with no better source, GPU index = local rank (torchrun and srun
  give each local rank the GPU of its index unless ``CUDA_VISIBLE_DEVICES`` says otherwise):
  an assumption, said so wherever it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from hangscope.analysis.verdict import EvidenceItem, Finding
from hangscope.model import GpuReading, JobEvidence, LogEvent


@dataclass(frozen=True, slots=True)
class RankGpu:
    rank: int
    pci: str
    index: int | None
    uuid: str
    how: str  # "pid" | "CUDA_VISIBLE_DEVICES" | "nccl" | "local rank"
    readings: tuple[GpuReading, ...]  # every nvidia-smi reading of this GPU, oldest first
    tie_where: str = ""  # the line that tied the GPU to the rank (an NCCL init line), if one

    def label(self) -> str:
        return f"GPU {self.index} ({self.pci})" if self.index is not None else f"GPU {self.pci}"

    def describe(self) -> str:
        """``GPU 3 (0000:3b:00): 0% util, 71 W, 74213/81559 MiB, SM 1980 MHz [by pid]``."""
        text = self.label()
        if self.readings:
            last = self.readings[-1]
            parts = []
            if last.util_pct is not None:
                parts.append(f"{last.util_pct:g}% util")
            if last.power_w is not None:
                parts.append(f"{last.power_w:g} W")
            if last.mem_used_mib is not None and last.mem_total_mib is not None:
                parts.append(f"{last.mem_used_mib:g}/{last.mem_total_mib:g} MiB")
            if last.sm_clock_mhz is not None:
                parts.append(f"SM {last.sm_clock_mhz:g} MHz")
            if parts:
                text += ": " + ", ".join(parts)
        return text + f" [{_HOW[self.how]}]"


_HOW = {"pid": "nvidia-smi lists the rank's pid on it",
        "CUDA_VISIBLE_DEVICES": "the rank's CUDA_VISIBLE_DEVICES (and LOCAL_RANK) name it",
        "nccl": "the rank's NCCL init line names its bus id",
        "local rank": "assumed: GPU index = local rank, nothing else ties them"}


# log events whose ``pid`` field is the process of the rank they are filed under: NCCL's
# ``host:pid:tid`` lines, torchrun's failure table
_OWN_PID = frozenset({"nccl_device", "nccl_warn", "nccl_transport_error", "cuda_error",
                      "elastic_child_failed"})


def pid_ranks(evidence: JobEvidence) -> dict[int, int]:
    """Every pid known to be a rank's or one of its descendants'."""
    found: dict[int, int] = {}
    for snapshot in evidence.os_waits:
        for proc in snapshot.processes.values():
            owner = proc.rank if proc.rank is not None else proc.worker_of
            if owner is not None:
                found.setdefault(proc.pid, owner)
    for rank, ev in evidence.ranks.items():
        for pid in ev.worker_pids:
            found[pid] = rank
        if ev.pid is not None:
            found[ev.pid] = rank
        for event in ev.logs:
            if event.kind in _OWN_PID and isinstance(event.fields.get("pid"), int):
                found.setdefault(int(event.fields["pid"]), event.rank if event.rank is not None
                                 else rank)
    return found


def rank_gpus(evidence: JobEvidence) -> dict[int, RankGpu]:
    """Each rank's GPU, where some source ties one to it."""
    by_pci: dict[str, list[GpuReading]] = {}
    for reading in sorted(evidence.gpus, key=lambda r: r.taken_at or 0.0):
        by_pci.setdefault(reading.pci, []).append(reading)
    pids = pid_ranks(evidence)
    tied: dict[int, tuple[str, str]] = {}  # rank -> (pci, how)
    tie_lines: dict[int, str] = {}  # rank -> file:line of the NCCL line that tied it
    nvml: dict[str, int] = {}  # pci -> NVML index (nvidia-smi's), as NCCL printed it
    for pci, readings in by_pci.items():
        for reading in readings:
            for pid in reading.pids:
                if pid in pids:
                    tied.setdefault(pids[pid], (pci, "pid"))
    for rank, pci in _visible(evidence, by_pci).items():
        tied.setdefault(rank, (pci, "CUDA_VISIBLE_DEVICES"))
    for rank, event in _nccl_devices(evidence):
        if rank not in tied:
            tied[rank] = (str(event.fields["pci"]), "nccl")
            tie_lines[rank] = event.where()
        if isinstance(event.fields.get("nvml_dev"), int):
            nvml[str(event.fields["pci"])] = int(event.fields["nvml_dev"])
    hosts = {ev.host for ev in evidence.ranks.values() if ev.host} | \
        {r.host for r in evidence.gpus if r.host}
    if not tied and len(hosts) <= 1:
        by_index = {r.index: r.pci for r in evidence.gpus if r.index is not None}
        for rank, ev in evidence.ranks.items():
            local = ev.local_rank if ev.local_rank is not None else rank
            if local in by_index:
                tied[rank] = (by_index[local], "local rank")
    result = {}
    for rank, (pci, how) in tied.items():
        kept = tuple(by_pci.get(pci, ()))
        index = next((r.index for r in kept if r.index is not None), nvml.get(pci))
        uuid = next((r.uuid for r in kept if r.uuid), "")
        result[rank] = RankGpu(rank, pci, index, uuid, how, kept, tie_lines.get(rank, ""))
    return result


def _visible(evidence: JobEvidence, by_pci: dict[str, list[GpuReading]]) -> dict[int, str]:
    """Ranks whose ``CUDA_VISIBLE_DEVICES`` names one GPU (or names several and the rank's
    ``LOCAL_RANK`` picks one, as ``cuda:LOCAL_RANK`` does): that GPU's bus id, by index or
    uuid (a ``GPU-`` prefix, as CUDA accepts it)."""
    found = {}
    for rank, (visible, local) in evidence.gpu_visible.items():
        names = [v.strip() for v in visible.split(",") if v.strip()]
        pick = names[0] if len(names) == 1 else names[local] if local is not None and \
            0 <= local < len(names) else None
        if pick is None:
            continue
        for pci, readings in by_pci.items():
            first = readings[0]
            if (pick.isdigit() and first.index == int(pick)) or \
                    (pick.startswith("GPU-") and first.uuid.startswith(pick)):
                found[rank] = pci
                break
    return found


def _nccl_devices(evidence: JobEvidence) -> list[tuple[int, LogEvent]]:
    found: list[tuple[int, LogEvent]] = []
    for rank, ev in evidence.ranks.items():
        found += [(e.rank if e.rank is not None else rank, e) for e in ev.logs
                  if e.kind == "nccl_device"]
    found += [(e.rank, e) for e in evidence.unattributed_logs
              if e.kind == "nccl_device" and e.rank is not None]
    return found


class FaultRanks:
    """Resolves GPU-fault events that name no rank, with the maps built once."""

    def __init__(self, evidence: JobEvidence) -> None:
        self.pids = pid_ranks(evidence)
        gpus = rank_gpus(evidence)
        by_pci: dict[str, set[int]] = {}
        for rank, gpu in gpus.items():
            by_pci.setdefault(gpu.pci, set()).add(rank)
        # a bus id two ranks share is two hosts' GPUs (or a mistake): it names neither
        self.pci = {pci: next(iter(ranks)) for pci, ranks in by_pci.items() if len(ranks) == 1}

    def rank_of(self, event: LogEvent) -> int | None:
        pid = event.fields.get("pid")
        if isinstance(pid, int) and pid in self.pids:
            return self.pids[pid]
        return self.pci.get(str(event.fields.get("pci", "")))


def cite_gpus(root: Finding | None, gpus: dict[int, RankGpu], limit: int = 4) -> None:
    """The root finding's culprits' GPU lines, added to its evidence where not cited yet."""
    if root is None:
        return
    cited = {item.rank for item in root.evidence if item.source == "gpu"}
    for rank in root.culprit_ranks[:limit]:
        gpu = gpus.get(rank)
        if gpu is not None and rank not in cited:
            where = gpu.readings[-1].where if gpu.readings else gpu.tie_where
            if where:  # a GPU line is cited only with the line it stands on
                root.evidence.append(EvidenceItem("gpu", rank, gpu.describe(), where))
