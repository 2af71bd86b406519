"""The worker side of ``fr_digest``: read one dump and reduce it to its :class:`DumpDigest`,
column by column where the dump's fields have the plain types (``fr_columns``), else record by
record (:meth:`Reducer.by_record`), which reports bad records in the full loader's words. Also
what the pool's worker processes run (:func:`reduce_item`).
"""

from __future__ import annotations

import gc
from array import array
from collections.abc import Sequence
from itertools import islice
from operator import gt
from typing import Any

from hangscope import timing
from hangscope.errors import BadInputError
from hangscope.model import Frame, FrEntry
from hangscope.sources import (
    flight_recorder,
    fr_blocks,
    fr_blocks_native,
    fr_columns,
    fr_corrections,
    fr_native,
)
from hangscope.sources.fr_digest import (
    MAX_PROBLEMS,
    TAIL,
    Body,
    DumpDigest,
    GroupPart,
    Latest,
    P2pPart,
    Read,
    Shipped,
    int_array,
    ranks_spec,
)


def reduce_dump(path: str, rank: int) -> DumpDigest:
    """Read one dump and reduce it. Raises BadInputError like ``flight_recorder.load_dump``.

    Hot path at scale (8 million records at 4096 x 2000): a record that is plain history
    (completed, no frames) becomes three numbers and a body id (a send or receive also its
    creation time) without ever being an :class:`FrEntry`, and without per-record Python where
    the dump's fields have the plain types (``fr_columns`` reads them column by column, in C);
    the few records kept whole are built from their key's body there. Read record by record,
    every record not plain history goes through the full loader's ``Converter``, as does a
    record the fast path cannot read, which reports its problem as the full loader does.

    Where the C reader (``fr_native``) takes the pickle, no record but those is unpickled."""
    data = flight_recorder.read_bytes(path)
    with timing.phase("unpickle"):
        native = fr_native.read(data)
    cols: fr_columns.Columns | None = None
    entries_raw: Sequence[Any]
    if native is not None and fr_blocks.may_hold(data):  # coalesced blocks (pipeline p2p)
        with timing.phase("reduce"):
            native = fr_blocks_native.resolve(*native)
    if native is not None and fr_corrections.misread(native[0], native[1]):
        native = None  # rare (a rank inside a call): its records are read as dicts, and fixed
    notes: list[str] = []
    if native is None:
        raw, entries_raw = flight_recorder.read_raw(path, data)
        notes = fr_corrections.correct(raw, entries_raw)
    else:
        raw, entries_raw, cols = native
    del data
    with timing.phase("reduce"):
        reducer = Reducer(path, rank, raw, entries_raw, notes)
        digest = reducer.digest(cols)
    with timing.phase("unpickle"):  # freeing what unpickling made is its cost too
        del reducer, raw, entries_raw
    return digest


class _Group:
    """One group's records of one dump, in record order, while they are read."""

    __slots__ = ("bodies", "desc", "kept", "p2p", "p2p_seqs", "raw_index", "record_ids", "seqs")

    def __init__(self) -> None:
        self.desc = ""
        self.seqs: list[int] = []
        self.p2p_seqs: list[int] = []
        self.record_ids: list[int] = []
        self.bodies: list[int] = []
        # FrEntry, or (built by fr_columns) a Shipped whose stack is still the frames tuple
        self.kept: dict[int, FrEntry | tuple[Any, ...]] = {}
        self.p2p = P2pColumns()
        self.raw_index: list[int] = []  # where each collective is in the dump's entries


class P2pColumns:
    """One group's sends and receives of one dump, in record order, while they are read: the
    columns of :class:`~hangscope.sources.fr_digest.P2pPart`, and the records kept whole (read
    record by record: all of them, and :meth:`Reducer.part` keeps those the digest keeps)."""

    __slots__ = ("bodies", "created", "kept", "p2p_seqs", "raw_index", "record_ids", "seqs")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.p2p_seqs: list[int] = []
        self.record_ids: list[int] = []
        self.bodies: list[int] = []
        self.created: list[int] = []  # time_created_ns, 0 for none
        self.raw_index: list[int] = []
        self.kept: dict[int, FrEntry | tuple[Any, ...]] = {}


