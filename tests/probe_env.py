"""Turn the probe on in a job started by a test, the way users do (HANGSCOPE_PROBE=1 and the
installed ``hangscope-probe.pth``), without touching the machine's site-packages: the .pth goes
into a throwaway user site (PYTHONUSERBASE), which ``site`` processes like any site-packages, and
this checkout goes on PYTHONPATH so that the hook imports the code under test."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PTH = REPO / "hangscope" / "probe" / "hangscope-probe.pth"


def probe_env(tmp: Path, on: bool = True) -> dict[str, str]:
    base = tmp / "userbase"
    site = base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(PTH, site)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONUSERBASE": str(base), "PYTHONPATH": path,
           "HANGSCOPE_PROBE_DIR": str(tmp / "sockets"),
           # no dump file anywhere: whatever FR attach gets comes from the probe
           "TORCH_FR_DUMP_TEMP_FILE": str(tmp / "no-dump" / "nccl_trace_rank_")}
    if on:
        env["HANGSCOPE_PROBE"] = "1"
    return env


def wait_sockets(folder: Path, pids: Iterable[int], timeout: float = 30.0) -> None:
    wanted = [folder / f"{pid}.sock" for pid in pids]
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in wanted):
        if time.monotonic() > deadline:
            missing = [p.name for p in wanted if not p.exists()]
            raise TimeoutError(f"no probe socket {missing} in {folder} after {timeout:g} s")
        time.sleep(0.05)


def sockets_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
