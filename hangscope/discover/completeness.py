"""What discovery can say about the ranks it did not find: which local ranks the launcher should
have started, which of those run outside the search, which exited, and which job looks mixed in."""

from __future__ import annotations

import re
from collections.abc import Sequence

import psutil

from hangscope.collect.procstate import sample_process
from hangscope.discover.environ import env_int, read_environ
from hangscope.discover.job import JobProcesses
from hangscope.discover.proctree import Children, ProcTable

_NPROC_ARG = re.compile(r"^--nproc[-_]per[-_]node(?:=(\S+))?$")


def check_completeness(job: JobProcesses, table: ProcTable, children: Children) -> None:
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


def _unsearched_local_ranks(job: JobProcesses, children: Children,
                            wanted: set[int]) -> dict[int, int]:
    """Local ranks that do run, as other children of the same launcher, but were not searched."""
    found: dict[int, int] = {}
    ours = {r.pid for r in job.ranks}
    for launcher in job.launchers if wanted else []:
        for child in children.get(launcher.pid, []):
            env = read_environ(child) if child not in ours else None
            local = env_int(env.get("LOCAL_RANK")) if isinstance(env, dict) else None
            if local in wanted and local is not None:
                found.setdefault(local, child)
    return found


def _nproc_arg(cmdline: Sequence[str]) -> int | None:
    """``--nproc-per-node N`` (or ``=N``, any spelling) from a launcher's command line."""
    for i, arg in enumerate(cmdline):
        m = _NPROC_ARG.match(arg)
        if m:
            value = m.group(1) if m.group(1) is not None else (
                cmdline[i + 1] if i + 1 < len(cmdline) else "")
            return env_int(value)
    return None
