"""Where one run's time goes (``hangscope analyze --profile``): wall and CPU seconds per named
phase, counted by a context manager around each stage.

Phases are exclusive: time spent in a phase opened inside another counts for the inner one only
(reading a dump inside the reducer counts as ``read``, not ``reduce``), so the phases and
``other`` add up to the total. Worker processes time their own phases (:func:`measured`) and
send the totals back with their result; the parent adds them up apart from its own (:meth:`
Profile.add_worker`), since their wall seconds overlap the parent's.

Off unless :func:`profiling` is active: then :func:`phase` costs one global lookup and returns a
shared no-op context manager. Only the pipeline turns it on (in ``try``/``finally``), and only
``cli.py`` prints it (:func:`format_profile`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

# (name, what it counts), in the order a run goes through them
PHASES: tuple[tuple[str, str], ...] = (
    ("read", "finding, sniffing and reading files"),
    ("logs", "reading and scanning rank, launcher and NCCL logs for events"),
    ("unpickle", "decoding dumps (pickle or JSON), and freeing them"),
    ("reduce", "per-record work: digests by columns, or converting records"),
    ("wait", "waiting for the worker processes (dumps or logs)"),
    ("hydrate", "building dumps from digests, sharing histories"),
    ("match", "cross-rank matching: groups, histories, divergence, p2p, wait graph"),
    ("detect", "detectors and ranking the findings"),
    ("render", "verdict.json and report.html"),
)
PHASE_NAMES = tuple(name for name, _what in PHASES)

Times = dict[str, tuple[float, float]]  # phase -> (wall s, CPU s)


@dataclass(slots=True)
class Profile:
    """Seconds per phase of this process, and summed over worker processes."""

    wall: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    worker_wall: dict[str, float] = field(default_factory=dict)
    worker_cpu: dict[str, float] = field(default_factory=dict)
    worker_items: int = 0  # results the workers sent back with their times
    total_wall: float = 0.0
    total_cpu: float = 0.0
    # open phases, innermost last: [name, wall at start, cpu at start, children's wall, cpu]
    _stack: list[list[Any]] = field(default_factory=list)

    def add_worker(self, times: Times) -> None:
        """One worker result's phase times (see :func:`measured`)."""
        self.worker_items += 1
        for name, (wall, cpu) in times.items():
            self.worker_wall[name] = self.worker_wall.get(name, 0.0) + wall
            self.worker_cpu[name] = self.worker_cpu.get(name, 0.0) + cpu

    def times(self) -> Times:
        return {name: (self.wall[name], self.cpu.get(name, 0.0)) for name in self.wall}


class _Phase:
    __slots__ = ("name", "profile")

    def __init__(self, profile: Profile, name: str) -> None:
        self.profile, self.name = profile, name

    def __enter__(self) -> None:
        self.profile._stack.append([self.name, time.perf_counter(), time.process_time(), 0.0, 0.0])

    def __exit__(self, *exc: object) -> None:
        wall_end, cpu_end = time.perf_counter(), time.process_time()
        profile = self.profile
        name, wall0, cpu0, child_wall, child_cpu = profile._stack.pop()
        wall, cpu = wall_end - wall0, cpu_end - cpu0
        profile.wall[name] = profile.wall.get(name, 0.0) + wall - child_wall
        profile.cpu[name] = profile.cpu.get(name, 0.0) + cpu - child_cpu
        if profile._stack:
            outer = profile._stack[-1]
            outer[3] += wall
            outer[4] += cpu


_active: Profile | None = None
_NULL: AbstractContextManager[None] = nullcontext()


def phase(name: str) -> AbstractContextManager[None]:
    """Count the time inside as ``name`` (one of :data:`PHASE_NAMES`) while profiling."""
    profile = _active
    return _NULL if profile is None else _Phase(profile, name)


def current() -> Profile | None:
    return _active


@contextmanager
def profiling() -> Iterator[Profile]:
    """Count phases until the block ends; the profile's totals cover the whole block."""
    global _active
    previous, profile = _active, Profile()
    _active = profile
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        yield profile
    finally:
        profile.total_wall = time.perf_counter() - wall0
        profile.total_cpu = time.process_time() - cpu0
        _active = previous


def measured(fn: Callable[[T], Any], item: T) -> tuple[Any, Times]:
    """``fn(item)`` in a worker process, with its own phase times (a fresh profile: a forked
    worker inherits the parent's). The time outside any phase is ``other``."""
    with profiling() as profile:
        result = fn(item)
    times = profile.times()
    inside = sum(wall for wall, _cpu in times.values()), sum(cpu for _wall, cpu in times.values())
    times["other"] = (profile.total_wall - inside[0], profile.total_cpu - inside[1])
    return result, times


def format_profile(profile: Profile) -> Iterator[str]:
    """The profile as a table, one line per phase (every phase, zeros included)."""
    workers = profile.worker_items > 0
    yield ("hangscope: profile of this run, seconds (wall / CPU of this process"
           + ("; workers: summed over the worker processes, overlapping the parent's wait)"
              if workers else ")"))
    head = f"  {'phase':<10} {'wall':>8} {'cpu':>8}"
    if workers:
        head += f" {'workers wall':>13} {'workers cpu':>12}"
    yield head + "  what"
    rows = [*PHASES, ("other", "the rest: imports, other evidence, the pipeline itself")]
    phased_wall = sum(profile.wall.get(name, 0.0) for name in PHASE_NAMES)
    phased_cpu = sum(profile.cpu.get(name, 0.0) for name in PHASE_NAMES)
    for name, what in rows:
        if name == "other":
            wall, cpu = profile.total_wall - phased_wall, profile.total_cpu - phased_cpu
        else:
            wall, cpu = profile.wall.get(name, 0.0), profile.cpu.get(name, 0.0)
        line = f"  {name:<10} {max(wall, 0.0):8.3f} {max(cpu, 0.0):8.3f}"
        if workers:
            line += (f" {profile.worker_wall.get(name, 0.0):13.3f}"
                     f" {profile.worker_cpu.get(name, 0.0):12.3f}")
        yield f"{line}  {what}"
    line = f"  {'total':<10} {profile.total_wall:8.3f} {profile.total_cpu:8.3f}"
    if workers:
        line += (f" {sum(profile.worker_wall.values()):13.3f}"
                 f" {sum(profile.worker_cpu.values()):12.3f}")
    yield line + (f"  ({profile.worker_items} files read by workers)" if workers else "")


__all__ = ["PHASES", "PHASE_NAMES", "Profile", "current", "format_profile", "measured", "phase",
           "profiling"]
