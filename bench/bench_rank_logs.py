"""Benchmark ``hangscope analyze`` on a job's rank logs full of ordinary training output.

    python bench/bench_rank_logs.py [--ranks 8] [--mb 1.5] [--baseline GIT_REF] [--rounds 2]
                                    [--bundle]

``bench_logs.py`` times the event scan over NCCL_DEBUG=INFO text; this one times what a user runs
on a dead job's log folder: every rank's log, each over the megabyte of tail the scanners read
whole, of what training prints between failures (framework config dumps, step and loss lines,
progress bars, warnings) and, at the end, rank 5's CUDA OOM while the others' watchdogs time out.
Each side (this tree, and ``--baseline``'s ``hangscope/`` exported with ``git archive``) runs as
``python -m hangscope analyze DIR --json`` in a fresh process, rounds alternating, best wall time
of each; both must name rank 5's OOM. ``--bundle`` files the same logs in a bundle (each under
its rank in the manifest, as attach writes them) and analyzes that instead of the folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_logs import _replace_section, export_revision  # noqa: E402

CULPRIT = 5


def _training_lines(rng: random.Random, rank: int) -> list[str]:
    """One round of what a rank prints while it trains: a mix of the frameworks' own forms."""
    step = rng.randrange(1, 100000)
    stamp = f"[2025-01-02 15:{rng.randrange(60):02d}:{rng.randrange(60):02d},{rng.randrange(1000):03d}]"
    keys = ("stage=0 contiguous_gradients=True reduce_scatter=True reduce_bucket_size=500000000 "
            "allgather_partitions=True allgather_bucket_size=500000000 overlap_comm=True "
            "load_from_fp32_weights=True elastic_checkpoint=False offload_param=None")
    return [
        f"{stamp} [INFO] [config.py:1003:print]   zero_config .................. {keys}",
        f"{stamp} [INFO] [logging.py:96:log_dist] [Rank {rank}] step={step}, skipped=0, "
        f"lr=[{rng.random() * 1e-4:.6e}], mom=[(0.9, 0.95)]",
        f"{{'loss': {rng.random() * 3:.4f}, 'grad_norm': {rng.random() * 5:.4f}, "
        f"'learning_rate': {rng.random() * 2e-5:.3e}, 'epoch': {step / 1e4:.2f}}}",
        f" iteration {step}/  500000 | consumed samples: {step * 128} | elapsed time per iteration "
        f"(ms): {600 + rng.random() * 40:.1f} | learning rate: {rng.random() * 3e-4:.3E} | global "
        f"batch size: 128 | lm loss: {2 + rng.random():.6E} | loss scale: 1.0 | grad norm: "
        f"{rng.random():.3f} | number of skipped iterations: 0 | number of nan iterations: 0 |",
        f"Epoch 0:  {step % 100:2d}%|{'#' * (step % 10)}{' ' * (10 - step % 10)}| "
        f"{step % 1000}/1000 [01:02<07:38,  1.92it/s, loss={rng.random() * 3:.3f}, v_num=0]",
        f"{stamp} [WARNING] [stage_1_and_2.py:1906:step] [deepspeed] OVERFLOW! Rank {rank} Skipping "
        f"step. Attempted loss scale: {2 ** rng.randrange(10, 17)}, reducing to "
        f"{2 ** rng.randrange(5, 10)}",
        "/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:464: UserWarning: "
        "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly.",
        f"{stamp} [INFO] [timer.py:260:stop] epoch=0/micro_step={step}/global_step={step // 4}, "
        f"RunningAvgSamplesPerSec={10 + rng.random():.4f}, CurrSamplesPerSec={10 + rng.random():.4f}, "
        f"MemAllocated=6.8GB, MaxMemAllocated=19.63GB",
    ]


def _ending(rank: int) -> list[str]:
    if rank == CULPRIT:
        return ["Traceback (most recent call last):",
                '  File "/workspace/train.py", line 212, in <module>',
                "    main()",
                '  File "/workspace/train.py", line 190, in main',
                "    loss.backward()",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a "
                "total capacity of 79.15 GiB of which 1.02 GiB is free."]
    return [f"[rank{rank}]:[E102 16:12:33.000000000 ProcessGroupNCCL.cpp:632] [Rank {rank}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9120, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600093 milliseconds before timing out."]


