"""The evidence model: what every loader produces and every detector reads.

Loaders (``hangscope.sources``) and live collectors (``hangscope.collect``) turn foreign
formats into these plain dataclasses; nothing downstream of them looks at a raw file again.
Partial evidence is normal: every field that a source may not provide is optional, and a rank may
have any subset of flight-recorder dump, stack samples, process states and log events.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

# --------------------------------------------------------------------------------------------------
# Stacks (py-spy, saved stack dumps, FR entry frames)


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python (or native) frame. Frames are interned by loaders: compare them by value."""

    name: str
    filename: str
    line: int | None = None
    native: bool = False

    def where(self) -> str:
        return f"{self.filename}:{self.line}" if self.line is not None else self.filename


@dataclass(frozen=True, slots=True)
class FrameLocal:
    """One local variable ``py-spy dump --locals`` read and hangscope kept (sources/pyspy.py's
    ``keep_local``): an int a p2p call's peer may come from, or the name of a torch ``Work``
    (``value`` None; its repr is dropped). Every other local is dropped when read: locals may
    hold secrets, and a bundle travels."""

    frame: int  # index into ThreadStack.frames
    name: str
    value: int | None


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread of one process at one instant. ``frames`` is innermost first, as py-spy prints."""

    thread_id: int
    frames: tuple[Frame, ...]
    name: str | None = None
    is_main: bool = False
    active: bool | None = None  # py-spy: False when the thread sits idle in a known wait
    owns_gil: bool | None = None
    locals: tuple[FrameLocal, ...] = ()  # only with --locals, only what keep_local keeps


@dataclass(frozen=True, slots=True)
class StackSample:
    """Every thread of one process, dumped once at ``taken_at`` (seconds since the epoch)."""

    pid: int
    taken_at: float
    threads: tuple[ThreadStack, ...]
    source: str = "py-spy"  # where it came from, for evidence citations
    path: str | None = None  # file it was read from, if any
    # the main thread's voluntary context switches that the dump itself caused (attach measures
    # them around each py-spy run): not the thread's own wake-ups
    switches_during: int | None = None


# --------------------------------------------------------------------------------------------------
# Process state (/proc via psutil, launcher and log exit records)

ProcStatus = Literal["R", "S", "D", "Z", "T", "I", "gone", "unknown"]


@dataclass(frozen=True, slots=True)
class ProcessState:
    """A process at one instant. ``cpu_time_s`` grows between samples only if it computes."""

    pid: int
    sampled_at: float
    status: ProcStatus
    cpu_time_s: float | None = None
    rss_bytes: int | None = None
    num_threads: int | None = None
    wchan: str | None = None
    children: tuple[int, ...] = ()
    exit_code: int | None = None
    exit_signal: int | None = None
    # the main thread's voluntary context switches so far (/proc/PID/status is the main thread's
    # own): a thread that waits in the same frame yet keeps switching blocks and wakes again
    voluntary_switches: int | None = None
    # set where the state was not read from the process's own /proc entry (it was gone before
    # the look, its pid unknown: 0): what told it, e.g. an orphan of it that carries its identity
    told_by: str | None = None
    # bytes the main thread read and wrote through system calls so far (rchar + wchar of
    # /proc/PID/task/PID/io: files, pipes and sockets alike): a thread that sleeps between
    # writes of a rate-limited copy is doing I/O, not waiting
    main_io_bytes: int | None = None


# --------------------------------------------------------------------------------------------------
# Logs

Severity = Literal["debug", "info", "warning", "error", "fatal"]


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One meaningful line (or multi-line block) recognised in a log.

    ``kind`` is a short machine name (``nccl_watchdog_timeout``, ``cuda_oom``, ``traceback``,
    ``gloo_connection_closed``...); ``fields`` holds what the parser pulled out of it (seq, op,
    peer, bytes...). ``path:line_no`` is what a finding cites.
    """

    kind: str
    message: str
    path: str
    line_no: int
    rank: int | None = None
    time: float | None = None  # seconds since the epoch, when the line carries a timestamp
    severity: Severity = "info"
    fields: dict[str, str | int | float] = field(default_factory=dict)

    def where(self) -> str:
        return f"{self.path}:{self.line_no}"


# --------------------------------------------------------------------------------------------------
# Flight recorder

FrState = Literal["scheduled", "started", "completed"]


