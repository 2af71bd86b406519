"""Find a SLURM job's processes on this node by their environment, not by a pid.

Every process slurmstepd starts for a job (the batch script, each step's tasks, and whatever they
start: torchrun, its ranks, their DataLoader workers) inherits ``SLURM_JOB_ID`` from it, and
``SLURMD_NODENAME`` names the node the step runs on. On a real cluster one host is one node; where
several ``slurmd -N NAME`` share one machine (a test cluster, or multiple-slurmd builds),
``SLURMD_NODENAME`` is the only way to tell their processes apart, hence ``--slurm-node``.

The roots are the matching processes; discovery then walks their descendants as for ``--pid``.
Three kinds of process match and are never roots: this hangscope process with its ancestors (an
``srun`` step running ``hangscope collect`` carries the job's environment too, and its
``SLURM_PROCID`` would make it look like rank 0), its descendants (py-spy), and any other hangscope
process (the collections of the other virtual nodes on the same machine).
"""

from __future__ import annotations

import os
import re

from hangscope.discover.proctree import ProcTable, ancestors, children_of, with_descendants

_MAX_ENVIRON = 1 << 20
_HANGSCOPE_CMD = re.compile(r"(^|[/\s])hangscope(\s|$)|-m\s+hangscope(\s|$)")


def environ_value(pid: int, name: str) -> str | None:
    """One variable of a process's initial environment, read raw (cheaper than psutil's parse of
    all of it, for every process on the node); None when unset or unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read(_MAX_ENVIRON)
    except OSError:  # gone, a kernel thread, or another user's
        return None
    key = name.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode("utf-8", "replace")
    return None


def slurm_roots(table: ProcTable, job_id: str | None, node: str | None,
                reasons: list[str]) -> list[int]:
    """Processes whose environment has ``SLURM_JOB_ID=job_id`` (any job when None) and, with
    ``node``, ``SLURMD_NODENAME=node``; not hangscope's own (see the module docstring)."""
    me = os.getpid()
    own = {me, *ancestors(me, table), *with_descendants([me], children_of(table))}
    hits: list[int] = []
    job_seen = 0
    for pid, snap in table.items():
        if pid in own:
            continue
        if job_id is not None and environ_value(pid, "SLURM_JOB_ID") != job_id:
            continue
        job_seen += 1
        if node is not None and environ_value(pid, "SLURMD_NODENAME") != node:
            continue
        if _HANGSCOPE_CMD.search(snap.line):
            continue
        hits.append(pid)
    if not hits:
        what = f"SLURM_JOB_ID={job_id}" if job_id is not None else "a SLURM_JOB_ID"
        if job_seen and node is not None:
            reasons.append(f"{job_seen} process(es) have {what} in their environment, none of "
                           f"them SLURMD_NODENAME={node}")
        else:
            reasons.append(f"no process of ours to read has {what} in its environment")
    return hits


def on_node(pids: list[int], node: str, reasons: list[str]) -> list[int]:
    """Of roots found otherwise (--pid, --pid-group, --match), those on ``node``."""
    kept = [pid for pid in pids if environ_value(pid, "SLURMD_NODENAME") == node]
    if len(kept) < len(pids):
        reasons.append(f"{len(pids) - len(kept)} process(es) dropped: not SLURMD_NODENAME={node}")
    return kept
