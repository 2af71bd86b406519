"""Find the processes of one distributed job on this node: launchers, ranks, DataLoader workers.

Why the process tree and not the process group: torchrun 2.13 starts every worker with
``start_new_session=True``, so the launcher's group holds only the launcher. We take the processes
the user pointed at (``--pid-group``, ``--pid``, ``--match``), add all their descendants, and call a
Python process a *rank* when its environment (``/proc/PID/environ``) carries ``RANK`` (or, when a
launcher did not set it, ``SLURM_PROCID`` / ``OMPI_COMM_WORLD_RANK`` / ``PMI_RANK``).

A forked DataLoader worker inherits its rank's environment, so it looks like a second copy of the
rank: a process whose ancestor is already that rank is a worker (or a helper) of it, never a rank.

Only an allow-listed part of each environment is kept (``ENV_ALLOW``): the rest can hold secrets.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import psutil

from hangscope.collect.procstate import sample_process
from hangscope.errors import CollectError, UsageError

# Identity and the settings later collectors need (FR dumps, NCCL logs, error files).
ENV_ALLOW: frozenset[str] = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_ERROR_FILE",
    "MASTER_ADDR", "MASTER_PORT", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_DYNAMIC_FILE_NAME",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_ENABLE_MONITORING",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_DEBUG",
    "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "TORCH_DISTRIBUTED_DEBUG", "TORCH_CPP_LOG_LEVEL",
    "CUDA_VISIBLE_DEVICES", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
})
ENV_ALLOW_PREFIXES: tuple[str, ...] = ("SLURM_",)
# Secrets are sometimes stashed in SLURM_* (job comments, exported vars): never keep these.
_ENV_DENY = re.compile(r"(TOKEN|SECRET|PASSW|KEY|CRED|AUTH)", re.IGNORECASE)
_MAX_ENV_VALUE = 4096

# (environment variable holding the global rank, local rank, world size, local world size)
_IDENTITY_SCHEMES: tuple[tuple[str, str, str, str], ...] = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS"),
)

# Launcher kind -> pattern over the joined command line.
_LAUNCHERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("torchrun", re.compile(r"(^|[/\s])torchrun(\s|$)")),
    ("torch.distributed.run", re.compile(r"-m\s+torch\.distributed\.(run|launch)(\s|$)")),
    ("elastic-agent", re.compile(r"torch\.distributed\.elastic\.agent")),
    ("mpirun", re.compile(r"(^|/)(mpirun|mpiexec|orterun|prterun)(\s|$)")),
    ("srun", re.compile(r"(^|/)srun(\s|$)")),
    ("deepspeed", re.compile(r"(^|[/\s])deepspeed(\s|$)|-m\s+deepspeed\.launcher")),
    ("accelerate", re.compile(r"(^|[/\s])accelerate(\s+launch)(\s|$)|-m\s+accelerate\.commands")),
)
_PYTHON_EXE = re.compile(r"^(python|pypy)[\d.]*[dmu]*$")
_MP_CHILD = re.compile(r"multiprocessing\.(spawn|forkserver)|--multiprocessing-fork")
_MP_HELPER = re.compile(r"multiprocessing\.(resource_tracker|semaphore_tracker)")
_NPROC_ARG = re.compile(r"^--nproc[-_]per[-_]node(?:=(\S+))?$")


@dataclass(slots=True)
class ProcInfo:
    """A process we looked at (a launcher, usually): enough to cite it and find its logs."""

    pid: int
    ppid: int
    name: str
    cmdline: list[str]
    create_time: float
    kind: str = ""  # launcher kind ("torchrun", "mpirun"...), "" for other processes
    status: str = ""


@dataclass(slots=True)
class RankProcess:
    """One live rank on this host, with the identity its launcher gave it."""

    pid: int
    rank: int
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    group_rank: int | None
    run_id: str | None
    master_addr: str | None
    master_port: int | None
    env: dict[str, str]
    cmdline: list[str]
    workers: list[int]
    create_time: float
    identity_from: str = "RANK"  # the variable the rank number came from


@dataclass(slots=True)
class JobProcesses:
    """What ``discover`` found; ``notes`` say what it could not see and why."""

    launchers: list[ProcInfo]
    ranks: list[RankProcess]
    searched: str
    host: str
    expected_local_ranks: set[int] = field(default_factory=set)
    missing_local_ranks: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def rank_pids(self) -> dict[int, int]:
        return {r.rank: r.pid for r in self.ranks}


@dataclass(slots=True)
class _Snap:
    pid: int
    ppid: int
    name: str
    exe: str
    cmdline: list[str]
    create_time: float
    status: str

    @property
    def line(self) -> str:
        return " ".join(self.cmdline) or self.name

    @property
    def is_python(self) -> bool:
        names = [os.path.basename(self.exe), self.name]
        if self.cmdline:
            names.append(os.path.basename(self.cmdline[0]))
        return any(_PYTHON_EXE.match(n) for n in names if n)


def discover(*, pid_group: int | None = None, pids: Sequence[int] = (), match: str | None = None,
             host: str | None = None) -> JobProcesses:
    """Find the job's launchers, ranks and DataLoader workers; raise CollectError if no rank."""
    if pid_group is None and not pids and not match:
        raise UsageError("nothing to search: give --pid-group PGID, --pid PID or --match PATTERN")
    try:
        pattern = re.compile(match) if match else None
    except re.error as exc:
        raise UsageError(f"--match {match!r} is not a valid regular expression: {exc}") from None
    table = _snapshot()
    children: dict[int, list[int]] = {}
    for snap in table.values():
        children.setdefault(snap.ppid, []).append(snap.pid)
    searched = _describe_search(pid_group, pids, match)
    reasons: list[str] = []
    roots = _roots(table, pid_group, pids, pattern, reasons)
    rootset = set(roots)  # walk from the topmost roots only, so parents come before children
    roots = [pid for pid in roots if not rootset.intersection(_ancestors(pid, table))]
    looked = _with_descendants(roots, children)
    ranks, workers_of, launchers, env_reasons = _classify(looked, table, children)
    reasons.extend(env_reasons)
    if not ranks:
        raise CollectError(f"no rank process found: searched {searched}, looked at {len(looked)} "
                           f"process{'es' if len(looked) != 1 else ''}; "
                           + ("; ".join(reasons[:6]) or "none of them exists")
                           + (f"; and {len(reasons) - 6} more" if len(reasons) > 6 else ""))
    for rank in ranks:
        rank.workers = workers_of.get(rank.pid, [])
    # A launcher above a rank the user named directly still matters (its logs, its liveness).
    for rank in ranks:
        for pid in _ancestors(rank.pid, table):
            if launcher_kind(table[pid].cmdline) and pid not in launchers:
                launchers[pid] = _proc_info(table[pid])
    job = JobProcesses(launchers=sorted(launchers.values(), key=lambda p: p.pid),
                       ranks=sorted(ranks, key=lambda r: (r.rank, r.pid)), searched=searched,
                       host=host or socket.gethostname())
    _check_completeness(job, table, children)
    return job


