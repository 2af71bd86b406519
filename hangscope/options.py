"""Typed options the CLI builds for the pipeline, kept apart from the code that uses them so that
importing them is cheap: ``attach`` starts collecting before the analysis is even imported."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AttachOptions:
    """How to find a live job and how hard to look at it."""

    pid_group: int | None = None
    pids: tuple[int, ...] = ()
    match: str | None = None
    samples: int = 3
    interval: float = 1.0
    max_samples: int = 8  # while the samples show some rank moving (see collect.attach)
    dump_timeout: float = 5.0
    native: bool = False
    nonblocking: bool = False
    trigger_fr: bool = True
    probe: bool = True  # ask each rank's in-job probe (hangscope.probe) where it runs one
    query_ras: bool = True  # ask NCCL's RAS service on this node (NCCL >= 2.24)
    slurm_job: str | None = None  # this node's processes of SLURM job N (SLURM_JOB_ID)
    slurm_node: str | None = None  # only those with SLURMD_NODENAME = this (virtual nodes)
    timeout: float | None = None  # --timeout: seconds the whole command may take (None: no limit)
    redact: bool = True  # mask secrets in the text files copied into the bundle (hangscope.redact)


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """Hints for reading saved evidence."""

    prefix: str | None = None  # flight-recorder file name prefix, when names are ambiguous
    world_size: int | None = None
    jobs: int | None = None  # processes reading dumps and logs (None: one per usable core)


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Where the verdict and the report go, and what they may show."""

    out_dir: str | None = None
    force: bool = False
    redact: bool = True
    write_html: bool = True
    profile: bool = False  # --profile: count where the time goes (hangscope.timing)
