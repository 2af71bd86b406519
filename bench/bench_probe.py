"""Benchmark: what the in-job probe costs a training process (hangscope.probe).

A child process trains a small MLP (DistributedDataParallel over a 1-rank gloo group, so every
step all_reduces its gradients; one intra-op thread) for --steps steps after --warmup steps, and
prints its steps per second. It runs in three set-ups, interleaved per repeat so that drift of a
shared machine hits them alike:

  off    the start-up hook installed (hangscope-probe.pth in the child's site dir), HANGSCOPE_PROBE
         unset: what every Python process pays once the package is installed;
  idle   HANGSCOPE_PROBE=1: the probe's thread listens and is never asked;
  asked  HANGSCOPE_PROBE=1 and a client asks the probe (FR trace, stacks, CUDA, DataLoader) every
         --ask-every seconds while the child trains.

Also timed: interpreter start-up (``python -c pass``) without the hook file, with it and the
variable unset, and with the probe on; and the answer's round trip as the client saw it.
The hook is put into a throwaway user site (PYTHONUSERBASE), this checkout on PYTHONPATH.
Usage: python bench/bench_probe.py [--repeat 5] [--steps 3000] [--write-docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, ROOT)

from hangscope.collect.probe import ask  # noqa: E402
from hangscope.probe.wire import WireError  # noqa: E402

TRAIN = r"""
import os, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 64), torch.randn(64, 1)
def step():
    opt.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
for _ in range(int(sys.argv[2])):
    step()
print("READY", flush=True)
t, c = time.perf_counter(), time.process_time()
for _ in range(int(sys.argv[3])):
    step()
n = int(sys.argv[3])
print(f"STEPS_PER_S {n / (time.perf_counter() - t):.3f} {n / (time.process_time() - c):.3f}",
      flush=True)