def launcher_kind(cmdline: Sequence[str]) -> str:
    """The launcher a command line runs ("torchrun", "mpirun"...), or "" for none."""
    line = " ".join(cmdline)
    return next((kind for kind, rx in _LAUNCHERS if rx.search(line)), "")


def filter_env(environ: dict[str, str]) -> dict[str, str]:
    """The allow-listed part of an environment, values capped: never store the whole thing."""
    kept = {}
    for name, value in environ.items():
        prefixed = name.startswith(ENV_ALLOW_PREFIXES) and not _ENV_DENY.search(name)
        if name in ENV_ALLOW or prefixed:
            kept[name] = value[:_MAX_ENV_VALUE]
    return kept


def _snapshot() -> dict[int, _Snap]:
    table: dict[int, _Snap] = {}
    attrs = ["pid", "ppid", "name", "exe", "cmdline", "create_time", "status"]
    for proc in psutil.process_iter(attrs, ad_value=None):
        info = proc.info
        table[proc.pid] = _Snap(proc.pid, info["ppid"] or 0, info["name"] or "", info["exe"] or "",
                                list(info["cmdline"] or []), info["create_time"] or 0.0,
                                info["status"] or "")
    return table


def _describe_search(pid_group: int | None, pids: Sequence[int], match: str | None) -> str:
    parts = []
    if pid_group is not None:
        parts.append(f"process group {pid_group}")
    if pids:
        parts.append(f"pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))}")
    if match:
        parts.append(f"command lines matching {match!r}")
    return " + ".join(parts) + " and their descendants"


