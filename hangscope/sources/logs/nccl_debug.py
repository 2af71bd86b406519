# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""NCCL's own ``NCCL_DEBUG=INFO|WARN`` output (NCCL 2.x ``src/debug.cc``: ``ncclDebugLog``).

Line format (NCCL 2.x; the source location appears for WARN since 2.4 and for INFO at TRACE level;
a launcher may add ``[1] `` or ``[rank1]:`` in front)::

    <host>:<pid>:<tid> [<cudaDev>] NCCL INFO <message>
    <host>:<pid>:<tid> [<cudaDev>] <file>:<line> NCCL WARN <message>

Events:

``nccl_transport_error`` -- a WARN about the network/transport, e.g. (issues NVIDIA/nccl#928, #1405,
#1814, #1232, nccl-tests#252)::

    H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)
    hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 172.36.143.59<44206> with status=12 opcode=129 len=65536 vendor err 129 (Recv) localGid ::ffff:29.87.88.182 remoteGids::ffff:29.87.4.221
    node0:13571:13593 [0] misc/socket.cc:71 NCCL WARN socketProgress: Connection closed by remote peer node2<42830>
    node0:13571:13593 [0] include/socket.h:423 NCCL WARN Net : Connection closed by remote peer 10.0.0.2<45678>
    node0:13571:13593 [0] transport/net_socket.cc:519 NCCL WARN NET/Socket : peer 10.0.0.2<45678> message truncated : receiving 1048576 bytes instead of 65536

  fields: host, pid, tid, cuda_dev, src, transport (NET/IB, NET/Socket, Net, socket), peer, peer_port,
  error (IB work-completion status), vendor_err, direction (Send/Recv); for ``message truncated :
  receiving N bytes instead of M`` also truncated (1), got_bytes (N), want_bytes (M): NCCL goes on
  "If you believe your socket network is in a healthy state, there may be a mismatch in collective
  sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks".

``nccl_warn`` -- any other ``NCCL WARN`` line (same host/pid/tid/cuda_dev/src fields). Among them
``ibvwrap.c:102 NCCL WARN Call to ibv_get_async_event failed``: NCCL's IB async-event thread could
not read the device's event queue, which happens when the device context closes under it (at
teardown, or after the device event that NCCL reports on its own line, ``NET/IB : Got async event
: local catastrophic error``, NVIDIA/nccl#230). Alone it names no failed transfer: an echo, not a
transport error.

``nccl_init_start`` (host, pid, comm: the ``comm 0x...`` pointer) -- NCCL >= 2.19's ``Init START``
line of a communicator; ``nccl_comm_ready`` (same fields) -- its ``Init COMPLETE``, for a
communicator whose START this file showed (``analysis/detectors/init_hang.py`` pairs them).

``nccl_connected`` (host, pid) -- ``NCCL INFO Connected all rings`` / ``Connected all trees``:
a communicator's channels connected (set-up that went through; NCCL < 2.19 says little else).

``nccl_local_peer_closed`` (host, pid, cuda_dev, peer_local) -- ``[Service thread] Connection
closed by localRank N``: NCCL's proxy lost the connection of local rank N's process.

``nccl_comm_end`` (host, pid, comm_rank, nranks, how: ``destroy`` | ``abort``) -- ``comm 0x55d5
rank 3 nranks 4 cudaDev 3 busId 400000 - Abort COMPLETE`` (or ``Destroy COMPLETE``): the process
tore its communicator down (``ncclCommAbort``: torch's shutdown at exit, or after an error;
``ncclCommDestroy``: destroy_process_group).

