"""Line up every rank's flight-recorder entries per process group, by sequence number.

The result, :class:`Picture`, says for each group who its members are, where each member is
(last op entered, the op it is blocked in) and which ranks share an identical history, and holds
what the logs observed of collectives (``observations``: watchdog timeouts, desync reports, DETAIL
mismatches, failed barriers, store waits). Detectors and the wait graph read only this. Work is
per group and per *class* of identical ranks, so 4096 ranks
in 3 kinds of group cost about as much as the few distinct histories they hold. Dumps read as
digests (``sources.fr_stream``, from 16 dumps on) arrive with their classes made: ranks whose
histories of a group are equal share one ``SharedHistory``, and their records are rebuilt on
access.

Ring buffers: each rank keeps only its last N entries, so histories are compared only on the
sequence numbers every member still holds (torch's ``align_trace_from_beginning`` idea, but per
group and without discarding the newer entries a lagging rank lacks).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from hangscope import timing
from hangscope.analysis.fr_match import match_key
from hangscope.analysis.observations import (
    WAITING_STATES,
    Observation,
    by_rank,
    log_observations,
)
from hangscope.model import FrDump, FrEntry, JobEvidence
from hangscope.sources.fr_lazy import RankGroup, SharedHistory, group_names, rank_groups

DEFAULT_PG = "0"


@dataclass(slots=True)
class RankInGroup:
    """One rank's view of one process group (collectives only; p2p is kept apart)."""

    rank: int
    seqs: Sequence[int]  # collective seq ids held, ascending
    entries: Sequence[FrEntry]  # same order as seqs
    pending: FrEntry | None  # first op not completed: what the rank is blocked in on this group
    p2p_pending: list[FrEntry] = field(default_factory=list)
    p2p: Sequence[FrEntry] = field(default_factory=list)  # every send/recv, in record order
    # the history this rank shares with others, when its dump was reduced (sources.fr_digest)
    history: SharedHistory | None = None

    @property
    def last_seq(self) -> int:
        return self.seqs[-1] if self.seqs else 0

    @property
    def first_seq(self) -> int:
        return self.seqs[0] if self.seqs else 0

    def entry_at(self, seq: int) -> FrEntry | None:
        index = bisect.bisect_left(self.seqs, seq)
        if index < len(self.seqs) and self.seqs[index] == seq:
            return self.entries[index]
        return None

    def block_at(self, seq: int) -> list[FrEntry]:
        """Every entry at ``seq``: one op, or the ops of a coalesced block (they share its seq,
        its ``*coalesced`` end entry last), in the order the rank issued them."""
        start = bisect.bisect_left(self.seqs, seq)
        return list(self.entries[start:bisect.bisect_right(self.seqs, seq, lo=start)])

    @property
    def entered(self) -> int:
        """The highest seq this rank can be said to have reached: the first one it is blocked
        in, else the last one it recorded. An NCCL rank whose stream is stuck in seq N may have
        enqueued (recorded) seqs past N that it cannot start."""
        return self.pending.collective_seq_id if self.pending is not None else self.last_seq

    def last_completed(self) -> FrEntry | None:
        for entry in reversed(self.entries):
            if entry.completed:
                return entry
        return None


@dataclass(slots=True)
class GroupView:
    """A process group across ranks. ``members_known`` is False when inferred from usage."""

    name: str
    desc: str
    members: tuple[int, ...]
    members_known: bool
    ranks: dict[int, RankInGroup]  # members that have a dump
    members_declared: bool = False  # a dump's pg_config lists them (not the world, not usage)
    _history: dict[tuple[object, ...], list[int]] | None = None  # history_classes, once
    _history_index: dict[int, int] | None = None

    def history_of(self, rank: int) -> int:
        """Which history class (see :func:`history_classes`) the rank is in; 0 when the group
        has one class (or the rank holds nothing in it)."""
        if self._history_index is None:
            classes = history_classes(self)
            self._history_index = {} if len(classes) < 2 else {
                r: i for i, ranks in enumerate(classes.values()) for r in ranks}
        return self._history_index.get(rank, 0)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.desc})" if self.desc and self.desc != self.name else self.name

    def without_dump(self) -> list[int]:
        return [r for r in self.members if r not in self.ranks]

    def global_rank(self, local: int) -> int | None:
        """Map a group-local rank (as p2p profiling names give it) to a global rank."""
        if 0 <= local < len(self.members):
            return self.members[local]
        return None


