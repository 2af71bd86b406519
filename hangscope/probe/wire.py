"""Where a rank's probe listens and how one talks to it: shared by the probe (in the job) and by
``hangscope.collect.probe`` (in attach). Stdlib only: this module is imported inside the job.

The socket of process PID is ``<dir>/<PID>.sock``, ``<dir>`` being ``$HANGSCOPE_PROBE_DIR`` when
the job sets it, else ``/tmp/hangscope-probe-<uid>`` (uid of the job's user). The folder is mode
0700 and the socket 0600; the probe checks the peer's uid with ``SO_PEERCRED`` as well.

Protocol (version 1): the client sends one frame, the probe answers with two. A frame is a 4-byte
big-endian length and that many bytes. The request is a JSON object
``{"protocol": 1, "want": ["fr", "threads", "cuda", "dataloader"]}``; the answer is a JSON header
(see ``hangscope.probe.answer``) followed by the flight-recorder trace as torch's
``_dump_fr_trace_json`` wrote it (an empty frame when there is none).
"""

from __future__ import annotations

import os
import socket
import struct
import time

ENV_ON = "HANGSCOPE_PROBE"
ENV_DIR = "HANGSCOPE_PROBE_DIR"
PROTOCOL = 1
WANT_ALL = ("fr", "threads", "cuda", "dataloader")
MAX_REQUEST = 64 << 10
MAX_HEADER = 16 << 20  # stacks of a few thousand threads
MAX_FR = 256 << 20  # an FR buffer of 20k entries is a few tens of MB of JSON
_LEN = struct.Struct(">I")


class WireError(Exception):
    """The other side broke the protocol, went away, or was too slow."""


def socket_dir(uid: int | None = None, env: dict[str, str] | None = None) -> str:
    """The probe folder of ``uid`` (default: ours), honouring ``HANGSCOPE_PROBE_DIR`` in ``env``
    (default: this process's environment)."""
    env = dict(os.environ) if env is None else env
    chosen = env.get(ENV_DIR, "").strip()
    if chosen:
        return chosen
    return f"/tmp/hangscope-probe-{os.getuid() if uid is None else uid}"


def socket_path(pid: int, uid: int | None = None, env: dict[str, str] | None = None) -> str:
    return os.path.join(socket_dir(uid, env), f"{pid}.sock")


def send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_LEN.pack(len(data)) + data if len(data) < 65536 else _LEN.pack(len(data)))
    if len(data) >= 65536:
        sock.sendall(data)


def recv_frame(sock: socket.socket, limit: int, deadline: float | None = None) -> bytes:
    """One frame of at most ``limit`` bytes; WireError on a short read, a larger frame, or when
    ``deadline`` (a ``time.monotonic()`` instant) passes; without one, the socket's own timeout
    bounds each read."""
    size = _LEN.unpack(_recv_exact(sock, _LEN.size, deadline))[0]
    if size > limit:
        raise WireError(f"frame of {size} bytes is over the {limit}-byte limit")
    return _recv_exact(sock, size, deadline)


def _recv_exact(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireError("timed out")
            sock.settimeout(left)
        try:
            chunk = sock.recv(min(size - got, 1 << 20))
        except TimeoutError as exc:
            raise WireError("timed out") from exc
        except OSError as exc:
            raise WireError(exc.strerror or str(exc)) from exc
        if not chunk:
            raise WireError(f"connection closed after {got} of {size} bytes")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
