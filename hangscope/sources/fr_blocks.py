"""A ``batch_isend_irecv`` block's sends and receives, read in the state of the block.

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

The C reader's dumps are resolved on its columns (:func:`resolve_native`), with no record made
but those a block's end takes its state from and those the digest keeps: the same records,
columns and keys as :func:`resolve` then ``fr_columns.scan`` give.

Collective blocks end in ``nccl:<OP>_coalesced`` (``allreduce_coalesced``, ...), not
``nccl:coalesced``, and are not touched; neither is an end whose nearest earlier record in its
group is a collective (older torch named every block's end ``nccl:coalesced``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import accumulate, compress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # fr_columns reads through flight_recorder, which resolves with this module
    from hangscope.sources.fr_columns import Columns

END = "coalesced"  # the op of a block's end: "nccl:coalesced", "gloo:coalesced", ...
_TAKEN = ("state", "retired", "time_discovered_started_ns", "time_discovered_completed_ns",
          "duration_ms")


def may_hold(data: bytes) -> bool:
    """Whether the dump's bytes can hold a block's end: a cheap test before reading records."""
    return b":coalesced" in data


def resolve(entries: list[Any]) -> list[Any]:
    """The records with each p2p block resolved (see the module docstring): the block's sends
    and receives updated in place, its end left out. Returns ``entries`` itself where no block
    was found. Records of any other type or form are passed through untouched."""
    runs: dict[Any, tuple[Any, list[int]]] = {}  # group -> (p2p seq, indices) of its last p2p run
    seen: set[Any] = set()  # groups with a record before this one
    ends: list[int] = []
    for index, record in enumerate(entries):
        if type(record) is not dict:
            continue
        name, group = record.get("profiling_name"), _group(record)
        if type(name) is not str or group is None:
            continue
        op = name.partition(":")[2].strip() if ":" in name else name.strip()
        seq = record.get("p2p_seq_id")
        if op == END:
            run = runs.pop(group, None)
            if run is not None and run[0] == seq:
                for inner in run[1]:
                    _take(entries[inner], record)
                ends.append(index)
            elif group not in seen and type(seq) is int and seq > 0 \
                    and record.get("state") == "completed":
                ends.append(index)  # the ring buffer dropped its block's sends and receives
        elif _is_p2p(record, op):
            run = runs.get(group)
            if run is not None and run[0] == seq:
                run[1].append(index)
            else:
                runs[group] = (seq, [index])
        else:
            runs.pop(group, None)
        seen.add(group)
    if not ends:
        return entries
    dropped = set(ends)
    return [record for index, record in enumerate(entries) if index not in dropped]


def resolve_native(top: dict[str, Any], entries: Sequence[Any], cols: Columns) -> tuple[
        dict[str, Any], Sequence[Any], Columns]:
    """:func:`resolve` for the C reader's lazy records and their columns: the same logic on each
    record's key (every record of a key has the same name, group, flag and state) and the
    columns' p2p seqs, so that only the records it changes are made, when indexed."""
    firsts, p2p_seqs = cols.firsts, cols.p2p_seqs
    kinds: dict[int, tuple[Any, str, Any]] = {}  # key's first record -> (group, kind, state)
    for first in dict.fromkeys(firsts):
        record = entries[first]
        name, group = record.get("profiling_name"), _group(record)
        if type(name) is not str or group is None:
            kinds[first] = (None, "", None)
            continue
        op = name.partition(":")[2].strip() if ":" in name else name.strip()
        kind = "end" if op == END else "p2p" if _is_p2p(record, op) else ""
        kinds[first] = (group, kind, record.get("state"))
    # only the groups with an end can change: walk their records alone
    groups = {group for group, kind, _state in kinds.values() if kind == "end"}
    if not groups:
        return top, entries, cols
    mine = {first for first, (group, _kind, _state) in kinds.items() if group in groups}
    runs: dict[Any, tuple[int, list[int]]] = {}
    seen: set[Any] = set()
    end_of: dict[int, int] = {}  # a block's send/recv -> its end
    ends: list[int] = []
    for index in compress(range(len(firsts)), map(mine.__contains__, firsts)):
        group, kind, state = kinds[firsts[index]]
        if kind == "p2p":  # the most of them, first
            seq = p2p_seqs[index]
            run = runs.get(group)
            if run is not None and run[0] == seq:
                run[1].append(index)
            else:
                runs[group] = (seq, [index])
            seen.add(group)
            continue
        seq = p2p_seqs[index]
        if kind == "end":
            run = runs.pop(group, None)
            if run is not None and run[0] == seq:
                for inner in run[1]:
                    if kinds[firsts[inner]][2] == "scheduled":
                        end_of[inner] = index
                ends.append(index)
            elif group not in seen and seq > 0 and state == "completed":
                ends.append(index)
        else:
            runs.pop(group, None)
        seen.add(group)
    if not ends:
        return top, entries, cols
    keep = bytearray(b"\x01") * len(firsts)
    for index in ends:
        keep[index] = 0
    kept = list(compress(range(len(firsts)), keep))
    # keys: a changed record's is its own key's with its end's state and retirement (the same
    # for every end of one key); equal keys may now be two classes, which the reducer's body
    # table (keyed by value) makes one again
    classes: list[Any] = list(compress(firsts, keep))
    position = list(accumulate(keep))  # old index -> new index + 1
    for old, end in end_of.items():
        classes[position[old] - 1] = (firsts[old], firsts[end])
    new_first: dict[Any, int] = {}
    firsts_now = list(map(new_first.setdefault, classes, range(len(kept))))
    created = list(compress(cols.created, keep))
    timed = cols.timed or (set(map(type, created)) == {int} and min(created, default=0) > 0)
    view = _Resolved(entries, kept, end_of)
    top = {**top, "entries": view}
    return top, view, replace(
        cols, record_ids=list(compress(cols.record_ids, keep)),
        seqs=list(compress(cols.seqs, keep)), p2p_seqs=list(compress(p2p_seqs, keep)),
        timed=timed, created=created, firsts=firsts_now)


class _Resolved(Sequence[Any]):
    """The C reader's records with the blocks resolved: the ends left out, a block's send or
    receive made (a copy) with its end's state when indexed."""

    __slots__ = ("end_of", "entries", "kept")

    def __init__(self, entries: Sequence[Any], kept: list[int], end_of: dict[int, int]) -> None:
        self.entries, self.kept, self.end_of = entries, kept, end_of

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.kept)))]
        old = self.kept[index]
        record = self.entries[old]
        end = self.end_of.get(old)
        if end is None:
            return record
        record = dict(record)
        _take(record, self.entries[end])
        return record


def _take(inner: dict[str, Any], end: dict[str, Any]) -> None:
    """The block's state onto one of its sends or receives, where that has none of its own."""
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