@dataclass(slots=True)
class Picture:
    """One picture of the collectives: FR dumps aligned per group, and log observations."""

    groups: dict[str, GroupView]
    dumps: dict[int, FrDump]
    world_size: int
    backends: set[str]
    notes: list[str]  # evidence gaps found while correlating (inferred membership, ...)
    observations: list[Observation] = field(default_factory=list)  # from logs, see observations

    _pending: dict[int, list[tuple[GroupView, FrEntry]]] | None = None
    _observed: dict[int, list[Observation]] | None = None

    def observed(self, rank: int) -> list[Observation]:
        """The rank's log observations, the most telling first (see ``observations.rank_order``)."""
        if self._observed is None:
            self._observed = by_rank(self.observations)
        return self._observed.get(rank, [])

    def observed_in_collective(self) -> set[int]:
        """Ranks whose logs show them inside a collective (not "elsewhere")."""
        return {o.rank for o in self.observations if o.state in WAITING_STATES}

    def pending_ops(self, rank: int) -> list[tuple[GroupView, FrEntry]]:
        """Every op the rank is blocked in, oldest first (by record id)."""
        if self._pending is None:
            self._pending = _pending_by_rank(self.groups)
        return self._pending.get(rank, [])


def finished(entry: FrEntry) -> bool:
    """The rank's side of this op completed, and the dump says so by its state: NCCL marks an op
    ``completed`` when its work ends. An op that is only ``retired`` (gloo) may have failed."""
    return entry.completed is True and entry.state == "completed"


def _pending_by_rank(groups: dict[str, GroupView]) -> dict[int, list[tuple[GroupView, FrEntry]]]:
    """One pass over the groups for every rank: asking per rank would scan every group again."""
    found: dict[int, list[tuple[GroupView, FrEntry]]] = {}
    for group in groups.values():
        for rank, view in group.ranks.items():
            entries = [view.pending] if view.pending is not None else []
            entries += view.p2p_pending
            if entries:
                found.setdefault(rank, []).extend((group, entry) for entry in entries)
    for pairs in found.values():
        pairs.sort(key=lambda item: item[1].record_id)
    return found


GLOO_P2P_NOTE = ("gloo's flight recorder does not record send/recv: point-to-point waits are "
                 "invisible in these dumps (stacks show them)")


