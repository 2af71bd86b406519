"""Who broke the order: in a deadlock through collectives of several process groups, the ranks
whose order of those groups differs from the other members'.

Signal: for each group the cycle blocks in, its *frontier* is the lowest collective seq a rank of
the cycle is blocked in. For each pair of those groups (A at seq a, B at seq b), every rank that is
a member of both and has a dump *votes* with the order in which it issued the two frontier
collectives, read from its flight-recorder history: it entered A's and not B's (A first), B's and
not A's (B first), or both (the lower record id first). A rank that entered neither does not vote.
The order most voters used is taken as the intended one; the voters of the other order are the
culprits. A tie (rank 0 A then B, rank 1 B then A) has no majority: both sides are named and the
finding says so with lower confidence.

Cites: the frontier entries (through the deadlock finding). False positives: a majority that is
itself wrong (rank-0-only code that reorders on most ranks is rare, but a group where most members
took a data-dependent branch is possible); async collectives whose record order is not the order the
program meant. Stacks name no group or seq: :func:`stack_only_note` says what stacks cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

from hangscope.analysis.correlate import GroupView, Picture
from hangscope.analysis.rank_state import RankStackState
from hangscope.analysis.stacks import is_library, short_where
from hangscope.model import Frame, FrEntry
from hangscope.ranges import ranks_phrase


@dataclass(frozen=True, slots=True)
class Frontier:
    """The collective of ``group`` at ``seq`` that some rank of the cycle is blocked in."""

    group: GroupView
    seq: int
    op: str

    def label(self) -> str:
        return f"{self.op} seq {self.seq} on pg {self.group.label}"


@dataclass(slots=True)
class PairVote:
    """How the members of two groups ordered the groups' frontier collectives."""

    first: Frontier  # the majority's (or, on a tie, the lower-ranked side's) first collective
    second: Frontier
    majority: list[int]  # issued ``first`` before ``second``
    minority: list[int]  # issued ``second`` first

    @property
    def tie(self) -> bool:
        return len(self.majority) == len(self.minority)


@dataclass(slots=True)
class OrderVerdict:
    """The pairs whose members disagree, and the ranks named for it."""

    votes: list[PairVote] = field(default_factory=list)  # pairs with at least one dissenter
    culprits: list[int] = field(default_factory=list)
    tie: bool = False  # no pair has a strict majority: both sides are named

    def sentence(self) -> str:
        """What the members did, majority first: one clause per disagreeing pair."""
        clauses = []
        for vote in self.votes:
            members = len(vote.majority) + len(vote.minority)
            share = "" if vote.tie else f" (the majority, {len(vote.majority)} of {members})"
            clause = (f"{ranks_phrase(vote.majority)}{share} entered {vote.first.label()} before "
                      f"{vote.second.label()}; {ranks_phrase(vote.minority)} entered "
                      f"{vote.second.label()} first")
            if vote.tie:
                clause += (f": {len(vote.majority)} against {len(vote.minority)}, so no majority"
                           " says which order is intended; both sides are named and either may "
                           "be the one to fix")
            clauses.append(clause)
        return " | ".join(clauses)


def frontiers(picture: Picture, ranks: list[int]) -> list[Frontier]:
    """Per group, the lowest seq one of ``ranks`` is blocked in (groups in name order)."""
    found = []
    wanted = set(ranks)
    for group in picture.groups.values():
        pending = [(view.pending.collective_seq_id, view.pending.op)
                   for rank, view in group.ranks.items()
                   if rank in wanted and view.pending is not None]
        if pending:
            seq, op = min(pending)
            found.append(Frontier(group, seq, op))
    return found


def _first(group_a: Frontier, group_b: Frontier, rank: int) -> bool | None:
    """True when ``rank`` issued A's frontier collective before B's, False for B first, None when
    its history says neither."""
    view_a = group_a.group.ranks.get(rank)
    view_b = group_b.group.ranks.get(rank)
    entry_a: FrEntry | None = view_a.entry_at(group_a.seq) if view_a is not None else None
    entry_b: FrEntry | None = view_b.entry_at(group_b.seq) if view_b is not None else None
    if entry_a is not None and entry_b is not None:
        return entry_a.record_id < entry_b.record_id
    if entry_a is not None:
        return True
    if entry_b is not None:
        return False
    return None


