# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Process-group setup and rendezvous: what ranks print while the job is still forming.

``store_barrier_wait`` -- ``_store_based_barrier`` in ``torch/distributed/distributed_c10d.py``
(every ``init_process_group``/``new_group`` before torch 2.3 without ``barrier``; logged every
timeout/10)::

    # torch 1.x
    Waiting in store based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)
    # torch 2.x
    Waiting in store based barrier to initialize process group for 10 secondsrank: 3, key: store_based_barrier_key:1 (world_size=4, num_workers_joined=3, timeout=0:30:00 error=...)
    Timed out initializing process group in store based barrier on rank: 0, for key: store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=0:30:00)

  fields: key, world_size, joined, timed_out (1 for the final error). ``joined`` above
  ``world_size`` means more processes than ranks used the key: a stale store or duplicate ranks.

``store_timeout`` -- the TCPStore server waiting for its clients (``TCPStore.cpp``):
``Timed out after 901 seconds waiting for clients. 1/2 clients joined.`` (fields joined, world_size,
waited_s) and a client that cannot reach it: ``The client socket has timed out after 1800s while
trying to connect to (10.0.0.1, 29500).`` (fields host, port, waited_s).

``rendezvous_timeout`` -- torchelastic: ``RendezvousTimeoutError``, ``RendezvousConnectionError: The
connection to the C10d store has failed`` and ``The node 'x' has failed to ... rendezvous``.

``global_rank_init`` -- PyTorch Lightning's ``Initializing distributed: GLOBAL_RANK: 1, MEMBER:
2/4`` (the same GLOBAL_RANK printed by two processes is a duplicate rank).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event, resolve_rank

_BARRIER = re.compile(
    r"store based barrier.*?rank:? (?P<rank>\d+), (?:for )?key: (?P<key>\S+) "
    r"\(world_size=(?P<ws>\d+), (?:worker_count|num_workers_joined)=(?P<n>\d+)")
_CLIENTS = re.compile(r"Timed out after (?P<s>\d+) seconds waiting for clients\. "
                      r"(?P<n>\d+)/(?P<ws>\d+) clients joined")
_CONNECT = re.compile(r"client socket has timed out after (?P<s>\d+)s while trying to connect "
                      r"to \((?P<host>[^,)]+), (?P<port>\d+)\)")
_GLOBAL = re.compile(r"GLOBAL_RANK: (?P<rank>\d+), MEMBER: (?P<member>\d+)/(?P<ws>\d+)")


def store_barrier(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _BARRIER.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {
        "key": m.group("key"), "world_size": int(m.group("ws")), "joined": int(m.group("n")),
        "timed_out": int("Timed out" in line.body)}
    rank = int(m.group("rank"))
    return [make_event("store_barrier_wait", line, ctx, "warning", fields,
                       rank=line.rank if line.rank is not None else rank,
                       rank_source=line.rank_source or "message")]


def store_timeout(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    fields: dict[str, str | int | float] = {}
    m = _CLIENTS.search(line.body)
    if m:
        fields.update(joined=int(m.group("n")), world_size=int(m.group("ws")),
                      waited_s=int(m.group("s")))
    else:
        c = _CONNECT.search(line.body)
        if not c:
            return []
        fields.update(host=c.group("host"), port=int(c.group("port")), waited_s=int(c.group("s")))
    return [make_event("store_timeout", line, ctx, "error", fields)]


# (torch before 2.1 spelled it "retreiving"; a paste may start at "setting up", its "[N] is" cut)
_UNIQUE_ID = re.compile(r"(?:\[(?P<me>\d+)\] is )?setting up NCCL communicator and retr(?:ie|ei)ving "
                        r"ncclUniqueId from \[(?P<src>\d+)\] via c10d key-value store by key "
                        r"'(?P<key>[^']*)'")


def unique_id_wait(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``[1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value
    store by key '0', but store->get('0') got error: wait timeout after 600000ms``: a rank's first
    collective on a group waited for the group's rank that creates the NCCL id (fields
    ``waits_for``, ``key``; ranks of that group)."""
    m = _UNIQUE_ID.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {"waits_for": int(m.group("src")), "key": m.group("key")}
    rank, source = resolve_rank(line, ctx, int(m.group("me")) if m.group("me") else None)
    return [make_event("store_timeout", line, ctx, "error", fields, rank=rank, rank_source=source)]


def rendezvous(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    if not any(word in line.body for word in ("Rendezvous", "rendezvous", "C10d store")):
        return []
    return [make_event("rendezvous_timeout", line, ctx, "error", {})]


def global_rank(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _GLOBAL.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {"global_rank": int(m.group("rank")),
                                            "world_size": int(m.group("ws"))}
    return [make_event("global_rank_init", line, ctx, "info", fields)]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"in store based barrier", store_barrier),
    (b"waiting for clients", store_timeout),
    (b"client socket has timed out", store_timeout),
    (b"RendezvousTimeoutError", rendezvous),
    (b"retrieving ncclUniqueId from", unique_id_wait),
    (b"retreiving ncclUniqueId from", unique_id_wait),
    (b"failed to join the rendezvous", rendezvous),
    (b"RendezvousConnectionError", rendezvous),
    (b"GLOBAL_RANK: ", global_rank),
]
