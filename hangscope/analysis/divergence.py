"""Where the ranks of one group first disagree about a collective: shared by the two mismatch
detectors, which differ only in what disagrees (the op, or its sizes and dtypes).

Every seq that every rank of the group still holds is compared, pending or not: a collective that
failed (gloo raises on a size mismatch, and retires the entry) or that completed with wrong
arguments is as much a mismatch as one the ranks hang in. A coalesced block (several ops at one
seq) is compared op by op, in the order each rank issued them. What must agree is
``fr_match.match_key``; with no majority, a side whose record contradicts its own op
(``fr_match.invalid``) is the odd one.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Literal

from hangscope.analysis.correlate import GroupView, RankInGroup, history_classes
from hangscope.analysis.fr_match import differs_in, invalid, match_key
from hangscope.model import FrEntry

# What became of the collective: ranks still in it; every rank retired it and recorded nothing
# after it (gloo raised, the ranks exited); every rank completed it (and went on past it).
Outcome = Literal["pending", "failed", "completed", "went_on"]


@dataclass(slots=True)
class Divergence:
    group: GroupView
    seq: int
    # (representative entry, ranks), the expected side first (for "syntax": the ranks whose
    # record is sound, possibly none, then those whose record contradicts its op)
    sides: list[tuple[FrEntry, list[int]]]
    outcome: Outcome = "pending"
    what: str = "op"  # what differs first: see fr_match.differs_in
    position: int = 0  # index of the differing op inside a coalesced block
    invalid: str = ""  # why the odd side's own record contradicts its op, when that decided

    @property
    def ops_differ(self) -> bool:
        return self.what == "op"

    @property
    def majority_is_clear(self) -> bool:
        """More than half of the ranks on one side (``analysis.majority``'s rule, shared by
        stacks, logs and group creation), or a side whose own record contradicts its op."""
        total = sum(len(ranks) for _, ranks in self.sides)
        return bool(self.invalid) or (len(self.sides) > 1 and len(self.sides[0][1]) * 2 > total)


def first_divergence(group: GroupView) -> Divergence | None:
    """The lowest seq, among those every member with a dump still holds, where what must match
    differs; or the first record that contradicts its own op.

    Compares one representative per history class, so cost is in classes, not ranks.
    """
    classes = list(history_classes(group).values())
    reps = [group.ranks[ranks[0]] for ranks in classes]
    if not reps:
        return None
    size = len(group.members) if group.members_declared else None
    low = max(v.first_seq for v in reps)
    high = min(v.last_seq for v in reps)
    checked: dict[object, str] = {}
    if len(reps) == 1 and _sound(reps[0], low, high, size, checked):
        return None
    seqs = sorted({seq for rep in reps for seq in rep.seqs if low <= seq <= high})
    for seq in seqs:
        blocks = [rep.block_at(seq) for rep in reps]
        if any(not block for block in blocks):
            continue  # a rank holds nothing at this seq (an empty coalesced block): no evidence
        if len(reps) > 1 and len({tuple(map(match_key, b)) for b in blocks}) > 1:
            return _sides(group, seq, classes, blocks, size)
        bad = [(ranks, e, why) for ranks, block in zip(classes, blocks) for e in block
               if (why := _invalid(e, size, checked))]
        if bad:
            return _invalid_only(group, seq, classes, blocks, bad)
    return None


def _sound(rep: RankInGroup, low: int, high: int, size: int | None,
           checked: dict[object, str]) -> bool:
    """Whether no record of a reduced dump's history between seqs ``low`` and ``high``
    contradicts its op: one record per distinct body (``sources.fr_digest``), not one per seq.
    With one history class that is the whole question (nothing to compare it with); a record
    is rebuilt only for each distinct body, instead of for every seq of every group."""
    shared = rep.history
    if shared is None:
        return False
    start = bisect.bisect_left(shared.seqs, low)
    stop = bisect.bisect_right(shared.seqs, high)
    bodies = shared.bodies
    return not any(_invalid(rep.entries[bodies.index(body, start, stop)], size, checked)
                   for body in dict.fromkeys(bodies[start:stop]))


def _invalid(entry: FrEntry, size: int | None, checked: dict[object, str]) -> str:
    """``fr_match.invalid``, once per distinct record (a history repeats a few records)."""
    fields = (entry.op, entry.input_sizes, entry.output_sizes, entry.input_dtypes,
              entry.output_dtypes)
    found = checked.get(fields)
    if found is None:
        found = checked[fields] = invalid(entry, size)
    return found


def _sides(group: GroupView, seq: int, classes: list[list[int]], blocks: list[list[FrEntry]],
           size: int | None) -> Divergence:
    position = next(i for i in range(max(map(len, blocks)))
                    if len({match_key(b[i]) if i < len(b) else None for b in blocks}) > 1)
    by_key: dict[object, tuple[FrEntry, list[int]]] = {}
    for ranks, block in zip(classes, blocks):
        entry = block[min(position, len(block) - 1)]
        key = tuple(map(match_key, block[position:position + 1])) or ("<none>",)
        by_key.setdefault(key, (entry, []))[1].extend(ranks)
    sides = sorted(by_key.values(), key=lambda side: (-len(side[1]), min(side[1])))
    why = ""
    if len(sides) > 1 and len(sides[0][1]) == len(sides[1][1]):
        # no majority: a side whose own record contradicts its op is the odd one
        reasons = [invalid(entry, size) for entry, _ in sides]
        flagged = [i for i, reason in enumerate(reasons) if reason]
        if len(flagged) == 1:
            why = reasons[flagged[0]]
            sides = [side for i, side in enumerate(sides) if i != flagged[0]] + \
                [sides[flagged[0]]]
    what = differs_in(sides[0][0], sides[-1][0]) or "op"
    if position >= min(map(len, blocks)):
        what = "op"  # one rank's coalesced block has more ops than another's
    return Divergence(group=group, seq=seq, sides=sides, outcome=_outcome(group, seq),
                      what=what, position=position, invalid=why)


def _invalid_only(group: GroupView, seq: int, classes: list[list[int]],
                  blocks: list[list[FrEntry]], bad: list[tuple[list[int], FrEntry, str]]
                  ) -> Divergence:
    """Every rank agrees, but what some recorded contradicts the op itself (torch: "syntax").
    The sides are the ranks with a sound record (possibly none) and those without."""
    _, entry, why = bad[0]
    culprits = sorted({r for ranks, _, _ in bad for r in ranks})
    others = sorted({r for ranks in classes for r in ranks} - set(culprits))
    position = next(block.index(entry) for block in blocks if entry in block)
    sound = next((block for ranks, block in zip(classes, blocks) if ranks[0] in others), None)
    sides = [(sound[position] if sound else entry, others), (entry, culprits)]
    return Divergence(group=group, seq=seq, sides=sides, outcome=_outcome(group, seq),
                      what="syntax", position=position, invalid=why)


def _outcome(group: GroupView, seq: int) -> Outcome:
    """Failed when no rank recorded anything after the collective on the group, none recorded it
    ``completed``, and some rank retired it: a backend that marks an op that raised retired (gloo)
    ended it there, and with mismatched arguments it cannot have succeeded (a rank dumped in the
    moment after its error may not have retired it yet). Else pending while any rank is still in
    it; else it completed (and the ranks went on, where they recorded later seqs): with mismatched
    arguments, a wrong result."""
    views = [view for view in group.ranks.values() if view.seqs]
    block = [e for view in views for e in view.block_at(seq)]
    last = all(view.last_seq == seq for view in views)
    if last and all(e.state != "completed" for e in block) \
            and any(e.completed is True for e in block):
        return "failed"
    if any(e.completed is not True for e in block):
        return "pending"
    return "completed" if last else "went_on"
