# ruff: noqa: E501
"""Shared pieces of the log parsers: the per-line prefixes, timestamps, rank hints and the event builder.

A line as a launcher writes it is ``<process prefixes><timestamp/level prefix><message>``. Process
prefixes, peeled in any order and repeated:

* ``[default3]:`` -- torchrun ``--tee``/``--redirects`` prefix ``[{role}{local_rank}]:`` (a LOCAL rank).
* ``[rank3]:`` (then one optional space) -- torch >= 2.2 prefixes every line of a worker's stderr,
  Python tracebacks included, with its global rank (``torch/distributed/elastic``'s
  ``log_line_prefix``); accelerate launches through torchrun and gets the same prefix.
* ``[rank: 3]`` -- Lightning's ``rank_prefixed_message``; ``[rank=3] || `` -- Determined's;
  ``[RANK 3]`` -- a common user pattern; ``[] `` -- an empty tag, peeled.
* ``[1,3]<stderr>:`` -- Open MPI ``--tag-output`` (job, rank), ``[3]<stderr>:`` -- horovodrun's;
  ``[3] `` -- a bare rank tag.
* ``48: `` -- ``srun -l``/``--label``: the task id, right-aligned to the widest one (`` 3: `` among
  16 tasks), only at the very start of a line.
* Before those: ``name  | `` -- docker compose /
  kubectl stream heads; ``[pod/name/container] `` -- kubectl ``--prefix``; ``E   `` -- pytest.

Timestamp/level prefixes (at most one):

* glog from Python (``torch.distributed.elastic`` loggers): ``W1121 11:43:46.127000 3904 file.py:874] ``
* c10 logging (torch >= 2.4): ``[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] ``;
  torch <= 2.3: ``[E ProcessGroupNCCL.cpp:458] `` (no time).
* DeepSpeed: ``[2024-05-01 12:00:00,123] [INFO] [engine.py:123:__init__] ``
* ISO 8601 / Python logging: ``2024-05-01 12:00:00,123 ``, ``2024-05-01T12:00:00.123Z ``, bracketed or not.
* kernel ``[12345.678901] `` (seconds since boot: kept in ``fields['uptime_s']``, not ``time``);
  syslog ``May  1 12:00:00 host kernel: ``.

glog and syslog lines carry no year: it is taken from the file's mtime (and one year earlier when that
would put the line in the future). Local times are converted with the machine's time zone.
"""

from __future__ import annotations

import calendar
import os
import re
import time as _time
from dataclasses import dataclass, field

from hangscope.model import LogEvent, Severity, is_default_pg

MESSAGE_CLIP = 1000

ANSI_PATTERN = r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]"  # terminal colour/cursor codes
_ANSI = re.compile(ANSI_PATTERN)

# process prefixes (peeled repeatedly)
_P_RANK = re.compile(r"\[rank(\d+)\]: ?")
# a rank named in a line's text, not its prefix: "Rank = 2,", "rank 3", "global_rank: 5"
TEXT_RANK = re.compile(r"(?i)\b(?:global[_ ]?)?rank\s*[=:#]?\s*\[?(?P<r>\d+)\b")
# Lightning's [rank: 3]; Determined's [rank=3] (then its "|| " separator)
_P_RANK_LIGHTNING = re.compile(r"\[rank ?[:=] ?(\d+)\] ?(?:\|\| )?")
_P_EMPTY = re.compile(r"\[\] ")  # an empty tag (a wrapper's container or task id, unset)
_P_RANK_UPPER = re.compile(r"\[RANK (\d+)\]:? ?")
# Open MPI's --tag-output ``[1,2]<stdout>:``; some wrappers print ``[1,2]:``; SageMaker's
# distributed training names the rank and the host: ``[1,mpirank:2,algo-1]<stderr>:``
_P_MPI = re.compile(r"\[(?:\d+,)?(?:mpirank:)?(\d+)(?:,[\w.\-]+)?\]<(?:stdout|stderr)>: ?"
                    r"|\[\d+,(\d+)\]: ?")
