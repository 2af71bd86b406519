# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Lines that say how a rank's runtime is configured: NCCL's banners and torch's environment line.
Each becomes a ``runtime_config`` event with ``key`` and ``value`` fields, compared across ranks by
``analysis.config_skew``. Formats (NCCL 2.x ``src/init.cc``, ``src/misc/param.cc``,
``src/misc/socket.cc``, ``src/transport/net_ib.cc``, ``src/transport/net_socket.cc``; the line
prefix is ``src/debug.cc``'s ``<host>:<pid>:<tid> [<cudaDev>] NCCL INFO``)::

    NCCL version 2.21.5+cuda12.4                                   (NCCL_DEBUG=VERSION/WARN: bare)
    node1:1234:1234 [0] NCCL INFO NCCL version 2.21.5+cuda12.4     (INFO; rank 0 of each comm)
        -> nccl_version 2.21.5, nccl_cuda 12.4
    node1:1234:1234 [0] NCCL INFO cudaDriverVersion 12040           -> cuda_driver_version 12040
    node1:1234:1234 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0
    node1:1234:1234 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.   (param.cc: a period)
        -> env:NCCL_SOCKET_IFNAME eth0, env:NCCL_IB_DISABLE 1
    node1:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>          -> nccl_bootstrap_if eth0
    node1:1234:1234 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.1<0>
    node1:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
        -> nccl_net_devices "IB mlx5_0:1/IB mlx5_1:1/RoCE; OOB eth0" (addresses dropped: they
           differ per node by design)
    node1:1234:1234 [0] NCCL INFO Using network IB                             -> nccl_network IB

``nccl_interface`` -- a loopback interface (``lo``, an address in 127.0.0.0/8 or ``::1``) that
NCCL's socket code picked, in any of its wordings: NCCL 2.3's ``NET : Using interface lo:127.0.0.1<0>``
(one line per interface), later ``NET/Socket : Using [0]lo:127.0.0.1<0> [1]eth0:...`` and
``Bootstrap : Using lo:127.0.0.1<0>`` / ``Bootstrap : Using [0]lo:127.0.0.1<0>``. fields: host,
pid, iface, addr, use (``net`` | ``bootstrap``). Only loopback ones are events: a peer on another
host cannot reach an address on it (``analysis/detectors/net_config.py``, rule
``loopback-interface``).

torch (``ProcessGroupNCCL.cpp``, ``LOG(INFO) << logPrefix() << "ProcessGroupNCCL environments: "``,
torch 2.2+; every rank prints it for its first process group)::

    I20241209 23:39:42.495654 138559122262912 ProcessGroupNCCL.cpp:914] [PG ID 0 PG GUID 0 Rank 1] ProcessGroupNCCL environments: NCCL version: 2.20.5, TORCH_NCCL_ASYNC_ERROR_HANDLING: 1, TORCH_NCCL_DUMP_ON_TIMEOUT: 0, ..., TORCH_DISTRIBUTED_DEBUG: OFF, ...
        -> nccl_version 2.20.5, torch:TORCH_NCCL_ASYNC_ERROR_HANDLING 1, ... (the values torch
           uses, defaults included: not environment variables)

A line gets its rank from its prefix, the file's rank hint, torch's ``[PG ID 0 ... Rank N]``, or
(NCCL lines) from the ``Init COMPLETE`` line of the same ``host:pid`` (``scan._finish``).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event, resolve_rank
from hangscope.sources.logs.nccl_debug import nccl_line, origin

KIND = "runtime_config"
_MAX_VALUE = 512
_VERSION = re.compile(r"^NCCL version (?P<v>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?\S*\s*$")
_DRIVER = re.compile(r"^cudaDriverVersion (?P<v>\d+)\s*$")
_SET_BY_ENV = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]+) set by environment to (?P<v>.*?)\.?\s*$")
_NETWORK = re.compile(r"^Using network (?P<v>\S+)\s*$")
_BOOTSTRAP = re.compile(r"^Bootstrap ?: Using (?P<v>[\w.\-]+):")
_NET_USING = re.compile(r"^NET/(?P<t>\w+) ?: Using (?P<rest>.*)$")
_IFACES = re.compile(r"(?<![\w.\-])(?P<if>[\w.\-]+):(?P<addr>[0-9a-fA-F.:%\w]+?)<\d+>")
_USING = re.compile(r"^(?P<use>NET|NET/Socket|Bootstrap) ?: Using (?:interface )?")
_DEVICE = re.compile(r"\[\d+\](?P<dev>[\w.\-]+(?::\d+/\w+)?)")
_OOB = re.compile(r"OOB (?P<if>[\w.\-]+):")
_TORCH_ENV = re.compile(
    r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID [^\]]*?)? Rank (?P<rank>\d+)\] ProcessGroupNCCL "
    r"environments: (?P<rest>.*)$")
