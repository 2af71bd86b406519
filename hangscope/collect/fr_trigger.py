"""Flight-recorder dumps of a live rank: pick up the ones on disk, and ask for a fresh one.

Where torch writes them (ProcessGroupNCCL's DebugInfoWriter, torch 2.13): ``<prefix><rank>`` with
prefix ``TORCH_FR_DUMP_TEMP_FILE``, else ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, else
``/tmp/nccl_trace_rank_``; with ``TORCH_FR_DUMP_DYNAMIC_FILE_NAME`` set, the writer uses the
variable's value as the whole file name. A relative prefix is relative to the rank's cwd.

When ``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` is set, each NCCL rank creates the FIFO
``<value><rank>.pipe`` and dumps when anything is written to it. We write one byte with
``O_NONBLOCK`` so we never block: no reader (ENXIO) means the rank's monitor thread is not running
(gloo ranks never create the pipe), and we say so. Then we wait, bounded, for the dump file to
appear or change and stop growing. Triggering is the one write hangscope makes to a job: it only
asks torch to do what the user configured it to do.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hangscope.discover import RankProcess

DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"
MAX_DUMP_BYTES = 512 << 20
_CLOCK_SLACK_S = 2.0  # a file's mtime and a process's start time come from different clocks
_TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(slots=True)
class FrDumpFile:
    """One dump as read from disk; ``triggered`` when we asked the rank to write it."""

    rank: int
    path: str
    data: bytes
    mtime: float
    triggered: bool


@dataclass(slots=True)
class FrResult:
    files: list[FrDumpFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def dump_paths(rank: RankProcess) -> list[str]:
    """Where this rank's dumps would be, most specific first."""
    env = rank.env
    prefix = (env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
              or DEFAULT_PREFIX)
    prefix = _resolve(prefix, rank.pid)
    paths = [f"{prefix}{rank.rank}"]
    if env.get("TORCH_FR_DUMP_DYNAMIC_FILE_NAME", "").strip().lower() in _TRUE:
        paths.insert(0, prefix)
    return paths


def pipe_path(rank: RankProcess) -> str | None:
    """The FIFO that triggers a dump, when the rank was told to create one."""
    value = rank.env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    return f"{_resolve(value, rank.pid)}{rank.rank}.pipe" if value else None


def find_dumps(rank: RankProcess) -> FrResult:
    """The dumps already on disk for this rank (e.g. written on a watchdog timeout).

    The default path is shared by every job on the host (``/tmp/nccl_trace_rank_<N>``), so a
    file written before this rank's process started is an earlier run's dump: read as this
    job's, it would show that run's last collectives. Such a file is passed over, with a note."""
    result = FrResult()
    for path in dump_paths(rank):
        got = _read_dump(rank.rank, path, False, result.notes)
        if got is not None and got.mtime < rank.create_time - _CLOCK_SLACK_S:
            result.notes.append(
                f"rank {rank.rank}: {path} was written "
                f"{rank.create_time - got.mtime:.0f} s before this rank's process started: "
                "an earlier run's dump, not read")
        elif got is not None:
            result.files.append(got)
    if not result.files and not result.notes:
        result.notes.append(f"rank {rank.rank}: no flight-recorder dump at "
                            f"{' or '.join(dump_paths(rank))}")
    return result


def trigger_dump(rank: RankProcess, *, timeout_s: float = 10.0, settle_s: float = 0.3,
                 poll_s: float = 0.05, clock: Callable[[], float] = time.monotonic) -> FrResult:
    """Poke the rank's dump pipe and wait (at most ``timeout_s``) for a new dump."""
    return trigger_dumps([rank], timeout_s=timeout_s, settle_s=settle_s, poll_s=poll_s,
                         clock=clock)[0]


