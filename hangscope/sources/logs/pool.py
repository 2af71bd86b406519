"""Scan many logs at once: one worker process per usable core, results in the files' order.

A job's rank logs are independent: each scan is a function of its file alone (``loader.
scan_log_file``), so they are read in parallel and filed into the evidence afterwards, in the
order a single process would have filed them (the verdict does not depend on how many workers
read). Worth it from a few megabytes on: forking, and pickling the events back, cost tens of
milliseconds."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from hangscope import timing
from hangscope.cores import can_fork, usable_cores
from hangscope.errors import BadInputError
from hangscope.model import LogEvent
from hangscope.sources.logs.loader import scan_log_file

# below this many bytes in all, one process reads them (a pool costs more than it saves)
POOL_FROM_BYTES = 4 << 20

ScanResult = tuple[str, list[LogEvent], str | None]  # path, events, the problem reading it


def scan_files(paths: list[str], jobs: int | None = None,
               ranks: list[int | None] | None = None) -> Iterator[ScanResult]:
    """Each path's events (or its one-line problem), in ``paths``' order; ``jobs`` worker
    processes (None: one per usable core; 1: in this process). ``ranks``: the rank each file
    was filed under (a bundle's), by position; None: no file belongs to a rank."""
    items = list(zip(paths, ranks or [None] * len(paths), strict=True))
    workers = min(jobs or usable_cores(), len(items))
    if workers <= 1 or not can_fork() or _size(paths) < POOL_FROM_BYTES:
        for item in items:
            with timing.phase("logs"):
                result = _scan_one(item)
            yield result
        return
    with ProcessPoolExecutor(max_workers=workers,
                             mp_context=multiprocessing.get_context("fork")) as pool:
        profile = timing.current()
        if profile is None:
            yield from pool.map(_scan_one, items)
            return
        timed = pool.map(_scan_one_timed, items)
        for _item in items:
            with timing.phase("wait"):
                result, times = next(timed)
            profile.add_worker(times)
            yield result


def _scan_one(item: tuple[str, int | None]) -> ScanResult:
    path, rank = item
    try:
        return path, scan_log_file(path, rank), None
    except BadInputError as exc:
        return path, [], str(exc)


def _scan_one_timed(item: tuple[str, int | None]) -> tuple[ScanResult, timing.Times]:
    """``_scan_one`` with the worker's own phase times, which the parent adds up."""
    return timing.measured(_scan_one_phased, item)


def _scan_one_phased(item: tuple[str, int | None]) -> ScanResult:
    with timing.phase("logs"):
        return _scan_one(item)


def _size(paths: list[str]) -> int:
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    return total
