"""Ask NCCL's RAS service on this node for its job-wide status report (what ``ncclras`` prints).

Protocol, as read in NVIDIA/nccl (NCCL >= 2.24): ``src/ras/client.cc`` (the ``ncclras`` client),
``src/ras/client_support.cc`` (``rasClientInitSocket``, ``rasClientEventLoop``,
``rasClientRunInit``), ``src/ras/ras_internal.h`` (``NCCL_RAS_CLIENT_PORT 28028``,
``NCCL_RAS_CLIENT_PROTOCOL 2``, ``RAS_COLLECTIVE_LEG_TIMEOUT_SEC 5``), ``src/bootstrap.cc``
(``NCCL_PARAM(RasEnable, "RAS_ENABLE", 1)``; RAS starts only when it is exactly 1) and the docs
``env.rst`` (NCCL_RAS_ENABLE, NCCL_RAS_ADDR) and ``troubleshooting/ras.rst``::

    (every NCCL process with NCCL_RAS_ENABLE=1, the default, listens on NCCL_RAS_ADDR, "host:port"
     or "[v6]:port", default localhost:28028, SO_REUSEPORT: all ranks of a node share the port)
    client: CLIENT PROTOCOL 2\\n          server: SERVER PROTOCOL 2\\n
    client: TIMEOUT <secs>\\n             server: OK\\n      (leg timeout of RAS's own collective)
    client: SET FORMAT json\\n            server: OK\\n      (NCCL >= 2.28; older: "ERROR: Unknown
                                                          command ...", the connection stays usable)
    client: STATUS\\n  or VERBOSE STATUS\\n server: the report, then it closes the connection (EOF)

Commands are case-insensitive lines; a trailing CR is dropped. The text report starts
``NCCL version X.Y.Z compiled with CUDA A.B`` / ``CUDA runtime version ..., driver version ...``,
then ``Job summary``, ``Communicators...`` and the Errors/Warnings sections that
:mod:`hangscope.sources.logs.nccl_ras` parses. RAS answers from its own thread, so a rank whose
main thread is stuck in a collective still answers; the report needs one RAS collective over the
job, which NCCL bounds by the leg timeout plus 5 s.

Where RAS is probed: the port is looked up in ``/proc/<rank>/net/tcp{,6}`` (the rank's network
namespace) and only a listener that a rank of this job owns (``socket:[inode]`` among its fds) is
spoken to, at the address it is bound to, so no name is resolved. Nothing listening means a
gloo-only job, NCCL < 2.24 or no communicator yet: no connection is made; a listener of another
process is left alone; one whose owner cannot be checked (unreadable fds) is asked, since the
handshake tells RAS from anything else. Without ``/proc`` a probe happens only when the ranks'
environment sets one of NCCL's own variables (``NCCL_*``; torch's ``TORCH_NCCL_*`` flight-recorder
settings serve gloo jobs too, so they are no sign of NCCL). The peer is untrusted: every
read is bounded in bytes and by one overall deadline, and the report is stored, never interpreted
here.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Literal

from hangscope.discover import JobProcesses, RankProcess

DEFAULT_ADDR = "localhost:28028"
CLIENT_PROTOCOL = 2
DEFAULT_TIMEOUT_S = 5.0
MAX_REPORT_BYTES = 8 << 20
MAX_LINE_BYTES = 1024  # a handshake reply; ncclras reads these into a 1 KiB buffer
MAX_FDS = 1 << 17
MAX_RANKS_CHECKED = 64
BUNDLE_NAMES = {"text": "nccl_ras.txt", "json": "nccl_ras.json"}
_LISTEN = "0A"

Status = Literal["ok", "failed", "timeout", "skipped"]


@dataclass(slots=True)
class RasPlan:
    """Where to ask, or why not. ``expected``: the job looks like it should have RAS, so not
    getting a report is an evidence gap rather than a detail."""

    host: str | None
    port: int
    reason: str
    expected: bool = False


@dataclass(slots=True)
class RasResult:
    """One query. ``data`` is the report as received (possibly partial: see ``status``)."""

    status: Status
    where: str
    detail: str
    data: bytes = b""
    fmt: str = "text"
    server_protocol: int | None = None
    truncated: bool = False
    gap: str | None = None
    seconds: float = 0.0

    def bundle_name(self) -> str:
        return BUNDLE_NAMES.get(self.fmt, BUNDLE_NAMES["text"])


class _NotRas(Exception):
    """The peer does not speak the RAS client protocol."""


def collect(job: JobProcesses, *, timeout_s: float = DEFAULT_TIMEOUT_S, fmt: str = "text",
            verbose: bool = False, max_bytes: int = MAX_REPORT_BYTES) -> RasResult:
    """Plan and, when RAS is there, run one query; never raises for network trouble."""
    started = time.monotonic()
    where = plan(job)
    if where.host is None:
        return RasResult(status="skipped", where=f"port {where.port}" if where.port else "",
                         detail=where.reason,
                         gap=f"no NCCL RAS report: {where.reason}" if where.expected else None)
    result = query(where.host, where.port, timeout_s=timeout_s, fmt=fmt, verbose=verbose,
                   max_bytes=max_bytes)
    result.detail = f"{result.detail} ({where.reason})"
    if result.status != "ok":
        result.gap = f"NCCL RAS at {result.where}: {result.detail}"
    result.seconds = round(time.monotonic() - started, 3)
    return result


def plan(job: JobProcesses) -> RasPlan:
    """Decide from the ranks' environment and this node's sockets whether RAS can be asked."""
    ranks = job.ranks
    if not ranks:
        return RasPlan(None, 0, "no ranks found")
    enabled = [r for r in ranks if not _disabled(r.env.get("NCCL_RAS_ENABLE"))]
    if not enabled:
        return RasPlan(None, 0, "NCCL_RAS_ENABLE is not 1 in the ranks' environment")
    value = next((r.env["NCCL_RAS_ADDR"] for r in enabled if r.env.get("NCCL_RAS_ADDR")),
                 DEFAULT_ADDR)
    parsed = parse_addr(value)
    if parsed is None:
        return RasPlan(None, 0, f"NCCL_RAS_ADDR {_excerpt(value.encode())} is not host:port",
                       expected=True)
    host, port = parsed
    # NCCL's own settings only: torch's TORCH_NCCL_* flight-recorder knobs serve gloo jobs too.
    nccl_env = any(k.startswith("NCCL_") for r in ranks for k in r.env)
    first = enabled[0]
    if _other_netns(first.pid):
        return RasPlan(None, port, f"rank {first.rank} runs in another network namespace "
                       "(run hangscope inside the job's container)", expected=nccl_env)
    listeners = listening_sockets(first.pid, port)
    if listeners is None:  # no /proc: fall back to what the environment says
        if not nccl_env:
            return RasPlan(None, port, "no sign of NCCL in the ranks' environment")
        literal = _connect_host(host)
        if literal is None:
            return RasPlan(None, port, f"{host} is a host name; not resolved", expected=True)
        return RasPlan(literal, port, "NCCL job, listening sockets not readable")
    if not listeners:
        return RasPlan(None, port, f"nothing listens on port {port} (gloo job, NCCL < 2.24, "
                       "RAS disabled, or no NCCL communicator yet)", expected=nccl_env)
    owner = _owner(enabled, listeners)
    if owner is None:
        return RasPlan(listeners[0][0], port,
                       f"a process listens on port {port}; its owner could not be checked")
    rank, listener = owner
    if rank is None:
        return RasPlan(None, port, f"port {port} is held by a process outside this job",
                       expected=nccl_env)
    return RasPlan(listener, port, f"rank {rank.rank} (pid {rank.pid}) listens on port {port}")


def parse_addr(value: str) -> tuple[str, int] | None:
    """``host:port`` or ``[v6]:port`` (NCCL's ``ncclSocketGetAddrFromString``), else None."""
    value = value.strip()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        if not sep:
            return None
    else:
        host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or len(host) > 255:
        return None
    return host, int(port)


def listening_sockets(pid: int, port: int) -> list[tuple[str, int]] | None:
    """(address to connect to, socket inode) of each TCP listener on ``port`` in ``pid``'s
    network namespace; None when the tables cannot be read."""
    found: list[tuple[str, int]] = []
    readable = False
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open(f"/proc/{pid}/net/{name}", encoding="ascii", errors="replace") as handle:
                lines = handle.read(16 << 20).splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            addr_hex, _, port_hex = fields[1].partition(":")
            try:
                if int(port_hex, 16) != port:
                    continue
                address = _proc_address(addr_hex, family)
                found.append((_any_to_loopback(address), int(fields[9])))
            except (ValueError, OSError, struct.error):
                continue
    return found if readable else None


def query(host: str, port: int, *, timeout_s: float = DEFAULT_TIMEOUT_S, fmt: str = "text",
          verbose: bool = False, max_bytes: int = MAX_REPORT_BYTES) -> RasResult:
    """Speak the ncclras protocol to ``host:port`` (an address, not a name) within ``timeout_s``
    seconds in all, reading at most ``max_bytes`` of report."""
    started = time.monotonic()
    deadline = started + timeout_s
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    result = RasResult(status="failed", where=where, detail="")
    buffer = bytearray()
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout_s)) as sock:
            _converse(sock, deadline, buffer, result, fmt, verbose, max_bytes, timeout_s)
    except ConnectionRefusedError:
        result.detail = "connection refused (no NCCL RAS listening)"
    except TimeoutError:
        result.status = "timeout"
        got = f"; kept the first {len(buffer)} bytes of the report" if buffer else ""
        result.detail = f"no complete answer within {timeout_s:g} s{got}"
    except _NotRas as exc:
        result.detail = f"not an NCCL RAS service: {exc}"
        buffer.clear()
    except OSError as exc:
        result.detail = f"connection failed: {exc.strerror or exc.__class__.__name__}"
    result.data = bytes(buffer)
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _converse(sock: socket.socket, deadline: float, buffer: bytearray, result: RasResult,
              fmt: str, verbose: bool, max_bytes: int, timeout_s: float) -> None:
    reader = _Reader(sock, deadline)
    reader.send(f"CLIENT PROTOCOL {CLIENT_PROTOCOL}\n")
    reply = reader.line()
    if not reply.upper().startswith(b"SERVER PROTOCOL "):
        raise _NotRas(f"handshake answered {_excerpt(reply)}")
    version = reply[len(b"SERVER PROTOCOL "):].strip()
    result.server_protocol = int(version) if version.isdigit() and len(version) < 6 else None
    notes: list[str] = []
    if result.server_protocol != CLIENT_PROTOCOL:
        notes.append(f"server protocol {_excerpt(version)}")
    # RAS's own collective may wait one leg timeout, plus NCCL's fixed 5 s, on a silent peer.
    reader.send(f"TIMEOUT {max(1, int(timeout_s / 2))}\n")
    if reader.line().strip().upper() != b"OK":
        notes.append("TIMEOUT refused")
    if fmt == "json":
        reader.send("SET FORMAT json\n")
        if reader.line().strip().upper() == b"OK":
            result.fmt = "json"
        else:
            notes.append("no JSON output (NCCL < 2.28): text instead")
    reader.send("VERBOSE STATUS\n" if verbose else "STATUS\n")
    buffer += reader.pending()
    while len(buffer) < max_bytes:
        piece = reader.recv(min(65536, max_bytes - len(buffer)))
        if not piece:
            break
        buffer += piece
    if len(buffer) >= max_bytes:
        del buffer[max_bytes:]
        result.truncated = True
        notes.append(f"report cut at {max_bytes} bytes")
    if not buffer:
        raise _NotRas("closed the connection without a report")
    result.status = "ok"
    result.detail = "; ".join([f"{len(buffer)} bytes of {result.fmt} report", *notes])


