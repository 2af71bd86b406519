"""Per-rank state from stacks and /proc samples: what the main thread does, and is it moving?

Several samples a second apart tell a stuck rank (same stack every time, no CPU gained) from a busy
or slow one (stacks change, CPU time grows). One sample, or none, leaves progress ``unknown``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hangscope.analysis.p2p_frames import P2pWait, p2p_wait
from hangscope.analysis.stacks import (
    Kind,
    ThreadActivity,
    classify_thread,
    main_thread,
)
from hangscope.analysis.stacktree import stack_key
from hangscope.model import Frame, JobEvidence, ProcessState, RankEvidence, StackSample
from hangscope.sources.source_lines import line_text

Progress = Literal["stuck", "moving", "unknown"]

# CPU share of one core, over the sampling window, above which a rank counts as computing.
BUSY_CPU_SHARE = 0.2
IDLE_CPU_SHARE = 0.05
# A main thread blocked for good sleeps once and stays asleep (a gloo all_reduce whose peer never
# comes: 0 voluntary context switches in 3 s, measured here); one that waits in the same frame
# but completes collectives or reads blocks and wakes every time. A poll loop on a dead peer
# switches too, but it sleeps in a `sleep` or lock frame, left out here; DataLoader's own
# status poll is every 5 s (0.2/s).
MOVING_SWITCHES = 1.0  # per second
MIN_SWITCH_WINDOW_S = 1.5
MIN_SHORT_SWITCHES = 3  # own wake-ups that tell over a shorter window
SWITCHING_WAITS = frozenset({"collective", "p2p", "io", "dataloader"})
# A main thread that reads or writes this many bytes a second through system calls (files, pipes,
# sockets) while its frame says it waits (OWN_IO_KINDS) moves: a rate-limited copy sleeps between
# chunks, a slow volume's write blocks in the same frame every time. A poll loop that checks a
# file or prints "still waiting" moves tens of bytes. Not read in waits that do I/O of their own
# (set-up polls its store over a socket; the DataLoader's and the collectives' reads are told by
# their wake-ups), nor in a computing frame, whose own output (a log line a step) says nothing
# its CPU time does not.
MOVING_IO_BPS = 16 << 10
# where a main thread waits: on other ranks, or on its own input (a read, its DataLoader, a sleep)
PEER_WAIT_KINDS = ("collective", "p2p")
OWN_WAIT_KINDS = ("io", "dataloader", "sleep")
OWN_IO_KINDS = frozenset({"sleep", "io", "lock", "idle"})
# ProcessGroupNCCL's blocking wait polls its work every 10 ms: a hung collective switches there
_BLOCKING_WAIT_ENV = ("env:TORCH_NCCL_BLOCKING_WAIT", "env:NCCL_BLOCKING_WAIT")

_SHUTDOWN_FRAMES = {("_shutdown", "threading.py")}


@dataclass(slots=True)
class RankStackState:
    rank: int
    main: ThreadActivity | None  # latest sample's main thread
    main_frames: tuple[Frame, ...]
    threads: list[ThreadActivity] = field(default_factory=list)  # every thread, latest sample
    progress: Progress = "unknown"
    cpu_share: float | None = None  # CPU seconds gained per wall second over the samples
    io_rate: float | None = None  # bytes the main thread read and wrote per second, over them
    samples: int = 0
    last_status: str | None = None  # proc status letter, "gone"
    gone_at: float | None = None  # when a /proc sample first found the process exited
    seen_until: float | None = None  # the last sample (stack or /proc) that found it alive
    main_finished: bool = False  # the main module returned or raised; threads keep it alive
    sample_path: str | None = None
    kinds: list[str] = field(default_factory=list)  # main-thread kind in each Python sample
    # where the main thread was in each Python sample: (the frame that decided its kind, the
    # job's own frame), either None where unknown
    frames_seen: list[tuple[Frame | None, Frame | None]] = field(default_factory=list)
    window_s: float = 0.0  # wall seconds the /proc samples span
    p2p: P2pWait | None = None  # the p2p op the main thread waits in, peer where known
    switch_rate: float | None = None  # the main thread's voluntary context switches per second
    polls_collectives: bool = False  # NCCL's blocking wait: switches in a collective are polls
    # the latest Python-only sample's main-thread stack (stacktree.stack_key), and whether a
    # --native follow-up decided ``main``
    python_key: tuple[object, ...] = ()
    from_native: bool = False

    @property
    def gone(self) -> bool:
        return self.last_status in ("gone", "Z")

    def does_io(self) -> bool:
        """Its main thread moves data while its frame says it waits (:func:`moves_data`)."""
        return self.main is not None and moves_data(self.main.kind, self.io_rate)

    def keeps_waking(self) -> bool:
        """The main thread blocked and woke at least :data:`MOVING_SWITCHES` times a second,
        and not because NCCL's blocking wait polls the collective it sits in: its waits end."""
        main = self.main
        return (self.switch_rate or 0.0) >= MOVING_SWITCHES and not (
            self.polls_collectives and main is not None and main.kind in ("collective", "p2p"))

    def describe(self) -> str:
        if self.gone:
            return "process exited" if self.last_status == "gone" else "zombie process"
        if self.main_finished:
            return "main thread finished (crashed or returned); other threads keep it alive"
        if self.main is None:
            return "no stack"
        text = self.main.describe()
        if self.p2p is not None and self.p2p.peer is not None:
            text += f"; {self.p2p.clause()}"
        if self.progress != "unknown":
            share = f", {self.cpu_share:.0%} CPU" if self.cpu_share is not None else ""
            if self.does_io():
                share += f", {(self.io_rate or 0.0) / 1024:.0f} KiB/s read+written"
            text += f" [{self.progress}{share}]"
        return text