_P_ROLE = re.compile(r"\[([A-Za-z_][A-Za-z_\-]*?)(\d+)(?:\|\d+)?\]:")  # torchrun [default0]:, [trainer0|0]:
_P_BARE = re.compile(r"\[(\d{1,4})\] (?=\S)")  # 5 digits and more: a pid ("[26236] ...")
# Heads a container runtime or test runner puts before the process prefixes (peeled first, in any
# order; ``srun -l``'s task id is ``_P_SRUN`` below): docker compose / kubectl
# ``name  | `` (a name with a separator character, or padded by two spaces), kubectl --prefix
# ``[pod/name/container] ``, pytest's failure marker ``E   ``.
_P_PIPE = re.compile(r"(?:[\w][\w.\-/]*[.\-/][\w.\-/]*|[\w.\-/]+(?= {2})) *\| ")
_P_KUBE = re.compile(r"\[pod/[^\]\s]+\] ")
_P_INDENTED = re.compile(r"\[(?:rank ?[:=]? ?\d+|RANK \d+|\d+,(?:mpirank:)?\d+(?:,[\w.\-]+)?\]<std|[A-Za-z_]+\d+\]:|[IWEF]\d{4} )")
_P_PYTEST = re.compile(r"E {2,8}(?=\S)")
# pdsh's relay head (``worker-1: ``, ``10.0.3.17: ``; normalize peels it where most lines carry
# it, this where a wrapped or mixed paste leaves it on some): before a process prefix only
PDSH_PATTERN = (r"(?:\d{1,3}(?:\.\d{1,3}){3}|(?![Rr]ank\d|RANK\d)(?=[\w.\-]{0,62}[\d\-])"
                r"[A-Za-z][\w.\-]{0,62}): ")
_P_PDSH = re.compile(PDSH_PATTERN + r"(?=\[(?:rank|RANK |default|\d+,)|\s*\d{1,6}: )")
# the container runtime's own log file (CRI, what ``kubectl logs`` reads from the node:
# ``2025-07-25T07:53:08.217487+08:00 stdout F ``; ``P`` marks a line split at 16 KiB)
CRI_PATTERN = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) (?:stdout|stderr) [FP] "
_P_CRI = re.compile(CRI_PATTERN)
# a collector's timestamp before the launcher's process head (AzureML's, ``kubectl logs
# --timestamps``): ``2020-11-08 20:25:49 [1,0]<stdout>:``, with a zone name and a replica's name
# (Polyaxon's ``2020-01-15 22:44:33 UTC master.0 -- [1,0]<stderr>:``), or in ctime's form glued
# to the head (horovodrun --prefix-output-with-timestamp: ``Fri Sep 18 03:11:09 2020[0]<stderr>:``);
# peeled only where a head follows
_P_STAMP = re.compile(r"(?:(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
                      r"(?: [A-Z]{2,5})? (?:[\w.\-]+ -- )?"
                      r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct"
                      r"|Nov|Dec) +\d{1,2} \d\d:\d\d:\d\d \d{4} ?)"
                      r"(?=\[(?:\d+,)?\d+\]<|\[rank\d|\[RANK \d|\[default\d|\[rank ?[:=])")
# Ray's worker prefix: ``(RayWorkerWrapper pid=4009) `` or ``(RayTrainWorker pid=9, ip=10.0.0.1) ``
# vLLM's workers under its own executor name their parallel rank there: ``(VllmWorker TP2 pid=7) ``,
# ``(VllmWorker rank=2 pid=7) ``, ``(Worker_PP1_TP0 pid=7) ``
_P_RAY = re.compile(r"\((?:(?P<who>[\w.\-]+(?: (?:TP\d+|rank=\d+))?) )?pid=\d+(?:, ip=[^)]*)?\) ")
# sglang's head names the process's parallel ranks after the time: ``[2025-07-25 07:53:08 TP2] ``,
# ``[2025-07-25 07:53:08 DP1 TP3 EP3] ``
_T_SGLANG = re.compile(r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?P<tags>(?: (?:DP|PP|TP|EP|CP)\d+)+)\] ")
_PARALLEL_TAG = re.compile(r"(?<![A-Za-z])(DP|PP|TP|EP|CP|rank=)(\d+)")
# torch.multiprocessing.spawn's header over the traceback of the process that raised (read by the
# traceback handler, which gives that traceback the process, and by the cue scan)
SPAWN_HEADER = re.compile(r"^\W{0,4}Process (\d+) terminated with the following error:")
SRUN_PATTERN = r" {0,5}(\d{1,6}): "  # ``srun -l``'s task label (normalize peels it too)
_P_SRUN = re.compile(SRUN_PATTERN)