class _Reader:
    """recv/send under one deadline; ``line`` reads one bounded reply line."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline, self.buf = sock, deadline, b""

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)

    def send(self, text: str) -> None:
        self._arm()
        self.sock.sendall(text.encode("ascii"))

    def recv(self, size: int) -> bytes:
        self._arm()
        return self.sock.recv(size)

    def line(self) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) >= MAX_LINE_BYTES:
                raise _NotRas(f"reply line longer than {MAX_LINE_BYTES} bytes")
            piece = self.recv(MAX_LINE_BYTES)
            if not piece:
                raise _NotRas(f"closed the connection after {_excerpt(self.buf)}")
            self.buf += piece
        line, _, self.buf = self.buf.partition(b"\n")
        if len(line) > MAX_LINE_BYTES:
            raise _NotRas(f"reply line longer than {MAX_LINE_BYTES} bytes")
        return line.rstrip(b"\r")

    def pending(self) -> bytes:
        out, self.buf = self.buf, b""
        return out


def _owner(ranks: list[RankProcess], listeners: list[tuple[str, int]]
           ) -> tuple[RankProcess | None, str] | None:
    """(rank, address) of a listener a rank owns; (None, "") when every rank could be checked and
    none owns one; None when some could not be checked."""
    by_inode = {inode: address for address, inode in listeners}
    unknown = False
    for rank in ranks[:MAX_RANKS_CHECKED]:
        inodes = _socket_inodes(rank.pid)
        if inodes is None:
            unknown = True
            continue
        for inode in inodes:
            if inode in by_inode:
                return rank, by_inode[inode]
    return None if unknown else (None, "")


def _socket_inodes(pid: int) -> set[int] | None:
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    inodes: set[int] = set()
    for name in names[:MAX_FDS]:
        try:
            target = os.readlink(f"{folder}/{name}")
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]") and target[8:-1].isdigit():
            inodes.add(int(target[8:-1]))
    return inodes


def _other_netns(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    except OSError:
        return False  # cannot tell: act as if shared


def _proc_address(hex_addr: str, family: int) -> str:
    """/proc/net/tcp prints each 32-bit word of the address in host byte order."""
    words = [int(hex_addr[i:i + 8], 16) for i in range(0, len(hex_addr), 8)]
    if len(words) != (1 if family == socket.AF_INET else 4):
        raise ValueError(hex_addr)
    return socket.inet_ntop(family, b"".join(struct.pack("=I", word) for word in words))


def _any_to_loopback(address: str) -> str:
    if address == "0.0.0.0":
        return "127.0.0.1"
    if address == "::":
        return "::1"
    return address


def _connect_host(host: str) -> str | None:
    if host == "localhost":
        return "127.0.0.1"
    try:
        return _any_to_loopback(str(ipaddress.ip_address(host)))
    except ValueError:
        return None


def _disabled(value: str | None) -> bool:
    """NCCL starts RAS only when the parameter is exactly 1 (``ncclParamRasEnable() == 1``)."""
    try:
        return int((value or "1").strip(), 0) != 1
    except ValueError:
        return False  # NCCL would warn and keep its default, 1


def _excerpt(data: bytes) -> str:
    text = "".join(chr(b) if 32 <= b < 127 else "?" for b in data[:60])
    return repr(text + ("..." if len(data) > 60 else ""))
