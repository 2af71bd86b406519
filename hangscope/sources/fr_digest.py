"""Read many flight-recorder dumps at the cost of reading them: reduce each dump to a digest as
it is read (in a pool of worker processes), keep only what the analysis needs.

Why: 4096 ranks x 2000 entries is 8 million records; holding each as an object costs gigabytes,
and unpickling them on one core costs minutes. But ranks of one process group mostly hold the
same history: the same ops, sizes and dtypes at the same sequence numbers. What differs per rank
is small: record ids, times, stack frames, and the frontier (the ops not yet completed).

The digest of one dump, per process group (:class:`GroupPart`), is:

- the collectives' sequence numbers, p2p sequence numbers and record ids (arrays, in the order
  ``analysis.correlate`` sorts them: by seq, then record order);
- per collective, the id of its *body* in a small table: every field of the record except
  record id, seqs, times and frames (op, sizes, dtypes, state, completion, ...), so a group's
  history is an array of small ints, and ranks with equal arrays share one history
  (:class:`SharedHistory`: the equivalence class ``history_classes`` works on);
- in full, the records that are not plain history: those with stack frames (the newest of the
  dump, see ``flight_recorder.FRAMES_KEPT_PER_DUMP``), every op not known to be completed (the
  frontier, what a rank is blocked in), and every send/recv (p2p matching reads their times);
- the first record id and the newest record of the dump.

A record rebuilt from the digest equals the one the full loader builds, except that its times
and duration are None: only p2p matching and the report read those, and both get full records
(p2p records are kept whole; the report reads a rank's dump again, see :class:`DumpEntries`).
So every detector sees the same records and gives the same answers; ``tests/test_fr_streaming.py``
compares both paths on every FR fixture.

What crosses the process boundary is the digest (tens of KB per rank, arrays and a few tuples),
never the entries: the parent would pay the unpickling again.
"""

from __future__ import annotations

import functools
import gc
import logging
import multiprocessing
import os
import threading
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, overload

from hangscope.errors import BadInputError
from hangscope.model import Frame, FrDump, FrEntry, ProcessGroupInfo
from hangscope.sources import flight_recorder

log = logging.getLogger(__name__)

# From this many dumps on, they are reduced as they are read, by a pool of worker processes where
# more than one core is usable. Below, the full records cost little and starting a pool costs more
# than it saves: 2000-entry dumps on 2 cores, best of 3, load only: 8 dumps 0.38-0.72 s in one
# process, 0.62-0.76 s with a pool; 16 dumps 0.65 s vs 0.47 s; 64 dumps 3.3 s vs 2.3 s.
STREAM_FROM = 16
POOL_FROM = 16
MAX_PROBLEMS = 20  # per dump, as the full loader reports them
# The newest records of each group kept whole: the report shows the last 20 per group of the ranks
# it details (report.payload.MAX_FR_ENTRIES, report.timeline.LAST), with their times.
TAIL = 20

# body: every field of a record but record id, seqs, times and frames (see the module docstring)
Body = tuple[Any, ...]
# a record as shipped: FrEntry's fields in order, frames replaced by an index into ``stacks``
Shipped = tuple[Any, ...]
RanksSpec = tuple[int, int, int] | tuple[int, ...] | None


@dataclass(slots=True)
class GroupPart:
    """One rank's records of one process group, reduced (see the module docstring)."""

    desc: str  # the first non-empty pg desc among the group's records, in record order
    seqs: array  # type: ignore[type-arg]  # collective seq ids, sorted as correlate sorts them
    p2p_seqs: array  # type: ignore[type-arg]
    record_ids: array  # type: ignore[type-arg]
    bodies: array  # type: ignore[type-arg]  # index into DumpDigest.bodies
    kept: dict[int, Shipped]  # position in the arrays -> the whole record
    pending: int  # position of the op the rank is blocked in, -1 if none
    p2p: list[Shipped]  # every send/recv, in record order


