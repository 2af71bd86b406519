"""Who a process is, read from its environment (``/proc/PID/environ``), and what of it we keep.

A rank's number comes from ``RANK`` or, when a launcher did not set it, ``SLURM_PROCID`` /
``OMPI_COMM_WORLD_RANK`` / ``PMI_RANK``. Only an allow-listed part of each environment is kept
(``ENV_ALLOW``): the rest can hold secrets.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import psutil

# Identity and the settings later collectors need (FR dumps, NCCL logs, error files).
ENV_ALLOW: frozenset[str] = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_ERROR_FILE",
    "MASTER_ADDR", "MASTER_PORT", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_DYNAMIC_FILE_NAME",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_ENABLE_MONITORING",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_DEBUG",
    "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_RAS_ENABLE", "NCCL_RAS_ADDR",
    "NCCL_RAS_TIMEOUT_FACTOR", "TORCH_DISTRIBUTED_DEBUG", "TORCH_CPP_LOG_LEVEL",
    "CUDA_VISIBLE_DEVICES", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    # the node a rank runs on, for bundle manifests (collect/identity.py)
    "SLURMD_NODENAME", "NODE_NAME", "KUBERNETES_NODE_NAME",
    # settings that change how collectives or compute behave, compared across ranks
    # (collect/runtime.py, analysis/config_skew.py)
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING",
    "PYTORCH_CUDA_ALLOC_CONF", "LD_PRELOAD", "LD_LIBRARY_PATH",
})
ENV_ALLOW_PREFIXES: tuple[str, ...] = ("SLURM_", "NCCL_", "TORCH_NCCL_", "TORCH_FR_", "GLOO_")
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


class Identity(NamedTuple):
    """A rank's place in the job, from the first scheme whose rank variable is set."""

    variable: str  # the variable the rank number came from ("RANK", "SLURM_PROCID"...)
    rank: int
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None


def filter_env(environ: dict[str, str]) -> dict[str, str]:
    """The allow-listed part of an environment, values capped: never store the whole thing."""
    kept = {}
    for name, value in environ.items():
        prefixed = name.startswith(ENV_ALLOW_PREFIXES) and not _ENV_DENY.search(name)
        if name in ENV_ALLOW or prefixed:
            kept[name] = value[:_MAX_ENV_VALUE]
    return kept


def read_environ(pid: int) -> dict[str, str] | str:
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


def identity(env: dict[str, str]) -> Identity | None:
    """The rank this environment names, or None when no scheme's rank variable is set."""
    for rank_var, local_var, world_var, lws_var in _IDENTITY_SCHEMES:
        rank = env_int(env.get(rank_var))
        if rank is not None:
            return Identity(rank_var, rank, env_int(env.get(local_var)),
                            env_int(env.get(world_var)), env_int(env.get(lws_var)))
    return None


def env_int(value: str | None) -> int | None:
    """An integer setting, or None when absent or not a number."""
    if value is None:
        return None
    try:
        return int(value.strip().split("(")[0])  # SLURM_NTASKS_PER_NODE can read "4(x2)"
    except ValueError:
        return None