def pair_vote(group_a: Frontier, group_b: Frontier, picture: Picture) -> PairVote | None:
    """The members' votes on the order of two frontier collectives; None when nobody dissents."""
    voters = sorted(set(group_a.group.members) & set(group_b.group.members) & set(picture.dumps))
    a_first: list[int] = []
    b_first: list[int] = []
    for rank in voters:
        order = _first(group_a, group_b, rank)
        if order is not None:
            (a_first if order else b_first).append(rank)
    if not a_first or not b_first:
        return None
    if len(b_first) > len(a_first) or (len(b_first) == len(a_first) and b_first < a_first):
        return PairVote(group_b, group_a, b_first, a_first)
    return PairVote(group_a, group_b, a_first, b_first)


def order_verdict(picture: Picture, cycle_ranks: list[int]) -> OrderVerdict:
    """Compare, per pair of the cycle's groups, the order each member used (majority wins)."""
    votes = [vote for a, b in combinations(frontiers(picture, cycle_ranks), 2)
             if (vote := pair_vote(a, b, picture)) is not None]
    decided = [vote for vote in votes if not vote.tie]
    if decided:
        culprits = sorted({r for vote in decided for r in vote.minority})
        return OrderVerdict(votes=decided, culprits=culprits)
    if votes:
        culprits = sorted({r for vote in votes for r in vote.majority + vote.minority})
        return OrderVerdict(votes=votes, culprits=culprits, tie=True)
    return OrderVerdict()


def stack_sites(picture: Picture, stacks: dict[int, RankStackState]
                ) -> dict[str, list[tuple[str, list[int]]]]:
    """Per collective op, the places of the job's code (file:line) ranks without a dump sit in it
    from, not moving, the most-populated place first. Where every such rank sits at one line, a
    helper reached along different paths of the job's code (a sync helper called from a backward
    hook on one rank and from the step's end on the others), the places are the paths, each named
    by the frame where it parts from the others: ranks at different points of the program."""
    sites: dict[tuple[str, str], list[int]] = {}
    paths: dict[int, tuple[Frame, ...]] = {}
    for rank, state in stacks.items():
        main = state.main
        if (rank in picture.dumps or main is None or main.kind != "collective"
                or state.progress == "moving" or main.user_frame is None):
            continue
        sites.setdefault((main.op or "?", short_where(main.user_frame)), []).append(rank)
        paths[rank] = tuple(f for f in state.main_frames if not is_library(f))
    by_op: dict[str, list[tuple[str, list[int]]]] = {}
    for (op, where), ranks in sites.items():
        by_op.setdefault(op, []).append((where, sorted(ranks)))
    for op, places in by_op.items():
        if len(places) == 1:
            by_op[op] = places = _by_path(*places[0], paths)
        places.sort(key=lambda item: (-len(item[1]), item[1]))
    return by_op


def _by_path(where: str, ranks: list[int], paths: dict[int, tuple[Frame, ...]]
             ) -> list[tuple[str, list[int]]]:
    """Ranks at one line split by the path of the job's own frames that led there (innermost
    first), each place named by the line and the first frame where the paths part."""
    split: dict[tuple[Frame, ...], list[int]] = {}
    for rank in ranks:
        split.setdefault(paths[rank], []).append(rank)
    if len(split) < 2:
        return [(where, ranks)]
    shared = 0
    keys = list(split)
    while all(len(k) > shared and k[shared] == keys[0][shared] for k in keys):
        shared += 1
    return [(f"{where} via {short_where(path[shared])}" if len(path) > shared
             else f"{where} (called from the top of its stack)", sorted(members))
            for path, members in split.items()]


def stack_only_note(picture: Picture, stacks: dict[int, RankStackState]) -> str | None:
    """Ranks without a flight-recorder dump that sit in one collective op called from different
    places of the job's code: say what stacks cannot tell (which group, which seq, so whether it
    is an ordering deadlock across process groups)."""
    for op, places in sorted(stack_sites(picture, stacks).items()):
        if len(places) < 2:
            continue
        seen = "; ".join(f"{ranks_phrase(ranks)} in {op} from {where}" for where, ranks in places)
        odd = ""
        if len(places[-1][1]) < len(places[0][1]):
            odd = f", where {ranks_phrase(places[-1][1])} would have the odd order"
        return (f"{seen}: a stack names no process group and no seq, so whether this is one "
                f"collective reached from {len(places)} places, or collectives of different "
                f"process groups that the ranks issued in different orders (an ordering deadlock"
                f"{odd}), cannot be told; flight-recorder dumps (TORCH_FR_BUFFER_SIZE) would tell")
    return None