@dataclass(slots=True)
class DumpDigest:
    """What a worker sends back for one dump."""

    rank: int
    path: str
    version: str
    backend: str
    pg_config: list[tuple[str, str, RanksSpec]]  # (name, desc, ranks) as ProcessGroupInfo
    pg_status: dict[str, dict[str, int]]
    n_entries: int
    first_record_id: int | None
    latest: Shipped | None  # the record with the highest record id
    bodies: list[Body]
    stacks: list[tuple[tuple[str, str, int | None], ...]]
    groups: dict[str, GroupPart]
    problems: list[str]
    n_problems: int
    # record ids rise in file order and every record has a creation time: then the records
    # rebuilt from the digest are, for everything the report shows, the dump's own
    tail_exact: bool = False


# ------------------------------------------------------------------ worker side: reduce


def reduce_dump(path: str, rank: int) -> DumpDigest:
    """Read one dump and reduce it. Raises BadInputError like ``flight_recorder.load_dump``.

    Hot path at scale (8 million records at 4096 x 2000): a record that is plain history
    (completed, no frames, not p2p) becomes four numbers and a body id without ever being an
    :class:`FrEntry`; every other record goes through the full loader's ``Converter``. A record
    the fast path cannot read goes through the ``Converter`` too, which reports its problem as
    the full loader does."""
    raw, entries_raw = flight_recorder.read_raw(path)
    problems: list[str] = []
    return _Reducer(path, rank, raw, entries_raw, problems).digest()


class _Group:
    """One group's records of one dump, in record order, while they are read."""

    __slots__ = ("bodies", "desc", "kept", "p2p", "p2p_seqs", "raw_index", "record_ids", "seqs")

    def __init__(self) -> None:
        self.desc = ""
        self.seqs: list[int] = []
        self.p2p_seqs: list[int] = []
        self.record_ids: list[int] = []
        self.bodies: list[int] = []
        self.kept: dict[int, FrEntry] = {}
        self.p2p: list[FrEntry] = []
        self.raw_index: list[int] = []  # where each collective is in the dump's entries