def trigger_dumps(ranks: list[RankProcess], *, timeout_s: float = 10.0, settle_s: float = 0.3,
                  poll_s: float = 0.05, clock: Callable[[], float] = time.monotonic
                  ) -> list[FrResult]:
    """Poke every rank's dump pipe first, then wait (at most ``timeout_s`` in all) for each new
    dump: one result per rank, in order.

    All at once, because dumps of a live job are snapshots at the moments they are written: asked
    one after another (each takes the rank's monitor thread up to a second to notice), a running
    job's ranks would be caught steps apart and the later ones would look ahead of the earlier.
    torch writes the file in place (an ofstream, not a rename), so a dump counts as done once
    it changed and then kept the same size and mtime for ``settle_s``.
    """
    results = [FrResult() for _ in ranks]
    waiting: list[tuple[int, dict[str, tuple[int, int] | None], str]] = []
    for index, rank in enumerate(ranks):
        pipe = pipe_path(rank)
        who = f"rank {rank.rank}"
        if pipe is None:
            results[index].notes.append(f"{who}: TORCH_NCCL_DEBUG_INFO_PIPE_FILE is not set: "
                                        f"cannot ask for a dump")
            continue
        before = {path: _signature(path) for path in dump_paths(rank)}
        problem = poke_pipe(pipe)
        if problem:
            results[index].notes.append(f"{who}: {problem}")
            continue
        waiting.append((index, before, pipe))
    deadline = clock() + timeout_s
    since: dict[tuple[int, str], tuple[tuple[int, int] | None, float]] = {}
    while waiting:
        for item in list(waiting):
            index, before, _ = item
            for path, old in before.items():
                now, t = _signature(path), clock()
                if since.get((index, path), (None, 0.0))[0] != now:
                    since[(index, path)] = (now, t)
                elif now is not None and now != old and t - since[(index, path)][1] >= settle_s:
                    got = _read_dump(ranks[index].rank, path, True, results[index].notes)
                    if got is not None:
                        results[index].files.append(got)
                        waiting.remove(item)
                        break
        if not waiting or clock() >= deadline:
            break
        time.sleep(poll_s)
    for index, before, pipe in waiting:
        results[index].notes.append(
            f"rank {ranks[index].rank}: asked for a flight-recorder dump through {pipe} but none "
            f"appeared at {' or '.join(before)} within {timeout_s:g} s")
    return results


def collect_fr(rank: RankProcess, *, trigger: bool = True, timeout_s: float = 10.0) -> FrResult:
    """A fresh dump when the rank can be asked for one, else what is already on disk."""
    return collect_frs([rank], trigger=trigger, timeout_s=timeout_s)[0]


def collect_frs(ranks: list[RankProcess], *, trigger: bool = True, timeout_s: float = 10.0
                ) -> list[FrResult]:
    """``collect_fr`` for many ranks, their pipes poked together (see ``trigger_dumps``)."""
    asked = [index for index, rank in enumerate(ranks)
             if trigger and pipe_path(rank) is not None]
    fresh = dict(zip(asked, trigger_dumps([ranks[i] for i in asked], timeout_s=timeout_s)))
    out = []
    for index, rank in enumerate(ranks):
        got = fresh.get(index)
        if got is not None and got.files:
            out.append(got)
            continue
        old = find_dumps(rank)
        if got is not None:
            old.notes[:0] = got.notes
        out.append(old)
    return out


def poke_pipe(path: str) -> str | None:
    """Write one byte to a dump FIFO without ever blocking; None on success, else why not."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return (f"the dump pipe {path} does not exist (only NCCL process groups create it; "
                f"the rank may not have initialised one yet)")
    except OSError as exc:
        return f"the dump pipe {path} cannot be checked ({exc.strerror or exc})"
    if not stat.S_ISFIFO(mode):
        return f"{path} is not a FIFO: not writing to it"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return (f"nobody reads the dump pipe {path} (ENXIO): the rank's NCCL monitor thread "
                    f"is not running, or the rank is gone")
        return f"cannot open the dump pipe {path} ({exc.strerror or exc})"
    try:
        os.write(fd, b"1")
    except BlockingIOError:
        pass  # the pipe is full: a dump request is already pending
    except OSError as exc:
        return f"cannot write to the dump pipe {path} ({exc.strerror or exc})"
    finally:
        os.close(fd)
    return None


def _signature(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None


def _read_dump(rank: int, path: str, triggered: bool, notes: list[str]) -> FrDumpFile | None:
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            if st.st_size > MAX_DUMP_BYTES:
                notes.append(f"rank {rank}: {path} is {st.st_size} bytes, over the "
                             f"{MAX_DUMP_BYTES >> 20} MiB limit: not collected")
                return None
            data = handle.read(MAX_DUMP_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        notes.append(f"rank {rank}: {path} is unreadable ({exc.strerror or exc})")
        return None
    return FrDumpFile(rank, path, data, st.st_mtime, triggered)


def _resolve(path: str, pid: int) -> str:
    if os.path.isabs(path):
        return path
    try:
        return os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
    except OSError:
        return path