def _roots(table: dict[int, _Snap], pid_group: int | None, pids: Sequence[int],
           pattern: re.Pattern[str] | None, reasons: list[str]) -> list[int]:
    roots: list[int] = []
    if pid_group is not None:
        members = [pid for pid in table if _pgid(pid) == pid_group]
        if not members:
            reasons.append(f"no process has process group id {pid_group}")
        roots.extend(members)
    for pid in pids:
        if pid in table:
            roots.append(pid)
        else:
            reasons.append(f"pid {pid} does not exist")
    if pattern is not None:
        me = {os.getpid(), *_ancestors(os.getpid(), table)}  # our own shell matches the pattern too
        hits = [pid for pid, s in table.items() if pid not in me and pattern.search(s.line)]
        if not hits:
            reasons.append(f"no command line matches {pattern.pattern!r}")
        roots.extend(hits)
    return list(dict.fromkeys(roots))


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _with_descendants(roots: Iterable[int], children: dict[int, list[int]]) -> list[int]:
    """Roots and everything below them, parents before children."""
    seen: list[int] = []
    stack = list(reversed(list(roots)))
    known: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in known:
            continue
        known.add(pid)
        seen.append(pid)
        stack.extend(reversed(children.get(pid, [])))
    return seen


def _ancestors(pid: int, table: dict[int, _Snap]) -> list[int]:
    out: list[int] = []
    cur = table[pid].ppid if pid in table else 0
    while cur > 0 and cur in table and cur not in out:
        out.append(cur)
        cur = table[cur].ppid
    return out


def _proc_info(snap: _Snap) -> ProcInfo:
    return ProcInfo(snap.pid, snap.ppid, snap.name, snap.cmdline, snap.create_time,
                    launcher_kind(snap.cmdline), snap.status)


def _read_environ(pid: int) -> dict[str, str] | str:
    """The environment, or why it cannot be read."""
    try:
        env: dict[str, str] = psutil.Process(pid).environ()
        return env
    except psutil.ZombieProcess:
        return "is a zombie (exited, not yet reaped): its environment is gone"
    except psutil.NoSuchProcess:
        return "exited while we looked"
    except psutil.AccessDenied:
        return "has an environment we may not read (access denied: another user? try sudo -E)"


def _identity(env: dict[str, str]) -> tuple[str, int, int | None, int | None, int | None] | None:
    for rank_var, local_var, world_var, lws_var in _IDENTITY_SCHEMES:
        rank = _int(env.get(rank_var))
        if rank is not None:
            return (rank_var, rank, _int(env.get(local_var)), _int(env.get(world_var)),
                    _int(env.get(lws_var)))
    return None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip().split("(")[0])  # SLURM_NTASKS_PER_NODE can read "4(x2)"
    except ValueError:
        return None


def _classify(looked: list[int], table: dict[int, _Snap], children: dict[int, list[int]]
              ) -> tuple[list[RankProcess], dict[int, list[int]], dict[int, ProcInfo], list[str]]:
    """Split the processes into ranks, their workers and launchers; say why others are neither."""
    ranks: dict[int, RankProcess] = {}
    owner: dict[int, int] = {}  # pid -> rank pid it belongs to (workers, helpers)
    workers: dict[int, list[int]] = {}
    launchers: dict[int, ProcInfo] = {}
    reasons: list[str] = []
    for pid in looked:
        snap = table[pid]
        parent_owner = owner.get(snap.ppid) if snap.ppid not in ranks else snap.ppid
        if parent_owner is not None:
            owner[pid] = parent_owner
            if _is_worker(snap, table, ranks[parent_owner]):
                workers.setdefault(parent_owner, []).append(pid)
            continue
        kind = launcher_kind(snap.cmdline)
        if kind:
            launchers[pid] = _proc_info(snap)
            if not children.get(pid):
                reasons.append(f"pid {pid} is a launcher ({kind}) with no live child process")
            continue
        if not snap.is_python:
            if not children.get(pid):
                reasons.append(f"pid {pid} ({snap.name or '?'}) is not a python process")
            continue
        env = _read_environ(pid)
        if isinstance(env, str):
            reasons.append(f"pid {pid} {env}")
            continue
        ident = _identity(env)
        if ident is None:
            reasons.append(f"pid {pid} is a python process but has no RANK (nor SLURM_PROCID, "
                           f"OMPI_COMM_WORLD_RANK, PMI_RANK) in its environment")
            continue
        var, rank, local, world, lws = ident
        if var != "RANK" and _has_rank_below(pid, children):
            launchers[pid] = _proc_info(snap)  # a custom launcher inside an srun/mpirun task
            continue
        ranks[pid] = RankProcess(
            pid=pid, rank=rank, local_rank=local, world_size=world, local_world_size=lws,
            group_rank=_int(env.get("GROUP_RANK") or env.get("SLURM_NODEID")),
            run_id=env.get("TORCHELASTIC_RUN_ID") or env.get("SLURM_JOB_ID"),
            master_addr=env.get("MASTER_ADDR"), master_port=_int(env.get("MASTER_PORT")),
            env=filter_env(env), cmdline=snap.cmdline, workers=[], create_time=snap.create_time,
            identity_from=var)
    return list(ranks.values()), workers, launchers, reasons


