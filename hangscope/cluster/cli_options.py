"""The SLURM options of ``attach`` and ``collect``, and the fan-out options they build; kept here
so that ``cli.py`` only gains one decorator line per command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from hangscope.cluster.slurm import FanoutOptions

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_TIMEOUT = 60.0


def slurm_options() -> Callable[[F], F]:
    """``--slurm-job`` (fan out over the job's nodes), ``--slurm-job-local`` and ``--slurm-node``
    (this node's processes of a job). The fan-out is bounded by the command's ``--timeout``
    (default 60 s)."""
    decorators = [
        click.option("--slurm-job", metavar="JOBID",
                     help="Collect on every node of this running SLURM job (one srun step per "
                          "node, bundles through --out, which must be on a shared filesystem), "
                          "then analyze them together. See docs/cluster.md."),
        click.option("--slurm-job-local", metavar="JOBID",
                     help="This node's processes of SLURM job JOBID: those with SLURM_JOB_ID="
                          "JOBID in their environment, and their descendants."),
        click.option("--slurm-node", metavar="NAME",
                     help="Only processes whose SLURMD_NODENAME is NAME (virtual nodes that "
                          "share one machine)."),
    ]

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def fanout_options(job_id: str, out_dir: str, timeout: float | None, *, samples: int | None = None,
                   interval: float | None = None, max_samples: int | None = None,
                   native: bool = False, nonblocking: bool = False, no_fr_trigger: bool = False,
                   no_ras: bool = False) -> FanoutOptions:
    """The fan-out, passing on to each node's ``hangscope collect`` the options given here that
    differ from attach's defaults (the remote command line stays short and plain)."""
    args: list[str] = []
    for name, value, default in (("--samples", samples, 3), ("--interval", interval, 1.0),
                                 ("--max-samples", max_samples, 8)):
        if value is not None and value != default:
            args += [name, f"{value:g}" if isinstance(value, float) else str(value)]
    for name, flag in (("--native", native), ("--nonblocking", nonblocking),
                       ("--no-fr-trigger", no_fr_trigger), ("--no-ras", no_ras)):
        if flag:
            args.append(name)
    return FanoutOptions(job_id=job_id, out_dir=out_dir,
                         timeout=timeout if timeout is not None else DEFAULT_TIMEOUT,
                         collect_args=tuple(args))
