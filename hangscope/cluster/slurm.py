"""SLURM fan-out: one ``hangscope collect`` per node of a running job, then one merged analysis.

``attach --slurm-job J`` and ``collect --slurm-job J --out DIR`` run, for every node of job J (from
``squeue -h -j J -o %N`` and ``scontrol show hostnames``)::

    srun --overlap --jobid J -N 1 --ntasks-per-node=1 --nodelist NODE --time MIN \\
         PYTHON -m hangscope collect --slurm-job-local J --slurm-node NODE \\
         --out DIR/NODE --timeout S --quiet

* ``--overlap``: without it the step waits behind the job's own steps forever.
* One step per node, all started at once, not one step over ``-N <all nodes>``: on Slurm 22.05 a
  launch failure on one node (its slurmd dead) cancels the step on every node, so one dead node
  would lose every bundle (tried: ``--no-kill`` does not change it).
* ``PYTHON`` is this interpreter (``sys.executable``): the nodes run the same install.
* Bundles come back through ``DIR``, which must be on a filesystem every node shares (the job's
  working directory usually is); they are not streamed through srun's stdout.

Every step is bounded: the remote collection gets a ``--timeout`` a few seconds shorter than ours,
srun gets ``--time``, and at our deadline each srun still running gets SIGTERM, then SIGKILL, by
its process group. A node that did not leave a finished bundle (a manifest) becomes an evidence
gap that names it and the ranks no bundle holds; the analysis runs on what came back.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

from hangscope.bundle import is_bundle
from hangscope.cluster.runner import (
    FanoutResult,
    NodeResult,
    Step,
    last_line,
    node_gaps,
    run_steps,
    stopped,
)
from hangscope.errors import CollectError, UsageError

__all__ = ["FanoutOptions", "FanoutResult", "NodeResult", "fan_out", "job_nodes", "node_gaps",
           "srun_command"]
log = logging.getLogger(__name__)

# Seconds kept back from --timeout for srun's own start and stop around the remote collection.
_MARGIN = 5.0


@dataclass(frozen=True, slots=True)
class FanoutOptions:
    """What to collect where, and for how long at most."""

    job_id: str
    out_dir: str  # the shared folder: one bundle per node goes to OUT_DIR/<node>
    timeout: float = 60.0
    collect_args: tuple[str, ...] = ()  # extra options for each node's `hangscope collect`
    nodes: tuple[str, ...] = ()  # default: the job's nodes, from squeue


def job_nodes(job_id: str, timeout: float = 10.0) -> list[str]:
    """The nodes the running job holds; UsageError when it is not running or unknown."""
    if not job_id.strip() or not all(part.isdigit() for part in job_id.split("_")):
        raise UsageError(f"--slurm-job {job_id!r} is not a SLURM job id")
    out = _run(["squeue", "-h", "-j", job_id, "-o", "%T %N"], timeout)
    fields = out.split()
    if not fields:
        raise UsageError(f"SLURM job {job_id}: squeue does not list it (finished or unknown)")
    if fields[0] != "RUNNING" or len(fields) < 2:
        raise UsageError(f"SLURM job {job_id} is {fields[0]}, not RUNNING: nothing to attach to")
    return _run(["scontrol", "show", "hostnames", fields[1]], timeout).split()


def srun_command(job_id: str, node: str, bundle: str, remote_timeout: float,
                 collect_args: tuple[str, ...] = (), python: str | None = None) -> list[str]:
    """The one srun step that collects ``node``'s ranks of ``job_id`` into ``bundle``."""
    minutes = max(1, math.ceil((remote_timeout + _MARGIN) / 60))
    return ["srun", "--overlap", "--jobid", job_id, "-N", "1", "--ntasks-per-node=1",
            "--nodelist", node, "--time", str(minutes), "--job-name", "hangscope-collect",
            python or sys.executable, "-m", "hangscope", "collect", "--slurm-job-local", job_id,
            "--slurm-node", node, "--out", bundle, "--timeout", f"{remote_timeout:g}", "--quiet",
            *collect_args]


def fan_out(options: FanoutOptions) -> FanoutResult:
    """Run every node's collection at once, bounded by ``options.timeout`` in all; never raises
    for a node that fails (its NodeResult says why), only when the job has no node at all."""
    started = time.monotonic()
    nodes = list(options.nodes) or job_nodes(options.job_id, min(10.0, options.timeout))
    if not nodes:
        raise CollectError(f"SLURM job {options.job_id}: squeue lists no node")
    if shutil.which("srun") is None:
        raise CollectError("srun is not on the PATH: run this where SLURM's client commands are")
    taken = [n for n in nodes if os.path.lexists(os.path.join(options.out_dir, n))]
    if taken:
        raise UsageError(f"{os.path.join(options.out_dir, taken[0])}: exists already; "
                         "give an empty --out")
    os.makedirs(options.out_dir, exist_ok=True)
    remote = max(5.0, options.timeout - _MARGIN)
    logs = os.path.join(options.out_dir, ".srun")
    os.makedirs(logs, exist_ok=True)
    steps = []
    for node in nodes:
        bundle = os.path.join(options.out_dir, node)
        log_path = os.path.join(logs, f"{node}.log")
        command = srun_command(options.job_id, node, bundle, remote, options.collect_args)
        steps.append(Step(node, bundle, command, log_path, log_path))
    result = FanoutResult(f"SLURM job {options.job_id}", "node")
    result.nodes = run_steps(steps, options.timeout, _outcome, started=started)
    result.seconds = time.monotonic() - started
    return result


def _outcome(step: Step, code: int | None, seconds: float, why: str) -> NodeResult:
    if is_bundle(step.bundle):
        # A finished bundle counts even if srun then failed (exit 4: nothing to collect there
        # leaves no manifest, so it cannot be here).
        return NodeResult(step.node, step.bundle, "ok", "", seconds)
    if code is None:
        return stopped(step, why, seconds)
    last = last_line(step.stdout, first_error=True)
    return NodeResult(step.node, step.bundle, "failed", f"sent no bundle (srun exit {code}"
                      + (f": {last}" if last else "") + ")", seconds)


def _run(command: list[str], timeout: float) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise CollectError(f"{command[0]} is not on the PATH: run this where SLURM's client "
                           "commands are") from None
    except subprocess.TimeoutExpired:
        raise CollectError(f"{' '.join(command)} did not answer within {timeout:g} s "
                           "(slurmctld down?)") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        if "Invalid job id" in reason:
            raise UsageError(f"SLURM job {command[command.index('-j') + 1]}: {reason}")
        raise CollectError(f"{' '.join(command)}: {reason}")
    return done.stdout
