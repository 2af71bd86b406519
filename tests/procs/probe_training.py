"""Deterministic training for the probe's "never hurts training" test (tests/test_probe_live.py): a tiny MLP trained with
DistributedDataParallel over gloo, batches from a DataLoader with 2 forked workers (so the probe's
fork handling and its DataLoader answer are exercised), HANGSCOPE_TRAIN_STEPS steps (default 300).
Every rank writes its ready file once training started. With HANGSCOPE_HOLD_FILE set, each rank
waits before its last step until that file exists (at most HOLD_S): a test that asks the probes
while the job trains releases it when it is done asking, so no ask meets a rank that has already
finished, however slow the machine. Rank 0 prints ``param sha256 <hex>``, the
SHA-256 of every parameter's bytes after training: equal across runs only if every step computed
the same bits. Exits 0 after running the interpreter's exit handlers (see leave())."""

import atexit
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures",
                                "jobs"))

import _common  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

N, D, H, BATCH, LR = 1024, 16, 32, 32, 0.05
HOLD_S = 180.0


def hold() -> None:
    """Before the last step, wait for the test's release file, if it named one."""
    path = os.environ.get("HANGSCOPE_HOLD_FILE")
    deadline = time.monotonic() + HOLD_S
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def train(rank: int, world: int) -> None:
    torch.set_num_threads(1)
    steps = int(os.environ.get("HANGSCOPE_TRAIN_STEPS", "300"))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=g)
    y = torch.sin(x @ torch.randn(D, 1, generator=g))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(D, H), nn.Tanh(), nn.Linear(H, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, sampler=sampler, num_workers=2,
                        persistent_workers=True, multiprocessing_context="fork")
    step, epoch = 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if step == steps - 1:
                hold()
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            step += 1
            if step == 1:
                _common.ready_point("training", dump=False)
            if step >= steps:
                break
        epoch += 1
    digest = hashlib.sha256()
    for p in model.module.parameters():
        digest.update(bytes(p.detach().contiguous().view(torch.uint8).flatten().tolist()))
    if rank == 0:
        print(f"param sha256 {digest.hexdigest()}", flush=True)


def leave() -> None:
    """Exit 0 as a normal exit would, exit handlers included, but skip the interpreter's
    finalization, which aborts about one gloo exit in twenty (see _common._leave_cleanly)."""
    dist.destroy_process_group()
    sys.stdout.flush()
    atexit._run_exitfuncs()
    os._exit(0)


if __name__ == "__main__":
    rank, world = _common.setup()
    train(rank, world)
    leave()
