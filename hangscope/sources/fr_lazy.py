"""The records of a reduced dump (``fr_digest``), made when something reads them: the sequences
``FrDump.entries`` and ``RankInGroup.entries``/``p2p`` stand for, and the few questions the
analysis asks of any dump (its newest record, its first record id, its groups) answered without
reading a reduced dump again. ``fr_stream.hydrate`` builds them from a digest.
"""

from __future__ import annotations

import functools
import logging
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from hangscope.model import FrDump, FrEntry
from hangscope.sources import flight_recorder
from hangscope.sources.fr_digest import Body, Shipped

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class SharedHistory:
    """The collectives (or the sends and receives) of one process group as one or more ranks hold
    them: the ranks with equal digests share one of these (for collectives, an equivalence class
    of ``correlate.history_classes``)."""

    seqs: array  # type: ignore[type-arg]
    p2p_seqs: array  # type: ignore[type-arg]
    bodies: array  # type: ignore[type-arg]  # index into Tables.bodies


class _LazyEntries(Sequence[FrEntry]):
    """Indexing for sequences whose records are made on first read: subclasses give
    ``__len__`` and ``_at`` (a valid, non-negative index)."""

    __slots__ = ()

    @overload
    def __getitem__(self, index: int) -> FrEntry: ...

    @overload
    def __getitem__(self, index: slice) -> list[FrEntry]: ...

    def __getitem__(self, index: int | slice) -> FrEntry | list[FrEntry]:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._at(index)

    # filled in by each subclass's __init__ (its __slots__)
    kept: dict[int, FrEntry | Shipped]
    shared: SharedHistory
    record_ids: array  # type: ignore[type-arg]
    pg_name: str
    _bodies: list[Body]
    _unship: Callable[[Shipped], FrEntry]

    def _created(self, index: int) -> int | None:
        raise NotImplementedError

    def _at(self, index: int) -> FrEntry:
        """A record kept whole (unshipped on first read), or one rebuilt from the shared
        history's columns and the body table."""
        entry = self.kept.get(index)
        if entry is not None:
            if type(entry) is tuple:
                entry = self.kept[index] = self._unship(entry)
            return entry  # type: ignore[return-value]
        shared = self.shared
        b = self._bodies[shared.bodies[index]]
        return FrEntry(self.record_ids[index], self.pg_name, b[0], shared.seqs[index],
                       shared.p2p_seqs[index], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8],
                       b[9], self._created(index), None, None, None, b[10], b[11], (), b[12])


class GroupEntries(_LazyEntries):
    """One rank's collectives of one group, as ``RankInGroup.entries``: records are rebuilt on
    access from the shared history, the rank's record ids and its records kept whole. Those
    stay as shipped until something reads them (the report, for the few ranks it details):
    most never are, and at 4096 ranks they are 300,000 records."""

    __slots__ = ("_bodies", "_unship", "kept", "pg_name", "record_ids", "shared")

    def __init__(self, pg_name: str, shared: SharedHistory, record_ids: array,  # type: ignore[type-arg]
                 kept: dict[int, FrEntry | Shipped], bodies: list[Body],
                 unship: Callable[[Shipped], FrEntry]) -> None:
        self.pg_name = pg_name
        self.shared = shared
        self.record_ids = record_ids
        self.kept = kept
        self._bodies = bodies
        self._unship = unship

    def __len__(self) -> int:
        return len(self.record_ids)

    def _created(self, index: int) -> int | None:
        return None  # collectives' creation times stay in the kept records


