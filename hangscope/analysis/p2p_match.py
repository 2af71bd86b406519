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
from dataclasses import dataclass

from hangscope import timing
from hangscope.analysis.correlate import GroupView
from hangscope.model import FrEntry


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


def _mismatches(group: GroupView, whole_history: set[int]) -> list[P2pMismatch]:
    sends: dict[tuple[int, int], list[FrEntry]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[FrEntry]] = defaultdict(list)
    any_source: dict[int, list[FrEntry]] = defaultdict(list)
    for rank, view in group.ranks.items():
        if rank not in whole_history:
            continue
        for entry in view.p2p:
            peer = group.global_rank(entry.peer) if entry.peer is not None else None
            if entry.op == "send" and peer is not None:
                sends[(rank, peer)].append(entry)
            elif entry.op == "recv" and peer is not None:
                recvs[(peer, rank)].append(entry)
            elif entry.op == "recv":
                any_source[rank].append(entry)
    found: list[P2pMismatch] = []
    left: dict[int, list[tuple[int, FrEntry]]] = defaultdict(list)  # receiver -> unpaired sends
    for (src, dst), posted in sends.items():
        if dst not in whole_history:
            continue
        taken = recvs.get((src, dst), [])
        for send, recv in zip(posted, taken):
            _compare(group, src, send, dst, recv, found)
        left[dst].extend((src, send) for send in posted[len(taken):])
    for dst, pending in any_source.items():
        unpaired = sorted(left.get(dst, []), key=lambda item: item[1].time_created_ns or 0)
        for (src, send), recv in zip(unpaired, pending):
            _compare(group, src, send, dst, recv, found)
    return sorted(found, key=lambda m: (m.send.time_created_ns or 0, m.sender))


def _compare(group: GroupView, src: int, send: FrEntry, dst: int, recv: FrEntry,
             found: list[P2pMismatch]) -> None:
    sizes, dtypes = received(recv)
    if send.input_sizes != sizes or (send.input_dtypes and dtypes
                                     and set(send.input_dtypes) != set(dtypes)):
        found.append(P2pMismatch(group, src, send, dst, recv))
