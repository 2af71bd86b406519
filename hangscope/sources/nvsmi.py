# ruff: noqa: E501  (the docstring quotes raw nvidia-smi output verbatim)
"""``nvidia-smi`` output -> :class:`~hangscope.model.GpuReading` objects, in the formats the tool
prints (its man page; the output is not promised stable, so every field is optional here).

* ``--query-gpu=index,uuid,pci.bus_id,utilization.gpu,power.draw,memory.used,memory.total,clocks.sm
  --format=csv[,noheader][,nounits]``: a header ``index, uuid, pci.bus_id, utilization.gpu [%],
  power.draw [W], ...`` unless ``noheader``; values ``100 %``/``100``, ``[N/A]``, ``[Not Supported]``,
  ``[Unknown Error]``, ``[GPU is lost]``.
* ``--query-compute-apps=pid,gpu_uuid,used_memory --format=csv,...``: which pids run on which GPU.
* the default table (``| 0  NVIDIA H100 80GB HBM3  On | 00000000:18:00.0 Off | 0 |`` then ``| N/A 34C
  P0 118W / 700W | 74213MiB / 81559MiB | 100% Default |``, and the ``Processes:`` table).
* ``nvidia-smi -q -x``: the same as XML (:func:`parse_xml`).
* ``nvidia-smi -q``: ``GPU 00000000:18:00.0`` sections with ``Minor Number``, ``GPU UUID``,
  ``Utilization / Gpu``, ``Power Draw``, ``FB Memory Usage / Used, Total``, ``Clocks / SM`` and
  ``Processes / Process ID``.

``attach`` stores its raw query output in the bundle as ``job/gpu.json`` (kind ``"gpu"``):
``{"schema": "hangscope.gpu/1", "host": ..., "samples": [{"taken_at": ..., "fields": [...],
"query_gpu": "<csv>", "compute_apps": "<csv>"}], "ranks": {"<rank>": {"cuda_visible_devices": "3",
"local_rank": 3}}}``.
"""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree

from hangscope.errors import BadInputError
from hangscope.model import GpuReading, JobEvidence
from hangscope.sources.logs.gpu import PCI, norm_pci

KIND = "gpu"
SCHEMA = "hangscope.gpu/1"
QUERY_FIELDS = ("index", "uuid", "pci.bus_id", "utilization.gpu", "power.draw", "memory.used",
                "memory.total", "clocks.sm")
APPS_FIELDS = ("pid", "gpu_uuid", "used_memory")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?")
_TO_ATTR = {"utilization.gpu": "util_pct", "power.draw": "power_w", "memory.used": "mem_used_mib",
            "memory.total": "mem_total_mib", "clocks.sm": "sm_clock_mhz",
            "clocks.current.sm": "sm_clock_mhz"}


def _num(text: str) -> float | None:
    m = _NUMBER.match(text.strip())
    return float(m.group(0)) if m else None