def generate(folder: Path, ranks: int, megabytes: float, seed: int = 11) -> int:
    """Write ``rank{N}.log`` for every rank; returns the bytes written."""
    rng = random.Random(seed)
    total = 0
    for rank in range(ranks):
        lines: list[str] = []
        size = 0
        while size < megabytes * (1 << 20):
            for line in _training_lines(rng, rank):
                lines.append(line)
                size += len(line) + 1
        text = "\n".join(lines + _ending(rank)) + "\n"
        (folder / f"rank{rank}.log").write_text(text, encoding="utf-8")
        total += len(text.encode())
    return total


def as_bundle(folder: Path, ranks: int) -> Path:
    """The logs of ``folder`` as a bundle next to it: ``ranks/N/stdout.log``, listed per rank."""
    root = folder.parent / "bundle"
    entries = {}
    for rank in range(ranks):
        (root / "ranks" / str(rank)).mkdir(parents=True)
        (folder / f"rank{rank}.log").rename(root / "ranks" / str(rank) / "stdout.log")
        entries[str(rank)] = {"host": "bench", "files": [
            {"kind": "log", "path": f"ranks/{rank}/stdout.log"}]}
    manifest = {"schema": "hangscope.bundle/1", "world_size": ranks, "ranks": entries,
                "job_files": [], "gaps": []}
    (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return root


def time_analyze(tree: Path, folder: Path, out: Path) -> dict[str, object]:
    """One ``hangscope analyze`` of ``folder`` by the package in ``tree``, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # (run from the logs' folder: ``-m`` puts the working directory first on the path)
    run = subprocess.run([sys.executable, "-m", "hangscope", "analyze", str(folder), "--json",
                          "--force", "--out", str(out)], env=env, capture_output=True, text=True,
                         cwd=folder.parent)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    verdict = json.loads(run.stdout)
    first = (verdict.get("findings") or [{}])[0]
    return {"wall": wall, "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
            "rss_kib": after.ru_maxrss, "finding": f"{first.get('kind')} {first.get('culprit_ranks')}",
            "ok": first.get("kind") == "rank_oom" and first.get("culprit_ranks") == [CULPRIT]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=float, default=1.5, help="MiB of log per rank")
    parser.add_argument("--baseline", metavar="GIT_REF", help="also time this revision")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each; the best counts")
    parser.add_argument("--bundle", action="store_true", help="the logs filed in a bundle")
    parser.add_argument("--append-docs", action="store_true")
    args = parser.parse_args()
    best: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="hangscope-bench-ranklogs-") as tmp:
        folder = Path(tmp) / "logs"
        folder.mkdir()
        size = generate(folder, args.ranks, args.mb)
        if args.bundle:
            folder = as_bundle(folder, args.ranks)
        sides = {"this tree": ROOT}
        if args.baseline:
            sides[f"baseline `{args.baseline}`"] = export_revision(args.baseline, tmp)
        for _ in range(args.rounds):
            for name, tree in sides.items():
                run = time_analyze(tree, folder, Path(tmp) / "out")
                if name not in best or run["wall"] < best[name]["wall"]:  # type: ignore[operator]
                    best[name] = run
    rows = [f"| {name} | {args.ranks} x {args.mb:g} MiB ({size / 1e6:.1f} MB) | {r['wall']:.2f} s | "
            f"{r['cpu']:.2f} s | {size / (1 << 20) / r['wall']:.1f} MiB/s | "  # type: ignore[operator]
            f"{r['rss_kib'] / 1024:.0f} MiB | {r['finding']} |"  # type: ignore[operator]
            for name, r in best.items()]
    table = ("| tree | rank logs | analyze wall | cpu | throughput | peak RSS | first finding |\n"
             "| --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(rows) + "\n")
    print(table)
    if args.append_docs:
        command = (f"python bench/bench_rank_logs.py --ranks {args.ranks} --mb {args.mb:g} --rounds "
                   f"{args.rounds}" + (f" --baseline {args.baseline}" if args.baseline else "")
                   + " --append-docs")
        text = ("## Analyzing a job's rank logs\n\n"
                f"`{command}` on {platform.processor() or platform.machine()}, Python "
                f"{platform.python_version()}, {os.cpu_count()} cores; each side a fresh "
                "`hangscope analyze DIR --json` process, rounds alternating, best wall time. The logs "
                "are synthetic training output (DeepSpeed config and step lines, HF Trainer dicts, "
                "Megatron iterations, tqdm bars, warnings), rank 5 ending in a CUDA OOM and the "
                "others in watchdog timeouts; see bench/bench_rank_logs.py.\n\n" + table + "\n")
        _replace_section(ROOT / "docs" / "benchmarks.md", "## Analyzing a job's rank logs", text)
    return 0 if all(r["ok"] for r in best.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