class _Reducer:
    def __init__(self, path: str, rank: int, raw: dict[str, Any], entries_raw: list[Any],
                 problems: list[str]) -> None:
        self.path, self.rank, self.raw, self.entries_raw = path, rank, raw, entries_raw
        self.problems = problems
        self.converter = flight_recorder.Converter(path, len(entries_raw), problems)
        self.body_ids: dict[Body, int] = {}
        self.bodies: list[Body] = []
        self.stack_ids: dict[tuple[Frame, ...], int] = {(): -1}
        self.stacks: list[tuple[tuple[str, str, int | None], ...]] = []
        self.groups: dict[str, _Group] = {}

    def body(self, body: Body) -> int:
        found = self.body_ids.get(body)
        if found is None:
            found = self.body_ids[body] = len(self.bodies)
            self.bodies.append(body)
        return found

    def group(self, name: str, desc: str) -> _Group:
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = _Group()
        if desc and not group.desc:
            group.desc = desc
        return group

    def digest(self) -> DumpDigest:  # noqa: C901 - one pass, kept flat for speed
        conv = self.converter
        convert, parse_name, pg_of = conv.convert, conv.parse_name, conv.pg
        names, pgs = conv.name_cache, conv.pg_cache
        completion, frames_from = flight_recorder.completion, conv.frames_from
        shape_list, str_list = flight_recorder._shape_list, flight_recorder._str_list
        body_ids, body_of, group_of = self.body_ids, self.body, self.group
        n_valid = 0
        first_rid: int | None = None
        latest: tuple[int, int, FrEntry | None] | None = None  # record id, index, entry if kept
        backend_seen = ""
        timed = True
        last_rid: int | None = None
        ordered = True
        for index, raw in enumerate(self.entries_raw):
            entry: FrEntry | None = None
            if type(raw) is not dict or "state" not in raw or "record_id" not in raw \
                    or "profiling_name" not in raw or "collective_seq_id" not in raw:
                convert(index, raw)  # records the problem
                continue
            try:
                name = raw["profiling_name"]
                parsed = names.get(name)
                backend, op, peer, says_p2p = parsed if parsed is not None else parse_name(name)
                group_raw = raw.get("process_group")
                pg = pgs.get(group_raw) if type(group_raw) is tuple else None
                if pg is None:
                    pg = pg_of(raw)
                state = raw["state"]
                completed = True if state == "completed" else completion(state, backend, raw)
                is_p2p = raw.get("is_p2p")
                if type(is_p2p) is not bool:
                    is_p2p = says_p2p
                if index >= frames_from or completed is not True or is_p2p:
                    raise _Whole
                rid = int(raw["record_id"])
                created = raw.get("time_created_ns")
                if type(created) is not int or created <= 0:
                    timed = False
                seq = int(raw["collective_seq_id"])
                p2p_seq = int(raw.get("p2p_seq_id") or 0)
                duration = raw.get("duration_ms")
                if duration is not None and isinstance(duration, (int, float)):
                    float(duration)  # the full loader rejects what this cannot convert
                timeout = raw.get("timeout_ms")
                thread_name = raw.get("thread_name")
                if thread_name is not None and type(thread_name) is not str:
                    thread_name = str(thread_name)
                sizes = raw.get("input_sizes")
                in_sizes = tuple(map(tuple, sizes)) if type(sizes) is list else shape_list(sizes)
                sizes = raw.get("output_sizes")
                out_sizes = tuple(map(tuple, sizes)) if type(sizes) is list \
                    else shape_list(sizes)
                key = (pg[1], op, backend, is_p2p, state if type(state) is str else str(state),
                       completed, in_sizes, str_list(raw.get("input_dtypes")), out_sizes,
                       str_list(raw.get("output_dtypes")),
                       timeout if type(timeout) is int else None, peer, thread_name)
                known = body_ids.get(key)
                body = known if known is not None else body_of(key)
            except (_Whole, TypeError, ValueError, OverflowError):
                # kept whole, or the fast path could not read it: the full loader's converter
                # decides (and records the problem, if it has one, in its words)
                entry = convert(index, raw)
                if entry is None:
                    continue
                rid, seq, p2p_seq = entry.record_id, entry.collective_seq_id, entry.p2p_seq_id
                backend, pg = entry.backend, (entry.pg_name, entry.pg_desc)
                if entry.time_created_ns is None:
                    timed = False
            group = group_of(pg[0], pg[1])
            if entry is not None and entry.is_p2p:
                group.p2p.append(entry)
            else:
                if entry is not None:
                    group.kept[len(group.seqs)] = entry
                    body = body_of(_body(entry))
                group.seqs.append(seq)
                group.p2p_seqs.append(p2p_seq)
                group.record_ids.append(rid)
                group.bodies.append(body)
                group.raw_index.append(index)
            n_valid += 1
            if last_rid is not None and rid <= last_rid:
                ordered = False
            last_rid = rid
            if first_rid is None:
                first_rid = rid
            if latest is None or rid > latest[0]:
                latest = (rid, index, entry)
            if backend and not backend_seen:
                backend_seen = backend
        for group in self.groups.values():
            for position in range(max(0, len(group.seqs) - TAIL), len(group.seqs)):
                if position not in group.kept:
                    index = group.raw_index[position]
                    whole = convert(index, self.entries_raw[index])
                    assert whole is not None  # the fast path read it
                    group.kept[position] = whole
        newest = None
        if latest is not None:
            newest = latest[2] or convert(latest[1], self.entries_raw[latest[1]])
        dump = flight_recorder.dump_of(self.path, self.rank, self.raw, [], backend_seen)
        return DumpDigest(
            rank=self.rank, path=self.path, version=dump.version, backend=dump.backend,
            pg_config=[(info.name, info.desc, _ranks_spec(info.ranks))
                       for info in dump.process_groups.values()],
            pg_status=dump.pg_status, n_entries=n_valid, first_record_id=first_rid,
            latest=self.ship(newest) if newest is not None else None,
            bodies=self.bodies, stacks=self.stacks,
            groups={name: self.part(group) for name, group in self.groups.items()},
            problems=self.problems[:MAX_PROBLEMS], n_problems=len(self.problems),
            tail_exact=ordered and timed)

    def part(self, group: _Group) -> GroupPart:
        """The group's arrays in the order ``correlate`` sorts collectives: by seq, stably."""
        seqs = group.seqs
        order = list(range(len(seqs)))
        if any(a > b for a, b in zip(seqs, seqs[1:])):
            order.sort(key=seqs.__getitem__)
        position = {old: new for new, old in enumerate(order)} if group.kept else {}
        kept = {position[old]: entry for old, entry in group.kept.items()}
        pending = -1
        for new in sorted(kept):
            if kept[new].completed is False:
                pending = new
                break
        if pending < 0 and order and (last := kept.get(len(order) - 1)) is not None \
                and last.completed is None:
            pending = len(order) - 1
        return GroupPart(
            desc=group.desc,
            seqs=array("q", [seqs[i] for i in order]),
            p2p_seqs=array("q", [group.p2p_seqs[i] for i in order]),
            record_ids=array("q", [group.record_ids[i] for i in order]),
            bodies=array("I", [group.bodies[i] for i in order]),
            kept={new: self.ship(entry) for new, entry in kept.items()},
            pending=pending, p2p=[self.ship(entry) for entry in group.p2p])

    def ship(self, entry: FrEntry) -> Shipped:
        stack = self.stack_ids.get(entry.frames)
        if stack is None:
            stack = self.stack_ids[entry.frames] = len(self.stacks)
            self.stacks.append(tuple((f.name, f.filename, f.line) for f in entry.frames))
        return (entry.record_id, entry.pg_name, entry.pg_desc, entry.collective_seq_id,
                entry.p2p_seq_id, entry.op, entry.backend, entry.is_p2p, entry.state,
                entry.completed, entry.input_sizes, entry.input_dtypes, entry.output_sizes,
                entry.output_dtypes, entry.time_created_ns, entry.time_started_ns,
                entry.time_completed_ns, entry.duration_ms, entry.timeout_ms, entry.peer, stack,
                entry.thread_name)