def rank_states(evidence: JobEvidence) -> dict[int, RankStackState]:
    """Stack-derived state for every rank that has samples or process states."""
    states: dict[int, RankStackState] = {}
    for rank, rank_ev in evidence.ranks.items():
        if rank_ev.samples or rank_ev.proc:
            states[rank] = _state(rank_ev, evidence.source_lines)
    _share_native(states)
    for state in states.values():
        if _switches_past_waits(state):
            # the same frame at every sample, yet the thread keeps blocking and waking:
            # collectives that complete, reads that return
            state.progress = "moving"
    return states


def _switches_past_waits(state: RankStackState) -> bool:
    """The main thread waits in a collective, p2p op, read or DataLoader (at the end, after a
    --native reading is shared) and switched at least :data:`MOVING_SWITCHES` times a second."""
    main = state.main
    return state.progress != "moving" and main is not None and main.kind in SWITCHING_WAITS \
        and state.keeps_waking()


def _share_native(states: Mapping[int, RankStackState]) -> None:
    """attach takes one --native dump per distinct stack of ranks blocked in a C call nothing
    names: the wait it names is also that of every rank with the same Python stack that had none
    of its own."""
    named = {state.python_key: state.main for state in states.values()
             if state.from_native and state.main is not None and state.main.kind != "idle"
             and state.python_key}
    for state in states.values():
        main = state.main
        if main is None or main.kind != "idle" or state.from_native \
                or (found := named.get(state.python_key)) is None:
            continue
        state.main = dataclasses.replace(found, thread_id=main.thread_id,
                                         thread_name=main.thread_name, active=main.active)
        state.threads = [state.main if t is main else t for t in state.threads]


def died_first(stacks: Mapping[int, RankStackState], rank: int) -> bool:
    """The rank's process exited while another rank of the job lived on: alive at the end of
    what was looked at, or seen alive at or after the rank was first seen gone. Where every rank
    went in the same interval between two looks (``watch`` seeing the whole job end), /proc
    cannot tell who went first, nor a crash from a finish or a kill of all: the logs must."""
    state = stacks.get(rank)
    if state is None or not state.gone:
        return False
    return len(stacks) == 1 or bool(outlived_by(stacks, rank))


def outlived_by(stacks: Mapping[int, RankStackState], rank: int) -> list[int]:
    """The ranks seen alive at or after ``rank`` was first seen gone (``died_first``'s proof)."""
    state = stacks.get(rank)
    if state is None or not state.gone or state.gone_at is None:
        return []
    return sorted(r for r, other in stacks.items() if r != rank and (
        not other.gone or (other.seen_until is not None and other.seen_until >= state.gone_at)))


