"""Benchmark: `hangscope attach` (with the report) vs one sequential `py-spy dump` pass.

Starts a real 16-rank gloo job on CPU (fixtures/jobs/missing_rank.py under torchrun), waits until
every rank hangs, then times, side by side in one run:
  (a) one sequential pass of `py-spy dump --json --pid PID` over the ranks (the baseline a person
      would run by hand),
  (b) `hangscope attach --pid-group PGID --samples 1` (discovery, stacks, /proc, logs, analysis,
      verdict.json and report.html),
  (c) `hangscope attach` with its defaults (3 samples ~1 s apart, to tell stuck from slow).
The job is stopped by its process groups at the end. Usage: python bench/bench_attach.py [--ranks 16]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fixtures.jobrunner import running_job  # noqa: E402


def _time(cmd: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, timeout=600)
    return time.perf_counter() - started, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    pyspy = shutil.which("py-spy") or "py-spy"
    work = tempfile.mkdtemp(prefix="bench-attach-")
    rows = []
    with running_job("missing_rank", nproc=args.ranks, ready_dir=os.path.join(work, "ready"),
                     timeout=300) as job:
        time.sleep(2)
        pids = [pid for _, pid in sorted(job.rank_pids.items())]
        for index in range(args.repeat):
            seq_started = time.perf_counter()
            for pid in pids:
                subprocess.run([pyspy, "dump", "--json", "--pid", str(pid)], capture_output=True,
                               timeout=60)
            sequential = time.perf_counter() - seq_started
            one, rc1 = _time([sys.executable, "-m", "hangscope", "attach", "--pid-group",
                              str(job.pgid), "--samples", "1", "--out",
                              os.path.join(work, f"one-{index}")])
            full, rc3 = _time([sys.executable, "-m", "hangscope", "attach", "--pid-group",
                               str(job.pgid), "--out", os.path.join(work, f"full-{index}")])
            rows.append((sequential, one, full, rc1, rc3))
    shutil.rmtree(work, ignore_errors=True)
    print(f"| run | sequential py-spy pass ({args.ranks} ranks) | attach --samples 1 | ratio | "
          "attach (defaults: 3 samples) | exit codes |")
    print("|---|---|---|---|---|---|")
    for index, (seq, one, full, rc1, rc3) in enumerate(rows, 1):
        print(f"| {index} | {seq:.2f} s | {one:.2f} s | {one / seq:.2f}x | {full:.2f} s | "
              f"{rc1}, {rc3} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
