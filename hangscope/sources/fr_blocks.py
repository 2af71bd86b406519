"""The ops of a coalesced block (``batch_isend_irecv``, ``_coalescing_manager``), read in the
state of the block.

NCCL's flight recorder writes such a block (Megatron's pipeline p2p by default) as one record per
send or receive, then one ``nccl:coalesced`` record that ends it (torch's ``pointToPoint`` and
``endCoalescing``; the assertions of ``test_batched_send_recv`` in torch's test_c10d_nccl.py):

- the sends and receives share one ``p2p_seq_id`` (bumped once per block) and have no CUDA
  events of their own, so they stay ``scheduled``, never retired, with no times or duration,
  however the block went;
- the end has the block's ``p2p_seq_id``, the group's current ``collective_seq_id``, empty
  sizes, and the block's events: its state, times and duration are the block's. Its ``is_p2p``
  is False in recent torch (``isP2POp(COALESCED)``), and its ``collective_seq_id`` is whatever
  the group's collective count is.

Read as written, every send and receive of a finished job would be pending, and every end a
collective at an old seq, all ends of a group one "coalesced block" (a collective mismatch
between stages that did different numbers of blocks). So each block's sends and receives take
its end's state, retirement, times and duration, and the end is dropped: what is left reads
like individual sends and receives. A block whose end is not in the dump (the rank was still
inside ``batch_isend_irecv``, e.g. connecting a communicator) is left as written: not started.

The C reader's dumps are resolved on its columns (``fr_blocks_native``), by the same walk.

Collective blocks are recorded the same way since FR 2.7 where torch runs a collective as several
ops (``all_gather`` of uneven sizes as broadcasts; ``test_allgather_uneven``): ops ``scheduled``
without events, sharing the block's ``collective_seq_id``, then an end named after the block
(``nccl:ALLGATHER_coalesced``) with the block's state. Their ops take the end's state too, and
the end stays (the analysis reads a collective block whole, its end last). A fused op
(``allreduce_coalesced``: one record, seq of its own) is no block end.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

END = "coalesced"  # the op of a block's end: "nccl:coalesced", "gloo:coalesced", ...
_TAKEN = ("state", "retired", "time_discovered_started_ns", "time_discovered_completed_ns",
          "duration_ms")


def may_hold(data: bytes) -> bool:
    """Whether the dump's bytes can hold a block's end: a cheap test before reading records."""
    return b"coalesced" in data


def resolve(entries: list[Any]) -> list[Any]:
    """The records with each block resolved (see the module docstring): a block's ops updated
    in place, a p2p block's end left out. Returns ``entries`` itself where no p2p end was
    dropped. Records of any other type or form are passed through untouched."""
    names = {name for record in entries
             if type(record) is dict and type(name := record.get("profiling_name")) is str}
    if not any(name.endswith(END) for name in names):
        return entries  # no block's end: the common case, one pass in C
    rows = []
    for index, record in enumerate(entries):
        if type(record) is dict:
            group, kind = classify(record)
            if group is not None:
                rows.append((index, group, kind, record.get("state"),
                             record.get("p2p_seq_id"), record.get("collective_seq_id")))
    takes, ends = walk(rows)
    for inner, end in takes.items():
        take(entries[inner], entries[end])
    if not ends:
        return entries
    dropped = set(ends)
    return [record for index, record in enumerate(entries) if index not in dropped]


ENDS = ("end", "p2p end")


def classify(record: dict[str, Any]) -> tuple[Any, str]:
    """The record's group (None: not read here) and kind: "p2p" (a send or receive), "p2p end"
    (``<backend>:coalesced``: ends a p2p block, or a collective one in older torch), "end" (any
    other ``..._coalesced``) or "" (any other op)."""
    name, group = record.get("profiling_name"), _group(record)
    if type(name) is not str or group is None:
        return None, ""
    op = name.partition(":")[2].strip() if ":" in name else name.strip()
    if op == END:
        return group, "p2p end"
    if op.endswith(END):
        return group, "end"
    return group, "p2p" if _is_p2p(record, op) else ""


def walk(rows: Iterable[tuple[int, Any, str, Any, Any, Any]]) -> tuple[dict[int, int],
                                                                         list[int]]:
    """Over (index, group, kind, state, p2p seq, collective seq), in record order: which record
    takes its state from which end, and which ends are left out. A block is the run of records
    of one group right before its end: sends/receives of the end's p2p seq, or collectives of
    its collective seq."""
    runs: dict[Any, tuple[bool, Any, list[int]]] = {}  # group -> (p2p?, seq, indices)
    seen: set[Any] = set()  # groups with a record before this one
    takes: dict[int, int] = {}
    ends: list[int] = []
    for index, group, kind, state, p2p_seq, seq in rows:
        if kind == "p2p" or not kind:
            p2p, at = (True, p2p_seq) if kind else (False, seq)
            run = runs.get(group)
            if run is not None and run[0] is p2p and run[1] == at:
                run[2].append(index)
            else:
                runs[group] = (p2p, at, [index])
        else:
            run = runs.pop(group, None)
            if run is not None and run[0] and kind == "p2p end" and run[1] == p2p_seq:
                takes.update(dict.fromkeys(run[2], index))
                ends.append(index)  # a p2p block reads as its sends and receives
            elif run is not None and not run[0] and run[1] == seq:
                takes.update(dict.fromkeys(run[2], index))  # a collective block keeps its end
            elif kind == "p2p end" and group not in seen and type(p2p_seq) is int \
                    and p2p_seq > 0 and state == "completed":
                ends.append(index)  # the ring buffer dropped its block's sends and receives
        seen.add(group)
    return takes, ends


def take(inner: dict[str, Any], end: dict[str, Any]) -> None:
    """The block's state onto one of its ops, where that has none of its own (``scheduled``: no
    events); its own creation time, sizes and seqs stay."""
    if inner.get("state") != "scheduled":
        return
    for field in _TAKEN:
        if field in end:
            inner[field] = end[field]
        elif field == "duration_ms":
            inner.pop(field, None)


def _is_p2p(record: dict[str, Any], op: str) -> bool:
    flag = record.get("is_p2p")
    if type(flag) is bool:
        return flag
    return op.startswith(("send ", "recv "))


def _group(record: dict[str, Any]) -> Any:
    group = record.get("process_group")
    if isinstance(group, (list, tuple)) and group:
        return str(group[0])
    pg_id = record.get("pg_id")
    return None if pg_id is None else f"#{pg_id}"
