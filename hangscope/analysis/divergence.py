"""Where the ranks of one group first disagree about a collective: shared by the two mismatch
detectors, which differ only in what disagrees (the op, or its sizes and dtypes)."""

from __future__ import annotations

from dataclasses import dataclass

from hangscope.analysis.correlate import GroupView, history_classes
from hangscope.model import FrEntry


@dataclass(slots=True)
class Divergence:
    group: GroupView
    seq: int
    sides: list[tuple[FrEntry, list[int]]]  # (representative entry, ranks), largest side first

    @property
    def ops_differ(self) -> bool:
        return len({entry.op for entry, _ in self.sides}) > 1

    @property
    def majority_is_clear(self) -> bool:
        return len(self.sides) > 1 and len(self.sides[0][1]) > len(self.sides[1][1])


def first_divergence(group: GroupView) -> Divergence | None:
    """The lowest seq, among those every member still holds, where signatures differ.

    Compares one representative per history class, so cost is in classes, not ranks.
    """
    classes = list(history_classes(group).values())
    if len(classes) < 2:
        return None
    reps = [group.ranks[ranks[0]] for ranks in classes]
    low = max(v.first_seq for v in group.ranks.values() if v.seqs)
    high = min(v.last_seq for v in group.ranks.values() if v.seqs)
    for seq in range(low, high + 1):
        entries = [rep.entry_at(seq) for rep in reps]
        signatures = {e.signature() if e is not None else None for e in entries}
        if len(signatures) > 1:
            return _sides(group, seq, classes, entries)
    return None


def _sides(group: GroupView, seq: int, classes: list[list[int]],
           entries: list[FrEntry | None]) -> Divergence:
    by_sig: dict[object, tuple[FrEntry, list[int]]] = {}
    for ranks, entry in zip(classes, entries):
        if entry is None:
            continue
        side = by_sig.setdefault(entry.signature(), (entry, []))
        side[1].extend(ranks)
    sides = sorted(by_sig.values(), key=lambda side: (-len(side[1]), min(side[1])))
    return Divergence(group=group, seq=seq, sides=sides)
