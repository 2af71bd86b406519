"""Rank stacks merged into one prefix tree, LLNL STAT style: where ranks' paths part is where to
look first.

One builder, :func:`merge_stacks`, serves both users; they differ only in its parameters:

- the analysis (:func:`merge_prefix_tree`) merges one stack per rank by :func:`frame_key`, so
  library lines and unsymbolised addresses do not split ranks on different installs;
- the HTML report (``report/stacktree.py``) merges every thread of each rank by its interned frame,
  up to a node budget, and stores the nodes as columns in first-seen order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hangscope.analysis.stacks import is_library, module_path, short_where
from hangscope.model import Frame
from hangscope.ranges import format_ranks

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class PrefixNode(Generic[K]):
    """One call-path prefix (outermost frame at the root) and the ranks passing through it.
    Ranks are kept as sorted inclusive ranges: 4096 ranks in one state cost one pair."""

    frame: Frame | None  # None at the root, else the first frame merged here
    index: int = -1  # position in PrefixTree.nodes; -1 at the root
    ranges: list[list[int]] = field(default_factory=list)
    children: dict[K, PrefixNode[K]] = field(default_factory=dict)

    def add_rank(self, rank: int) -> None:
        """Ranks must arrive in increasing order; a repeat (another thread) adds nothing."""
        if self.ranges and self.ranges[-1][1] + 1 == rank:
            self.ranges[-1][1] = rank
        elif not self.ranges or self.ranges[-1][1] < rank:
            self.ranges.append([rank, rank])

    def ranks(self) -> list[int]:
        return [rank for start, end in self.ranges for rank in range(start, end + 1)]

    def count(self) -> int:
        return sum(end - start + 1 for start, end in self.ranges)

    def rank_text(self) -> str:
        return format_ranks(self.ranks())

    def walk(self, depth: int = 0) -> Iterator[tuple[int, PrefixNode[K]]]:
        """Depth-first (node, depth), children with the most ranks first."""
        yield depth, self
        for child in sorted(self.children.values(), key=lambda n: (-n.count(), n.ranges)):
            yield from child.walk(depth + 1)

    def to_dict(self) -> dict[str, object]:
        return {"frame": None if self.frame is None else
                {"name": self.frame.name, "where": self.frame.where()},
                "ranks": [tuple(r) for r in self.ranges],
                "children": [child.to_dict() for child in sorted(
                    self.children.values(), key=lambda n: (-n.count(), n.ranges))]}


@dataclass(slots=True)
class PrefixTree(Generic[K]):
    """The merged tree, and its nodes below the root in first-seen order (parents before
    children) as columns, for consumers that store it flat."""

    root: PrefixNode[K]
    nodes: list[PrefixNode[K]] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # index of each node's parent, -1: the root
    keys: list[K] = field(default_factory=list)  # each node's key
    truncated: int = 0  # stacks cut short because the tree already had max_nodes nodes


def merge_stacks(stacks: Iterable[tuple[int, Sequence[Frame]]],
                 key: Callable[[Frame], K | None], max_nodes: int | None = None
                 ) -> PrefixTree[K]:
    """Merge (rank, frames innermost first) pairs, ranks in increasing order (a rank may come
    once per thread), outermost frame first. Frames of equal ``key`` share a node; a frame whose
    key is None is skipped. A stack that needs a new node once there are ``max_nodes`` stops
    there and counts in ``truncated``."""
    tree: PrefixTree[K] = PrefixTree(PrefixNode(frame=None))
    for rank, frames in stacks:
        node = tree.root
        node.add_rank(rank)
        for frame in reversed(frames):
            frame_id = key(frame)
            if frame_id is None:
                continue
            child = node.children.get(frame_id)
            if child is None:
                if max_nodes is not None and len(tree.nodes) >= max_nodes:
                    tree.truncated += 1
                    break
                child = node.children[frame_id] = PrefixNode(frame, len(tree.nodes))
                tree.nodes.append(child)
                tree.parents.append(node.index)
                tree.keys.append(frame_id)
            child.add_rank(rank)
            node = child
    return tree


def merge_prefix_tree(stacks: Mapping[int, Sequence[Frame]]) -> PrefixNode[FrameKey]:
    """Merge one stack per rank (innermost first, as sampled) by :func:`frame_key` into one tree
    rooted at the outermost frames: where ranks' paths diverge is where to look."""
    return merge_stacks(((rank, stacks[rank]) for rank in sorted(stacks)), frame_key).root


def format_tree(root: PrefixNode[K], max_depth: int = 64) -> Iterator[str]:
    """Text rendering, one line per node: ``  [0-3] all_reduce (torch/...:3252)``."""
    for depth, node in root.walk():
        if node.frame is None or depth > max_depth:
            continue
        yield f"{'  ' * (depth - 1)}[{node.rank_text()}] {short_where(node.frame)}"


# --------------------------------------------------------------------------------------------------
# Equivalence classes: the keys ranks in one state share

FrameKey = tuple[str, str, int | None]
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]+$")


def frame_key(frame: Frame) -> FrameKey | None:
    """How a frame compares across ranks. Library frames: function + module path, no line (so
    ranks on hosts with different install prefixes or patch versions still group). The job's own
    frames keep their line: two calls to all_reduce from different lines are different states.
    Unsymbolised native frames (``0x7f...``) differ per process (ASLR) and are dropped (None)."""
    if frame.native:
        if _ADDRESS.match(frame.name):
            return None
        return (frame.name, frame.filename.rsplit("/", 1)[-1], None)
    if is_library(frame):
        return (frame.name, module_path(frame.filename), None)
    return (frame.name, frame.filename, frame.line)


def stack_key(frames: Sequence[Frame]) -> tuple[FrameKey, ...]:
    """Hashable key of a whole stack (innermost first), equal for ranks in the same state."""
    return tuple(key for key in map(frame_key, frames) if key is not None)


def group_by_stack(stacks: dict[int, tuple[Frame, ...]]) -> list[tuple[tuple[Frame, ...],
                                                                       list[int]]]:
    """Ranks with equal :func:`stack_key`, largest group first: (a representative stack, ranks)."""
    groups: dict[tuple[FrameKey, ...], tuple[tuple[Frame, ...], list[int]]] = {}
    for rank in sorted(stacks):
        frames = stacks[rank]
        groups.setdefault(stack_key(frames), (frames, []))[1].append(rank)
    return sorted(groups.values(), key=lambda group: (-len(group[1]), group[1][0]))
