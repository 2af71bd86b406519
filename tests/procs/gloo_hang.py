"""A 2+ rank gloo job that hangs: rank 0 blocks in all_reduce, the other ranks never join.

    torchrun ... gloo_hang.py READY_DIR NUM_WORKERS

Each rank prints one stdout and one stderr line, optionally starts a DataLoader with
NUM_WORKERS persistent workers (forked, torch's default), then writes READY_DIR/rank<R> =
{"pid": ..., "workers": [...]} and blocks.
"""

import json
import os
import sys
import threading

import torch
import torch.distributed as dist


def main() -> None:
    ready_dir, num_workers = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} up (stdout)", flush=True)
    print(f"rank {rank} up (stderr)", file=sys.stderr, flush=True)
    workers: list[int] = []
    keep = None
    if num_workers:
        from torch.utils.data import DataLoader, TensorDataset

        loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=1,
                            num_workers=num_workers, persistent_workers=True)
        keep = iter(loader)
        next(keep)
        workers = [w.pid for w in keep._workers]
    path = os.path.join(ready_dir, f"rank{rank}")
    with open(path + ".tmp", "w") as handle:
        json.dump({"pid": os.getpid(), "workers": workers}, handle)
    os.replace(path + ".tmp", path)
    if rank == 0:
        dist.all_reduce(torch.ones(1))  # never completes: nobody else joins
    threading.Event().wait()
    del keep


if __name__ == "__main__":
    main()