# timestamp / level prefixes
_T_GLOG = re.compile(r"([IWEF])(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +\d+ [^\]\s]+:\d+\] ?")
_T_C10 = re.compile(r"\[([IWEF])(\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) [^\]\s]+:\d+\] ?")
_T_C10_OLD = re.compile(r"\[([IWEF]) [^\]\s]+:\d+\] ?")
_T_DEEPSPEED = re.compile(
    r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d),(\d{3})\] \[(\w+)\] \[[^\]]*\] ?")
_T_ISO = re.compile(
    r"\[?(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?\]?"
    r"(?:\s*[-|:]?\s*(?:\[?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?)?)? ?")
_T_KERNEL = re.compile(r"\[\s*(\d+\.\d+)\] ")
_T_SYSLOG = re.compile(
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d+) (\d\d):(\d\d):(\d\d) \S+ [\w\-\[\].]+: ")
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

_LEVELS: dict[str, Severity] = {
    "I": "info", "W": "warning", "E": "error", "F": "fatal",
    "DEBUG": "debug", "INFO": "info", "WARNING": "warning", "WARN": "warning",
    "ERROR": "error", "CRITICAL": "fatal", "FATAL": "fatal",
}

# in-message process-group prefixes written by ProcessGroupNCCL::logPrefix()/createLogPrefix()
PG_PREFIX = re.compile(
    # (the GUID may be empty: "[PG ID 4 PG GUID  Rank 2]", torch 2.5 for a group with no desc)
    r"\[PG ID (?P<id>\d+) PG GUID (?P<guid>[^\s(\]]*)(?:\((?P<desc>[^)]*)\))? {1,2}Rank (?P<r1>\d+)\]"
    r"|\[PG (?P<pg>\d+)(?: \((?P<desc2>[^)]*)\))? Rank (?P<r2>\d+)\]"
    r"|\[Rank (?P<r3>\d+)\]")


@dataclass(slots=True)
class Line:
    """One physical line after its prefixes were peeled."""

    raw: str  # the decoded line (ANSI removed, CR stripped)
    body: str  # the message after process and timestamp prefixes
    line_no: int
    key: str  # the process prefixes verbatim: lines of one stream share it
    rank: int | None = None
    rank_source: str = ""
    local_rank: int | None = None
    time: float | None = None
    severity: Severity | None = None
    uptime_s: float | None = None
    stream_text: str = ""  # raw minus the process prefixes (timestamp kept)


@dataclass(slots=True)
class Context:
    path: str
    year: int
    now: float
    rank_hint: int | None = None
    rank_hint_source: str = "hint"
    local_hint: int | None = None
    pid_rank: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    launcher_stopping: bool = False  # a launcher said it is killing the job (mpi.srun_stop)
    comms_started: set[str] = field(default_factory=set)  # NCCL "comm 0x.. - Init START" seen


def decode(raw: bytes, limit: int) -> str:
    if len(raw) > limit:
        raw = raw[:limit]
    text = raw.decode("utf-8", errors="replace")
    if text.endswith("\r"):
        text = text[:-1]
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text


def _local_epoch(year: int, month: int, day: int, hh: int, mm: int, ss: int, frac: str | None,
                 tz: str | None = None) -> float | None:
    try:
        tup = (year, month, day, hh, mm, ss, 0, 0, -1)
        if tz:
            base = float(calendar.timegm(tup))
            if tz != "Z":
                sign = -1 if tz[0] == "-" else 1
                digits = tz[1:].replace(":", "")
                base -= sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)
        else:
            base = _time.mktime(tup)
    except (ValueError, OverflowError):
        return None
    if frac:
        base += float("0." + frac[:9])
    return base