class P2pRecords(_LazyEntries):
    """One rank's sends and receives of one group, in record order, as ``RankInGroup.p2p``:
    columns (the seqs and bodies shared by the ranks that hold equal ones, the record ids and
    creation times the rank's own) and the few records kept whole (see ``fr_digest.P2pPart``).
    A record is made on access, and not kept: a 3D-parallel job's dumps hold hundreds of sends
    and receives each, and p2p matching reads their columns (:meth:`signature`), making only the
    records it cites."""

    __slots__ = ("_bodies", "_unship", "created", "kept", "pg_name", "record_ids", "shared")

    def __init__(self, pg_name: str, shared: SharedHistory, record_ids: array,  # type: ignore[type-arg]
                 created: Sequence[int], kept: dict[int, FrEntry | Shipped],
                 bodies: list[Body], unship: Callable[[Shipped], FrEntry]) -> None:
        self.pg_name, self.shared, self.record_ids = pg_name, shared, record_ids
        self.created, self.kept = created, kept
        self._bodies, self._unship = bodies, unship

    def __len__(self) -> int:
        return len(self.record_ids)

    @property
    def body_ids(self) -> Sequence[int]:
        """Per record, its body's index in the parent's table: equal ids, equal bodies."""
        return self.shared.bodies

    def signature(self, body_id: int) -> tuple[Any, ...]:
        """What p2p matching reads of a record with that body: op, peer, input sizes and dtypes,
        output sizes and dtypes."""
        b = self._bodies[body_id]
        return b[1], b[11], b[6], b[7], b[8], b[9]

    def created_at(self, index: int) -> int | None:
        return self.created[index] or None

    def _created(self, index: int) -> int | None:
        return self.created[index] or None


@dataclass(slots=True)
class RankGroup:
    """One rank's view of one group, from its digest (what ``correlate._rank_view`` computes)."""

    desc: str
    entries: GroupEntries
    pending: FrEntry | None
    p2p: P2pRecords
    p2p_pending: list[FrEntry]  # the sends and receives not completed


class DumpEntries(Sequence[FrEntry]):
    """``FrDump.entries`` of a reduced dump. Its length, first record id, newest record and
    groups come from the digest; anything that reads the records themselves (the report, for the
    few ranks it details) reads the dump again, in full."""

    __slots__ = ("exact", "first_record_id", "groups", "latest", "n", "path", "rank")

    def __init__(self, path: str, rank: int, n: int, first_record_id: int | None,
                 latest: FrEntry | None, groups: dict[str, RankGroup], exact: bool) -> None:
        self.path, self.rank, self.n = path, rank, n
        self.first_record_id, self.latest, self.groups = first_record_id, latest, groups
        self.exact = exact

    def _records(self) -> list[FrEntry]:
        """Every record, in file order. Rebuilt from the digest where that gives what the report
        shows (the newest :data:`TAIL` records of each group whole, with their times; the others
        without times), else read again from the dump."""
        if not self.exact:
            return _full_entries(self.path, self.rank)
        out: list[FrEntry] = []
        for group in self.groups.values():
            out.extend(group.entries[:])
            out.extend(group.p2p)
        out.sort(key=lambda e: e.record_id)
        return out

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, index: int) -> FrEntry: ...

    @overload
    def __getitem__(self, index: slice) -> list[FrEntry]: ...

    def __getitem__(self, index: int | slice) -> FrEntry | list[FrEntry]:
        return self._records()[index]

    def __iter__(self) -> Iterator[FrEntry]:
        return iter(self._records())


@functools.lru_cache(maxsize=8)
def _full_entries(path: str, rank: int) -> list[FrEntry]:
    log.debug("reading %s again for its records", path)
    return flight_recorder.load_dump(path, rank)[0].entries


def latest_entry(dump: FrDump) -> FrEntry | None:
    """The dump's record with the highest record id, without reading a reduced dump again."""
    if isinstance(dump.entries, DumpEntries):
        return dump.entries.latest
    return max(dump.entries, key=lambda e: e.record_id) if dump.entries else None


def first_record_id(dump: FrDump) -> int | None:
    if isinstance(dump.entries, DumpEntries):
        return dump.entries.first_record_id
    return dump.entries[0].record_id if dump.entries else None


def group_names(dump: FrDump) -> set[str]:
    """The process groups the dump has records of."""
    if isinstance(dump.entries, DumpEntries):
        return set(dump.entries.groups)
    return {entry.pg_name for entry in dump.entries}


def rank_groups(dump: FrDump) -> dict[str, RankGroup] | None:
    """The per-group digests of a reduced dump; None for a dump held in full."""
    return dump.entries.groups if isinstance(dump.entries, DumpEntries) else None