def is_default_pg(pg: str | None) -> bool:
    """Whether a log line's group name is the job's default group: torch prints it as ``0``,
    ``0:default_pg`` or ``default_pg``; a line that names no group (None, "") speaks of it too."""
    return not pg or pg in ("0", "default_pg") or pg.endswith(":default_pg")


@dataclass(frozen=True, slots=True)
class ProcessGroupInfo:
    """A process group as a dump describes it. ``ranks`` are global ranks; None when unknown
    (gloo dumps in torch 2.13 leave it empty)."""

    name: str
    desc: str
    ranks: tuple[int, ...] | None


@dataclass(slots=True)
class FrEntry:
    """One flight-recorder record: one collective or p2p op as one rank issued it.

    ``op`` is the operation without the backend prefix (``all_reduce``, ``send``). For p2p ops
    ``peer`` is the peer's rank inside ``pg_name`` as torch wrote it (``nccl:send 0->1``).
    ``completed`` is True/False when the dump says (state, ``retired``), None when it cannot tell.
    """

    record_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    op: str
    backend: str
    is_p2p: bool
    state: str
    completed: bool | None
    input_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_sizes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    time_created_ns: int | None = None
    time_started_ns: int | None = None
    time_completed_ns: int | None = None
    duration_ms: float | None = None
    timeout_ms: int | None = None
    peer: int | None = None
    frames: tuple[Frame, ...] = ()
    thread_name: str | None = None

    @property
    def seq(self) -> int:
        """The sequence number this op is matched on: p2p and collectives count separately."""
        return self.p2p_seq_id if self.is_p2p else self.collective_seq_id

    def signature(self) -> tuple[str, tuple[tuple[int, ...], ...], tuple[str, ...]]:
        """What must agree across ranks for a collective to match: op, sizes, dtypes."""
        return (self.op, self.input_sizes, self.input_dtypes)


@dataclass(slots=True)
class FrDump:
    """One rank's flight-recorder dump, normalised across torch versions and backends."""

    rank: int
    path: str
    version: str
    backend: str  # "nccl", "gloo", ... taken from the entries' profiling names
    process_groups: dict[str, ProcessGroupInfo]
    pg_status: dict[str, dict[str, int]]
    entries: list[FrEntry]
    host: str | None = None
    torch_version: str | None = None


# --------------------------------------------------------------------------------------------------
# Runtime configuration (libraries, versions, collective-relevant settings)


@dataclass(frozen=True, slots=True)
class ConfigFact:
    """One setting that defines a rank's runtime: ``key`` is ``env:NAME``, ``lib:NAME`` or a
    version (``nccl_version``, ``torch_version``, ``python_version``, ...); ``where`` is the
    bundle file or ``log:line`` it was read from."""

    key: str
    value: str
    source: str  # runtime (read from /proc at collection) | log
    where: str = ""


# --------------------------------------------------------------------------------------------------
# A rank and a job


@dataclass(slots=True)
class RankEvidence:
    """Everything known about one rank. Any part may be missing."""

    rank: int
    host: str | None = None
    pid: int | None = None
    local_rank: int | None = None
    fr: FrDump | None = None
    samples: list[StackSample] = field(default_factory=list)
    proc: list[ProcessState] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)
    worker_pids: list[int] = field(default_factory=list)  # DataLoader workers
    worker_samples: dict[int, list[StackSample]] = field(default_factory=dict)
    worker_proc: dict[int, list[ProcessState]] = field(default_factory=dict)
    config: list[ConfigFact] = field(default_factory=list)  # libraries, versions, settings
    config_env_read: bool = False  # the environment was read whole: a variable absent is unset


@dataclass(frozen=True, slots=True)
class OsFd:
    """One open file descriptor: ``pipe:[4242]``, ``socket:[77]`` or a path; ``flags`` from
    fdinfo (the low two bits: 0 read, 1 write, 2 both); ``dev_ino`` as /proc/locks writes it."""

    fd: int
    target: str
    flags: int | None = None
    dev_ino: str | None = None


@dataclass(frozen=True, slots=True)
class OsLock:
    """One /proc/locks line; ``blocked``: a request waiting for the lock on the same inode."""

    kind: str
    mode: str
    pid: int
    dev_ino: str
    blocked: bool
    line: str


