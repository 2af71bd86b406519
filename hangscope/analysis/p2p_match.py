"""Pair each send with the recv it feeds, and say where their sizes or dtypes differ.

A send from rank A to rank B and the recv on B from A match when the tensor A sends has the shape
and dtype of the one B receives into (torch's ``Op.match`` for send/recv:
``send.input_sizes == recv.output_sizes``). NCCL delivers sends on one channel (A to B) in the
order they were posted, so the k-th send A recorded to B feeds the k-th recv B recorded from A; a
recv from any source (``nccl:recv 1<-?``) takes the oldest send to its rank left unpaired.

Counting from the first send only holds when both dumps hold their rank's whole history: a rank
whose ring buffer dropped its oldest records (the first record id is not 0) is not paired. gloo
records no send/recv at all. False positives: a job that posts sends and recvs of one channel out
of order through several streams (NCCL would itself mismatch them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq
from typing import Any

from hangscope import timing
from hangscope.analysis.correlate import GroupView
from hangscope.model import FrEntry
from hangscope.sources.fr_lazy import P2pRecords


@dataclass(frozen=True, slots=True)
class P2pMismatch:
    group: GroupView
    sender: int
    send: FrEntry
    receiver: int
    recv: FrEntry

    @property
    def what(self) -> str:
        return "sizes" if self.send.input_sizes != received(self.recv)[0] else "dtypes"


def received(recv: FrEntry) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    """The shape and dtype a recv receives into (its output; its input if no output recorded)."""
    if recv.output_sizes and recv.output_sizes[0]:
        return recv.output_sizes, recv.output_dtypes or recv.input_dtypes
    return recv.input_sizes, recv.input_dtypes


def p2p_mismatches(group: GroupView, whole_history: set[int]) -> list[P2pMismatch]:
    """Every send/recv pair of ``group`` whose shapes or dtypes differ, oldest send first.

    ``whole_history``: the ranks whose dumps hold every record since the job started."""
    with timing.phase("match"):
        return _mismatches(group, whole_history)


# op, peer (in the group), input sizes, input dtypes, output sizes, output dtypes
Signature = tuple[Any, ...]


@dataclass(slots=True)
class _Side:
    """One rank's sends and receives as matching reads them: per record a key that stands for
    its signature (equal keys, equal signatures), and the records themselves, made only for the
    pairs cited."""

    records: Sequence[FrEntry]
    keys: Sequence[Hashable]
    signature: Callable[[Any], Signature]

    def created(self, index: int) -> int | None:
        records = self.records
        if isinstance(records, P2pRecords):
            return records.created_at(index)
        return records[index].time_created_ns


def _side(records: Sequence[FrEntry]) -> _Side:
    if isinstance(records, P2pRecords):  # a reduced dump: its body ids are the keys
        return _Side(records, records.body_ids, records.signature)
    keys = [(e.op, e.peer, e.input_sizes, e.input_dtypes, e.output_sizes, e.output_dtypes)
            for e in records]
    return _Side(records, keys, _same)


def _same(key: Signature) -> Signature:
    return key


def _mismatches(group: GroupView, whole_history: set[int]) -> list[P2pMismatch]:
    """Channels are found per distinct signature, records are sorted into them and pairs
    compared by their keys (in C), so that a rank's hundreds of sends and receives cost a few
    passes, not a Python step each; each distinct pair of signatures is compared once."""
    sends: dict[tuple[int, int], tuple[_Side, list[int]]] = {}
    recvs: dict[tuple[int, int], tuple[_Side, list[int]]] = {}
    any_source: dict[int, tuple[_Side, list[int]]] = {}
    for rank, view in group.ranks.items():
        if rank not in whole_history or not view.p2p:
            continue
        side = _side(view.p2p)
        channel_of: dict[Hashable, tuple[str, int] | None] = {}
        for key in dict.fromkeys(side.keys):
            op, peer = side.signature(key)[:2]
            at = group.global_rank(peer) if peer is not None else None
            channel_of[key] = ("send", at) if op == "send" and at is not None else \
                ("recv", at) if op == "recv" and at is not None else \
                ("any", rank) if op == "recv" else None
        channels = list(map(channel_of.__getitem__, side.keys))
        for channel in dict.fromkeys(channels):  # in the order of their first records
            if channel is None:
                continue
            found = (side, list(compress(range(len(channels)),
                                         map(eq, channels, repeat(channel)))))
            if channel[0] == "send":
                sends[(rank, channel[1])] = found
            elif channel[0] == "recv":
                recvs[(channel[1], rank)] = found
            else:
                any_source[rank] = found
    mismatched: list[P2pMismatch] = []
    left: dict[int, list[tuple[int, _Side, int]]] = defaultdict(list)  # receiver -> unpaired
    for (src, dst), (sender, posted) in sends.items():
        if dst not in whole_history:
            continue
        receiver, taken = recvs.get((src, dst), (sender, []))
        paired = min(len(posted), len(taken))
        pairs = list(zip(map(sender.keys.__getitem__, posted[:paired]),
                         map(receiver.keys.__getitem__, taken[:paired])))
        differ = {pair for pair in set(pairs)
                  if _differ(sender.signature(pair[0]), receiver.signature(pair[1]))}
        if differ:
            mismatched.extend(
                P2pMismatch(group, src, sender.records[posted[k]], dst, receiver.records[taken[k]])
                for k in compress(range(paired), map(differ.__contains__, pairs)))
        left[dst].extend((src, sender, index) for index in posted[paired:])
    for dst, (receiver, pending) in any_source.items():
        unpaired = sorted(left.get(dst, []), key=lambda item: item[1].created(item[2]) or 0)
        for (src, sender, index), recv in zip(unpaired, pending):
            if _differ(sender.signature(sender.keys[index]),
                       receiver.signature(receiver.keys[recv])):
                mismatched.append(P2pMismatch(group, src, sender.records[index], dst,
                                              receiver.records[recv]))
    return sorted(mismatched, key=lambda m: (m.send.time_created_ns or 0, m.sender))


def _differ(send: Signature, recv: Signature) -> bool:
    """Whether what the send sends is not what the recv receives into (see :func:`received`)."""
    _op, _peer, in_sizes, in_dtypes, out_sizes, out_dtypes = recv
    sizes, dtypes = (out_sizes, out_dtypes or in_dtypes) if out_sizes and out_sizes[0] else \
        (in_sizes, in_dtypes)
    return send[2] != sizes or bool(send[3] and dtypes and set(send[3]) != set(dtypes))