def _has_rank_below(pid: int, children: dict[int, list[int]]) -> bool:
    for child in _with_descendants(children.get(pid, []), children):
        env = _read_environ(child)
        if isinstance(env, dict) and _int(env.get("RANK")) is not None:
            return True
    return False


def _is_worker(snap: _Snap, table: dict[int, _Snap], rank: RankProcess) -> bool:
    """A multiprocessing child (DataLoader worker) of a rank, not a helper like resource_tracker.

    spawn children say ``multiprocessing.spawn`` in their command line; forkserver children are
    forked by the forkserver, so they share its command line (the forkserver itself is a child of
    the rank); fork children (DataLoader's default) share the rank's exe and command line.
    """
    line = snap.line
    if _MP_HELPER.search(line) or not snap.is_python:
        return False
    if "multiprocessing.forkserver" in line:
        parent = table.get(snap.ppid)
        return parent is not None and parent.line == line  # else: the forkserver server
    if _MP_CHILD.search(line):
        return True
    return snap.cmdline == rank.cmdline


def _check_completeness(job: JobProcesses, table: dict[int, _Snap],
                        children: dict[int, list[int]]) -> None:
    """Fill expected/missing local ranks and explain the gaps we can see from outside."""
    sizes = {r.local_world_size for r in job.ranks if r.local_world_size}
    if not sizes:
        sizes = {n for n in (_nproc_arg(p.cmdline) for p in job.launchers) if n}
    if len(sizes) > 1:
        job.notes.append(f"ranks disagree on LOCAL_WORLD_SIZE ({sorted(sizes)}): "
                         f"more than one job matched?")
    expected = set(range(max(sizes))) if sizes else set()
    found = {r.local_rank for r in job.ranks if r.local_rank is not None}
    job.expected_local_ranks = expected
    unsearched = _unsearched_local_ranks(job, children, expected - found)
    for local, pid in sorted(unsearched.items()):
        job.notes.append(f"local rank {local} runs as pid {pid}, outside what was searched "
                         f"(give the launcher's pid or group to include it)")
    job.missing_local_ranks = sorted(expected - found - set(unsearched))
    seen: dict[int, list[int]] = {}
    for r in job.ranks:
        seen.setdefault(r.rank, []).append(r.pid)
    for rank, pids in sorted(seen.items()):
        if len(pids) > 1:
            job.notes.append(f"rank {rank} is held by {len(pids)} processes "
                             f"({', '.join(map(str, pids))}): more than one job matched?")
    run_ids = {r.run_id for r in job.ranks if r.run_id}
    if len(run_ids) > 1:
        job.notes.append(f"ranks of {len(run_ids)} different runs found: {sorted(run_ids)}")
    for launcher in job.launchers:
        for child in children.get(launcher.pid, []):
            snap = table.get(child)
            if snap is not None and snap.status == psutil.STATUS_ZOMBIE:
                state = sample_process(child)
                how = (f" (signal {state.exit_signal})" if state.exit_signal else
                       f" (exit code {state.exit_code})" if state.exit_code is not None else "")
                job.notes.append(f"pid {child}, a child of launcher {launcher.pid}, has exited"
                                 f"{how} and is not yet reaped")
    if job.missing_local_ranks:
        alive = [p.pid for p in job.launchers if psutil.pid_exists(p.pid)]
        missing = ", ".join(map(str, job.missing_local_ranks))
        if alive:
            job.notes.append(f"local rank(s) {missing} have no process: exited or never started; "
                             f"launcher {alive[0]} is alive, so only it knows the exit code "
                             f"(see its log and TORCHELASTIC_ERROR_FILE)")
        else:
            job.notes.append(f"local rank(s) {missing} have no process and no launcher is alive")


def _unsearched_local_ranks(job: JobProcesses, children: dict[int, list[int]],
                            wanted: set[int]) -> dict[int, int]:
    """Local ranks that do run, as other children of the same launcher, but were not searched."""
    found: dict[int, int] = {}
    ours = {r.pid for r in job.ranks}
    for launcher in job.launchers if wanted else []:
        for child in children.get(launcher.pid, []):
            env = _read_environ(child) if child not in ours else None
            local = _int(env.get("LOCAL_RANK")) if isinstance(env, dict) else None
            if local in wanted and local is not None:
                found.setdefault(local, child)
    return found


def _nproc_arg(cmdline: Sequence[str]) -> int | None:
    for i, arg in enumerate(cmdline):
        m = _NPROC_ARG.match(arg)
        if m:
            value = m.group(1) if m.group(1) is not None else (
                cmdline[i + 1] if i + 1 < len(cmdline) else "")
            return _int(value)
    return None
