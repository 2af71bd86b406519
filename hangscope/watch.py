"""``hangscope watch``: sit beside a live job, cheaply, and collect + analyze once when it stops
making progress (or a rank logs a watchdog timeout); see docs/watch.md.

Each check reads, without pausing any rank:

* every rank's CPU time (``/proc/PID/stat`` utime + stime, one small read);
* the new bytes of the job's log files (rank stdout/stderr and torchrun's per-rank files, the
  launcher's output): a line of a timeout family (:data:`ALARM_KINDS`, found by the same scanner
  ``analyze`` uses, on the new bytes only) fires at once; a progress line (``step N``, ``iter``,
  a tqdm bar...) is progress;
* the modification time of the flight-recorder dump files the ranks were told to write
  (``TORCH_FR_DUMP_TEMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``): torch writes one on a
  watchdog timeout, so a new one fires at once;
* every ``stack_every``-th check only, one ``py-spy dump --nonblocking`` per rank
  (collect/nbsample).

"No progress" (:class:`StallTracker`) is ``stall`` seconds in which no rank's main-thread stack
changed between samples, no log showed a progress line, and no rank burned more than
``cpu_share`` of a core between two checks. Then ``run_attach`` collects into OUT/bundle and
analyzes, once. Library code: returns a :class:`WatchResult`; only ``cli.py`` prints.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType

from hangscope.collect.fr_trigger import dump_paths
from hangscope.collect.logs import _log_dir_files, fd_target, read_bounded
from hangscope.collect.nbsample import Sampler, Signature
from hangscope.collect.procstate import cpu_seconds
from hangscope.discover import JobProcesses, RankProcess, discover
from hangscope.errors import CollectError
from hangscope.model import ProcessState
from hangscope.options import AttachOptions, LoadOptions, OutputOptions
from hangscope.result import Summary

# A hung gloo rank burns ~0.2-0.3 % of a core (torch's helper threads waking up; measured on
# fixtures/jobs/train_then_hang.py, docs/watch.md); 2 % is ~7x that and far below any rank that
# computes or steps.
CPU_SHARE = 0.02
ALARM_KINDS = frozenset({
    "nccl_watchdog_timeout", "nccl_work_status", "nccl_desync", "monitored_barrier_failure",
    "nccl_heartbeat_stuck", "fr_dump_notice", "gloo_timeout", "dataloader_timeout",
})
MAX_READ = 4 << 20  # new bytes read per log per check; more is skipped (a log flood is progress)
_OFF = ("0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class WatchOptions:
    pid_group: int | None = None
    pids: tuple[int, ...] = ()
    match: str | None = None
    slurm_job: str | None = None  # watch this node's ranks of the job; collect on all its nodes
    stall: float = 60.0
    timeout: float = 3600.0
    interval: float | None = None  # None: stall / 5, within 0.5-5 s
    stack_every: int = 3  # a non-blocking stack sample every Nth check
    cpu_share: float = CPU_SHARE
    dump_timeout: float = 2.0  # for one non-blocking py-spy dump
    collect_timeout: float | None = None  # bound on the collection after firing (SLURM: 60 s)


@dataclass(slots=True)
class Check:
    """What one check saw: the stall logic's only input."""

    at: float  # time.monotonic()
    cpu: dict[int, float]  # rank -> CPU seconds so far (ranks still alive)
    stacks: dict[int, Signature] | None = None  # rank -> main thread; None: not sampled
    progress: list[str] = field(default_factory=list)  # "path: line" of new progress lines


class StallTracker:
    """Decides "no progress for ``stall`` seconds" from a sequence of checks."""

    def __init__(self, stall: float, cpu_share: float, start: float) -> None:
        self.stall = stall
        self.cpu_share = cpu_share
        self.last_progress = start
        self.last_seen: list[str] = []  # what showed progress last
        self._cpu: dict[int, tuple[float, float]] = {}
        self._stacks: dict[int, Signature] = {}
        self.sampled = False

    def update(self, check: Check) -> str | None:
        """Feed one check; the reason for firing once ``stall`` seconds passed without progress."""
        moved: list[str] = []
        for rank, cpu in sorted(check.cpu.items()):
            before = self._cpu.get(rank)
            self._cpu[rank] = (check.at, cpu)
            if before is not None and check.at > before[0]:
                share = (cpu - before[1]) / (check.at - before[0])
                if share > self.cpu_share:
                    moved.append(f"rank {rank} used {share:.0%} of a core")
        if check.stacks is not None:
            self.sampled = True
            for rank, sig in sorted(check.stacks.items()):
                old = self._stacks.get(rank)
                self._stacks[rank] = sig
                if old is not None and old != sig:
                    moved.append(f"rank {rank}'s main-thread stack changed")
        moved.extend(f"progress line {p}" for p in check.progress[:1])
        if moved:
            self.last_progress = check.at
            self.last_seen = moved
            return None
        idle = check.at - self.last_progress
        if idle < self.stall:
            return None
        how = ["no rank's main-thread stack changed"] if self.sampled else []
        how += ["no log showed a progress line",
                f"no rank used more than {self.cpu_share:.0%} of a core"]
        return f"no progress for {idle:.0f}s: " + ", ".join(how)


