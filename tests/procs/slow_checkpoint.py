"""A real gloo job whose rank 0 writes a checkpoint to a slow volume while the others wait.

Three ranks under a plain Popen launcher. After two all_reduces rank 0 copies a checkpoint in
16 KiB chunks, fsync'd, sleeping between them as a volume of ~40 KiB/s makes a writer wait (for
as long as the test runs), while ranks 1 and 2 wait in ``dist.barrier()``. Its stack sits in one
frame (the sleep) at 1% CPU: only the bytes its main thread writes say it moves. Writes READY
(JSON: the launcher's pid, the ranks' pids) once every rank is in place.

    python slow_checkpoint.py READY PORT
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

RANK_CODE = """
import datetime, os, sys, time
import torch, torch.distributed as dist
ready, rank = sys.argv[1], int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
grads = torch.ones(64)
for step in range(2):
    dist.all_reduce(grads)
with open(f"{ready}.rank{rank}", "w") as out:
    out.write("in place")
if rank == 0:
    chunk = b"x" * (16 << 10)
    with open(f"{ready}.ckpt", "wb") as volume:
        while True:  # the checkpoint outlasts the test
            volume.write(chunk)
            volume.flush()
            os.fsync(volume.fileno())
            time.sleep(len(chunk) / (40 << 10))
dist.barrier()
"""


def main(ready: str, port: str) -> None:
    ranks = []
    for rank in range(3):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="3", LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        ranks.append(subprocess.Popen([sys.executable, "-c", RANK_CODE, ready], env=env))
    while not all(os.path.exists(f"{ready}.rank{r}") for r in range(3)):
        time.sleep(0.05)
    time.sleep(1.0)  # from the ready files into the barrier and the copy
    with open(ready + ".tmp", "w") as out:
        json.dump({"launcher": os.getpid(), "ranks": [r.pid for r in ranks],
                   "children": [r.pid for r in ranks]}, out)
    os.replace(ready + ".tmp", ready)
    for proc in ranks:
        proc.wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