def build_picture(evidence: JobEvidence) -> Picture:
    dumps = evidence.fr_dumps()
    notes: list[str] = []
    declared = _declared_groups(dumps, notes)
    world_size = _world_size(evidence, declared.get(DEFAULT_PG), notes)
    per_group: dict[str, dict[int, list[FrEntry]]] = defaultdict(lambda: defaultdict(list))
    reduced: dict[str, dict[int, RankGroup]] = defaultdict(dict)  # dumps read as digests
    descs: dict[str, str] = {}
    backends: set[str] = set()
    for rank, dump in dumps.items():
        if dump.backend:
            backends.add(dump.backend)
        parts = rank_groups(dump)
        if parts is not None:
            for name, part in parts.items():
                reduced[name][rank] = part
                if part.desc and name not in descs:
                    descs[name] = part.desc
            continue
        for entry in dump.entries:
            per_group[entry.pg_name][rank].append(entry)
            if entry.pg_desc and entry.pg_name not in descs:
                descs[entry.pg_name] = entry.pg_desc
    groups: dict[str, GroupView] = {}
    for name in sorted(set(per_group) | set(reduced) | set(declared), key=_group_sort_key):
        by_rank = per_group.get(name, {})
        digests = reduced.get(name, {})
        members, known = _members(name, declared.get(name), by_rank.keys() | digests.keys(),
                                  world_size)
        if not known and name != DEFAULT_PG:
            notes.append(
                f"process group {name} ({descs.get(name, '')}): the dumps do not list its members;"
                f" inferred ranks {_fmt(members)} from the ranks that used it")
        views = {rank: _rank_view(rank, entries) for rank, entries in by_rank.items()}
        views.update((rank, _digest_view(rank, part)) for rank, part in digests.items())
        if by_rank and digests:  # some dumps reduced, some not: keep the dumps' order
            views = {rank: views[rank] for rank in dumps if rank in views}
        for rank in members:
            if rank in dumps and rank not in views:
                views[rank] = RankInGroup(rank=rank, seqs=[], entries=[], pending=None)
        groups[name] = GroupView(name=name, desc=descs.get(name, ""), members=members,
                                 members_known=known, ranks=views,
                                 members_declared=bool(declared.get(name)))
    if "gloo" in backends:
        notes.append(GLOO_P2P_NOTE)
    observations = log_observations(evidence)
    if observations:
        world_size = max(world_size, max(o.rank for o in observations) + 1)
    return Picture(groups=groups, dumps=dumps, world_size=world_size, backends=backends,
                   notes=notes, observations=observations)


def _fmt(ranks: tuple[int, ...]) -> str:
    from hangscope.ranges import format_ranks

    return format_ranks(ranks)


def _group_sort_key(name: str) -> tuple[int, str]:
    return (0, f"{int(name):012d}") if name.isdigit() else (1, name)


def _declared_groups(dumps: dict[int, FrDump], notes: list[str]) -> dict[str, tuple[int, ...]]:
    """Members of each group as the dumps' ``pg_config`` lists them. gloo's one ``''`` slot is
    the default group's while a dump records nothing but the default group (torch 2.13 empties it
    once a sub-group exists). Where dumps list one group with different members (torch's analyzer
    then treats them as different groups), the first listing is kept and the conflict noted."""
    declared: dict[str, tuple[int, ...]] = {}
    conflicts: dict[str, set[tuple[int, ...]]] = {}
    for rank in sorted(dumps):
        dump = dumps[rank]
        for name, info in dump.process_groups.items():
            if not info.ranks:
                continue
            if not name:
                if group_names(dump) - {DEFAULT_PG}:
                    continue
                name = DEFAULT_PG
            have = declared.setdefault(name, info.ranks)
            if have != info.ranks:
                conflicts.setdefault(name, {have}).add(info.ranks)
    for name, listings in sorted(conflicts.items()):
        shown = "; ".join(_fmt(ranks) for ranks in sorted(listings))
        notes.append(f"the dumps list process group {name} with different members ({shown}): "
                     f"compared as one group of ranks {_fmt(declared[name])}")
    return declared


def _world_size(evidence: JobEvidence, default_members: tuple[int, ...] | None,
                notes: list[str]) -> int:
    """The job's size: as given (``--world-size``, a bundle's manifest), else the default group's
    members as the dumps list them, else the largest the evidence implies (file names, other
    groups). File names number ranks only by convention; the default group is the job."""
    if evidence.world_size:
        return evidence.world_size
    if default_members:
        outside = sorted(r for r in evidence.fr_dumps() if r not in default_members)
        if outside:
            notes.append(f"dumps named for ranks {_fmt(tuple(outside))} are not members of the "
                         f"default group (ranks {_fmt(default_members)}) that the dumps list")
            return max(max(default_members), *outside) + 1
        return max(default_members) + 1
    return evidence.expected_world_size() or 0


def _members(
    name: str,
    declared: tuple[int, ...] | None,
    users: set[int],
    world_size: int,
) -> tuple[tuple[int, ...], bool]:
    if declared:
        return declared, True
    if name == DEFAULT_PG and world_size:
        return tuple(range(world_size)), True
    return tuple(sorted(users)), False


