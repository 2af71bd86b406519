"""``fr_blocks`` on the C reader's dumps: the same walk over each record's key and the reader's
columns, so that no record is made but those a block's end changes and those the digest keeps.
The records, columns and keys are those ``fr_blocks.resolve`` then ``fr_columns.scan`` give
(``tests/test_fr_blocks.py`` holds them equal); key classes may be finer: a changed record
is keyed apart from records it now equals, which the reducer's body table makes one again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import accumulate, compress
from typing import Any

from hangscope.sources import fr_blocks
from hangscope.sources.fr_columns import Columns


def resolve(top: dict[str, Any], entries: Sequence[Any], cols: Columns) -> tuple[
        dict[str, Any], Sequence[Any], Columns]:
    """``fr_blocks.resolve`` for the C reader's lazy records and their columns: the same walk
    on each record's key (every record of a key has the same name, group, flag and state) and
    the columns' seqs, so that only the records it changes are made, when indexed."""
    firsts, p2p_seqs, seqs = cols.firsts, cols.p2p_seqs, cols.seqs
    kinds: dict[int, tuple[Any, str, Any]] = {}  # key's first record -> (group, kind, state)
    for first in dict.fromkeys(firsts):
        record = entries[first]
        group, kind = fr_blocks.classify(record)
        kinds[first] = (group, kind, record.get("state"))
    # only the groups with an end can change: walk their records alone
    groups = {group for group, kind, _state in kinds.values() if kind in fr_blocks.ENDS}
    if not groups:
        return top, entries, cols
    mine = {first for first, (group, _kind, _state) in kinds.items() if group in groups}
    takes, ends = fr_blocks.walk(
        (index, *kinds[firsts[index]], p2p_seqs[index], seqs[index])
        for index in compress(range(len(firsts)), map(mine.__contains__, firsts)))
    end_of = {inner: end for inner, end in takes.items()
              if kinds[firsts[inner]][2] == "scheduled"}  # what fr_blocks.take changes
    if not ends and not end_of:
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
        seqs=list(compress(seqs, keep)), p2p_seqs=list(compress(p2p_seqs, keep)),
        timed=timed, created=created, firsts=firsts_now)


class _Resolved(Sequence[Any]):
    """The C reader's records with the blocks resolved: p2p blocks' ends left out, a block's op
    made (a copy, once) with its end's state when first indexed, then the same object, as the
    reader hands out one object per record."""

    __slots__ = ("end_of", "entries", "kept", "made")

    def __init__(self, entries: Sequence[Any], kept: list[int], end_of: dict[int, int]) -> None:
        self.entries, self.kept, self.end_of = entries, kept, end_of
        self.made: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.kept)))]
        old = self.kept[index]
        end = self.end_of.get(old)
        if end is None:
            return self.entries[old]
        made = self.made.get(old)
        if made is None:
            made = self.made[old] = dict(self.entries[old])
            fr_blocks.take(made, self.entries[end])
        return made