def _glog_epoch(ctx: Context, month: int, day: int, hh: int, mm: int, ss: int,
                frac: str) -> float | None:
    stamp = _local_epoch(ctx.year, month, day, hh, mm, ss, frac)
    if stamp is not None and stamp > ctx.now + 86400 * 2:
        stamp = _local_epoch(ctx.year - 1, month, day, hh, mm, ss, frac)
    return stamp


# k2/icefall/lhotse recipes' logger (and those built on them: vall-e, ...): ``%(asctime)s
# %(levelname)s [%(filename)s:%(lineno)d] (%(rank)s/%(world_size)s) %(message)s``
_P_K2 = re.compile(r"\[[\w.\-]+\.py:\d+\] \((\d{1,5})/(\d{1,5})\) ")
# a logger's own rank tag after its time and level ("2026-11-28 03:05:57,470 INFO [rank2] train:"),
# behind a launcher prefix that gives only the local rank ("[default2]:")
_B_RANK = re.compile(r"\[(?:rank ?[:=]? ?|RANK )(\d{1,5})\]")


def parse_line(text: str, line_no: int, ctx: Context) -> Line:
    """Peel the process prefixes and one timestamp prefix off ``text``."""
    pos = 0
    rank: int | None = None
    source = ""
    local: int | None = None
    indent = len(text) - len(text.lstrip(" \t"))
    if indent and _P_INDENTED.match(text, indent):
        pos = indent  # a paste indented as a code block or a quote: "    [rank7]:[E816 ..."
    stamp = None
    for _ in range(3):
        head = _P_PIPE.match(text, pos) or _P_KUBE.match(text, pos) \
            or _P_PYTEST.match(text, pos) or _P_CRI.match(text, pos) or _P_PDSH.match(text, pos)
        if head is None and stamp is None:
            head = stamp = _P_STAMP.match(text, pos)
        if not head:
            break
        pos = head.end()
    ray = _P_RAY.match(text, pos)
    if ray:
        pos = ray.end()
        rank, local = parallel_rank(ray.group("who") or "")
        source = "prefix" if rank is not None else ""
    elif text[pos:pos + 1].isdigit() or text[pos:pos + 1] == " ":
        srun = _P_SRUN.match(text, pos)
        if srun:
            rank, source, pos = int(srun.group(1)), "prefix", srun.end()
    for _ in range(6):
        if not text.startswith("[", pos):
            break
        m = _P_RANK.match(text, pos)
        if m:
            rank, source, pos = int(m.group(1)), "prefix", m.end()
            continue
        m = _P_EMPTY.match(text, pos)
        if m:
            pos = m.end()
            continue
        m = _P_RANK_LIGHTNING.match(text, pos) or _P_RANK_UPPER.match(text, pos) \
            or _P_MPI.match(text, pos)
        if m:
            rank, source, pos = int(m.group(1) or m.group(2)), "prefix", m.end()
            continue
        m = _P_ROLE.match(text, pos)
        if m and m.group(1).lower() != "rank":
            local, pos = int(m.group(2)), m.end()
            continue
        m = _P_BARE.match(text, pos)
        if m and rank is None:
            rank, source, pos = int(m.group(1)), "prefix", m.end()
            continue
        break
    # (a prefix's one optional blank after its colon, eaten or not, is the same stream: Open MPI
    # writes "[1,0]<stderr>:" then the line as printed, frames' indent included)
    key = text[:pos].rstrip(" ") or text[:pos]
    rest = text[pos:]
    line = Line(raw=text, body=rest, line_no=line_no, key=key, rank=rank, rank_source=source,
                local_rank=local, stream_text=rest)
    if not rest:
        return line
    first = rest[0]
    m = None
    if first in "IWEF":
        m = _T_GLOG.match(rest)
        if m:
            line.severity = _LEVELS[m.group(1)]
            line.time = _glog_epoch(ctx, int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                    int(m.group(5)), int(m.group(6)), m.group(7))
    elif first == "[":
        m = _T_C10.match(rest)
        if m:
            line.severity = _LEVELS[m.group(1)]
            line.time = _glog_epoch(ctx, int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                    int(m.group(5)), int(m.group(6)), m.group(7))
        else:
            m = _T_C10_OLD.match(rest)
            if m:
                line.severity = _LEVELS[m.group(1)]
            else:
                m = _T_DEEPSPEED.match(rest)
                if m:
                    g = m.groups()
                    line.time = _local_epoch(int(g[0]), int(g[1]), int(g[2]), int(g[3]),
                                             int(g[4]), int(g[5]), g[6])
                    line.severity = _LEVELS.get(g[7].upper())
                else:
                    m = _T_KERNEL.match(rest) or _T_SGLANG.match(rest)
                    if m and m.re is _T_KERNEL:
                        line.uptime_s = float(m.group(1))
                    elif m:
                        g = m.groups()
                        line.time = _local_epoch(int(g[0]), int(g[1]), int(g[2]), int(g[3]),
                                                 int(g[4]), int(g[5]), None)
                        tagged, tagged_local = parallel_rank(m.group("tags"))
                        if line.rank is None and tagged is not None:
                            line.rank, line.rank_source = tagged, "prefix"
                        elif line.local_rank is None and tagged_local is not None:
                            line.local_rank = tagged_local
                    else:
                        m = _iso(rest, line)
    elif first.isdigit():
        m = _iso(rest, line)
    elif first in "JFMASOND":
        m = _T_SYSLOG.match(rest)
        if m:
            line.time = _glog_epoch(ctx, _MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)),
                                    int(m.group(4)), int(m.group(5)), "")
            body = rest[m.end():]
            k = _T_KERNEL.match(body)
            if k:
                line.uptime_s = float(k.group(1))
                line.body = body[k.end():]
                return line
    if m:
        line.body = rest[m.end():]
    if stamp is not None and line.time is None and stamp.group(1):
        _iso(stamp.group(1) + " ", line)  # the collector's time, where the line has none
    if line.rank is None and line.body.startswith("["):
        if k2 := _P_K2.match(line.body):
            line.rank, line.rank_source = int(k2.group(1)), "prefix"
        elif m and (tag := _B_RANK.match(line.body)):
            line.rank, line.rank_source = int(tag.group(1)), "prefix"
    return line