``nccl_device`` (or, for a line without a busId, ``nccl_init_done``: host, pid) -- the first
``Init COMPLETE`` line of each process: its communicator is ready. The same line serves rank
attribution: ``NCCL INFO comm 0x55df01b24dd0 rank 24 nranks 32 cudaDev 0 nvmlDev 0 busId 7000
commId 0x2114bc51af4fb978 - Init COMPLETE`` (NCCL 2.19+; older ones lack nvmlDev/commId) maps ``host:pid`` to the rank in the LARGEST communicator that process joined (the
world communicator for torch's default process group).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

# what follows the process's head: the source file and line (WARN; a net plugin's own lines,
# aws-ofi-nccl's, name the function instead: "int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t
# **):208"), the level, the message
_BODY = (r"(?:(?P<src>[\w./\-]+(?::| )\d+(?: \(\w+\))?|(?:[\w:]+\s+){0,2}[\w:~]+\([\w\s*&,:<>]{0,160}\):\d+) )?"
         r"NCCL (?P<level>INFO|WARN|TRACE|ABORT) (?P<msg>.*)$")
LINE = re.compile(r"(?:^|\s)(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] " + _BODY)
# the same line with its ``host:pid:tid [dev]`` head left out of the paste (``NCCL INFO ...``,
# ``misc/ibvwrap.cc:63 NCCL WARN ...`` at the start of a line): read alike, tied to no process
BARE = re.compile(r"^\s*" + _BODY)
_COMM = re.compile(r"\bcomm (0x[0-9a-f]+) rank (\d+) nranks (\d+)")
_LOCAL_CLOSED = re.compile(r"Connection closed by localRank (\d+)")
_TIMINGS = re.compile(r"Init timings: rank (\d+) nranks (\d+) total ([\d.]+)")
MAX_COMMS = 100_000  # communicators whose START is remembered per file
_INIT = re.compile(r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)")
_TRANSPORT = re.compile(
    r"^(?P<transport>NET/IB|NET/Socket|NET/\w+|Net|socket\w+|"
    r"Call to ibv_\w+|ibv_\w+|IB)\b")
_PEER = re.compile(
    r"(?:remote peer|from peer|peer|[Cc]onnect to|recv from|send to) "
    r"(?P<peer>[\w.:%\-]+?)<(?P<port>\d+)>")
_IB_ERR = re.compile(r"with (?:error|status=)\s*(?P<err>\d+)")
_VENDOR = re.compile(r"vendor err (?P<v>\d+)")
_DIRECTION = re.compile(r"\((?P<dir>Send|Recv)\)")
# a WARN raised in NCCL's network code names it by its source file whatever its words
# ("transport/net_ib/gdaki/gin_host_gdaki.cc:431 (gdakiConnectQp) NCCL WARN DOCA failure 21")
# (misc/ibvwrap's "Failed to open libibverbs.so" is no failure: NCCL falls back to sockets)
_NET_SOURCE = re.compile(r"transport/(?:net|coll_net)\w*[./]")
_TRANSPORT_WORDS = ("Connection closed", "Connection reset", "completion from peer", "NET/",
                    "socketProgress", "ibv_", "Net :", "timeout", "Timeout", "unreachable",
                    "refused", "truncated", "connection abort", "Connect to")


def nccl_line(body: str) -> re.Match[str] | None:
    """NCCL's debug line in ``body``, headed (``host``, ``pid``, ``tid``, ``dev`` set) or bare."""
    return LINE.search(body) or BARE.match(body)


def origin(m: re.Match[str]) -> dict[str, str | int | float]:
    """The process a matched line names (``host``, ``pid``), or nothing for a bare line."""
    if "host" not in m.re.groupindex:
        return {}
    return {"host": m.group("host"), "pid": int(m.group("pid"))}


def _key(m: re.Match[str]) -> tuple[str, int] | None:
    return (m.group("host"), int(m.group("pid"))) if "host" in m.re.groupindex else None


def note_init(line: Line, ctx: Context) -> None:
    m = LINE.search(line.body)
    if not m or m.group("level") != "INFO":
        return
    i = _INIT.search(m.group("msg"))
    if not i:
        return
    key = (m.group("host"), int(m.group("pid")))
    nranks, rank = int(i.group("nranks")), int(i.group("rank"))
    best = ctx.pid_rank.get(key)
    if best is None or nranks > best[0]:
        ctx.pid_rank[key] = (nranks, rank)


_BUS = re.compile(r"cudaDev (?P<dev>\d+) (?:nvmlDev (?P<nvml>\d+) )?busId (?P<bus>[0-9a-f]+)")


def init_line(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """Note the pid's rank; the first time a pid's rank is known, or when a larger communicator
    changes it, a ``nccl_device`` event ties that rank to its GPU (``cudaDev 3 nvmlDev 3 busId
    3b000``: NCCL's int64 of ``0000:3b:00.0``, the bus id the driver's Xid lines name)."""
    m = nccl_line(line.body)
    key = _key(m) if m else None
    before = ctx.pid_rank.get(key) if key else None
    note_init(line, ctx)
    after = ctx.pid_rank.get(key) if key else None
    b = _BUS.search(line.body)
    ready: list[LogEvent] = []
    if m is not None and (comm := _COMM.search(line.body)) is not None \
            and comm.group(1) in ctx.comms_started:
        ready.append(make_event("nccl_comm_ready", line, ctx, "info",
                                {**origin(m), "comm": comm.group(1)}))
    if m is not None and key is None and m.group("level") == "INFO" \
            and (i := _INIT.search(m.group("msg"))) is not None:
        # a bare line: the communicator it names is ready, its rank the line's own
        rank, source = (line.rank, line.rank_source) if line.rank is not None else \
            (int(i.group("rank")), "content")
        return [make_event("nccl_init_done", line, ctx, "info", {"nranks": int(i.group("nranks"))},
                           rank=rank, rank_source=source)] + ready
    if m is None or key is None or after is None or after == before:
        return ready
    if b is None:  # NCCL < 2.19 names no busId: only that this process's communicator is ready
        rank, source = (line.rank, line.rank_source) if line.rank is not None else \
            (after[1], "pid")
        return [make_event("nccl_init_done", line, ctx, "info",
                           {"host": key[0], "pid": key[1], "nranks": after[0]}, rank=rank,
                           rank_source=source)] + ready
    bus = int(b.group("bus"), 16)
    pci = f"{bus >> 20:04x}:{(bus >> 12) & 0xff:02x}:{(bus >> 4) & 0xff:02x}"
    fields: dict[str, str | int | float] = {
        "host": key[0], "pid": key[1], "cuda_dev": int(b.group("dev")), "pci": pci,
        "nranks": after[0]}
    if b.group("nvml") is not None:
        fields["nvml_dev"] = int(b.group("nvml"))
    rank, source = (line.rank, line.rank_source) if line.rank is not None else (after[1], "pid")
    return [make_event("nccl_device", line, ctx, "info", fields, rank=rank,
                       rank_source=source)] + ready


def local_peer_closed(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``[Service thread] Connection closed by localRank 7`` (NCCL's proxy service, proxy.cc): a
    process on the same node that this one's proxy served went away."""
    m = LINE.search(line.body)
    peer = _LOCAL_CLOSED.search(line.body)
    if m is None or peer is None:
        return []
    return [make_event("nccl_local_peer_closed", line, ctx, "info",
                       {"host": m.group("host"), "pid": int(m.group("pid")),
                        "cuda_dev": int(m.group("dev")), "peer_local": int(peer.group(1))})]


# a communicator torn down: "comm 0x3ab1b680 rank 1 nranks 2 cudaDev 1 busId d000 - Destroy
# COMPLETE" (ncclCommDestroy; ncclCommAbort says "Abort COMPLETE"); finish.py reads it too
COMM_END = re.compile(r"\bcomm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nranks (?P<n>\d+)\b.* - "
                      r"(?P<how>Abort|Destroy) COMPLETE\b")


def comm_end(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = nccl_line(line.body)
    end = COMM_END.search(line.body)
    if m is None or end is None or m.group("level") != "INFO":
        return []
    return [make_event("nccl_comm_end", line, ctx, "info", {
        **origin(m), "comm_rank": int(end.group("rank")), "nranks": int(end.group("n")),
        "how": end.group("how").lower()})]


def init_timings(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``Init timings: rank 5 nranks 8 total 2.46 (kernels 0.18, bootstrap 1.60, ...)`` (NCCL >=
    2.21, at the end of a communicator's init): that rank's communicator is ready."""
    m = LINE.search(line.body)
    t = _TIMINGS.search(line.body)
    if m is None or t is None:
        return []
    return [make_event("nccl_init_timing", line, ctx, "info",
                       {"host": m.group("host"), "pid": int(m.group("pid")),
                        "nranks": int(t.group(2)), "total_s": float(t.group(3))},
                       rank=int(t.group(1)), rank_source="content")]


def init_start(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``comm 0x... rank R nranks N ... - Init START``: a communicator's setup began."""
    m = nccl_line(line.body)
    comm = _COMM.search(line.body)
    if m is None or comm is None or len(ctx.comms_started) >= MAX_COMMS:
        return []
    ctx.comms_started.add(comm.group(1))
    return [make_event("nccl_init_start", line, ctx, "info",
                       {**origin(m),
                        "comm": comm.group(1), "comm_rank": int(comm.group(2)),
                        "nranks": int(comm.group(3))})]


# NCCL's proxy thread names its own rank: "[Proxy Service 93] Failed to execute operation Setup
# from rank 93" (proxy.cc); like Init COMPLETE's, it maps the line's host:pid to that rank
_PROXY = re.compile(r"\[Proxy Service (\d+)\]")


def warn(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = nccl_line(line.body)
    if not m or m.group("level") not in ("WARN", "ABORT"):
        return []
    key = _key(m)
    proxy = _PROXY.search(m.group("msg"))
    if proxy is not None and key is not None:
        ctx.pid_rank.setdefault(key, (0, int(proxy.group(1))))
    msg = m.group("msg").strip()
    fields: dict[str, str | int | float] = {**origin(m), "src": m.group("src") or "",
                                            "text": msg[:300]}
    if key is not None:
        fields.update({"tid": int(m.group("tid")), "cuda_dev": int(m.group("dev"))})
    kind = _warn_kind(msg, fields)
    rank, source = None, ""
    if line.rank is not None:
        rank, source = line.rank, line.rank_source
    else:
        known = ctx.pid_rank.get(key) if key is not None else None
        if known is not None:
            rank, source = known[1], "pid"
        elif ctx.rank_hint is not None:
            rank, source = ctx.rank_hint, ctx.rank_hint_source
    return [make_event(kind, line, ctx, "warning", fields, rank=rank, rank_source=source)]


def _warn_kind(msg: str, fields: dict[str, str | int | float]) -> str:
    """The event kind a WARN's message makes (``cuda_error``, ``nccl_transport_error`` or
    ``nccl_warn``), its details added to ``fields``."""
    t = _TRANSPORT.search(msg)
    if _NVLS.search(msg):  # the NVSwitches' multicast objects ran out: the fabric, not one GPU
        fields["transport"] = "NVLS"
        return "nccl_transport_error"
    cuda = _CUDA_FAILURE.search(msg)
    if cuda:  # NCCL's own CUDA call failed on this rank's GPU: ``Cuda failure 'out of memory'``
        fields["error"] = cuda.group("error")
        return "cuda_error"
    if _ASYNC_READ.search(msg) or not (t or any(word in msg for word in _TRANSPORT_WORDS)
                                       or _NET_SOURCE.match(str(fields.get("src", "")))):
        return "nccl_warn"  # (the async-event thread's read failing: an echo, module docstring)
    fields["transport"] = t.group("transport") if t else ""
    p = _PEER.search(msg)
    if p:
        fields["peer"] = p.group("peer")
        fields["peer_port"] = int(p.group("port"))
    e = _IB_ERR.search(msg)
    if e:
        fields["error"] = int(e.group("err"))
    v = _VENDOR.search(msg)
    if v:
        fields["vendor_err"] = int(v.group("v"))
    d = _DIRECTION.search(msg)
    if d:
        fields["direction"] = d.group("dir")
    cut = _TRUNCATED.search(msg)
    if cut:  # NCCL: "... there may be a mismatch in collective sizes ... between ranks"
        fields.update({"truncated": 1, "got_bytes": int(cut.group("got")),
                       "want_bytes": int(cut.group("want"))})
    return "nccl_transport_error"


# NCCL's last error as torch's exception quotes it (ncclGetLastError, torch >= 1.13): "NCCL
# error in: ..., internal error ... Last error:" and, on its own line, the WARN's message
# without its head ("Net : Call to recv from 10.0.0.2<56843> failed : Connection refused")
_LAST_ERROR = re.compile(r"\bLast error:\s*(?P<msg>.*)$")


def last_error(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A transport or CUDA failure that torch's NCCL exception quotes as NCCL's last error: the
    same event as the WARN line it comes from (``last_error`` set), on the line that says it."""
    m = _LAST_ERROR.search(line.body)
    if m is None:
        return []
    said, msg = line, m.group("msg").strip()
    if not msg:
        below = next((nxt for nxt in follow.lines() if nxt.key == line.key and nxt.body.strip()),
                     None)
        if below is None:
            return []
        said, msg = below, below.body.strip()
    if nccl_line(msg) is not None:
        return []  # a WARN line of its own, read as one
    fields: dict[str, str | int | float] = {"text": msg[:300], "last_error": 1}
    kind = _warn_kind(msg, fields)
    if kind == "nccl_warn" or (kind == "nccl_transport_error" and not _TRANSPORT.search(msg)
                               and fields.get("transport") != "NVLS"):
        return []  # (only NCCL's own wordings: "Net : ...", "NET/IB : ...", a Cuda failure)
    return [make_event(kind, said, ctx, "warning", fields)]


def nvls_failure(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """NCCL's NVLS WARN (``transport/nvls.cc``) quoted without its head, as torch's exception
    prints NCCL's last error::

        Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 2 'out of memory'.
        This is usually caused by a system or configuration error in the Fabric Manager or NVSwitches.

    The CUDA error is the NVSwitches' multicast resources (Fabric Manager), not the GPU's memory:
    a ``nccl_transport_error`` of transport ``NVLS``. A headed WARN line is ``warn``'s."""
    if nccl_line(line.body) is not None or not _NVLS.search(line.body):
        return []
    fields: dict[str, str | int | float] = {"text": line.body.strip()[:300], "transport": "NVLS"}
    return [make_event("nccl_transport_error", line, ctx, "warning", fields)]


_TRUNCATED = re.compile(r"message truncated : receiving (?P<got>\d+) bytes instead of (?P<want>\d+)")
_NVLS = re.compile(r"\(NVLS\) Multicast memory")
_ASYNC_READ = re.compile(r"^Call to ibv_get_async_event failed\s*$")
_CUDA_FAILURE = re.compile(r"Cuda failure (?:\d+ )?'(?P<error>[^']+)'")
_MISMATCH = re.compile(r"Mismatched collective detected, please check your collective calls at "
                       r"and around rank (?P<rank>\d+)")


def device_mismatch(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``nccl_device_mismatch`` -- NCCL's kernel found that a peer's collective arguments differ
    from its own (``ncclDevAssertedMismatch``, ``init.cc``/``enqueue.cc`` since 2.4)::

        init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around rank 39. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs

    The rank printed is the reporting communicator's own (``comm->rank``): field ``around_rank``;
    the host head (``host:pid:tid [dev]``) is often left out of a paste, so it is not required."""
    m = _MISMATCH.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {"around_rank": int(m.group("rank"))}
    head = LINE.search(line.body)
    if head:
        fields.update({"host": head.group("host"), "pid": int(head.group("pid"))})
    return [make_event("nccl_device_mismatch", line, ctx, "error", fields,
                       rank=int(m.group("rank")), rank_source="content")]




def connected(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``Connected all rings`` / ``Connected all trees`` (NCCL's init.cc, once per communicator
    as its channels connect, before Init COMPLETE): a set-up step that went through."""
    m = nccl_line(line.body)
    if m is None or m.group("level") != "INFO":
        return []
    return [make_event("nccl_connected", line, ctx, "info", origin(m))]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"Mismatched collective detected", device_mismatch),
    (b"NCCL WARN ", warn),  # (headed, or bare at the start of a line)
    (b" NCCL ABORT ", warn),
    (b"Init COMPLETE", init_line),
    (b"Init START", init_start),
    (b"Init timings: rank", init_timings),
    (b"Connection closed by localRank", local_peer_closed),
    (b"Abort COMPLETE", comm_end),
    (b"Destroy COMPLETE", comm_end),
    (b"NCCL INFO Connected all", connected),
    (b"Last error:", last_error),
    (b"(NVLS) Multicast memory", nvls_failure),
]