def ended_together(stacks: Mapping[int, RankStackState]) -> bool:
    """Every rank looked at exited and none was seen to outlive another (see ``died_first``)."""
    if len(stacks) < 2 or not all(s.gone for s in stacks.values()):
        return False
    # (a rank died first where another was seen alive at or after it was first seen gone: the
    # latest sighting of any other rank is the first or second latest of all, so one pass)
    latest = sorted(((s.seen_until, r) for r, s in stacks.items() if s.seen_until is not None),
                    reverse=True)[:2]
    for rank, state in stacks.items():
        other = next((seen for seen, r in latest if r != rank), None)
        if state.gone_at is not None and other is not None and other >= state.gone_at:
            return False
    return True


def exited_cleanly(evidence: JobEvidence, rank: int) -> bool:
    """The rank's process ended with exit status 0 (reaped or a zombie), not by a signal, by its
    last /proc sample."""
    proc = evidence.ranks[rank].proc if rank in evidence.ranks else []
    last = proc[-1] if proc else None
    return last is not None and last.exit_code == 0 and last.exit_signal is None


def _is_native(sample: StackSample) -> bool:
    return any(frame.native for thread in sample.threads for frame in thread.frames)


def _state(rank_ev: RankEvidence, lines: Mapping[str, Mapping[int, str]]) -> RankStackState:
    everything = sorted(rank_ev.samples, key=lambda s: s.taken_at)
    # A --native follow-up names the C call a thread blocks in; Python-only samples are what is
    # compared for progress (native frames differ between dumps of the same wait).
    native = [s for s in everything if _is_native(s)]
    samples = [s for s in everything if not _is_native(s)] or everything
    latest = native[-1] if native else samples[-1] if samples else None
    main = main_thread(latest) if latest is not None else None
    procs = sorted(rank_ev.proc, key=lambda p: p.sampled_at)
    if rank_ev.pid is not None:
        procs = [p for p in procs if p.pid == rank_ev.pid] or procs
    wchan = procs[-1].wchan if procs else None
    raw = [classify_thread(t) for t in latest.threads] if latest else []
    threads = [refine_idle(a, lines, raw, wchan if main is not None and a.thread_id ==
                           main.thread_id else None) for a in raw]
    state = RankStackState(
        rank=rank_ev.rank,
        main=next((a for a in threads if main is not None and a.thread_id == main.thread_id),
                  None),
        main_frames=main.frames if main else (), threads=threads,
        samples=len(samples), sample_path=latest.path if latest else None)
    state.main_finished = main is not None and _is_shutdown(main.frames)
    state.from_native = bool(native)
    python_main = main_thread(samples[-1]) if samples else None
    state.python_key = stack_key(python_main.frames) if python_main is not None else ()
    _add_p2p(state, samples[-1] if samples else None, latest if native else None, lines)
    for sample in samples:
        thread = main_thread(sample)
        seen = classify_thread(thread) if thread is not None else None
        state.kinds.append(seen.kind if seen is not None else "none")
        state.frames_seen.append((seen.frame, seen.user_frame) if seen else (None, None))
    if procs:
        state.last_status = procs[-1].status
        state.gone_at = next((p.sampled_at for p in procs if p.status in ("gone", "Z")), None)
    alive = [p.sampled_at for p in procs if p.status not in ("gone", "Z")]
    alive += [s.taken_at for s in everything]
    state.seen_until = max(alive, default=None)
    state.cpu_share = cpu_share(procs)
    if len(procs) >= 2:
        state.window_s = max(0.0, procs[-1].sampled_at - procs[0].sampled_at)
    state.progress = _progress(samples, state.cpu_share)
    state.io_rate = main_io_rate(procs)
    if state.progress != "moving" and state.does_io():
        state.progress = "moving"  # the same frame, but bytes go through it
    state.switch_rate = _switch_rate(procs, everything)
    state.polls_collectives = any(
        fact.key in _BLOCKING_WAIT_ENV and fact.value.strip().lower() in ("1", "true", "yes")
        for fact in rank_ev.config)
    if state.progress == "moving" and len(samples) >= 2 and set(state.kinds) == {"init"} \
            and len({_stack_key(s) for s in samples}) == 1:
        # process-group setup that keeps the same frame: gloo and the store retry their
        # connects in C++ and burn CPU doing it, but no data moves; setup is stuck
        state.progress = "stuck"
    return state