class _Whole(Exception):  # noqa: N818 - control flow: this record is kept whole
    pass


def _body(entry: FrEntry) -> Body:
    return (entry.pg_desc, entry.op, entry.backend, entry.is_p2p, entry.state, entry.completed,
            entry.input_sizes, entry.input_dtypes, entry.output_sizes, entry.output_dtypes,
            entry.timeout_ms, entry.peer, entry.thread_name)


_SPECS: dict[int, tuple[tuple[int, ...], RanksSpec]] = {}


def _ranks_spec(ranks: tuple[int, ...] | None) -> RanksSpec:
    """A group's members, as (start, stop, step) when evenly spaced: the default group of 4096
    ranks, listed in every dump, would otherwise cross the process boundary 4096 times."""
    if ranks is None:
        return None
    known = _SPECS.get(id(ranks))
    if known is not None and known[0] is ranks:
        return known[1]
    spec: RanksSpec = ranks
    if len(ranks) >= 3:
        step = ranks[1] - ranks[0]
        if step > 0 and ranks == tuple(range(ranks[0], ranks[-1] + 1, step)):
            spec = (ranks[0], ranks[-1] + 1, -step)  # a negative third item marks a range
    _SPECS[id(ranks)] = (ranks, spec)
    return spec


@functools.lru_cache(maxsize=4096)
def _ranks_of(spec: RanksSpec) -> tuple[int, ...] | None:
    if spec is None:
        return None
    if len(spec) == 3 and spec[2] < 0:
        return tuple(range(spec[0], spec[1], -spec[2]))
    return spec


# ------------------------------------------------------------------ parent side: hydrate


@dataclass(slots=True, eq=False)
class SharedHistory:
    """The collectives of one process group as one or more ranks hold them: the ranks with equal
    digests share one of these (an equivalence class of ``correlate.history_classes``)."""

    seqs: array  # type: ignore[type-arg]
    p2p_seqs: array  # type: ignore[type-arg]
    bodies: array  # type: ignore[type-arg]  # index into Tables.bodies


