"""A merged prefix tree of stacks across ranks (LLNL STAT's picture), as payload columns.

Every rank's stacks are walked outermost frame first and merged where they share a prefix; each
node keeps the set of ranks that passed through it. Where the tree branches, ranks diverge: a
lone rank in a branch of its own is where to look first.

Stacks come from py-spy samples (every thread of each rank's newest sample). When no rank has a
sample (a flight-recorder-only analysis), the call stack of the op each rank is blocked in (else
its newest op) stands in, and ``source`` says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from hangscope.analysis.stacktree import merge_stacks
from hangscope.model import Frame
from hangscope.sources.fr_lazy import latest_entry

if TYPE_CHECKING:
    from hangscope.report.payload_types import TreeColumns
    from hangscope.report.tables import Frames, Strings
    from hangscope.result import Result


def rank_stacks(result: Result) -> tuple[str, Iterator[tuple[int, tuple[Frame, ...]]]]:
    """(source, iterator of (rank, frames innermost first)) in rank order."""
    ev = result.evidence
    sampled = sorted(r for r, e in ev.ranks.items() if e.samples)
    if sampled:
        def from_samples() -> Iterator[tuple[int, tuple[Frame, ...]]]:
            for rank in sampled:
                threads = ev.ranks[rank].samples[-1].threads
                for thread in sorted(threads, key=lambda t: (not t.is_main, t.thread_id)):
                    yield rank, thread.frames
        return "py-spy", from_samples()
    picture = result.context.picture
    if not picture.dumps:
        return "", iter(())

    def from_fr() -> Iterator[tuple[int, tuple[Frame, ...]]]:
        for rank in sorted(picture.dumps):
            pending = picture.pending_ops(rank)
            dump = picture.dumps[rank]
            if pending:
                yield rank, pending[0][1].frames
            elif (latest := latest_entry(dump)) is not None:
                yield rank, latest.frames
    return "flight_recorder", from_fr()


def build(result: Result, frames: Frames, s: Strings, cap: int) -> TreeColumns:
    """Merge every rank's stacks by interned frame (analysis/stacktree.py's builder); nodes are
    numbered in first-seen order, parents before children. ``truncated`` counts the stacks cut
    short once the tree had ``cap`` nodes."""
    source, stacks = rank_stacks(result)
    tree = merge_stacks(stacks, key=frames, max_nodes=cap)
    return {"source": source, "parent": tree.parents, "frame": tree.keys,
            "ranks": [s(node.rank_text()) for node in tree.nodes],
            "count": [node.count() for node in tree.nodes], "truncated": tree.truncated}
