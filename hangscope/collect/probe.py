"""Ask a rank's in-job probe (``hangscope.probe``) what only the process knows.

A rank runs a probe when its job was started with ``HANGSCOPE_PROBE=1`` (or called
``hangscope.probe.install()``); its socket is ``hangscope.probe.wire.socket_path(pid)`` for the
rank's uid and environment. No socket: the rank has no probe, and nothing is said (the other
collectors still run). A socket that does not answer within the timeout becomes a gap: some thread
of the rank holds the GIL in C code, or the rank is stopped (py-spy pauses it for a moment).

What goes into the bundle, per rank:

- ``probe-fr.json`` (kind ``fr``): the flight-recorder trace as torch's ``_dump_fr_trace_json``
  wrote it, read by the same loader as any FR dump, so ``analyze BUNDLE`` sees what attach saw;
- ``probe.json`` (kind ``probe``, read by ``hangscope.sources.probe``)::

      {"rank": 3, "pid": 1234, "socket": "/tmp/hangscope-probe-0/1234.sock",
       "asked_at": 1795456933.1, "seconds": 0.012, "answer": {...the probe's header...}}
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from dataclasses import dataclass

from hangscope.bundle import BundleWriter, CollectionRecord
from hangscope.discover import RankProcess
from hangscope.discover.environ import read_environ
from hangscope.probe import wire

FR_NAME = "probe-fr.json"
RECORD_NAME = "probe.json"


@dataclass(slots=True)
class ProbeResult:
    rank: int
    socket: str
    record: bytes = b""  # probe.json; empty when the probe did not answer
    fr: bytes = b""  # the FR trace; empty when there is none
    note: str = ""  # why nothing (or only part) came back; empty when all is well
    seconds: float = 0.0

    @property
    def answered(self) -> bool:
        return bool(self.record)


def socket_of(rank: RankProcess) -> str:
    """Where this rank's probe would listen (its uid and its environment decide). Discovery
    keeps only an allow-list of the rank's environment: ``HANGSCOPE_PROBE_DIR`` is read here."""
    try:
        uid = os.stat(f"/proc/{rank.pid}").st_uid
    except OSError:
        uid = os.getuid()
    env = rank.env
    if wire.ENV_DIR not in env:
        full = read_environ(rank.pid)
        if isinstance(full, dict) and full.get(wire.ENV_DIR):
            env = {wire.ENV_DIR: full[wire.ENV_DIR]}
    return wire.socket_path(rank.pid, uid, env)


def has_probe(rank: RankProcess) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(socket_of(rank)).st_mode)
    except OSError:
        return False


def ask(path: str, timeout_s: float = 5.0,
        want: tuple[str, ...] = wire.WANT_ALL) -> tuple[dict[str, object], bytes, bytes]:
    """One request: (header, raw header bytes, FR bytes). Raises WireError or OSError."""
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(path)
        wire.send_frame(sock, json.dumps({"protocol": wire.PROTOCOL, "want": list(want)})
                        .encode())
        raw = wire.recv_frame(sock, wire.MAX_HEADER, deadline)
        fr = wire.recv_frame(sock, wire.MAX_FR, deadline)
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise wire.WireError(f"answer is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise wire.WireError("answer is not a JSON object")
    return header, raw, fr


def collect(rank: RankProcess, timeout_s: float = 5.0) -> ProbeResult | None:
    """The rank's probe answer, or None when it runs no probe."""
    path = socket_of(rank)
    result = ProbeResult(rank=rank.rank, socket=path)
    try:
        st = os.stat(path)
        owner = os.stat(f"/proc/{rank.pid}").st_uid
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    if st.st_uid != owner:
        result.note = (f"probe socket {path} belongs to uid {st.st_uid}, the rank to uid "
                       f"{owner}: not asked")
        return result
    asked_at, began = time.time(), time.monotonic()
    try:
        header, raw, fr = ask(path, timeout_s)
    except (wire.WireError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        result.note = (f"the probe at {path} did not answer ({reason}): a thread may hold the "
                       f"GIL in C code, or the rank is stopped")
        return result
    result.seconds = time.monotonic() - began
    result.fr = fr
    notes = header.get("notes")
    if isinstance(notes, list) and notes and not fr:
        result.note = f"probe: {notes[0]}"
    record = {"rank": rank.rank, "pid": rank.pid, "socket": path, "asked_at": asked_at,
              "seconds": round(result.seconds, 4)}
    result.record = (json.dumps(record, sort_keys=True)[:-1].encode() + b', "answer": '
                     + raw + b"}\n")
    return result


def collect_into(rank: RankProcess, writer: BundleWriter,
                 timeout_s: float = 5.0) -> ProbeResult | None:
    """``collect`` and store what came back: the record as ``probe.json`` (kind ``probe``), the
    FR trace as ``probe-fr.json`` (kind ``fr``), and a collection record. None: no probe."""
    began = time.time()
    got = collect(rank, timeout_s)
    if got is None:
        return None
    if got.answered:
        writer.add_file(rank.rank, "probe", RECORD_NAME, got.record)
    if got.fr:
        writer.add_file(rank.rank, "fr", FR_NAME, got.fr)
    detail = got.note
    if got.answered:
        detail = (f"probe {got.socket} answered in {got.seconds * 1000:.0f} ms, "
                  + (f"FR trace {len(got.fr)} bytes" if got.fr else "no FR trace"))
    writer.collection.append(CollectionRecord(
        source="probe", rank=rank.rank, status="ok" if got.answered else "failed",
        detail=detail, started_at=began, seconds=round(time.time() - began, 3)))
    return got
