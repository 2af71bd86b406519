"""Many flight-recorder dumps as digests (``sources.fr_digest``): read them in a pool of worker
processes, and stand each digest in for its dump in the evidence model.

The parent interns what digests share (:class:`Tables`): ranks with equal histories of a group
share one ``fr_lazy.SharedHistory``, the equivalence class ``analysis.correlate`` works on. A
reduced dump's ``FrDump.entries`` is a ``fr_lazy.DumpEntries``: its length, first record id, newest
record and groups come from the digest; its records, where something reads them (the report, for
the ranks it details), are rebuilt from the digest, or read again from the dump where the digest
cannot give what the report shows (see ``DumpDigest.tail_exact``).
"""

from __future__ import annotations

import gc
import multiprocessing
from array import array
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from hangscope import timing
from hangscope.cores import can_fork, usable_cores
from hangscope.errors import BadInputError
from hangscope.model import Frame, FrDump, FrEntry, ProcessGroupInfo
from hangscope.sources import flight_recorder
from hangscope.sources.fr_digest import MAX_PROBLEMS, Body, DumpDigest, Shipped, ranks_of
from hangscope.sources.fr_lazy import (
    DumpEntries,
    GroupEntries,
    P2pRecords,
    RankGroup,
    SharedHistory,
)
from hangscope.sources.fr_reduce import reduce_item, reduce_item_timed, worker_init

# From this many dumps on, they are reduced as they are read, by a pool of worker processes where
# more than one core is usable. Below, the full records cost little and starting a pool costs more
# than it saves: 2000-entry dumps on 2 cores, best of 3, load only: 8 dumps 0.38-0.72 s in one
# process, 0.62-0.76 s with a pool; 16 dumps 0.65 s vs 0.47 s; 64 dumps 3.3 s vs 2.3 s.
STREAM_FROM = 16
POOL_FROM = 16

# ------------------------------------------------------------------ parent side: hydrate


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
    if workers <= 1 or len(items) < POOL_FROM or not can_fork():
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