def _rank_view(rank: int, entries: list[FrEntry]) -> RankInGroup:
    collectives = sorted((e for e in entries if not e.is_p2p), key=lambda e: e.collective_seq_id)
    pending = next((e for e in collectives if e.completed is False), None)
    if pending is None and collectives and collectives[-1].completed is None:
        pending = collectives[-1]  # no completion info: the newest op is where it stands
    p2p = [e for e in entries if e.is_p2p]  # in record order, as the dump holds them
    p2p_pending = [e for e in p2p if e.completed is False]
    return RankInGroup(rank=rank, seqs=[e.collective_seq_id for e in collectives],
                       entries=collectives, pending=pending, p2p_pending=p2p_pending, p2p=p2p)


def _digest_view(rank: int, part: RankGroup) -> RankInGroup:
    """What :func:`_rank_view` gives, from a reduced dump (``sources.fr_digest``)."""
    return RankInGroup(rank=rank, seqs=part.entries.shared.seqs, entries=part.entries,
                       pending=part.pending,
                       p2p_pending=part.p2p_pending, p2p=part.p2p,
                       history=part.entries.shared)


def history_classes(group: GroupView) -> dict[tuple[object, ...], list[int]]:
    """Ranks of ``group`` grouped by identical histories on the seqs all of them still hold, as
    far as what must match across ranks goes (``fr_match.match_key``).

    Two ranks in one class agree on every collective they both recorded; a group with more than one
    class differs somewhere in the shared window. Computed once per group.
    """
    if group._history is not None:
        return group._history
    with timing.phase("match"):
        group._history = _history_classes(group)
    return group._history


def _history_classes(group: GroupView) -> dict[tuple[object, ...], list[int]]:
    views = [v for v in group.ranks.values() if v.seqs]
    if not views:
        return {}
    low = max(v.first_seq for v in views)
    high = min(v.last_seq for v in views)
    classes: dict[tuple[object, ...], list[int]] = defaultdict(list)
    key_ids: dict[object, int] = {}
    if all(view.history is not None for view in views):
        return _shared_history_classes(views, low, high, classes, key_ids)
    # Hot at scale (4096 ranks x 2000 entries): the raw fields find an entry's match key id
    # without calling match_key again for the many entries that repeat them.
    by_fields: dict[object, int] = {}
    get = by_fields.get
    for view in views:
        start = bisect.bisect_left(view.seqs, low)
        stop = bisect.bisect_right(view.seqs, high)
        ids: list[int] = []
        append = ids.append
        for entry in view.entries[start:stop]:
            fields = (entry.op, entry.input_sizes, entry.output_sizes, entry.input_dtypes,
                      entry.output_dtypes)
            found = get(fields)
            if found is None:
                found = by_fields[fields] = key_ids.setdefault(match_key(entry), len(key_ids))
            append(found)
        classes[tuple(ids)].append(view.rank)
    return classes


def _shared_history_classes(views: list[RankInGroup], low: int, high: int,
                            classes: dict[tuple[object, ...], list[int]],
                            key_ids: dict[object, int]) -> dict[tuple[object, ...], list[int]]:
    """:func:`_history_classes` for reduced dumps: the window's match keys are computed once per
    shared history (an equivalence class of digests), not once per rank."""
    by_history: dict[int, tuple[object, ...]] = {}
    by_body: dict[int, int] = {}
    for view in views:
        shared = view.history
        assert shared is not None
        found = by_history.get(id(shared))
        if found is None:
            start = bisect.bisect_left(shared.seqs, low)
            stop = bisect.bisect_right(shared.seqs, high)
            ids = []
            for position in range(start, stop):
                body = shared.bodies[position]
                key = by_body.get(body)
                if key is None:
                    key = by_body[body] = key_ids.setdefault(
                        match_key(view.entries[position]), len(key_ids))
                ids.append(key)
            found = by_history[id(shared)] = tuple(ids)
        classes[found].append(view.rank)
    return classes