@dataclass(slots=True)
class WatchResult:
    """``outcome``: "fired" (stall or alarm: collected and analyzed), "exited" (the job ended:
    its leftovers analyzed) or "timeout" (nothing happened)."""

    outcome: str
    reason: str
    summary: Summary | None
    checks: int
    seconds: float
    stall: float
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.summary.exit_code if self.summary is not None else 0


class Stopped(BaseException):
    """SIGTERM/SIGINT while watching: unwinds through every ``finally`` (children killed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into :class:`Stopped` in the main thread; restore on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_watch(options: WatchOptions, output: OutputOptions) -> WatchResult:
    from hangscope.pipeline import prepare_out_dir

    started = time.monotonic()
    out = prepare_out_dir(output)  # refuse a bad --out now, not after an hour of watching
    with stop_on_signals():
        job = _discover_waiting(options, started + options.timeout)
        stall, notes = effective_stall(options.stall, job)
        watcher = _Watcher(job, options, stall)
        sampler = Sampler()
        try:
            outcome, reason = watcher.loop(sampler, started + options.timeout)
        finally:
            sampler.kill_all()
        notes.extend(watcher.notes)
        summary: Summary | None = None
        if outcome == "fired":
            summary = _collect(options, output, out)
        elif outcome == "exited":
            summary = _analyze_leftovers(job, watcher.tails, watcher.states(), output, out)
    return WatchResult(outcome, reason, summary, watcher.checks, time.monotonic() - started,
                       stall, notes)


def _discover_waiting(options: WatchOptions, deadline: float) -> JobProcesses:
    """The ranks, once there are any: a watch started from cron or a job's own prolog may come
    before the launcher has started them. Retried every check interval until ``deadline``."""
    wait = options.interval or min(5.0, max(0.5, options.stall / 5))
    while True:
        try:
            return _discover(options)
        except CollectError:
            if time.monotonic() + wait >= deadline:
                raise
            time.sleep(wait)


def _discover(options: WatchOptions) -> JobProcesses:
    """The ranks to watch. With ``slurm_job``, those of the job on this node: in a synchronous
    job a hang anywhere stops every rank within a step, so one node's progress is the job's."""
    try:
        return discover(pid_group=options.pid_group, pids=options.pids, match=options.match,
                        slurm_job=options.slurm_job)
    except CollectError as exc:
        if options.slurm_job is None:
            raise
        raise CollectError(
            f"{exc}; watch --slurm-job reads progress from the job's ranks on the node it runs "
            f"on: run it on one of the job's nodes, e.g. srun --overlap --jobid "
            f"{options.slurm_job} -N 1 --ntasks=1 hangscope watch --slurm-job "
            f"{options.slurm_job} ...") from None


def effective_stall(stall: float, job: JobProcesses) -> tuple[float, list[str]]:
    """``stall``, capped below a deadline the ranks' environment states for certain: NCCL's
    heartbeat monitor aborts a rank whose watchdog is stuck for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC
    (when TORCH_NCCL_ENABLE_MONITORING is not off); watch fires at half of it, so that the
    collection finishes before the abort."""
    limits = []
    for rank in job.ranks:
        value = rank.env.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "")
        monitoring = rank.env.get("TORCH_NCCL_ENABLE_MONITORING", "1").strip().lower()
        if value.strip().isdigit() and int(value) > 0 and monitoring not in _OFF:
            limits.append(int(value))
    if limits and min(limits) / 2 < stall:
        cap = min(limits) / 2
        return cap, [f"--stall {stall:g}s capped to {cap:g}s: the ranks set "
                     f"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC={min(limits)} (NCCL aborts a rank whose "
                     f"watchdog is stuck that long)"]
    return stall, []


class _Watcher:
    def __init__(self, job: JobProcesses, options: WatchOptions, stall: float) -> None:
        self.job = job
        self.options = options
        self.interval = options.interval or min(5.0, max(0.5, stall / 5))
        self.tracker = StallTracker(stall, options.cpu_share, time.monotonic())
        self.tails = find_tails(job)
        self.fr = {path: _mtime(path) for rank in job.ranks if _explicit_fr(rank)
                   for path in dump_paths(rank)}
        self.checks = 0
        self.notes: list[str] = []
        self.alive: dict[int, ProcessState] = {}  # rank -> the last check that found it alive
        self.gone: dict[int, ProcessState] = {}  # rank -> the first check that found it gone

    def loop(self, sampler: Sampler, deadline: float) -> tuple[str, str]:
        while True:
            self.checks += 1
            now = time.monotonic()
            cpu = {r.rank: c for r in self.job.ranks if (c := cpu_seconds(r.pid)) is not None}
            self._record(cpu)
            if not cpu:
                return "exited", "every rank exited while watched"
            check = Check(now, cpu)
            for tail in self.tails:
                alarm = tail.poll(check.progress)
                if alarm:
                    return "fired", alarm
            for path, before in self.fr.items():
                if _mtime(path) != before:
                    return "fired", f"{path}: the job wrote a flight-recorder dump (torch " \
                                    f"does on a watchdog timeout)"
            if self.checks % self.options.stack_every == 1 or self.options.stack_every == 1:
                pids = {r.pid: r.rank for r in self.job.ranks if r.rank in cpu}
                got = sampler.sample(pids, self.options.dump_timeout)
                check.stacks = {pids[pid]: sig for pid, sig in got.items()}
            reason = self.tracker.update(check)
            if reason:
                return "fired", reason
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", (f"no stall in {self.options.timeout:g}s ({self.checks} "
                                   f"checks); last progress: "
                                   f"{'; '.join(self.tracker.last_seen[:2]) or 'none seen'}")
            time.sleep(min(left, max(0.0, now + self.interval - time.monotonic())))

    def _record(self, cpu: dict[int, float]) -> None:
        """Keep, per rank, the last check that found it alive and the first that found it gone:
        which ranks outlived which (one wall time per check, so the ranks of one check compare
        equal), the /proc evidence ``rank_state.died_first`` reads when the whole job ends."""
        at = time.time()
        for rank in self.job.ranks:
            if rank.rank in cpu:
                self.alive[rank.rank] = ProcessState(rank.pid, at, "unknown", cpu[rank.rank])
            elif rank.rank not in self.gone:
                self.gone[rank.rank] = ProcessState(rank.pid, at, "gone")

    def states(self) -> dict[int, list[ProcessState]]:
        """What ``_record`` kept, per rank: [last alive, first gone], either left out where
        no check saw it."""
        return {rank.rank: [s for s in (self.alive.get(rank.rank), self.gone.get(rank.rank))
                            if s is not None] for rank in self.job.ranks}


@dataclass(slots=True)
class LogTail:
    """Follows one log file from where it ended when watching began."""

    path: str
    rank: int | None
    name: str  # a file name for the leftovers folder
    offset: int = 0
    lines: int = 0  # lines before ``offset``

    def skip_to_end(self) -> None:
        with contextlib.suppress(OSError), open(self.path, "rb") as handle:
            data = handle.read()
            self.offset, self.lines = len(data), data.count(b"\n")

    def poll(self, progress: list[str]) -> str | None:
        """Read the complete new lines; append progress lines to ``progress``; return the first
        alarm line as "path:line: message", if any."""
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self.offset:  # truncated or replaced: start over
                    self.offset, self.lines = 0, 0
                if size - self.offset > MAX_READ:
                    self.offset = size - MAX_READ
                handle.seek(self.offset)
                data = handle.read(MAX_READ)
        except OSError:
            return None
        end = data.rfind(b"\n") + 1
        if end == 0:
            return None
        data = data[:end]
        base = self.lines
        self.offset, self.lines = self.offset + end, base + data.count(b"\n")
        return scan_new(self.path, data, base, self.rank, progress)


def scan_new(path: str, data: bytes, base: int, rank: int | None,
             progress: list[str]) -> str | None:
    """New complete lines of one log (starting after line ``base``): progress lines go into
    ``progress``; the first alarm is returned as "path:line: message"."""
    from hangscope.sources.logs.progress import _CANDIDATE, parse_progress
    from hangscope.sources.logs.scan import scan_log

    if not progress and _CANDIDATE.search(data):
        for number, raw in enumerate(data.split(b"\n"), base + 1):
            if _CANDIDATE.search(raw) and parse_progress(raw.decode("utf-8", "replace")):
                progress.append(f"{path}:{number}")
                break
    for event in scan_log(path, data=data, rank_hint=rank):
        if event.kind in ALARM_KINDS:
            return f"{path}:{base + event.line_no}: {event.message[:200]}"
    return None


def find_tails(job: JobProcesses) -> list[LogTail]:
    """The job's log files on this host (what ``attach`` collects, found the same way), each
    once, positioned at their current end."""
    found: list[LogTail] = []
    seen: set[tuple[int, int]] = set()

    def add(path: str, rank: int | None, name: str) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            found.append(LogTail(path, rank, name))

    for launcher in job.launchers:
        for fd in (1, 2):
            what, link = fd_target(launcher.pid, fd)
            if what == "file":
                add(link, None, f"launcher{launcher.pid}.{fd}.log")
    for rank in job.ranks:
        for fd in (1, 2):
            what, link = fd_target(rank.pid, fd)
            if what == "file":
                add(link, rank.rank, f"rank{rank.rank}.{'stdout' if fd == 1 else 'stderr'}.log")
        for kind, path in _log_dir_files(rank, job.launchers):
            add(path, rank.rank, f"rank{rank.rank}.{kind}.log")
    for tail in found:
        tail.skip_to_end()
    return found


def _explicit_fr(rank: RankProcess) -> bool:
    """Only dump paths the job chose: the default /tmp prefix is shared with other jobs."""
    return bool(rank.env.get("TORCH_FR_DUMP_TEMP_FILE")
                or rank.env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"))


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _collect(options: WatchOptions, output: OutputOptions, out: str) -> Summary:
    from hangscope.pipeline import run_attach

    if options.slurm_job is not None:
        from hangscope.cluster.cli_options import fanout_options
        from hangscope.cluster.run import run_slurm_attach

        fan = fanout_options(options.slurm_job, out, options.collect_timeout)
        return run_slurm_attach(fan, LoadOptions(), OutputOptions(
            out_dir=out, force=output.force, redact=output.redact, write_html=output.write_html))
    attach = AttachOptions(pid_group=options.pid_group, pids=options.pids, match=options.match,
                           redact=output.redact)
    return run_attach(attach, LoadOptions(), OutputOptions(
        out_dir=out, force=output.force, redact=output.redact, write_html=output.write_html))


def _analyze_leftovers(job: JobProcesses, tails: list[LogTail],
                       states: dict[int, list[ProcessState]], output: OutputOptions,
                       out: str) -> Summary:
    """The job ended while watched: write what it left into OUT/bundle (its logs, and what the
    checks saw of each rank's process: which ranks outlived which) and analyze that, so
    ``hangscope report OUT/bundle`` gives the same verdict later."""
    from hangscope.bundle import BundleWriter, clear_old_bundle
    from hangscope.collect.attach import describe_ranks
    from hangscope.collect.procstate import to_json
    from hangscope.pipeline import analyze_paths

    bundle_dir = os.path.join(out, "bundle")
    clear_old_bundle(bundle_dir)
    writer = BundleWriter(bundle_dir, redact=output.redact)
    copied = 0
    for tail in tails:
        try:
            data = read_bounded(tail.path)[0]
        except OSError:
            continue
        if tail.rank is None:
            writer.add_job_file("log", tail.name, data, source_path=tail.path)
        else:
            writer.add_file(tail.rank, "log", tail.name, data)
        copied += 1
    if not copied:
        raise CollectError("the job exited while watched and left no log file to analyze")
    describe_ranks(writer, job)
    for rank in job.ranks:
        if seen := states.get(rank.rank):
            writer.add_file(rank.rank, "proc", "proc.json", to_json(rank.pid, seen))
    writer.job["watched"] = "every rank exited while watched"
    writer.close()
    started = time.monotonic()
    summary = analyze_paths([bundle_dir], LoadOptions(), output, out).summary()
    summary.seconds = time.monotonic() - started
    return summary