def parallel_rank(tags: str) -> tuple[int | None, int | None]:
    """(rank, local rank) from an inference server's parallel-rank tags (``TP2``, ``DP1 TP3``,
    ``rank=2``). The tensor-parallel rank is the process's rank only where no other data- or
    pipeline-parallel rank than 0 is named; else it is its rank inside its group (kept as local)."""
    found = {name: int(value) for name, value in _PARALLEL_TAG.findall(tags)}
    if "rank=" in found:
        return found["rank="], None
    if "TP" not in found:
        return None, None
    if found.get("DP", 0) or found.get("PP", 0):
        return None, found["TP"]
    return found["TP"], None


def _iso(rest: str, line: Line) -> re.Match[str] | None:
    m = _T_ISO.match(rest)
    if not m:
        return None
    g = m.groups()
    line.time = _local_epoch(int(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]), int(g[5]),
                             g[6], g[7])
    if g[8]:
        line.severity = _LEVELS.get(g[8].upper())
    return m


def pg_info(text: str) -> tuple[str | None, int | None]:
    """(process group, rank inside it) from a ``[PG ID 0 PG GUID 0(default_pg) Rank 3]``-style
    prefix anywhere in the text; pg is None for a bare ``[Rank 3]``."""
    m = PG_PREFIX.search(text)
    if not m:
        return None, None
    if m.group("r1") is not None:
        desc = m.group("desc")
        return (f"{m.group('id')}:{desc}" if desc else m.group("id")), int(m.group("r1"))
    if m.group("r2") is not None:
        desc = m.group("desc2")
        return (f"{m.group('pg')}:{desc}" if desc else m.group("pg")), int(m.group("r2"))
    return None, int(m.group("r3"))


