"""Benchmark: `hangscope attach` (with the report) vs one sequential `py-spy dump` pass.

Starts a real N-rank gloo job on CPU (fixtures/jobs/missing_rank.py under torchrun), waits until
every rank hangs, then times, side by side in one run and interleaved per repeat:
  (a) one sequential pass of `py-spy dump --json --pid PID` over the ranks (the baseline a person
      would run by hand), with the py-spy binary hangscope itself uses (not a pyenv shim),
  (b) `hangscope attach --pid-group PGID --samples 1` (discovery, stacks, /proc, logs, analysis,
      verdict.json and report.html),
  (c) `hangscope attach` with its defaults (3 samples 1 s apart, to tell stuck from slow),
  (d) the floor any Python tool with hangscope's dependencies pays: starting the interpreter and
      importing click, psutil, networkx and jinja2, and nothing else.
hangscope is byte-compiled first, as `pip install` does. The ratio is given two ways: of the
medians, and per repeat (each attach against the pass timed just before it). The job is stopped
by its process groups at the end. Usage: python bench/bench_attach.py [--ranks 16 [32 ...]] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from hangscope.collect.pyspy import find_pyspy  # noqa: E402

from fixtures.jobrunner import running_job  # noqa: E402

FLOOR = "import click, psutil, networkx, jinja2"


def _time(cmd: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, timeout=600)
    return time.perf_counter() - started, proc.returncode


def measure(ranks: int, repeat: int, work: str) -> dict[str, list[float]]:
    pyspy = find_pyspy()
    times: dict[str, list[float]] = {"sequential": [], "one": [], "full": [], "floor": []}
    codes: set[int] = set()
    with running_job("missing_rank", nproc=ranks, ready_dir=os.path.join(work, f"ready{ranks}"),
                     timeout=600) as job:
        time.sleep(2)
        pids = [pid for _, pid in sorted(job.rank_pids.items())]
        for index in range(repeat):
            started = time.perf_counter()
            for pid in pids:
                subprocess.run([pyspy, "dump", "--json", "--pid", str(pid)], capture_output=True,
                               timeout=60)
            times["sequential"].append(time.perf_counter() - started)
            attach = [sys.executable, "-m", "hangscope", "attach", "--pid-group", str(job.pgid)]
            seconds, code = _time(attach + ["--samples", "1", "--out",
                                            os.path.join(work, f"one-{ranks}-{index}")])
            times["one"].append(seconds)
            codes.add(code)
            seconds, code = _time(attach + ["--out", os.path.join(work, f"full-{ranks}-{index}")])
            times["full"].append(seconds)
            codes.add(code)
            times["floor"].append(_time([sys.executable, "-c", FLOOR])[0])
    if codes != {3}:
        raise SystemExit(f"attach exit codes {sorted(codes)}: expected 3 (hang found) every time")
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="+", default=[16])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "hangscope")],
                   check=True)
    work = tempfile.mkdtemp(prefix="bench-attach-")
    print(f"median of {args.repeat} (min-max); py-spy: {find_pyspy()}; {os.cpu_count()} cores\n")
    print("| ranks | sequential py-spy pass | attach --samples 1 (with report) | ratio of medians | "
          "ratio per repeat | attach, defaults (3 samples) | python + dependency imports alone |")
    print("|---|---|---|---|---|---|---|")
    for ranks in args.ranks:
        t = measure(ranks, args.repeat, work)

        def cell(key: str) -> str:
            return (f"{statistics.median(t[key]):.2f} s ({min(t[key]):.2f}-{max(t[key]):.2f})")

        ratio = statistics.median(t["one"]) / statistics.median(t["sequential"])
        paired = [one / seq for one, seq in zip(t["one"], t["sequential"], strict=True)]
        print(f"| {ranks} | {cell('sequential')} | {cell('one')} | {ratio:.2f}x | "
              f"{statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f}) | "
              f"{cell('full')} | {cell('floor')} |", flush=True)
    subprocess.run(["rm", "-rf", work], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