@dataclass(slots=True)
class OsProcess:
    """A rank, a descendant of one, or the holder of a lock one waits on, as /proc showed it."""

    pid: int
    rank: int | None = None
    worker_of: int | None = None  # the rank it descends from
    cmdline: str = ""
    syscall: tuple[str, ...] = ()  # /proc/PID/syscall: number and arguments, or "running"
    wchan: str | None = None
    ppid: int | None = None
    fds: dict[int, OsFd] = field(default_factory=dict)


@dataclass(slots=True)
class OsSnapshot:
    """What the job's processes waited for through the OS at one moment (collect.oswaits)."""

    path: str
    taken_at: float
    processes: dict[int, OsProcess] = field(default_factory=dict)
    locks: list[OsLock] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU as ``nvidia-smi`` showed it at one moment (``sources/nvsmi.py``). ``pci`` is
    ``0000:3b:00`` (as the driver's Xid lines name it); ``pids``: its compute processes."""

    pci: str
    index: int | None = None
    uuid: str = ""
    taken_at: float | None = None
    util_pct: float | None = None
    power_w: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    sm_clock_mhz: float | None = None
    pids: tuple[int, ...] = ()
    host: str | None = None
    where: str = ""  # file:line, or the file, it was read from


_COMM_SETUP = frozenset({"nccl_device", "nccl_init_done"})


@dataclass(slots=True)
class JobEvidence:
    """The whole job as the loaders saw it: per-rank evidence plus what could not be had."""

    ranks: dict[int, RankEvidence] = field(default_factory=dict)
    world_size: int | None = None
    gaps: list[str] = field(default_factory=list)
    unattributed_logs: list[LogEvent] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # files and folders the evidence came from
    # the job's source lines its stacks cite, as read where the job ran: {file: {line: text}}
    source_lines: dict[str, dict[int, str]] = field(default_factory=dict)
    os_waits: list[OsSnapshot] = field(default_factory=list)  # /proc locks, pipes, children
    gpus: list[GpuReading] = field(default_factory=list)  # nvidia-smi readings, every sample
    # rank -> (its CUDA_VISIBLE_DEVICES, its LOCAL_RANK), as attach read them from its environment
    gpu_visible: dict[int, tuple[str, int | None]] = field(default_factory=dict)

    def all_logs(self) -> Iterator[LogEvent]:
        """Every log event of the job: those no rank could be given first, then each rank's."""
        yield from self.unattributed_logs
        for rank_ev in self.ranks.values():
            yield from rank_ev.logs

    def rank(self, rank: int) -> RankEvidence:
        """The rank's evidence, created empty on first use."""
        found = self.ranks.get(rank)
        if found is None:
            found = self.ranks[rank] = RankEvidence(rank=rank)
        return found

    def fr_dumps(self) -> dict[int, FrDump]:
        return {r: ev.fr for r, ev in self.ranks.items() if ev.fr is not None}

    def declared_worlds(self) -> list[LogEvent]:
        """Lines where a launcher or framework states the job's size (``declared_world``: the
        job as a whole, never a subgroup's communicator)."""
        return [e for e in self.all_logs()
                if e.kind == "declared_world" and isinstance(e.fields.get("world"), int)]

    def _communicator_sizes(self) -> list[int]:
        # a communicator NCCL set up ("rank 2 nranks 8 ... Init COMPLETE") spans at most the job
        return [int(e.fields["nranks"]) for e in self.all_logs()
                if e.kind in _COMM_SETUP and isinstance(e.fields.get("nranks"), int)]

    def stated_world_size(self) -> int | None:
        """The job's size as something that knows it says so: a bundle's manifest, a launcher's
        or framework's set-up line (``declared_world``), NCCL's communicator set-up (``nranks``,
        its largest); never inferred from the rank numbers seen."""
        sizes = [self.world_size or 0, *self._communicator_sizes()]
        sizes.extend(int(e.fields["world"]) for e in self.declared_worlds())
        return max(sizes) or None

    def expected_world_size(self) -> int | None:
        """The declared world size, else the largest one the evidence implies."""
        sizes = [self.world_size or 0, max(self.ranks, default=-1) + 1]
        for dump in self.fr_dumps().values():
            sizes.extend(len(pg.ranks) for pg in dump.process_groups.values() if pg.ranks)
        # a log's list of every process's value (Accelerate's shape check: process 0 to N-1)
        sizes.extend(int(e.fields["processes"]) for e in self.all_logs()
                     if e.kind == "shape_check" and isinstance(e.fields.get("processes"), int))
        sizes.extend(self._communicator_sizes())
        best = max(sizes)
        return best or None
