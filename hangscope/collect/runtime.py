"""What defines a rank's runtime, read once at collection, read-only and cheap: the libraries its
process has mapped, the interpreter and torch versions, and the settings that change how
collectives behave. Stored per rank as ``ranks/<r>/runtime.json`` (kind ``runtime``)::

    {"schema": "hangscope.runtime/1", "rank": 2, "pid": 4242,
     "exe": "/usr/bin/python3.11", "python_version": "3.11",
     "torch_version": "2.13.0+cpu", "nccl_version": "2.21.5",
     "libraries": {"libnccl": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5",
                   "libtorch_cpu": ".../site-packages/torch/lib/libtorch_cpu.so", ...},
     "env": {"NCCL_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "4", ...},
     "env_read": true}

A saved record is also evidence on its own (``hangscope analyze rank2.runtime.json``): it names
its rank. Sources: ``/proc/PID/maps`` (the files actually mapped: a pip wheel's NCCL loaded
before the system one shows here, not in ``ldconfig``), ``/proc/PID/exe``, ``torch/version.py``
beside the mapped ``libtorch_cpu.so``, a ``nvidia_nccl_cu*-X.dist-info`` folder beside a
wheel's NCCL. The environment is discovery's allow-listed copy (``discover.environ.ENV_ALLOW``)
narrowed to :data:`CONFIG_ENV_NAMES` and :data:`CONFIG_ENV_PREFIXES`: never a whole
environment (secrets), never identity (``RANK``...).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from hangscope.discover import RankProcess

SCHEMA = "hangscope.runtime/1"
KIND = "runtime"
FILE_NAME = "runtime.json"
# Libraries whose build or path decides how collectives and compute behave (basename stems).
_LIBS = re.compile(r"^(libnccl(?:-net\w*)?|libtorch_cpu|libtorch_cuda|libc10|libc10_cuda|"
                   r"libcudart|libcuda|libgloo\w*|libc|libpython[\d.]+|libgomp|libiomp5|"
                   r"libmpi\w*|libibverbs|libucc|libucp|libnvidia-ml|libmlx5)(?:[-.].*)?\.so"
                   r"(?:\.[\w.]+)?$")
_LIBC_OLD = re.compile(r"^libc-(\d+\.\d+)\.so$")
_NCCL_FILE = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)")
_PYTHON = re.compile(r"python(\d+\.\d+)")
_TORCH_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]{1,64})['"]""", re.MULTILINE)
_WHEEL_NCCL = re.compile(r"^nvidia_nccl_cu\d+-(\d+\.\d+\.\d+)\.dist-info$")
CONFIG_ENV_NAMES = frozenset({
    "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCH_DISTRIBUTED_DEBUG", "TORCH_CPP_LOG_LEVEL", "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING",
    "PYTORCH_CUDA_ALLOC_CONF", "LD_PRELOAD", "LD_LIBRARY_PATH",
})
CONFIG_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "GLOO_")
_MAX_MAPS_BYTES = 16 << 20


def config_env(env: dict[str, str]) -> dict[str, str]:
    """The part of an (already allow-listed) environment that changes collective behaviour."""
    return {name: value for name, value in env.items()
            if name in CONFIG_ENV_NAMES or name.startswith(CONFIG_ENV_PREFIXES)}


def describe(rank: RankProcess) -> dict[str, Any]:
    """The runtime record of one live rank (what could not be read is left out)."""
    record: dict[str, Any] = {"schema": SCHEMA, "rank": rank.rank, "pid": rank.pid,
                              "env": config_env(rank.env), "env_read": True}
    exe = _readlink(f"/proc/{rank.pid}/exe")
    if exe:
        record["exe"] = exe
        if m := _PYTHON.search(os.path.basename(exe)):
            record["python_version"] = m.group(1)
    libraries = mapped_libraries(rank.pid)
    record["libraries"] = libraries
    if "python_version" not in record:
        py = next((k for k in libraries if k.startswith("libpython")), None)
        if py and (m := _PYTHON.search(py)):
            record["python_version"] = m.group(1)
    if torch := torch_version(libraries.get("libtorch_cpu")):
        record["torch_version"] = torch
    if nccl := nccl_version(libraries.get("libnccl")):
        record["nccl_version"] = nccl
    return record


def mapped_libraries(pid: int) -> dict[str, str]:
    """Relevant shared libraries in ``/proc/PID/maps``: basename stem -> path (first mapping)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            data = handle.read(_MAX_MAPS_BYTES).decode("utf-8", "replace")
    except OSError:
        return {}
    found: dict[str, str] = {}
    for line in data.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].removesuffix(" (deleted)").strip()
        name = os.path.basename(path)
        if old := _LIBC_OLD.match(name):
            found.setdefault("libc", path)
            found.setdefault("glibc_version", old.group(1))
            continue
        m = _LIBS.match(name)
        if m:
            found.setdefault(m.group(1), path)
    found.pop("glibc_version", None)
    return found


def torch_version(libtorch: str | None) -> str | None:
    """``__version__`` of the torch package whose ``lib/libtorch_cpu.so`` is mapped."""
    if not libtorch:
        return None
    path = os.path.join(os.path.dirname(os.path.dirname(libtorch)), "version.py")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(64 << 10)
    except OSError:
        return None
    m = _TORCH_VERSION.search(text)
    return m.group(1) if m else None


def nccl_version(libnccl: str | None) -> str | None:
    """NCCL's version from its file name (``libnccl.so.2.21.5``), else from the pip wheel's
    ``nvidia_nccl_cu12-2.21.5.dist-info`` beside ``site-packages/nvidia/nccl/lib``."""
    if not libnccl:
        return None
    if m := _NCCL_FILE.search(os.path.basename(libnccl)):
        return m.group(1)
    site = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(libnccl))))
    try:
        names = os.listdir(site)
    except OSError:
        return None
    return next((m.group(1) for n in sorted(names) if (m := _WHEEL_NCCL.match(n))), None)


def to_bytes(record: dict[str, Any]) -> bytes:
    """The record as JSON, ``schema`` first (so a bare file is told by its first bytes)."""
    return json.dumps(record, indent=1).encode()


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path).removesuffix(" (deleted)")
    except OSError:
        return None