class Reducer:
    tail = TAIL

    def __init__(self, path: str, rank: int, raw: dict[str, Any], entries_raw: Sequence[Any],
                 problems: list[str]) -> None:
        self.path, self.rank, self.raw, self.entries_raw = path, rank, raw, entries_raw
        self.problems = problems
        self.converter = flight_recorder.Converter(path, len(entries_raw), problems)
        self.body_ids: dict[Body, int] = {}
        self.bodies: list[Body] = []
        self.stack_ids: dict[int, tuple[tuple[Frame, ...], int]] = {id(()): ((), -1)}
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

    def classify(self, raw: dict[str, Any]) -> tuple[tuple[str, str], str, Body, bool]:
        """A record's group, backend, body (every field but ids, seqs, times and frames, as the
        converter reads them) and whether it is plain history (completed, not p2p). Raises
        what the fast path raises on bad input."""
        conv = self.converter
        backend, op, peer, says_p2p = conv.parse_name(raw["profiling_name"])
        pg = conv.pg(raw)
        state = raw["state"]
        completed = flight_recorder.completion(state, backend, raw)
        is_p2p = raw.get("is_p2p")
        if type(is_p2p) is not bool:
            is_p2p = says_p2p
        timeout, thread_name = raw.get("timeout_ms"), raw.get("thread_name")
        return pg, backend, (
            pg[1], op, backend, is_p2p, state, completed,
            tuple(map(tuple, raw["input_sizes"])), tuple(raw["input_dtypes"]),
            tuple(map(tuple, raw["output_sizes"])), tuple(raw["output_dtypes"]),
            timeout if type(timeout) is int else None, peer, thread_name), \
            completed is True and not is_p2p

    def digest(self, cols: fr_columns.Columns | None = None) -> DumpDigest:
        """The dump's digest; ``cols``: its columns where the C reader computed them."""
        n_problems = len(self.problems)
        if cols is None:
            cols = fr_columns.scan(self.entries_raw)
        if cols is not None:
            done = fr_columns.assemble(self, cols)
            if done is not None:
                return self.finish(*done)
            del self.problems[n_problems:]  # read again, record by record
            self.body_ids, self.bodies, self.groups = {}, [], {}
        return self.finish(*self.by_record())

    def by_record(self) -> Read:  # noqa: C901 - one pass, kept flat for speed
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
                p2p = group.p2p
                p2p.kept[len(p2p.seqs)] = entry
                p2p.seqs.append(seq)
                p2p.p2p_seqs.append(p2p_seq)
                p2p.record_ids.append(rid)
                p2p.bodies.append(body_of(fr_columns.body_of(entry)))
                p2p.created.append(entry.time_created_ns or 0)
                p2p.raw_index.append(index)
            else:
                if entry is not None:
                    group.kept[len(group.seqs)] = entry
                    body = body_of(fr_columns.body_of(entry))
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
        return n_valid, first_rid, latest, backend_seen, ordered and timed

    def finish(self, n_valid: int, first_rid: int | None, latest: Latest, backend_seen: str,
               tail_exact: bool) -> DumpDigest:
        convert = self.converter.convert
        for group in self.groups.values():
            for position in range(max(0, len(group.seqs) - TAIL), len(group.seqs)):
                if position not in group.kept:
                    index = group.raw_index[position]
                    whole = convert(index, self.entries_raw[index])
                    assert whole is not None  # the fast path read it
                    group.kept[position] = whole
        newest: FrEntry | tuple[Any, ...] | None = None
        if latest is not None:
            newest = latest[2] or convert(latest[1], self.entries_raw[latest[1]])
        dump = flight_recorder.dump_of(self.path, self.rank, self.raw, [], backend_seen)
        return DumpDigest(
            rank=self.rank, path=self.path, version=dump.version, backend=dump.backend,
            pg_config=[(info.name, info.desc, ranks_spec(info.ranks))
                       for info in dump.process_groups.values()],
            pg_status=dump.pg_status, n_entries=n_valid, first_record_id=first_rid,
            latest=self.ship(newest) if newest is not None else None,
            bodies=self.bodies, stacks=self.stacks,
            groups={name: self.part(group) for name, group in self.groups.items()},
            problems=self.problems[:MAX_PROBLEMS], n_problems=len(self.problems),
            tail_exact=tail_exact)

    def part(self, group: _Group) -> GroupPart:
        """The group's arrays in the order ``correlate`` sorts collectives: by seq, stably."""
        seqs = group.seqs
        n = len(seqs)
        if any(map(gt, seqs, islice(seqs, 1, None))):
            order = sorted(range(n), key=seqs.__getitem__)
            position = {old: new for new, old in enumerate(order)} if group.kept else {}
            kept = {position[old]: entry for old, entry in group.kept.items()}
            p2p_seqs, record_ids, bodies = (
                list(map(column.__getitem__, order))
                for column in (group.p2p_seqs, group.record_ids, group.bodies))
            seqs = list(map(seqs.__getitem__, order))
        else:  # already in order (the common case): no per-record work
            kept, p2p_seqs, record_ids, bodies = \
                group.kept, group.p2p_seqs, group.record_ids, group.bodies
        pending = -1
        for new in sorted(kept):
            if _completed(kept[new]) is False:
                pending = new
                break
        if pending < 0 and n and (last := kept.get(n - 1)) is not None \
                and _completed(last) is None:
            pending = n - 1
        return GroupPart(
            desc=group.desc, seqs=array("q", seqs), p2p_seqs=array("q", p2p_seqs),
            record_ids=array("q", record_ids), bodies=array("I", bodies),
            kept={new: self.ship(entry) for new, entry in kept.items()},
            pending=pending, p2p=self.p2p_part(group.p2p))

    def p2p_part(self, p2p: P2pColumns) -> P2pPart | None:
        """The sends and receives as columns, keeping whole only those with frames, those not
        completed and the group's newest :data:`TAIL` (the report shows them with their times);
        None where there are none (most groups: nothing to ship, nothing for the parent to hold)."""
        n, frames_from, raw_index = len(p2p.seqs), self.converter.frames_from, p2p.raw_index
        if not n:
            return None
        kept = {position: entry for position, entry in sorted(p2p.kept.items())
                if position >= n - TAIL or raw_index[position] >= frames_from
                or _completed(entry) is not True}
        return P2pPart(
            seqs=array("q", p2p.seqs), p2p_seqs=array("q", p2p.p2p_seqs),
            record_ids=array("q", p2p.record_ids), bodies=array("I", p2p.bodies),
            created=int_array(p2p.created),
            kept={position: self.ship(entry) for position, entry in kept.items()})

    def stack(self, frames: tuple[Frame, ...]) -> int:
        # by identity: the converter interns frame tuples, and hashing one by value goes
        # through each Frame's Python-level __hash__ (the tuple is held, so its id stays its own)
        known = self.stack_ids.get(id(frames))
        if known is None:
            known = self.stack_ids[id(frames)] = (frames, len(self.stacks))
            self.stacks.append(tuple((f.name, f.filename, f.line) for f in frames))
        return known[1]

    def ship(self, entry: FrEntry | tuple[Any, ...]) -> Shipped:
        if type(entry) is tuple:  # built by fr_columns: only its stack is left to number
            return (*entry[:20], self.stack(entry[20]), entry[21])
        assert isinstance(entry, FrEntry)
        stack = self.stack(entry.frames)
        return (entry.record_id, entry.pg_name, entry.pg_desc, entry.collective_seq_id,
                entry.p2p_seq_id, entry.op, entry.backend, entry.is_p2p, entry.state,
                entry.completed, entry.input_sizes, entry.input_dtypes, entry.output_sizes,
                entry.output_dtypes, entry.time_created_ns, entry.time_started_ns,
                entry.time_completed_ns, entry.duration_ms, entry.timeout_ms, entry.peer, stack,
                entry.thread_name)


def _completed(entry: FrEntry | tuple[Any, ...]) -> bool | None:
    return entry[9] if type(entry) is tuple else entry.completed  # type: ignore[union-attr]


class _Whole(Exception):  # noqa: N818 - control flow: this record is kept whole
    pass


def worker_init() -> None:
    gc.disable()  # a worker's objects die by reference counting, dump after dump


def reduce_item(item: tuple[int, str]) -> DumpDigest | str:
    rank, path = item
    try:
        return reduce_dump(path, rank)
    except BadInputError as exc:
        return str(exc)


def reduce_item_timed(item: tuple[int, str]) -> tuple[DumpDigest | str, timing.Times]:
    """:func:`reduce_item` in a worker while the parent profiles: with the worker's phase
    times, which the parent adds up (``timing.Profile.add_worker``)."""
    return timing.measured(reduce_item, item)