def _rows(text: str, fields: tuple[str, ...]) -> tuple[tuple[str, ...], list[list[str]]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and not _NUMBER.match(lines[0].split(",")[0].strip()) \
            and not lines[0].strip().startswith("GPU-"):
        fields = tuple(col.split("[")[0].strip() for col in lines[0].split(","))
        lines = lines[1:]
    return fields, [[cell.strip() for cell in line.split(",")] for line in lines]


def parse_apps(text: str, fields: tuple[str, ...] = APPS_FIELDS) -> dict[str, list[int]]:
    """``--query-compute-apps`` CSV -> {gpu uuid: [pids]}."""
    fields, rows = _rows(text, fields)
    found: dict[str, list[int]] = {}
    for row in rows:
        cells = dict(zip(fields, row, strict=False))
        pid, uuid = cells.get("pid", ""), cells.get("gpu_uuid", "")
        if pid.isdigit() and uuid:
            found.setdefault(uuid, []).append(int(pid))
    return found


def parse_query(text: str, fields: tuple[str, ...] = QUERY_FIELDS, *, apps: str = "",
                taken_at: float | None = None, host: str | None = None,
                where: str = "") -> list[GpuReading]:
    """``--query-gpu`` CSV (with or without header and units) -> readings; ``apps`` the
    ``--query-compute-apps`` output of the same moment."""
    fields, rows = _rows(text, fields)
    pids = parse_apps(apps) if apps else {}
    readings = []
    for row in rows:
        cells = dict(zip(fields, row, strict=False))
        bus = cells.get("pci.bus_id", "")
        if not bus:
            continue
        values: dict[str, float | None] = {attr: _num(cells[name])
                                           for name, attr in _TO_ATTR.items() if name in cells}
        index = cells.get("index", "")
        uuid = cells.get("uuid", cells.get("gpu_uuid", ""))
        readings.append(GpuReading(
            pci=norm_pci(bus), index=int(index) if index.isdigit() else None, uuid=uuid,
            taken_at=taken_at, pids=tuple(pids.get(uuid, ())), host=host, where=where,
            **values))
    return readings


_T_GPU = re.compile(rf"^\|\s+(\d+)\s+.+?\|\s+({PCI}\.\d)\s")
_T_USE = re.compile(r"(?:(\d+)W|ERR!|N/A)\s*/\s*(?:\d+W|ERR!|N/A)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(?:(\d+)%|ERR!|N/A)")
_T_PROC = re.compile(r"^\|\s+(\d+)\s+(?:\S+\s+\S+\s+)?(\d+)\s+(?:C|G|C\+G|M|M\+C)\s+\S")


def parse_table(text: str, where: str = "") -> list[GpuReading]:
    """The default ``nvidia-smi`` table: GPUs with their bus id, power, memory and utilization,
    and the pids of the Processes table."""
    gpus: dict[int, dict[str, object]] = {}
    current: dict[str, object] | None = None
    pids: dict[int, list[int]] = {}
    in_procs = False
    for line in text.splitlines():
        if "Processes:" in line:
            in_procs = True
            continue
        if in_procs:
            p = _T_PROC.match(line)
            if p:
                pids.setdefault(int(p.group(1)), []).append(int(p.group(2)))
            continue
        g = _T_GPU.match(line)
        if g:
            current = gpus[int(g.group(1))] = {"pci": norm_pci(g.group(2))}
            continue
        u = _T_USE.search(line)
        if u and current is not None and "power_w" not in current:
            current.update(power_w=_num(u.group(1) or ""), mem_used_mib=float(u.group(2)),
                           mem_total_mib=float(u.group(3)), util_pct=_num(u.group(4) or ""))
    return [GpuReading(index=i, pids=tuple(pids.get(i, ())), where=where, **v)  # type: ignore[arg-type]
            for i, v in sorted(gpus.items())]


_Q_GPU = re.compile(rf"^GPU ({PCI}\.\d)\s*$")
_Q_KEY = re.compile(r"^(\s+)([^:]+?)\s*:\s*(.*)$")
_Q_WANT = {("", "Minor Number"): "index", ("", "GPU UUID"): "uuid",
           ("Utilization", "Gpu"): "util_pct", ("GPU Power Readings", "Power Draw"): "power_w",
           ("Power Readings", "Power Draw"): "power_w", ("FB Memory Usage", "Used"): "mem_used_mib",
           ("FB Memory Usage", "Total"): "mem_total_mib", ("Clocks", "SM"): "sm_clock_mhz"}


def parse_q(text: str, where: str = "") -> list[GpuReading]:
    """``nvidia-smi -q``: one reading per ``GPU <bus id>`` section."""
    readings: list[GpuReading] = []
    cur: dict[str, object] | None = None
    pids: list[int] = []
    section = ""

    def flush() -> None:
        if cur is not None:
            readings.append(GpuReading(pids=tuple(pids), where=where, **cur))  # type: ignore[arg-type]

    for line in text.splitlines():
        g = _Q_GPU.match(line)
        if g:
            flush()
            cur, pids, section = {"pci": norm_pci(g.group(1))}, [], ""
            continue
        if cur is None or not line.strip():
            continue
        k = _Q_KEY.match(line)
        if not k:
            section = line.strip() if len(line) - len(line.lstrip()) == 4 else section
            continue
        indent, key, value = len(k.group(1)), k.group(2), k.group(3).strip()
        scope = "" if indent <= 4 else section
        attr = _Q_WANT.get((scope, key))
        if key == "Process ID" and value.isdigit():
            pids.append(int(value))
        elif attr == "uuid":
            cur["uuid"] = value
        elif attr == "index":
            cur["index"] = int(value) if value.isdigit() else None
        elif attr:
            cur[attr] = _num(value)
    flush()
    return readings


def parse_xml(text: str, where: str = "") -> list[GpuReading]:
    """``nvidia-smi -q -x``: ``<gpu id="00000000:18:00.0">`` elements with ``minor_number``,
    ``uuid``, ``utilization/gpu_util``, ``gpu_power_readings/power_draw`` (``power_readings``
    before driver 530), ``fb_memory_usage/used|total``, ``clocks/sm_clock`` and
    ``processes/process_info/pid``. The DTD it names is never fetched."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise ValueError(f"not nvidia-smi XML ({exc})") from exc

    def value(gpu: ElementTree.Element, path: str) -> float | None:
        node = gpu.find(path)
        return _num(node.text or "") if node is not None else None

    readings = []
    for gpu in root.iter("gpu"):
        minor = gpu.findtext("minor_number", "").strip()
        power = value(gpu, "gpu_power_readings/power_draw")
        readings.append(GpuReading(
            pci=norm_pci(gpu.get("id", "")), index=int(minor) if minor.isdigit() else None,
            uuid=gpu.findtext("uuid", "").strip(), util_pct=value(gpu, "utilization/gpu_util"),
            power_w=power if power is not None else value(gpu, "power_readings/power_draw"),
            mem_used_mib=value(gpu, "fb_memory_usage/used"),
            mem_total_mib=value(gpu, "fb_memory_usage/total"),
            sm_clock_mhz=value(gpu, "clocks/sm_clock"), where=where,
            pids=tuple(int(p.text) for p in gpu.iterfind("processes/process_info/pid")
                       if p.text and p.text.strip().isdigit())))
    return readings


# lines of nvidia-smi's table output besides its rows: the date it prints first, a shell prompt
_TABLE_EXTRAS = re.compile(rb"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}|"
                           rb"\S*[$#] .*nvidia-smi.*)$")
FOREIGN_LINES = 3  # lines no nvidia-smi table holds that make a file a log that shows one
TABLE_LOOK_BYTES = 64 << 10  # read this much of a file that opens with a table (8 GPUs, their
# processes: several KiB) to find the lines after it


def in_a_log(head: bytes) -> bool:
    """The table is part of a console log (a job script ran nvidia-smi before training): lines
    that are neither the table's rows nor its date. Such a file is read as the log it is; its
    table is a snapshot of unknown time (the job's start, mostly), so no GPU state is taken
    from it."""
    foreign = 0
    for raw in head.split(b"\n"):
        line = raw.strip()
        if line and line[:1] not in (b"|", b"+", b"=") and not _TABLE_EXTRAS.match(line):
            foreign += 1
            if foreign >= FOREIGN_LINES:
                return True
    return False


def is_table(head: bytes) -> bool:
    """nvidia-smi's default output, its table (whether alone or at the top of a log)."""
    return b"NVIDIA-SMI " in head[:600] and b"Driver Version" in head[:600]


def sniff(head: bytes) -> bool:
    """nvidia-smi output in one of its formats; a table at the top of a log is told apart by
    the caller, from more of the file than a sniff's head (``in_a_log``)."""
    text = head.lstrip()
    return is_table(head) \
        or text.startswith(b"==============NVSMI LOG==============") \
        or (text.startswith(b"<?xml") and b"<nvidia_smi_log>" in head[:600]) \
        or (text.startswith(b"index,") and b"pci.bus_id" in head[:400]) \
        or (text.startswith(b"{") and f'"{SCHEMA}"'.encode() in head)


def parse_text(text: str, where: str) -> list[GpuReading]:
    if "<nvidia_smi_log>" in text[:600]:
        return parse_xml(text, where)
    if "NVSMI LOG" in text[:200]:
        return parse_q(text, where)
    if "NVIDIA-SMI " in text[:600]:
        return parse_table(text, where)
    return parse_query(text, where=where)


def load_gpu_file(path: str, rank: int | None, evidence: JobEvidence,
                  problems: list[str]) -> None:
    """A bundle's ``gpu.json``, or a saved ``nvidia-smi`` output of any of the formats above."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(8 << 20)
    except OSError as exc:
        raise BadInputError(path, f"cannot read: {exc.strerror}") from exc
    if not text.lstrip().startswith("{"):
        try:
            evidence.gpus.extend(parse_text(text, path))
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
        return
    try:
        doc = json.loads(text)
        if doc.get("schema") != SCHEMA:
            problems.append(f"{path}: not a {SCHEMA} file")
            return
        for rank, seen in (doc.get("ranks") or {}).items():
            local = seen.get("local_rank")
            evidence.gpu_visible[int(rank)] = (str(seen["cuda_visible_devices"]),
                                               local if isinstance(local, int) else None)
        for sample in doc.get("samples", []):
            evidence.gpus.extend(parse_query(
                sample.get("query_gpu", ""), tuple(sample.get("fields") or QUERY_FIELDS),
                apps=sample.get("compute_apps", ""), taken_at=sample.get("taken_at"),
                host=doc.get("host"), where=path))
    except (ValueError, AttributeError, TypeError, KeyError) as exc:
        problems.append(f"{path}: unreadable GPU record ({exc})")