# What the job's own line says it blocks in, when py-spy (without --native) shows no frame for the
# C call: ``with self.lock:``, ``lock.acquire()``, ``time.sleep(...)``, ``sock.recv(...)``.
_LINE_WAITS: tuple[tuple[re.Pattern[str], Kind, str], ...] = (
    (re.compile(r"\bwith\s+[\w.\[\]]*(lock|mutex|sem|cond)\w*\b", re.I), "lock", "lock.acquire"),
    (re.compile(r"\.acquire\(|\.wait\(|\.join\("), "lock", "lock.acquire"),
    (re.compile(r"\bsleep\("), "sleep", "time.sleep"),
    (re.compile(r"\.(recv|recv_into|read|readline|accept)\("), "io", "read"),
)


def refine_idle(activity: ThreadActivity, lines: Mapping[str, Mapping[int, str]] | None = None,
                siblings: Sequence[ThreadActivity] = (), wchan: str | None = None
                ) -> ThreadActivity:
    """Name an ``idle`` thread's wait from its source line, or, without the source, from what the
    dump itself shows.

    py-spy shows no frame for a C call made straight from the job's code, so the stack ends at
    the job's line; that line usually says what it waits on. The line comes from ``lines`` (carried
    in the bundle, read where the job ran) or from the file when it is readable here. Without
    either (a py-spy dump analyzed away from the job): the process's ``wchan`` (main thread only)
    and the other threads (see ``_sourceless``); library frames (``Lock.acquire``,
    ``Condition.wait``) and native frames were already read by ``classify_thread``. Only a hint:
    marked in ``op``.
    """
    frame = activity.user_frame
    if activity.kind != "idle" or frame is None or frame.line is None:
        return activity
    text = line_text(lines or {}, frame.filename, frame.line)
    if text is None:
        return _sourceless(activity, siblings, wchan)
    text = text.strip()
    for pattern, kind, op in _LINE_WAITS:
        if pattern.search(text):
            return dataclasses.replace(activity, kind=kind, op=f"{op} (source line: {text[:80]})")
    return activity


# the op of a lock wait told only by the other threads' shape (no source, name or wchan said it)
INFERRED_LOCK = "a lock, inferred"
# /proc/PID/wchan of a thread asleep in the kernel -> what it waits for
_WCHAN_WAITS: tuple[tuple[re.Pattern[str], Kind, str], ...] = (
    (re.compile(r"^(anon_pipe_read|pipe_read|pipe_wait\w*|unix_stream_read_generic"
                r"|sk_wait_data)$"), "io", "read"),
    (re.compile(r"^(hrtimer_nanosleep|do_nanosleep|clock_nanosleep)$"), "sleep", "time.sleep"),
)


def _sourceless(activity: ThreadActivity, siblings: Sequence[ThreadActivity],
                wchan: str | None) -> ThreadActivity:
    """What an idle thread waits on when its source line cannot be read.

    - the process's ``wchan`` (it is the main thread's): a pipe or socket read, a sleep (a futex
      says nothing: every blocked wait of CPython and torch sleeps on one);
    - another thread of the same process also blocked in the job's own code (idle at a job
      frame, or in a lock/queue wait called from one): two threads of one program stopped in
      their own code, with nothing of a collective or I/O in sight, is the shape of a lock
      inversion.
    False positives: two threads that each sleep in the job's own code (with no wchan to say so)
    look like the last rule.
    """
    if wchan:
        for pattern, kind, op in _WCHAN_WAITS:
            if pattern.match(wchan):
                return dataclasses.replace(activity, kind=kind, op=f"{op} (wchan {wchan})")
    blocked = [t for t in siblings if t.thread_id != activity.thread_id
               and t.user_frame is not None and t.kind in ("idle", "lock")]
    if blocked:
        other = blocked[0]
        name = other.thread_name or other.thread_id
        return dataclasses.replace(activity, kind="lock", op=(
            f"{INFERRED_LOCK} (no source here; thread '{name}' is blocked in the job's code "
            "too)"))
    return activity


