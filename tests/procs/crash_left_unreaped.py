"""A real gloo job whose rank 2 fails before joining, left unreaped by a plain Popen launcher.

Four ranks, started in rank order with only RANK/WORLD_SIZE/MASTER_* (no LOCAL_*, no torchrun).
Each loads its data shard, then calls ``init_process_group``; rank 2's shard is not there, so it
raises FileNotFoundError and exits 1 before it joins. The launcher waits on its ranks in order
(``for p in procs: p.wait()``): it is blocked on rank 0, so rank 2 stays a zombie, and ranks 0,
1 and 3 wait in init_process_group for it. Writes READY (JSON: the launcher's pid, the ranks'
pids) once rank 2 is a zombie and the others are in init.

    python crash_left_unreaped.py READY PORT
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

RANK_CODE = """
import datetime, os, sys
import torch, torch.distributed as dist
ready, rank = sys.argv[1], int(os.environ["RANK"])
shard = os.path.join(os.path.dirname(ready), f"shard-{rank}.pt")
data = torch.load(shard)  # rank 2's shard was never written
with open(f"{ready}.rank{rank}", "w") as out:
    out.write("joining")
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
dist.all_reduce(data)
"""


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def main(ready: str, port: str) -> None:
    import torch

    folder = os.path.dirname(ready)
    for rank in (0, 1, 3):
        torch.save(torch.ones(16), os.path.join(folder, f"shard-{rank}.pt"))
    ranks = []
    for rank in range(4):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port)
        for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            env.pop(name, None)
        ranks.append(subprocess.Popen([sys.executable, "-c", RANK_CODE, ready], env=env))
    while _state(ranks[2].pid) != "Z" or \
            not all(os.path.exists(f"{ready}.rank{r}") for r in (0, 1, 3)):
        time.sleep(0.05)
    time.sleep(1.0)  # from the ready files into init_process_group
    with open(ready + ".tmp", "w") as out:
        json.dump({"launcher": os.getpid(), "ranks": [r.pid for r in ranks],
                   "children": [r.pid for r in ranks]}, out)
    os.replace(ready + ".tmp", ready)
    for proc in ranks:  # in order: rank 2 is reaped only once rank 0 and 1 have ended
        proc.wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
