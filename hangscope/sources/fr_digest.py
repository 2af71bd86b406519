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
- the sends and receives the same way, apart (:class:`P2pPart`, in record order), with each
  one's creation time, which p2p matching reads (``analysis.p2p_match``: a recv from any
  source takes the oldest unpaired send);
- in full, the records that are not plain history: those with stack frames (the newest of the
  dump, see ``flight_recorder.FRAMES_KEPT_PER_DUMP``), every op not known to be completed (the
  frontier, what a rank is blocked in), and each group's newest :data:`TAIL` collectives and
  :data:`TAIL` sends/receives, which the report shows with their times;
- the first record id and the newest record of the dump.

A record rebuilt from the digest equals the one the full loader builds, except that its times
and duration are None (a send's or receive's creation time excepted): only p2p matching and the
report read those, and both get what they read (the records the report shows are kept whole, and
where that is not enough the report reads the dump again: see ``fr_lazy.DumpEntries``).
A 3D-parallel job's dumps are half sends and receives: as columns they cost about 36 bytes a
record in the parent, not a whole record's half a kilobyte.
So every detector sees the same records and gives the same answers; ``tests/test_fr_streaming.py``
compares both paths on every FR fixture.

What crosses the process boundary is the digest (tens of KB per rank, arrays and a few tuples),
never the entries: the parent would pay the unpickling again.

This module says what a digest is; ``fr_reduce`` makes one from a dump (in a worker process),
``fr_stream`` stands it in for the dump in the parent (``fr_lazy``: its records, on access).
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hangscope.model import FrEntry

MAX_PROBLEMS = 20  # per dump, as the full loader reports them
# The newest records of each group kept whole: the report shows the last 20 per group of the ranks
# it details (report.payload.MAX_FR_ENTRIES, report.timeline.LAST), with their times.
TAIL = 20

# body: every field of a record but record id, seqs, times and frames (see the module docstring)
Body = tuple[Any, ...]
# a record as shipped: FrEntry's fields in order, frames replaced by an index into ``stacks``
Shipped = tuple[Any, ...]
RanksSpec = tuple[int, int, int] | tuple[int, ...] | None
# record id, index, the record if kept whole (an FrEntry, or a record fr_columns built)
Latest = tuple[int, int, FrEntry | tuple[Any, ...] | None] | None
# what reading the records gives: valid records, first record id, latest, backend, tail exact
Read = tuple[int, int | None, Latest, str, bool]


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
    p2p: P2pPart | None  # None: the rank sent and received nothing in this group


@dataclass(slots=True)
class P2pPart:
    """One rank's sends and receives of one process group, in record order: columns, and the
    few records kept whole (see the module docstring)."""

    seqs: array  # type: ignore[type-arg]  # collective seq ids, as the records have them
    p2p_seqs: array  # type: ignore[type-arg]
    record_ids: array  # type: ignore[type-arg]
    bodies: array  # type: ignore[type-arg]  # index into DumpDigest.bodies
    created: Sequence[int]  # time_created_ns, 0 for none (an array; a list past 64 bits)
    kept: dict[int, Shipped]  # position -> the whole record


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


_SPECS: dict[int, tuple[tuple[int, ...], RanksSpec]] = {}


def ranks_spec(ranks: tuple[int, ...] | None) -> RanksSpec:
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


def int_array(values: list[int]) -> Sequence[int]:
    """``values`` as ``array("q")``, or as they are where one does not fit 64 bits."""
    try:
        return array("q", values)
    except OverflowError:
        return values


@functools.lru_cache(maxsize=4096)
def ranks_of(spec: RanksSpec) -> tuple[int, ...] | None:
    if spec is None:
        return None
    if len(spec) == 3 and spec[2] < 0:
        return tuple(range(spec[0], spec[1], -spec[2]))
    return spec