dist.destroy_process_group()
os._exit(0)
"""

MARK_BEGIN = "<!-- bench_probe:begin -->"
MARK_END = "<!-- bench_probe:end -->"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(work: str, hook: bool, on: bool) -> dict[str, str]:
    base = os.path.join(work, "hook" if hook else "nohook")
    site = os.path.join(base, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                        "site-packages")
    os.makedirs(site, exist_ok=True)
    if hook:
        shutil.copy(os.path.join(ROOT, "hangscope", "probe", "hangscope-probe.pth"), site)
    env = dict(os.environ, PYTHONUSERBASE=base, PYTHONPATH=ROOT,
               HANGSCOPE_PROBE_DIR=os.path.join(work, "sockets"), TORCH_FR_BUFFER_SIZE="2000")
    env.pop("HANGSCOPE_PROBE", None)
    if on:
        env["HANGSCOPE_PROBE"] = "1"
    return env


def train_once(work: str, mode: str, warmup: int, steps: int, ask_every: float,
               latencies: list[float]) -> tuple[float, float]:
    env = _env(work, hook=True, on=mode != "off")
    proc = subprocess.Popen([sys.executable, "-c", TRAIN, str(_free_port()), str(warmup),
                             str(steps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    stop = threading.Event()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"{mode}: {line}{proc.stderr.read() if proc.stderr else ''}")
        asker = None
        if mode == "asked":
            path = os.path.join(work, "sockets", f"{proc.pid}.sock")

            def loop() -> None:
                while not stop.wait(ask_every):
                    t = time.perf_counter()
                    try:
                        ask(path, timeout_s=5)
                    except (OSError, WireError):
                        return  # the child finished
                    latencies.append((time.perf_counter() - t) * 1000)

            asker = threading.Thread(target=loop, daemon=True)
            asker.start()
        out, err = proc.communicate(timeout=600)
        stop.set()
        if asker is not None:
            asker.join()
        found = re.search(r"STEPS_PER_S ([0-9.]+) ([0-9.]+)", out)
        if not found:
            raise RuntimeError(f"{mode}: no result\n{err[-2000:]}")
        return float(found.group(1)), float(found.group(2))
    finally:
        stop.set()
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def startup_ms(work: str, hook: bool, on: bool, repeat: int) -> float:
    env = _env(work, hook=hook, on=on)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        times.append((time.perf_counter() - t) * 1000)
    return min(times)  # best of N: the machine's noise only ever adds


def hook_line_ns() -> float:
    """What ``site`` runs for hangscope-probe.pth when the variable is unset, timed in-process."""
    import timeit

    with open(os.path.join(ROOT, "hangscope", "probe", "hangscope-probe.pth")) as handle:
        line = handle.read().strip()
    saved = os.environ.pop("HANGSCOPE_PROBE", None)
    try:
        runs = 100_000
        best = min(timeit.repeat(line, repeat=5, number=runs))
    finally:
        if saved is not None:
            os.environ["HANGSCOPE_PROBE"] = saved
    return best / runs * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--ask-every", type=float, default=1.0)
    parser.add_argument("--write-docs")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="hangscope-bench-probe-")
    try:
        rates: dict[str, list[float]] = {"off": [], "idle": [], "asked": []}
        cpu: dict[str, list[float]] = {"off": [], "idle": [], "asked": []}
        latencies: list[float] = []
        for index in range(args.repeat):
            order = list(rates) if index % 2 == 0 else list(reversed(rates))
            for mode in order:
                wall, per_cpu = train_once(work, mode, args.warmup, args.steps,
                                           args.ask_every, latencies)
                rates[mode].append(wall)
                cpu[mode].append(per_cpu)
            print(f"repeat {index + 1}: " + ", ".join(
                f"{m} {rates[m][-1]:.0f}/s {cpu[m][-1]:.0f}/cpu-s" for m in rates), flush=True)
        starts = {"no hook file": startup_ms(work, False, False, 20),
                  "hook, HANGSCOPE_PROBE unset": startup_ms(work, True, False, 20),
                  "hook, HANGSCOPE_PROBE=1": startup_ms(work, True, True, 20)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = render(rates, cpu, latencies, starts, args)
    print(table)
    if args.write_docs:
        with open(args.write_docs) as handle:
            doc = handle.read()
        begin, end = doc.index(MARK_BEGIN) + len(MARK_BEGIN), doc.index(MARK_END)
        with open(args.write_docs, "w") as handle:
            handle.write(doc[:begin] + "\n" + table + doc[end:])


def render(rates: dict[str, list[float]], cpu: dict[str, list[float]], latencies: list[float],
           starts: dict[str, float], args: argparse.Namespace) -> str:
    base, base_cpu = statistics.median(rates["off"]), statistics.median(cpu["off"])
    lines = [f"{platform.machine()}, {os.cpu_count()} cores (shared), Python "
             f"{platform.python_version()}; {args.repeat} interleaved repeats of {args.steps} "
             f"steps after {args.warmup} warm-up steps; asked every {args.ask_every:g} s.", "",
             "| set-up | steps/s, wall (median, min-max) | vs off | steps per CPU-second "
             "(median, min-max) | vs off |", "|---|---|---|---|---|"]
    for mode, label in (("off", "hook installed, HANGSCOPE_PROBE unset"),
                        ("idle", "probe on, never asked"),
                        ("asked", f"probe on, asked every {args.ask_every:g} s")):
        med, med_cpu = statistics.median(rates[mode]), statistics.median(cpu[mode])
        lines.append(f"| {label} | {med:.0f} ({min(rates[mode]):.0f}-{max(rates[mode]):.0f}) "
                     f"| {(med / base - 1) * 100:+.1f}% | {med_cpu:.0f} "
                     f"({min(cpu[mode]):.0f}-{max(cpu[mode]):.0f}) "
                     f"| {(med_cpu / base_cpu - 1) * 100:+.1f}% |")
    lines += ["", "| interpreter start-up (`python -c pass`, best of 20) | ms |", "|---|---|"]
    lines += [f"| {name} | {ms:.1f} |" for name, ms in starts.items()]
    lines += ["", f"The hook's line itself, HANGSCOPE_PROBE unset: {hook_line_ns():.0f} ns "
              "(timeit, best of 5)."]
    if latencies:
        lines += ["", f"Answer round trip while training ({len(latencies)} asks): median "
                  f"{statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