def resolve_rank(line: Line, ctx: Context, message_rank: int | None = None,
                 pg: str | None = None) -> tuple[int | None, str]:
    """The rank of the process that printed the line, and how we know it."""
    if line.rank is not None:
        return line.rank, line.rank_source
    if message_rank is not None and is_default_pg(pg):
        return message_rank, "message"
    if ctx.rank_hint is not None:
        return ctx.rank_hint, ctx.rank_hint_source
    return None, ""


def make_event(kind: str, line: Line, ctx: Context, severity: Severity,
               fields: dict[str, str | int | float], *, rank: int | None = None,
               rank_source: str | None = None, message: str | None = None) -> LogEvent:
    if rank is None and rank_source is None:
        rank, rank_source = resolve_rank(line, ctx)
    if rank_source:
        fields["rank_source"] = rank_source
    local = line.local_rank if line.local_rank is not None else ctx.local_hint
    if local is not None and "local_rank" not in fields:
        fields["local_rank"] = local
    if line.uptime_s is not None:
        fields["uptime_s"] = line.uptime_s
    text = line.raw if message is None else message
    if len(text) > MESSAGE_CLIP:
        text = text[:MESSAGE_CLIP - 3] + "..."
    sev = line.severity if line.severity in ("error", "fatal") and severity != "fatal" else severity
    return LogEvent(kind=kind, message=text, path=ctx.path, line_no=line.line_no, rank=rank,
                    time=line.time, severity=sev, fields=fields)


_SIZE = re.compile(r"([\d.]+) ?(B|bytes|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b")
_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def size_bytes(text: str) -> int | None:
    m = _SIZE.search(text)
    if not m:
        return None
    try:
        return int(float(m.group(1)) * _UNITS[m.group(2)])
    except ValueError:
        return None


SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS",
           8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
           14: "SIGALRM", 15: "SIGTERM"}

_PATH_ATTEMPT = re.compile(r"(?:^|/)attempt_\d+/(\d+)/(?:stdout|stderr|error)\.(?:log|json)$")
_PATH_RANK = re.compile(r"(?:^|[^a-z0-9])(?:global_?)?rank[_\-.]?(\d+)(?![0-9])", re.I)
_PATH_STD = re.compile(r"(?:^|[^a-z])(?:stdout|stderr|out|err|log)[_\-.](\d+)(?:\.|$)", re.I)
_PATH_LOCAL = re.compile(r"(?:^|[^a-z])local_?rank[_\-.]?(\d+)(?![0-9])", re.I)


def infer_rank_from_path(path: str) -> tuple[int | None, bool]:
    """The rank a log file's name implies: ``(rank, is_local)``.

    ``<run_id>/attempt_0/3/stderr.log`` (torchrun ``--log-dir``) and ``local_rank3.log`` give a LOCAL
    rank; ``rank3.log``, ``rank3.stderr.log``, ``stdout_3.log``, a ``rank3/`` parent folder give a
    global one. ``(None, False)`` when the name says nothing.
    """
    norm = path.replace(os.sep, "/")
    m = _PATH_ATTEMPT.search(norm)
    if m:
        return int(m.group(1)), True
    base = norm.rsplit("/", 1)[-1]
    m = _PATH_LOCAL.search(base)
    if m:
        return int(m.group(1)), True
    m = _PATH_RANK.search(base) or _PATH_STD.search(base)
    if m:
        return int(m.group(1)), False
    parent = norm.rsplit("/", 2)[-2] if norm.count("/") >= 1 else ""
    m = re.fullmatch(r"(?:global_?)?rank[_\-.]?(\d+)", parent, re.I)
    if m:
        return int(m.group(1)), False
    return None, False


def one_line(text: str, limit: int) -> str:
    """Whitespace collapsed, cut to ``limit`` characters with an ellipsis: for sentences that
    quote a log line."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def join_ints(values: list[int]) -> str:
    return ",".join(str(v) for v in values)