class GroupEntries(Sequence[FrEntry]):
    """One rank's collectives of one group, as ``RankInGroup.entries``: records are rebuilt on
    access from the shared history, the rank's record ids and its records kept whole."""

    __slots__ = ("_bodies", "kept", "pg_name", "record_ids", "shared")

    def __init__(self, pg_name: str, shared: SharedHistory, record_ids: array,  # type: ignore[type-arg]
                 kept: dict[int, FrEntry], bodies: list[Body]) -> None:
        self.pg_name = pg_name
        self.shared = shared
        self.record_ids = record_ids
        self.kept = kept
        self._bodies = bodies

    def __len__(self) -> int:
        return len(self.record_ids)

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
        entry = self.kept.get(index)
        if entry is not None:
            return entry
        shared = self.shared
        b = self._bodies[shared.bodies[index]]
        return FrEntry(self.record_ids[index], self.pg_name, b[0], shared.seqs[index],
                       shared.p2p_seqs[index], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8],
                       b[9], None, None, None, None, b[10], b[11], (), b[12])


@dataclass(slots=True)
class RankGroup:
    """One rank's view of one group, from its digest (what ``correlate._rank_view`` computes)."""

    desc: str
    entries: GroupEntries
    pending: FrEntry | None
    p2p: list[FrEntry]


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
    stacks = [tables.stack(raw) for raw in digest.stacks]
    body_map = tables.body_map(digest.bodies)
    identity = body_map == list(range(len(body_map)))

    def entry(shipped: Shipped) -> FrEntry:
        stack = shipped[20]
        return FrEntry(*shipped[:20], stacks[stack] if stack >= 0 else (),  # type: ignore[call-arg]
                       shipped[21])

    groups: dict[str, RankGroup] = {}
    for name, part in digest.groups.items():
        ids = part.bodies if identity else array("I", map(body_map.__getitem__, part.bodies))
        key = b"".join((name.encode(), b"\0", part.seqs.tobytes(), part.p2p_seqs.tobytes(),
                        ids.tobytes()))
        shared = tables.histories.get(key)
        if shared is None:
            shared = tables.histories[key] = SharedHistory(part.seqs, part.p2p_seqs, ids)
        kept = {position: entry(shipped) for position, shipped in part.kept.items()}
        entries = GroupEntries(name, shared, part.record_ids, kept, tables.bodies)
        groups[name] = RankGroup(desc=part.desc, entries=entries,
                                 pending=kept[part.pending] if part.pending >= 0 else None,
                                 p2p=[entry(shipped) for shipped in part.p2p])
    latest = entry(digest.latest) if digest.latest is not None else None
    return FrDump(
        rank=digest.rank, path=digest.path, version=digest.version, backend=digest.backend,
        process_groups={name: ProcessGroupInfo(name=name, desc=desc, ranks=_ranks_of(spec))
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
    """``items`` (rank, path), reduced (see :func:`load_dumps`)."""
    tables = Tables()
    workers = min(jobs or usable_cores(), len(items))
    # A forked worker keeps only the forking thread: a lock another thread held (logging's,
    # an allocator's) would stay locked in it. With other threads alive, read in this process.
    if workers <= 1 or len(items) < POOL_FROM or threading.active_count() > 1:
        yield from _hydrated(items, map(_work, items), tables)
        return
    context = multiprocessing.get_context("fork")
    chunk = max(1, min(16, len(items) // (workers * 8)))
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=_worker_init) as pool:
        yield from _hydrated(items, pool.map(_work, items, chunksize=chunk), tables)


def _capped(path: str, problems: list[str], total: int) -> list[str]:
    if total > len(problems):
        return [*problems, f"{path}: {total - len(problems)} more bad entries"]
    return problems


def _hydrated(items: list[tuple[int, str]], results: Iterator[DumpDigest | str],
              tables: Tables) -> Iterator[LoadResult]:
    for (rank, path), result in zip(items, results):
        if isinstance(result, str):
            yield rank, path, None, [result]
            continue
        yield (rank, path, hydrate(result, tables),
               _capped(path, result.problems, result.n_problems))


def _worker_init() -> None:
    gc.disable()  # a worker's objects die by reference counting, dump after dump


def _work(item: tuple[int, str]) -> DumpDigest | str:
    rank, path = item
    try:
        return reduce_dump(path, rank)
    except BadInputError as exc:
        return str(exc)
