"""A real gloo job whose crashed rank leaves a helper behind, under a plain Popen launcher.

Three ranks; each forks a metrics helper after ``init_process_group`` (the helper keeps the
rank's environment and a copy of its gloo sockets, and sleeps). After two all_reduces rank 2
dies of SIGSEGV; its helper, handed to init, still holds rank 2's sockets open, so ranks 0 and 1
get no "connection closed" and wait in the next all_reduce until the gloo timeout. Writes READY
(JSON: the launcher's pid, the ranks' pids, rank 2's helper pid) once rank 2 is gone and the
others have entered the all_reduce.

    python crash_leaves_helper.py READY PORT
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

RANK_CODE = """
import ctypes, datetime, faulthandler, os, sys, time
import torch, torch.distributed as dist
faulthandler.enable()
ready, rank = sys.argv[1], int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
helper = os.fork()
if helper == 0:
    while True:  # the metrics sink: a copy of the rank, its sockets too
        time.sleep(1)
with open(f"{ready}.helper{rank}", "w") as out:
    out.write(str(helper))
grads = torch.ones(64)
for step in range(2):
    dist.all_reduce(grads)
if rank == 2:
    ctypes.string_at(0)  # a bad pointer in a native reader: SIGSEGV
with open(f"{ready}.rank{rank}", "w") as out:
    out.write("entering all_reduce")
dist.all_reduce(grads)
"""


def main(ready: str, port: str) -> None:
    ranks = []
    for rank in range(3):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="3", LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        ranks.append(subprocess.Popen([sys.executable, "-c", RANK_CODE, ready], env=env))
    ranks[2].wait()
    while not all(os.path.exists(f"{ready}.rank{r}") for r in (0, 1)):
        time.sleep(0.05)
    with open(f"{ready}.helper2") as handle:
        helper = int(handle.read())
    time.sleep(0.5)  # from the ready file into the all_reduce
    with open(ready + ".tmp", "w") as out:
        json.dump({"launcher": os.getpid(), "ranks": [r.pid for r in ranks], "helper": helper,
                   "rank2_exit": ranks[2].returncode,
                   "children": [r.pid for r in ranks] + [helper]}, out)
    os.replace(ready + ".tmp", ready)
    time.sleep(900)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
