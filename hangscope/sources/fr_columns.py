"""One dump's raw entries read column by column, in C, for ``fr_reduce``.

Most records of a dump differ from an earlier one only in record id, seqs, times and frames.
Here each field is pulled out for all records at once (``operator.itemgetter`` over the
entries), the fields that decide a record's body become one small key per record (its scalars:
name, group, state, ...), and ``dict.setdefault`` maps every record to the first record with the
same key: all in C. Sizes and dtypes are not hashed per record but compared, in C, with those of
that first record; only where some differ are they made part of the key. (Measured on c10-written
dumps, this is about 10% cheaper than the record-by-record loop, not more: both are bound by
touching the freshly unpickled objects in memory, not by the interpreter.)

The answers cannot change: :func:`scan` gives up (``None``, and the caller reads the dump
record by record as before) unless every field has the types the record-by-record path reads
the same way whatever the value (``str`` names, ``int`` ids, lists of lists for sizes, ...).
With those types, records with equal keys are equal in every field the body is made of, so one
body, computed from the first record of each key by the record-by-record code, stands for all
of them (sizes compare with ``==``, see :func:`_scan`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, compress, islice, repeat
from operator import add, contains, itemgetter, lt, ne
from typing import Any

from hangscope.model import FrEntry
from hangscope.sources.flight_recorder import _time_ns

# the fields a body is made of (besides sizes and dtypes), hashed per record
# (thread_name last: before FR 2.10 no record has it, and then keys are made without it)
_KEYED = ("profiling_name", "process_group", "state", "is_p2p", "timeout_ms", "retired",
          "thread_name")
_P2P, _TIMEOUT, _RETIRED = 3, 4, 5  # their places in a key
_SIZES = ("input_sizes", "output_sizes")
_DTYPES = ("input_dtypes", "output_dtypes")
_LISTS = (*_SIZES, *_DTYPES)  # compared, not hashed
NoneType = type(None)
_STR, _INT = {str}, {int}


@dataclass(slots=True)
class Columns:
    """What :func:`scan` read. Every record is a dict with the fields the full loader needs."""

    # ints (read through array("q"), which takes what int() takes, as the converter reads them)
    record_ids: list[int]
    seqs: list[int]
    p2p_seqs: list[int]
    timed: bool  # every record has a positive int creation time
    created: list[Any]  # time_created_ns as the records have it
    firsts: list[int]  # per record, the index of the first record with the same key
    # every size of every record is an int (the C reader checks them all as it reads them)
    int_sizes: bool = False


def _types(values: Any) -> set[type]:
    return set(map(type, values))


def _rows(entries: Sequence[Any], fields: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """Per record, the tuple of its ``fields`` (None where it lacks one): one ``itemgetter``
    call per record, in C, where every record has them all."""
    try:
        return list(map(itemgetter(*fields), entries))
    except KeyError:
        pass
    # Fields no record has (thread_name before FR 2.10), if they come last, are left out of
    # every tuple alike; else each field is read with a default, one pass per field.
    present = fields[:len(fields) - sum(field not in entries[0] for field in fields)]
    if len(present) > 1 and all(field in entries[0] for field in present) \
            and not any(any(map(contains, entries, repeat(field)))
                        for field in fields[len(present):]):
        try:
            return list(map(itemgetter(*present), entries))
        except KeyError:
            pass
    get = dict.get
    return list(zip(*(map(get, entries, repeat(field)) for field in fields)))


def _column(entries: Sequence[Any], field: str) -> list[Any]:
    try:
        return list(map(itemgetter(field), entries))
    except KeyError:
        return list(map(dict.get, entries, repeat(field)))


def scan(entries: Sequence[Any]) -> Columns | None:
    """The dump's columns and keys; None where a record is not of the plain kind (see the
    module docstring): then nothing is decided here."""
    try:
        return _scan(entries) if entries else None
    except (TypeError, KeyError, IndexError, OverflowError):  # not a dict, unhashable, a field
        # none of the records has (FR before 2.x: "retired"), ...: read record by record
        return None


def _scan(entries: Sequence[Any]) -> Columns | None:
    # keys first: a record that is not a dict fails here, before anything else is read
    keys = _rows(entries, _KEYED)
    # ints, as int() reads them (array takes a bool as 0/1, as int() does)
    rids = array("q", _column(entries, "record_id"))
    seqs = array("q", _column(entries, "collective_seq_id"))
    p2p_raw = _column(entries, "p2p_seq_id")
    p2p_seqs = array("q", p2p_raw if None not in p2p_raw else [seq or 0 for seq in p2p_raw])
    # Where values of different types can be equal (1 == 1.0 == True), every record is checked;
    # a str, a None, a list or a tuple equals only its own kind, so for those fields the first
    # record of each key is checked below, which holds for every record equal to it.
    if not _types(map(itemgetter(_P2P), keys)) <= {bool, NoneType} \
            or not _types(map(itemgetter(_TIMEOUT), keys)) <= {int, NoneType} \
            or not _types(map(itemgetter(_RETIRED), keys)) <= {bool, NoneType}:
        return None
    if type(keys[0][1]) is list:  # JSON: the group as a list, made a tuple to be hashed
        columns: list[Any] = list(zip(*keys))
        if _types(columns[1]) != {list}:
            return None
        columns[1] = list(map(tuple, columns[1]))
        keys = list(zip(*columns))
    # Sizes are not type-checked per record (that pass over every list costs as much as the
    # comparison below): a record whose sizes equal its key's first record's under == (4096 and
    # 4096.0 do) shares that record's body, which is how the parent's body table (a dict keyed
    # by bodies) and every detector compare them anyway (records kept whole: _PreShip.exact).
    durations = _column(entries, "duration_ms")
    if int in _types(durations):  # float() of a huge int overflows
        numbers = [d for d in durations if type(d) is int]
        float(max(numbers)), float(min(numbers))
    created = _column(entries, "time_created_ns")
    timed = _types(created) == _INT and min(created) > 0
    seen: dict[Any, int] = {}
    firsts = list(map(seen.setdefault, keys, range(len(entries))))
    key_firsts = list(seen.values())
    lists = _rows(entries, _LISTS)
    pairs = list(map(lists.__getitem__, firsts))
    # one comparison in C: each record's (sizes, dtypes) with its key's first record's
    if lists != pairs:
        # Sizes differ among records of one key (DDP's buckets, say): the records whose sizes
        # differ from their key's first record's are keyed by their sizes too. Every record
        # with the key and sizes of such a record differs too, so the earliest of them is the
        # first record with that key and those sizes, as for the others.
        odd = list(compress(range(len(entries)), map(ne, lists, pairs)))
        in_sizes, out_sizes, in_types, out_types = zip(*map(lists.__getitem__, odd))
        for column in (in_sizes, out_sizes, in_types, out_types):
            if _types(column) != {list}:
                return None
        for sizes in (in_sizes, out_sizes):
            if _types(chain.from_iterable(sizes)) != {list}:
                return None
        more: dict[Any, int] = {}
        nested = [map(tuple, map(map, repeat(tuple), in_sizes)),
                  map(tuple, map(map, repeat(tuple), out_sizes)),
                  map(tuple, in_types), map(tuple, out_types)]
        firsts_of_odd = dict(zip(odd, map(more.setdefault, map(
            add, map(keys.__getitem__, odd), zip(*nested)), odd)))
        firsts = list(map(firsts_of_odd.get, range(len(entries)), firsts))
        key_firsts += more.values()
    if not all(map(_plain, map(entries.__getitem__, key_firsts))):
        return None
    return Columns(record_ids=rids.tolist(), seqs=seqs.tolist(), p2p_seqs=p2p_seqs.tolist(),
                   timed=timed, created=created, firsts=firsts)


def _plain(raw: dict[str, Any]) -> bool:
    """Whether the str, list and tuple fields of one record have the types the record-by-record
    path reads the same way whatever the value."""
    group, thread = raw.get("process_group"), raw.get("thread_name")
    if not isinstance(group, (tuple, list)) or not all(type(part) is str for part in group):
        return False
    return type(raw["profiling_name"]) is str and type(raw["state"]) is str \
        and type(thread) in (str, NoneType) \
        and all(type(raw.get(field)) is list and all(type(dims) is list for dims in raw[field])
                for field in _SIZES) \
        and all(type(raw.get(field)) is list and all(type(name) is str for name in raw[field])
                for field in _DTYPES)


def assemble(reducer: Any, cols: Columns) -> Any:
    """Fill ``reducer`` (an ``fr_reduce.Reducer``) from the columns, as its record-by-record
    pass would: the same groups in the same order, the same body ids, the same records kept
    whole. Returns what that pass returns (``fr_digest.Read``), or None where that cannot be
    promised (then the caller reads the dump record by record).

    Every record kept whole (the newest of the dump, with their frames; each group's newest
    ``TAIL`` collectives and sends/receives; every op not completed) is built from its key's
    body, which holds every field but ids, seqs, times and frames, not by the full loader's
    converter (see :class:`_PreShip`). The other sends and receives (in a 3D-parallel job, nearly
    half the records) become columns, as collectives do (:func:`_p2p`)."""
    entries, n, frames_from = reducer.entries_raw, len(reducer.entries_raw), \
        reducer.converter.frames_from
    firsts = cols.firsts
    # each key, classified once from its first record: (group name, desc), backend, body, plain
    info: dict[int, tuple[tuple[str, str], str, Any, bool]] = {}
    try:
        for first in dict.fromkeys(firsts):
            info[first] = reducer.classify(entries[first])
    except (TypeError, ValueError, OverflowError):
        return None
    slot: dict[str, int] = {}
    events: list[tuple[int, str, str, Any]] = []  # (index, group, desc, body): in record order
    for first, ((name, desc), _backend, body, _plain) in info.items():
        slot.setdefault(name, len(slot))
        events.append((first, name, desc, body))
    events.sort(key=itemgetter(0))
    register = reducer.body
    body_ids: dict[int, int] = {}
    for first, name, desc, body in events:
        reducer.group(name, desc)  # creates groups in record order, sets their desc
        body_ids[first] = register(body)
    # each record's bucket: its group's slot for plain history, the slot plus the number of
    # groups for sends and receives, -1 for the rest (kept whole, placed below); one stable sort
    # (in C) puts each bucket's records together, in record order
    p2p_keys = {first for first, got in info.items() if got[2][3]}
    shift = len(slot)
    bucket_of = {first: slot[got[0][0]] if got[3] else
                 shift + slot[got[0][0]] if first in p2p_keys else -1
                 for first, got in info.items()}
    record_bucket = list(map(bucket_of.__getitem__, firsts))
    order = sorted(range(n), key=record_bucket.__getitem__)
    in_order = list(map(record_bucket.__getitem__, order))
    buckets = {bucket: order[bisect_left(in_order, bucket):bisect_right(in_order, bucket)]
               for bucket in set(bucket_of.values())}
    record_body = list(map(body_ids.__getitem__, firsts))
    pre = _PreShip(entries, cols, reducer.converter, info, frames_from)
    pending: dict[str, dict[int, Any]] = {}
    for index in buckets.get(-1, ()):
        record = pre(index)
        pending.setdefault(record[1], {})[index] = record
    not_done = {first for first in p2p_keys if info[first][2][5] is not True}
    for name, group in reducer.groups.items():
        _group(reducer, group, cols, pre, buckets.get(slot[name], []), record_body,
               pending.get(name, {}), body_ids)
        if shift + slot[name] in buckets:
            _p2p(reducer, group.p2p, cols, pre, buckets[shift + slot[name]], record_body,
                 not_done)
    if not pre.exact(chain.from_iterable(indices for bucket, indices in buckets.items()
                                        if bucket >= shift)):
        return None  # sizes of another type than their key's first record's: read by record
    rids = cols.record_ids
    ordered = all(map(lt, rids, islice(rids, 1, None)))
    latest_rid = rids[-1] if ordered else max(rids)
    latest_index = n - 1 if ordered else rids.index(latest_rid)
    latest = pre.built.get(latest_index)
    backend = min(((first, got[1]) for first, got in info.items() if got[1]),
                  default=(0, ""))[1]
    return (n, rids[0], (latest_rid, latest_index, latest), backend, ordered and cols.timed)


def _group(reducer: Any, group: Any, cols: Columns, pre: _PreShip, indices: list[int],
           record_body: list[int], mine: dict[int, Any], body_ids: dict[int, int]) -> None:
    """One group's columns, from its plain records' ``indices``, and its records kept whole."""
    seqs, p2p_seqs, rids, firsts = cols.seqs, cols.p2p_seqs, cols.record_ids, cols.firsts
    columns = (indices, list(map(seqs.__getitem__, indices)),
               list(map(p2p_seqs.__getitem__, indices)), list(map(rids.__getitem__, indices)),
               list(map(record_body.__getitem__, indices)))
    where: dict[int, int] = {}
    for index in mine:  # the few ops not completed, inserted (in record order: each lands
        position = bisect_left(indices, index)  # after those inserted before it)
        for column, value in zip(columns, (index, seqs[index], p2p_seqs[index], rids[index],
                                           body_ids[firsts[index]])):
            column.insert(position, value)
        where[position] = index
    # kept whole, in the order the record-by-record pass keeps them: the ops not completed
    # and the dump's newest, by record; then the group's newest TAIL not yet kept
    m, tail = len(indices), max(pre.frames_from, 0)
    newest = range(bisect_left(indices, tail), m)
    kept: dict[int, Any] = {}
    for position in sorted(where.keys() | newest) if where else newest:
        index = indices[position]
        kept[position] = mine[index] if position in where else pre(index)
    for position in range(max(0, m - reducer.tail), m):
        if position not in kept:
            kept[position] = pre(indices[position])
    group.kept = kept
    group.raw_index, group.seqs, group.p2p_seqs, group.record_ids, group.bodies = columns


def _p2p(reducer: Any, p2p: Any, cols: Columns, pre: _PreShip, indices: list[int],
         record_body: list[int], not_done: set[int]) -> None:
    """One group's sends and receives (``fr_reduce.P2pColumns``), from their ``indices``, and
    those kept whole: with frames, not completed, and the group's newest ``TAIL``."""
    created = list(map(cols.created.__getitem__, indices))
    p2p.raw_index, p2p.seqs, p2p.p2p_seqs, p2p.record_ids, p2p.bodies = (
        indices, list(map(cols.seqs.__getitem__, indices)),
        list(map(cols.p2p_seqs.__getitem__, indices)),
        list(map(cols.record_ids.__getitem__, indices)),
        list(map(record_body.__getitem__, indices)))
    p2p.created = created if cols.timed else [_time_ns(value) or 0 for value in created]
    m = len(indices)
    keep = {*range(bisect_left(indices, max(pre.frames_from, 0)), m),
            *range(max(0, m - reducer.tail), m)}
    if not_done:
        keep.update(compress(range(m), map(not_done.__contains__,
                                           map(cols.firsts.__getitem__, indices))))
    p2p.kept = {position: pre(indices[position]) for position in sorted(keep)}


