"""Find the processes of one distributed job on this node: launchers, ranks, DataLoader workers.

Why the process tree and not the process group: torchrun 2.13 starts every worker with
``start_new_session=True``, so the launcher's group holds only the launcher. We take the processes
the user pointed at (``--pid-group``, ``--pid``, ``--match``), add all their descendants, and call a
Python process a *rank* when its environment (``/proc/PID/environ``) carries ``RANK`` (or, when a
launcher did not set it, ``SLURM_PROCID`` / ``OMPI_COMM_WORLD_RANK`` / ``PMI_RANK``).

One module per step: ``proctree`` walks the process table, ``environ`` reads identity from the
allow-listed environment, ``classify`` tells ranks from workers and launchers, ``completeness``
explains the ranks not found; ``job`` holds what :func:`discover` returns.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Sequence

from hangscope.discover.classify import SPAWN_ORDER, classify, left_behind, proc_info
from hangscope.discover.completeness import check_completeness
from hangscope.discover.environ import ENV_ALLOW, ENV_ALLOW_PREFIXES, filter_env
from hangscope.discover.job import JobProcesses, ProcInfo, RankProcess
from hangscope.discover.proctree import (
    ProcTable,
    ancestors,
    children_of,
    find_roots,
    launcher_kind,
    snapshot,
    with_descendants,
)
from hangscope.discover.slurm_env import on_node, slurm_roots
from hangscope.discover.zombies import zombie_ranks
from hangscope.errors import CollectError, UsageError

__all__ = ["ENV_ALLOW", "ENV_ALLOW_PREFIXES", "JobProcesses", "ProcInfo", "RankProcess",
           "discover", "filter_env", "launcher_kind"]


def discover(*, pid_group: int | None = None, pids: Sequence[int] = (), match: str | None = None,
             host: str | None = None, slurm_job: str | None = None,
             slurm_node: str | None = None) -> JobProcesses:
    """Find the job's launchers, ranks and DataLoader workers; raise CollectError if no rank.

    ``slurm_job`` adds the processes whose environment has ``SLURM_JOB_ID`` = it as roots;
    ``slurm_node`` keeps only roots whose ``SLURMD_NODENAME`` is it (see ``slurm_env``)."""
    if pid_group is None and not pids and not match and slurm_job is None:
        raise UsageError("nothing to search: give --pid-group PGID, --pid PID, --match PATTERN "
                         "or --slurm-job-local JOBID")
    try:
        pattern = re.compile(match) if match else None
    except re.error as exc:
        raise UsageError(f"--match {match!r} is not a valid regular expression: {exc}") from None
    table = snapshot()
    children = children_of(table)
    searched = _describe_search(pid_group, pids, match, slurm_job, slurm_node)
    reasons: list[str] = []
    roots = find_roots(table, pid_group, pids, pattern, reasons) \
        if pid_group is not None or pids or pattern else []
    if slurm_node is not None and roots:
        roots = on_node(roots, slurm_node, reasons)
    if slurm_job is not None:
        roots = list(dict.fromkeys(roots + slurm_roots(table, slurm_job, slurm_node, reasons)))
    rootset = set(roots)  # walk from the topmost roots only, so parents come before children
    roots = [pid for pid in roots if not rootset.intersection(ancestors(pid, table))]
    looked = with_descendants(roots, children)
    ranks, workers_of, launchers, env_reasons = classify(looked, table, children)
    reasons.extend(env_reasons)
    stray = left_behind(ranks, table)
    ranks = [rank for rank in ranks if rank not in [found for found, _ in stray]]
    reasons.extend(why for _, why in stray)
    if not ranks:
        raise CollectError(f"no rank process found: searched {searched}, looked at {len(looked)} "
                           f"process{'es' if len(looked) != 1 else ''}; "
                           + ("; ".join(reasons[:6]) or "none of them exists")
                           + (f"; and {len(reasons) - 6} more" if len(reasons) > 6 else ""))
    for rank in ranks:
        rank.workers = workers_of.get(rank.pid, [])
    # A launcher above a rank the user named directly still matters (its logs, its liveness).
    for rank in ranks:
        for pid in ancestors(rank.pid, table):
            if launcher_kind(table[pid].cmdline) and pid not in launchers:
                launchers[pid] = proc_info(table[pid])
    job = JobProcesses(launchers=sorted(launchers.values(), key=lambda p: p.pid),
                       ranks=sorted(ranks, key=lambda r: (r.rank, r.pid)), searched=searched,
                       host=host or socket.gethostname())
    job.notes.extend(why for _, why in stray)
    job.exited_ranks = _exited(stray, job, table)
    job.zombie_ranks = zombie_ranks(job.ranks, table, children, set(job.exited_ranks))
    job.notes.extend(told for _, told in job.zombie_ranks.values())
    check_completeness(job, table, children)
    spawned = [r for r in job.ranks if r.identity_from == SPAWN_ORDER]
    if spawned:
        job.notes.append(
            f"ranks {', '.join(str(r.rank) for r in spawned)} were started by "
            "torch.multiprocessing.spawn, which passes each its index as an argument, not in its "
            "environment: each is numbered by its place in the start order, which is its global "
            "rank in a one-node job (several nodes: add each node's offset)")
    return job


def _exited(stray: list[tuple[RankProcess, str]], job: JobProcesses,
            table: ProcTable) -> dict[int, str]:
    """The ranks only a left-behind child of theirs is left of: that child was handed to init
    (or a subreaper) because the process that forked it, the rank, has exited."""
    alive = {r.rank for r in job.ranks}
    told: dict[int, str] = {}
    for orphan, _ in stray:
        snap = table.get(orphan.pid)
        if orphan.rank in alive or orphan.rank in told or snap is None:
            continue
        told[orphan.rank] = (
            f"pid {orphan.pid}, which carries rank {orphan.rank}'s identity "
            f"({orphan.identity_from}={orphan.rank}) and started after the ranks, was handed to "
            f"pid {snap.ppid}: the process that forked it, rank {orphan.rank}, has exited")
    return told


def _describe_search(pid_group: int | None, pids: Sequence[int], match: str | None,
                     slurm_job: str | None = None, slurm_node: str | None = None) -> str:
    parts = []
    if pid_group is not None:
        parts.append(f"process group {pid_group}")
    if pids:
        parts.append(f"pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))}")
    if match:
        parts.append(f"command lines matching {match!r}")
    if slurm_job is not None:
        parts.append(f"processes of SLURM job {slurm_job}")
    node = f" on SLURM node {slurm_node}" if slurm_node is not None else ""
    return " + ".join(parts) + f"{node} and their descendants"
