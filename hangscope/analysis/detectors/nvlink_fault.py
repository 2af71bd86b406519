"""network_fault from the kernel's NVLink Xids: the GPU-to-GPU fabric failed.

Rule ``nvlink-xid``: the kernel log shows NVLink errors (Xid 74, 136, 137, 144-150: the driver's
``NVLINK_*`` / link-training codes, ``sources/logs/gpu.py``), or an Xid 45 that says it was
``caused by previous Xid N`` with N one of them. Basis: an NVLink Xid is a fault of the link
between GPUs, not of one rank's program; collectives routed over that link stall or fail on every
rank that uses it, so the job's hang or crash follows from the fabric. An Xid 45 naming an NVLink
Xid as its cause says the driver tore down the processes' GPU channels because of the link (0.8);
NVLink Xids alone, 0.7 (0.6 when every one of them calls itself non-fatal). Culprits: the ranks
whose GPUs the lines name, where the evidence ties a GPU to a rank (``gpu_ranks.FaultRanks``);
else none. Not a finding when training went on after the last NVLink line (a progress line later
in the same log, or later by timestamp): the link recovered or was routed around.
False positives: a node's dmesg from another time than the hang (the lines carry no job id).
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.gpu_ranks import FaultRanks
from hangscope.analysis.log_causes import describe
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    every = [e for r in ctx.evidence.ranks.values() for e in r.logs] + \
        ctx.evidence.unattributed_logs
    links = [e for e in every if e.kind == "gpu_xid" and e.fields.get("nvlink")]
    if not links or _went_on(links, [e for e in every if e.kind == "progress"]):
        return []
    owners = FaultRanks(ctx.evidence)
    ranks = sorted({r for e in links if (r := _rank(e, owners)) is not None})
    teardown = [e for e in links if e.fields.get("xid") == 45]
    codes = sorted({int(e.fields.get("cause_xid") or e.fields["xid"]) for e in links
                    if e.fields.get("xid") != 45 or e.fields.get("cause_xid")})
    nonfatal = all("nonfatal" in str(e.fields.get("text", "")).lower() for e in links)
    confidence = 0.8 if teardown else 0.6 if nonfatal else 0.7
    gpus = sorted({str(e.fields["pci"]) for e in links if e.fields.get("pci")})
    on = f" on GPU{'s' if len(gpus) > 1 else ''} {', '.join(gpus[:6])}" if gpus else ""
    who = (f"; the GPUs are {ranks_phrase(ranks)}'s" if ranks
           else "; no evidence here ties these GPUs to ranks")
    killed = (f", and the driver tore down {len({e.fields.get('pid') for e in teardown})} "
              "process(es)' GPU channels because of it (Xid 45 'caused by previous Xid')"
              if teardown else "")
    summary = (f"rule nvlink-xid: the kernel logged NVLink error Xid "
               f"{', '.join(map(str, codes))}{on}{killed}: the NVLink fabric between GPUs "
               "failed, so collectives over that link stall or fail on every rank using it; "
               f"no rank's own program is at fault{who}. Check `nvidia-smi nvlink -s` / "
               "`-e` and the fabric manager's log on that node")
    first = sorted(links, key=lambda e: (e.fields.get("xid") == 45, e.path, e.line_no))
    evidence = [EvidenceItem("log", _rank(e, owners), describe(e), e.where())
                for e in first[:4]]
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=ranks, waiting_ranks=[],
                    confidence=confidence, summary=summary, evidence=evidence,
                    measures={"rule": "nvlink-xid"})]


def _rank(event: LogEvent, owners: FaultRanks) -> int | None:
    return event.rank if event.rank is not None else owners.rank_of(event)


def _went_on(links: list[LogEvent], progress: list[LogEvent]) -> bool:
    """Training progressed after the last NVLink line: by timestamp where both carry one, else
    later in the same file."""
    for step in progress:
        for link in links:
            if step.time is not None and link.time is not None:
                if step.time <= link.time:
                    break
            elif step.path != link.path or step.line_no <= link.line_no:
                break
        else:
            return True
    return False