class _PreShip:
    """A record kept whole, built from its key's body: ``fr_digest.Shipped`` but for its stack,
    which is the frames tuple itself until the record is shipped (so that stacks are numbered in
    the order the record-by-record pass numbers them). Frames as the converter takes them: for
    the dump's newest records and for every op not completed.

    Equal to what the converter makes of it: records of one key have equal fields under ``==``
    (see :func:`scan`); only sizes of another type (4096.0 for 4096) could make the converter's
    values differ from the body's, which :meth:`exact` checks on the records built here."""

    __slots__ = ("built", "cols", "conv", "entries", "frames_from", "info")

    def __init__(self, entries: list[Any], cols: Columns, conv: Any,
                 info: dict[int, Any], frames_from: int) -> None:
        self.entries, self.cols, self.conv, self.info = entries, cols, conv, info
        self.frames_from = frames_from
        self.built: dict[int, tuple[Any, ...]] = {}  # index -> record

    def __call__(self, index: int) -> tuple[Any, ...]:
        raw, cols = self.entries[index], self.cols
        (name, _desc), _backend, body, _plain = self.info[cols.firsts[index]]
        desc, op, backend, is_p2p, state, completed, in_sizes, in_types, out_sizes, out_types, \
            timeout, peer, thread_name = body
        duration = raw.get("duration_ms")
        record = self.built[index] = (
            cols.record_ids[index], name, desc, cols.seqs[index], cols.p2p_seqs[index], op,
            backend, is_p2p, state, completed, in_sizes, in_types, out_sizes, out_types,
            _time_ns(raw.get("time_created_ns")),
            _time_ns(raw.get("time_discovered_started_ns")),
            _time_ns(raw.get("time_discovered_completed_ns")),
            float(duration) if isinstance(duration, (int, float)) else None,
            timeout, peer,
            self.conv.frames(raw.get("frames"))
            if index >= self.frames_from or completed is not True else (),
            thread_name)
        return record

    def exact(self, p2p: Iterable[int]) -> bool:
        """Whether every size of the records built here and of their keys' first records, and
        of every send and receive (``p2p``: their indices), is an ``int`` (then equal under
        ``==`` means the same value, and the record-by-record reading, which converts every send
        and receive, gives the same bodies)."""
        if self.cols.int_sizes:
            return True
        entries, firsts = self.entries, self.cols.firsts
        rows = {*self.built, *map(firsts.__getitem__, self.built), *p2p}
        dims = [dims for index in rows for field in _SIZES for dims in entries[index][field]]
        return _types(chain.from_iterable(dims)) <= _INT


def body_of(entry: FrEntry) -> tuple[Any, ...]:
    """A record's body: every field but record id, seqs, times and frames."""
    return (entry.pg_desc, entry.op, entry.backend, entry.is_p2p, entry.state, entry.completed,
            entry.input_sizes, entry.input_dtypes, entry.output_sizes, entry.output_dtypes,
            entry.timeout_ms, entry.peer, entry.thread_name)
