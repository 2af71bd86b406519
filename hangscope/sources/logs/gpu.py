# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""GPU faults the NVIDIA kernel driver (NVRM) writes to the kernel log (dmesg, ``journalctl -k``,
``/var/log/messages``), as NVIDIA's "Xid Errors" guide (docs.nvidia.com/deploy/xid-errors) and its
Xid catalog describe them.

``gpu_xid``::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus.   # driver >= 525
    NVRM: Xid (PCI:0000:3b:00): 79, pid=2710, name=python, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.                               # older drivers
    NVRM: Xid (0000:03:00): 14, Channel 00000001                                               # the guide's example
    NVRM: Xid (PCI:0000:ca:00): 95, pid=3210, name=python, Uncontained: FBHUB. RST: Yes, D-RST: No
    NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.
    NVRM: The NVIDIA GPU 0000:b3:00.0
                   NVRM: (PCI ID: 10de:26b5) installed in this system has
                   NVRM: fallen off the bus and is not responding to commands.                  # NVIDIA/NVSentinel#155

  fields: xid (79 for the fallen-off-the-bus texts that carry none), pci (``0000:3b:00``, lower
  case, no function), pid (when the driver names one), process, text (what follows), fatal (1 for
  the codes in :data:`FATAL`: the GPU or its memory is broken, the process on it cannot go on;
  0 for :data:`APP` codes, the process's own fault such as an illegal address, and the rest),
  nvlink (1 for the NVLink codes in :data:`NVLINK`, and for an Xid 45 whose text says it was
  ``caused by previous Xid N`` with N one of them), cause_xid (that N). The bus id may be elided
  as posted (``Xid (PCI:...): 145, ...``): the line is read, without a pci.

NVLink Xids (Blackwell's NVLink5 codes and the older 74), from the driver's ``nverror.h`` names;
the shapes as NVIDIA's NVSentinel syslog monitor parses them::

    NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)
    NVRM: Xid (PCI:0008:01:00): 149, <SUBCODE> Fatal XC0 i0 Link 07 (0x... 0x...)              # NVL5: subcode, severity, link, intrinfo
    NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149

``nvidia-smi`` on a lost GPU (same kind, xid 79)::

    Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error
    Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU
    Unable to determine the device handle for gpu 0000:18:00.0: Unknown Error          # nvidia-smi -L, NordicHPC/sonar#72

``gpu_fault`` -- another vendor's GPU fault, ROCm's HSA runtime (one line per process using the GPU)::

    HW Exception by GPU node-9 (Agent handle: 0x631351bb5a20) reason :GPU Hang

  fields: vendor (``amd``), gpu (``node-9``, the HSA agent's node: not a rank), reason, fatal (1).

``gpu_uuid`` -- the line before a GPU's first Xid: ``NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d-...``
(fields pci, uuid): how a kernel log ties a bus id to the uuid ``nvidia-smi`` prints.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent, Severity
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

# Xids after which the GPU, its memory or its links are unusable to the process on it (NVIDIA's
# catalog: resolution RESET_GPU / RESTART_BM / CONTACT_SUPPORT): 48 double-bit ECC, 62/119/120
# firmware/GSP, 63/64 row remapping, 74 NVLink, 79 off the bus, 92 high single-bit ECC rate,
# 94/95 contained/uncontained ECC, 140 unrecovered ECC, 154 recovery action.
FATAL = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154})
# Xids of the process's own GPU program (13 SM exception, 31 MMU fault / illegal address, 43 the
# channel it ran on stopped): that process failed first, on a healthy GPU.
APP = frozenset({13, 31, 43})
# NVLink, the GPU-to-GPU fabric (nverror.h): 74 NVLINK_ERROR, 136 ALI_TRAINING_FAIL (link training),
# 137 NVLINK_FLA_PRIV_ERR, 144-150 NVLINK_SAW/RLW/TLW/TREX/NVLPW_CTRL/NETIR/MSE_ERROR. A fault of
# the link between GPUs, not of one process's program.
NVLINK = frozenset({74, 136, 137, 144, 145, 146, 147, 148, 149, 150})
# 45: the driver cleaned up after a process that was killed or exited -- an echo, never a cause.

PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"  # domain:bus:device, as NVRM and nvidia-smi
_XID = re.compile(rf"NVRM: Xid \((?:PCI:)?(?:(?P<pci>{PCI})(?:\.\d)?|[^)]*)\): (?P<xid>\d+), (?P<rest>.*)$")
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<xid>\d+)", re.I)
_PID = re.compile(r"^pid=(?P<pid>'?<?[\w]+>?'?), (?:name=(?P<name>[^,]*), )?")
_GPU_AT = re.compile(rf"NVRM: GPU at (?:PCI:)?(?P<pci>{PCI})(?:\.\d)?: (?P<uuid>GPU-[0-9a-fA-F-]+)")
_OFF_BUS = re.compile(rf"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?(?P<pci>{PCI})(?:\.\d)?")


