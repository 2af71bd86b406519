# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""gloo transport errors as torch's ProcessGroupGloo surfaces them (``third_party/gloo/gloo/transport/
tcp/pair.cc``, ``unbound_buffer.cc``; recorded here with torch 2.13 CPU, see fixtures/logs/README.md).

``gloo_timeout`` (``unbound_buffer.cc``)::

    RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation to complete

  fields: timeout_ms, op (recv/send), src. gloo of torch <= 1.0 says ``buffer.cc:76] Read timeout
  [127.0.0.1]:32444`` (fields op ``recv``, peer, peer_port, src).

``gloo_connection_closed`` (``pair.cc``; older builds print ``../third_party/gloo/...``)::

    RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:13742. This is typically caused by a remote worker crashing. ...
    RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:62934: Connection reset by peer

  fields: peer, peer_port, reason (closed/reset/refused), src.

``gloo_enforce_fail`` -- ``[enforce fail at .../pair.cc:456] op.preamble.length <= op.nbytes. 12 vs 8.
Received data size doesn't match expected size. Is there a distributed collective mismatch...`` (a
size mismatch between ranks); fields: check, src.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

_SRC = re.compile(r"\[(?:enforce fail at )?(?P<src>[^\]\s]*gloo[^\]\s]*:\d+)\]")
_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<op>\w+) operation to complete")
# gloo of torch <= 1.0 (``transport/tcp/buffer.cc``): "Read timeout [127.0.0.1]:32444"
_READ_TIMEOUT = re.compile(r"Read timeout \[(?P<peer>[^\]]+)\]:(?P<port>\d+)")
_CLOSED = re.compile(r"Connection closed by peer \[(?P<peer>[^\]]+)\]:(?P<port>\d+)")
_READ_ERR = re.compile(
    r"(?:Read|Write) error \[(?P<peer>[^\]]+)\]:(?P<port>\d+): (?P<why>Connection reset by peer|"
    r"Connection refused|Broken pipe|[^.]+)")
_ENFORCE = re.compile(r"\[enforce fail at (?P<src>[^\]]+)\] (?P<check>.*?)\.?(?: Received data| Is there|$)")


def _src(body: str, fields: dict[str, str | int | float]) -> None:
    s = _SRC.search(body)
    if s:
        fields["src"] = s.group("src").rsplit("/gloo/", 1)[-1]


def timeout(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _TIMEOUT.search(line.body)
    if not m or ("gloo" not in line.body and "unbound_buffer" not in line.body):
        return []
    fields: dict[str, str | int | float] = {"timeout_ms": int(m.group("ms")), "op": m.group("op")}
    _src(line.body, fields)
    return [make_event("gloo_timeout", line, ctx, "error", fields)]


def read_timeout(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _READ_TIMEOUT.search(line.body)
    if not m or "gloo" not in line.body:
        return []
    fields: dict[str, str | int | float] = {"op": "recv", "peer": m.group("peer"),
                                            "peer_port": int(m.group("port"))}
    _src(line.body, fields)
    return [make_event("gloo_timeout", line, ctx, "error", fields)]


def closed(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    fields: dict[str, str | int | float] = {}
    m = _CLOSED.search(body)
    if m:
        fields.update(peer=m.group("peer"), peer_port=int(m.group("port")), reason="closed")
    else:
        r = _READ_ERR.search(body)
        if not r or "gloo" not in body:
            return []
        why = r.group("why")
        reason = "reset" if "reset" in why else "refused" if "refused" in why else \
            "broken_pipe" if "Broken pipe" in why else "error"
        fields.update(peer=r.group("peer"), peer_port=int(r.group("port")), reason=reason)
    _src(body, fields)
    return [make_event("gloo_connection_closed", line, ctx, "error", fields)]


def enforce(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    if "EnforceNotMet" in line.body and "enforce fail at" not in line.body:
        # "terminate called after throwing an instance of 'gloo::EnforceNotMet'" then "  what(): [...]"
        for nxt in follow.lines():
            if nxt.key == line.key:
                if "enforce fail at" in nxt.body:
                    follow.consume(nxt.line_no)
                    return enforce(nxt, ctx, follow)
                break
        return []
    m = _ENFORCE.search(line.body)
    if not m or "gloo" not in m.group("src"):
        return []
    fields: dict[str, str | int | float] = {
        "src": m.group("src").rsplit("/gloo/", 1)[-1], "check": m.group("check").strip()[:200]}
    # the check itself says it: a peer sent more bytes (its preamble) than this rank posted
    # (gloo's pair.cc; builds before ~2021 print no "doesn't match expected size" after it)
    if "doesn't match expected size" in line.body or "preamble.length <= op.nbytes" in line.body:
        fields["size_mismatch"] = 1
    return [make_event("gloo_enforce_fail", line, ctx, "error", fields)]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"Timed out waiting ", timeout),
    (b"Read timeout [", read_timeout),
    (b"Connection closed by peer", closed),
    (b"Read error [", closed),
    (b"Write error [", closed),
    (b"enforce fail at", enforce),
    (b"EnforceNotMet", enforce),
]
