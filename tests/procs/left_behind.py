"""A launcher that starts three 'ranks' (RANK in their environment); rank 2 forks a helper that
keeps its environment, then exits, as a rank that crashes leaves a child behind. Writes READY
(JSON: the launcher's pid, the ranks' pids, the helper's pid) once rank 2 is gone.

    python left_behind.py READY
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

RANK_CODE = """
import os, sys, time
rank = int(os.environ["RANK"])
if rank == 2:
    helper = os.fork()
    if helper == 0:
        time.sleep(600)  # the helper: a metrics sink, say
        os._exit(0)
    with open(sys.argv[1], "w") as out:
        out.write(str(helper))
    time.sleep(0.5)
    os._exit(139)  # rank 2 dies; its helper lives on
time.sleep(600)
"""


def main(ready: str) -> None:
    helper_file = ready + ".helper"
    ranks = []
    for rank in range(3):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="3", LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT="29999")
        ranks.append(subprocess.Popen([sys.executable, "-c", RANK_CODE, helper_file], env=env))
        time.sleep(0.05)
    ranks[2].wait()
    while not os.path.exists(helper_file):
        time.sleep(0.05)
    with open(helper_file) as handle:
        helper = int(handle.read())
    with open(ready + ".tmp", "w") as out:
        json.dump({"launcher": os.getpid(), "ranks": [r.pid for r in ranks], "helper": helper,
                   "children": [r.pid for r in ranks] + [helper]}, out)
    os.replace(ready + ".tmp", ready)
    time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1])
