"""Many flight-recorder dumps as digests (``sources.fr_digest``): read them in a pool of worker
processes, and stand each digest in for its dump in the evidence model.

The parent interns what digests share (:class:`Tables`): ranks with equal histories of a group
share one :class:`SharedHistory`, the equivalence class ``analysis.correlate`` works on. A
reduced dump's ``FrDump.entries`` is a :class:`DumpEntries`: its length, first record id, newest
record and groups come from the digest; its records, where something reads them (the report, for
the ranks it details), are rebuilt from the digest, or read again from the dump where the digest
cannot give what the report shows (see ``DumpDigest.tail_exact``).
"""

from __future__ import annotations

import functools
import gc
import logging
import multiprocessing
import os
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, overload

from hangscope import timing
from hangscope.errors import BadInputError
from hangscope.model import Frame, FrDump, FrEntry, ProcessGroupInfo
from hangscope.sources import flight_recorder
from hangscope.sources.fr_digest import MAX_PROBLEMS, Body, DumpDigest, Shipped, ranks_of
from hangscope.sources.fr_reduce import reduce_item, reduce_item_timed, worker_init

log = logging.getLogger(__name__)

# From this many dumps on, they are reduced as they are read, by a pool of worker processes where
# more than one core is usable. Below, the full records cost little and starting a pool costs more
# than it saves: 2000-entry dumps on 2 cores, best of 3, load only: 8 dumps 0.38-0.72 s in one
# process, 0.62-0.76 s with a pool; 16 dumps 0.65 s vs 0.47 s; 64 dumps 3.3 s vs 2.3 s.
STREAM_FROM = 16
POOL_FROM = 16

# ------------------------------------------------------------------ parent side: hydrate


@dataclass(slots=True, eq=False)
class SharedHistory:
    """The collectives of one process group as one or more ranks hold them: the ranks with equal
    digests share one of these (an equivalence class of ``correlate.history_classes``)."""

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

    def _at(self, index: int) -> FrEntry:
        raise NotImplementedError


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

    def _at(self, index: int) -> FrEntry:
        entry = self.kept.get(index)
        if entry is not None:
            if type(entry) is tuple:
                entry = self.kept[index] = self._unship(entry)
            return entry  # type: ignore[return-value]
        shared = self.shared
        b = self._bodies[shared.bodies[index]]
        return FrEntry(self.record_ids[index], self.pg_name, b[0], shared.seqs[index],
                       shared.p2p_seqs[index], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8],
                       b[9], None, None, None, None, b[10], b[11], (), b[12])


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

    def _at(self, index: int) -> FrEntry:
        entry = self.kept.get(index)
        if entry is not None:
            if type(entry) is tuple:
                entry = self.kept[index] = self._unship(entry)
            return entry  # type: ignore[return-value]
        shared = self.shared
        b = self._bodies[shared.bodies[index]]
        return FrEntry(self.record_ids[index], self.pg_name, b[0], shared.seqs[index],
                       shared.p2p_seqs[index], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8],
                       b[9], self.created[index] or None, None, None, None, b[10], b[11], (),
                       b[12])


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


@dataclass(slots=True)
class Tables:
    """What the parent interns across digests, so that ranks share it."""

    bodies: list[Body] = field(default_factory=list)
    body_ids: dict[Body, int] = field(default_factory=dict)
    frames: dict[tuple[str, str, int | None], Frame] = field(default_factory=dict)
    stacks: dict[tuple[tuple[str, str, int | None], ...], tuple[Frame, ...]] = \
        field(default_factory=dict)
    histories: dict[bytes, SharedHistory] = field(default_factory=dict)
    no_p2p: dict[str, P2pRecords] = field(default_factory=dict)  # per group: none, shared

    def body_map(self, bodies: list[Body]) -> list[int]:
        ids = self.body_ids
        out = []
        for body in bodies:
            found = ids.get(body)
            if found is None:
                found = ids[body] = len(self.bodies)
                self.bodies.append(body)
            out.append(found)
        return out

    def stack(self, raw: tuple[tuple[str, str, int | None], ...]) -> tuple[Frame, ...]:
        found = self.stacks.get(raw)
        if found is None:
            frames = self.frames
            found = self.stacks[raw] = tuple(
                frames.get(key) or frames.setdefault(key, Frame(*key)) for key in raw)
        return found