def _add_p2p(state: RankStackState, python: StackSample | None, native: StackSample | None,
             lines: Mapping[str, Mapping[int, str]]) -> None:
    """The main thread's p2p wait (analysis/p2p_frames.py) from the latest Python sample (which
    has the locals) and the native one (which names a Work's wait); a thread read as idle, or as
    waiting on a lock by its ``.wait()`` line, that waits on an isend/irecv Work becomes ``p2p``."""
    thread = main_thread(python) if python is not None else None
    if thread is None or state.main is None or state.main.kind not in ("p2p", "idle", "lock"):
        return
    found = p2p_wait(thread, lines, main_thread(native) if native is not None else None)
    if found is None:
        return
    state.p2p = found
    if state.main.kind != "p2p":
        before = state.main
        state.main = dataclasses.replace(before, kind="p2p", op=f"{found.call}.wait"
                                         if not found.call.endswith(".wait") else found.call)
        state.threads = [state.main if t is before else t for t in state.threads]


def _is_shutdown(frames: tuple[Frame, ...]) -> bool:
    return any((f.name, f.filename.rsplit("/", 1)[-1]) in _SHUTDOWN_FRAMES for f in frames)


def _switch_rate(procs: list[ProcessState], samples: list[StackSample]) -> float | None:
    """The main thread's own voluntary context switches per second over the /proc samples,
    less those the stack dumps in that span caused (py-spy interrupts a thread blocked in a
    futex); None where that cannot be told (a dump that did not measure its own)."""
    span = _span(procs, "voluntary_switches")
    if span is None:
        return None
    first, last, wall = span
    # a dump that began up to a second before the first look may still have held the thread
    dumps = [s for s in samples if first.sampled_at - 1.0 <= s.taken_at <= last.sampled_at]
    if any(s.switches_during is None for s in dumps):
        return None
    caused = sum(s.switches_during or 0 for s in dumps)
    own = max(0, (last.voluntary_switches or 0) - (first.voluntary_switches or 0) - caused)
    # a short look (attach --interval 0.2) tells only where the thread woke several times
    if wall < MIN_SWITCH_WINDOW_S and own < MIN_SHORT_SWITCHES:
        return None
    return own / wall


def moves_data(kind: str, io_rate: float | None) -> bool:
    """A main thread in a ``kind`` frame that reads and writes ``io_rate`` bytes a second moves
    (see :data:`MOVING_IO_BPS`); attach's sampling and the analysis ask the same question."""
    return kind in OWN_IO_KINDS and (io_rate or 0.0) >= MOVING_IO_BPS


def main_io_rate(procs: Sequence[ProcessState]) -> float | None:
    """Bytes per second the main thread read and wrote between the first and the last state
    that read its counters, over at least :data:`MIN_SWITCH_WINDOW_S`."""
    span = _span(procs, "main_io_bytes", skip=("gone", "Z"))
    if span is None or span[2] < MIN_SWITCH_WINDOW_S:
        return None
    first, last, wall = span
    return max(0, (last.main_io_bytes or 0) - (first.main_io_bytes or 0)) / wall


def cpu_share(procs: Sequence[ProcessState]) -> float | None:
    """CPU seconds gained per wall second between the first and the last state."""
    span = _span(procs, "cpu_time_s")
    if span is None:
        return None
    first, last, wall = span
    return max(0.0, (last.cpu_time_s or 0.0) - (first.cpu_time_s or 0.0)) / wall


def _span(procs: Sequence[ProcessState], counter: str, skip: tuple[str, ...] = ("gone",)
          ) -> tuple[ProcessState, ProcessState, float] | None:
    """The first and last states that read ``counter`` (of a live process) and the wall between
    them; None where fewer than two read it or no time passed."""
    read = [p for p in procs if getattr(p, counter) is not None and p.status not in skip]
    if len(read) < 2:
        return None
    wall = read[-1].sampled_at - read[0].sampled_at
    return (read[0], read[-1], wall) if wall > 0 else None


def _stack_key(sample: StackSample) -> tuple[tuple[str, str, int | None], ...]:
    """The main thread's Python frames by function, file name and line: the JSON and text forms
    of one dump print the same frame with a full and a short path."""
    main = main_thread(sample)
    return tuple((f.name, f.filename.rsplit("/", 1)[-1], f.line) for f in main.frames
                 if not f.native) if main else ()


def _progress(samples: list[StackSample], cpu_share: float | None) -> Progress:
    keys = {_stack_key(sample) for sample in samples}
    if cpu_share is not None and cpu_share >= BUSY_CPU_SHARE:
        return "moving"
    if len(samples) >= 2 and len(keys) > 1:
        return "moving"
    if len(samples) >= 2 and (cpu_share is None or cpu_share <= IDLE_CPU_SHARE):
        return "stuck"
    return "unknown"