def norm_pci(text: str) -> str:
    """``00000000:3B:00.0`` (nvidia-smi), ``PCI:0000:3b:00`` (NVRM) -> ``0000:3b:00``."""
    text = text.strip().lower().removeprefix("pci:")
    text = text.split(".", 1)[0]
    parts = text.split(":")
    if len(parts) == 3:
        return f"{parts[0][-4:]}:{parts[1]}:{parts[2]}"
    return text


def _event(kind: str, line: Line, ctx: Context, severity: Severity,
           fields: dict[str, str | int | float]) -> list[LogEvent]:
    """A kernel line names no rank: only a prefix a launcher put before it (``srun -l``) does; the
    rank a file's name implies is not the GPU's (a node's dmesg is every rank's)."""
    source = line.rank_source if line.rank is not None else ""
    return [make_event(kind, line, ctx, severity, fields, rank=line.rank, rank_source=source)]


def xid(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    m = _XID.search(body)
    if m is None:
        return []
    code = int(m.group("xid"))
    rest = m.group("rest")
    fields: dict[str, str | int | float] = {"xid": code}
    if m.group("pci"):
        fields["pci"] = norm_pci(m.group("pci"))
    cause = _CAUSED_BY.search(rest)
    if cause is not None:
        fields["cause_xid"] = int(cause.group("xid"))
    if code in NVLINK or fields.get("cause_xid") in NVLINK:
        fields["nvlink"] = 1
    p = _PID.match(rest)
    if p is not None:
        pid = p.group("pid").strip("'")
        if pid.isdigit():
            fields["pid"] = int(pid)
        name = (p.group("name") or "").strip()
        if name and name != "<unknown>":
            fields["process"] = name
        rest = rest[p.end():]
    fields["text"] = rest.strip()[:200]
    fields["fatal"] = 1 if code in FATAL else 0
    severity: Severity = "fatal" if code in FATAL else "error" if code in APP else "warning"
    return _event("gpu_xid", line, ctx, severity, fields)


def off_bus(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """The fallen-off-the-bus texts without an Xid number, one line or three."""
    body = line.body
    m = _OFF_BUS.search(body)
    if m is None or "NVRM: Xid" in body:
        return []
    if "fallen off the bus" not in body:
        if "The NVIDIA GPU" not in body:
            return []
        for n, nxt in enumerate(follow.lines()):
            if n >= 3 or "NVRM:" not in nxt.raw:
                return []
            follow.consume(nxt.line_no)
            if "fallen off the bus" in nxt.raw:
                break
        else:
            return []
    fields: dict[str, str | int | float] = {"xid": 79, "pci": norm_pci(m.group("pci")),
                                            "text": "GPU has fallen off the bus", "fatal": 1}
    return _event("gpu_xid", line, ctx, "fatal", fields)


_LOST = re.compile(rf"Unable to determine the device handle for (?i:gpu) ?(?P<pci>{PCI})(?:\.\d)?: "
                   r"(?P<why>.*)$")


def lost(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _LOST.search(line.body)
    if m is None:
        return []
    fields: dict[str, str | int | float] = {"xid": 79, "pci": norm_pci(m.group("pci")),
                                            "text": "nvidia-smi: " + m.group("why").strip()[:160],
                                            "fatal": 1}
    return _event("gpu_xid", line, ctx, "fatal", fields)


_HSA = re.compile(r"HW Exception by GPU (?P<node>node-\d+)(?: \(Agent handle: [^)]*\))? reason ?:\s*(?P<why>.*)$")


def hsa(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _HSA.search(line.body)
    if m is None:
        return []
    fields: dict[str, str | int | float] = {"vendor": "amd", "gpu": m.group("node"),
                                            "reason": m.group("why").strip()[:160], "fatal": 1}
    return _event("gpu_fault", line, ctx, "fatal", fields)


def gpu_at(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _GPU_AT.search(line.body)
    if m is None:
        return []
    fields: dict[str, str | int | float] = {"pci": norm_pci(m.group("pci")), "uuid": m.group("uuid")}
    return _event("gpu_uuid", line, ctx, "info", fields)


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"NVRM: Xid", xid),
    (b"NVRM: GPU at ", gpu_at),
    (b"NVRM: GPU ", off_bus),
    (b"NVRM: The NVIDIA GPU ", off_bus),
    (b"Unable to determine the device handle for GPU", lost),
    (b"Unable to determine the device handle for gpu", lost),  # nvidia-smi -L
    (b"HW Exception by GPU", hsa),
]