def hydrate(digest: DumpDigest, tables: Tables) -> FrDump:
    """The dump a digest stands for, sharing histories and frames with the dumps before it."""
    raw_stacks = digest.stacks
    stacks: dict[int, tuple[Frame, ...]] = {-1: ()}
    body_map = tables.body_map(digest.bodies)
    identity = body_map == list(range(len(body_map)))

    def entry(shipped: Shipped) -> FrEntry:
        stack = shipped[20]
        frames = stacks.get(stack)
        if frames is None:
            frames = stacks[stack] = tables.stack(raw_stacks[stack])
        return FrEntry(*shipped[:20], frames, shipped[21])  # type: ignore[call-arg]

    def shared_history(kind: bytes, name: str, seqs: array, p2p_seqs: array,  # type: ignore[type-arg]
                       bodies: array) -> SharedHistory:  # type: ignore[type-arg]
        ids = bodies if identity else array("I", map(body_map.__getitem__, bodies))
        key = b"".join((kind, name.encode(), b"\0", seqs.tobytes(), p2p_seqs.tobytes(),
                        ids.tobytes()))
        shared = tables.histories.get(key)
        if shared is None:
            shared = tables.histories[key] = SharedHistory(seqs, p2p_seqs, ids)
        return shared

    groups: dict[str, RankGroup] = {}
    for name, part in digest.groups.items():
        shared = shared_history(b"c", name, part.seqs, part.p2p_seqs, part.bodies)
        kept: dict[int, FrEntry | Shipped] = dict(part.kept)  # made records when read
        pending = None
        if part.pending >= 0:
            pending = kept[part.pending] = entry(part.kept[part.pending])
        entries = GroupEntries(name, shared, part.record_ids, kept, tables.bodies, entry)
        p2p_part = part.p2p
        p2p_pending: list[FrEntry] = []
        if p2p_part is None:
            p2p = tables.no_p2p.get(name)
            if p2p is None:
                nothing = array("q")
                p2p = tables.no_p2p[name] = P2pRecords(
                    name, SharedHistory(nothing, nothing, array("I")), nothing, nothing, {},
                    tables.bodies, entry)
        else:
            p2p_kept: dict[int, FrEntry | Shipped] = dict(p2p_part.kept)
            for position, shipped in p2p_part.kept.items():  # in record order
                if shipped[9] is False:  # not completed
                    p2p_kept[position] = made = entry(shipped)
                    p2p_pending.append(made)
            p2p = P2pRecords(name, shared_history(b"p", name, p2p_part.seqs, p2p_part.p2p_seqs,
                                                  p2p_part.bodies),
                             p2p_part.record_ids, p2p_part.created, p2p_kept, tables.bodies,
                             entry)
        groups[name] = RankGroup(desc=part.desc, entries=entries, pending=pending,
                                 p2p=p2p, p2p_pending=p2p_pending)
    latest = entry(digest.latest) if digest.latest is not None else None
    return FrDump(
        rank=digest.rank, path=digest.path, version=digest.version, backend=digest.backend,
        process_groups={name: ProcessGroupInfo(name=name, desc=desc, ranks=ranks_of(spec))
                        for name, desc, spec in digest.pg_config},
        pg_status=digest.pg_status,
        entries=DumpEntries(digest.path, digest.rank, digest.n_entries,  # type: ignore[arg-type]
                            digest.first_record_id, latest, groups, digest.tail_exact))


# ------------------------------------------------------------------ reading many dumps


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


LoadResult = tuple[int, str, FrDump | None, list[str]]  # rank, path, dump, problems


def load_dumps(by_rank: dict[int, str], jobs: int | None) -> Iterator[LoadResult]:
    """Every dump of ``by_rank`` in rank order, with its problems (at most :data:`MAX_PROBLEMS`
    lines, then a count). From :data:`STREAM_FROM` dumps on they are reduced as they are read,
    by ``jobs`` worker processes (None: one per usable core; 1, or fewer dumps than
    :data:`POOL_FROM`: in this process); below, held in full. A dump that cannot be read gives
    its one-line problem and no dump."""
    items = sorted(by_rank.items())
    if len(items) < STREAM_FROM:
        for rank, path in items:
            try:
                dump, problems = flight_recorder.load_dump(path, rank)
            except BadInputError as exc:
                yield rank, path, None, [str(exc)]
                continue
            yield rank, path, dump, _capped(path, problems[:MAX_PROBLEMS], len(problems))
        return
    yield from load_reduced(items, jobs)


def load_reduced(items: list[tuple[int, str]], jobs: int | None) -> Iterator[LoadResult]:
    """``items`` (rank, path), reduced (see :func:`load_dumps`). The cyclic garbage collector
    is off meanwhile: reading makes millions of short-lived containers that reference counting
    frees, and each collection pass would walk the digests kept so far."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield from _load_reduced(items, jobs)
    finally:
        if enabled:
            gc.enable()


def _load_reduced(items: list[tuple[int, str]], jobs: int | None) -> Iterator[LoadResult]:
    tables = Tables()
    workers = min(jobs or usable_cores(), len(items))
    # A forked worker keeps only the forking thread: a lock another thread held (logging's,
    # an allocator's) would stay locked in it. With other threads alive, read in this process.
    if workers <= 1 or len(items) < POOL_FROM or threading.active_count() > 1:
        yield from _hydrated(items, map(reduce_item, items), tables)
        return
    context = multiprocessing.get_context("fork")
    chunk = max(1, min(16, len(items) // (workers * 8)))
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=worker_init) as pool:
        profile = timing.current()
        if profile is None:
            results = pool.map(reduce_item, items, chunksize=chunk)
        else:
            results = _worker_times(pool.map(reduce_item_timed, items, chunksize=chunk), profile)
        yield from _hydrated(items, results, tables)


def _worker_times(results: Iterator[tuple[DumpDigest | str, timing.Times]],
                  profile: timing.Profile) -> Iterator[DumpDigest | str]:
    """The workers' results, their phase times added to ``profile`` (``--profile``)."""
    for result, times in results:
        profile.add_worker(times)
        yield result


def _capped(path: str, problems: list[str], total: int) -> list[str]:
    if total > len(problems):
        return [*problems, f"{path}: {total - len(problems)} more bad entries"]
    return problems


def _hydrated(items: list[tuple[int, str]], results: Iterator[DumpDigest | str],
              tables: Tables) -> Iterator[LoadResult]:
    for rank, path in items:
        with timing.phase("wait"):  # in this process (--jobs 1): read, unpickle, reduce inside
            result = next(results)
        if isinstance(result, str):
            yield rank, path, None, [result]
            continue
        with timing.phase("hydrate"):
            dump = hydrate(result, tables)
        yield rank, path, dump, _capped(path, result.problems, result.n_problems)