_TORCH_ITEM = re.compile(r"(?P<name>[A-Za-z][\w ]*?): (?P<v>[^,]*)(?:, |$)")


def nccl_info(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """NCCL's version, environment, network and device banners (INFO, or the bare version)."""
    body = line.body.strip()
    m = nccl_line(line.body)
    host_pid: dict[str, str | int | float] = {}
    if m:
        if m.group("level") != "INFO":
            return []
        body = m.group("msg").strip()
        host_pid = origin(m)
        if host_pid:
            host_pid["cuda_dev"] = int(m.group("dev"))
    pairs = _nccl_pairs(body)
    return [make_event(KIND, line, ctx, "info", {"key": key, "value": value, **host_pid})
            for key, value in pairs] + _loopback(line, ctx, body, host_pid)


def _loopback(line: Line, ctx: Context, body: str,
              host_pid: dict[str, str | int | float]) -> list[LogEvent]:
    """``nccl_interface`` events for the loopback interfaces a ``Using`` line names."""
    using = _USING.match(body)
    if using is None:
        return []
    use = "bootstrap" if using.group("use") == "Bootstrap" else "net"
    return [make_event("nccl_interface", line, ctx, "info",
                       {"iface": m.group("if"), "addr": m.group("addr"), "use": use, **host_pid})
            for m in _IFACES.finditer(body, using.end())
            if m.group("if") == "lo" or m.group("addr").startswith("127.")
            or m.group("addr") == "::1"]


def _nccl_pairs(body: str) -> list[tuple[str, str]]:
    if v := _VERSION.match(body):
        pairs = [("nccl_version", v.group("v"))]
        return pairs + ([("nccl_cuda", v.group("cuda"))] if v.group("cuda") else [])
    if v := _DRIVER.match(body):
        return [("cuda_driver_version", v.group("v"))]
    if v := _SET_BY_ENV.match(body):
        return [("env:" + v.group("name"), v.group("v")[:_MAX_VALUE])]
    if v := _NETWORK.match(body):
        return [("nccl_network", v.group("v"))]
    if v := _BOOTSTRAP.match(body):
        return [("nccl_bootstrap_if", v.group("v"))]
    if v := _NET_USING.match(body):
        devices = " ".join(d.group("dev") for d in _DEVICE.finditer(v.group("rest")))
        oob = _OOB.search(v.group("rest"))
        text = f"{v.group('t')} {devices}" + (f"; OOB {oob.group('if')}" if oob else "")
        return [("nccl_net_devices", text.strip()[:_MAX_VALUE])] if devices else []
    return []


def torch_environments(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """torch's ``ProcessGroupNCCL environments:`` line: the NCCL version and the TORCH_NCCL_*
    settings in effect."""
    m = _TORCH_ENV.search(line.body)
    if not m:
        return []
    rank, source = resolve_rank(line, ctx, int(m.group("rank")), m.group("pg"))
    events = []
    for item in _TORCH_ITEM.finditer(m.group("rest")):
        name, value = item.group("name").strip(), item.group("v").strip()[:_MAX_VALUE]
        key = "nccl_version" if name == "NCCL version" else f"torch:{name}"
        if " " in name and key != "nccl_version":
            continue
        events.append(make_event(KIND, line, ctx, "info", {"key": key, "value": value},
                                 rank=rank, rank_source=source))
    return events


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"NCCL version ", nccl_info),
    (b"cudaDriverVersion ", nccl_info),
    (b" set by environment to ", nccl_info),
    (b"Using network ", nccl_info),
    (b"Bootstrap : Using ", nccl_info),
    (b"Bootstrap: Using ", nccl_info),
    (b" : Using [", nccl_info),
    (b"NET : Using interface ", nccl_info),  # NCCL 2.3
    (b"ProcessGroupNCCL environments: ", torch_environments),
]
