#!/usr/bin/env python3
"""Benchmark: analyzing N ranks x 2000 NCCL flight-recorder entries, side by side in one run.

For each N (default 8,64,256,1024,4096) the script builds (once, cached under --work) the
benchmark layout of fixtures/synth_fr.py (default group + tp groups of 8 + dp groups,
ring buffer of 2000 entries per rank, one tp rank missing from the last tp all_reduce),
then times, each in its own child process, one after the other:

  floor        a child that reads every dump, unpickles it with pickle.loads (JSON: json.loads)
               and throws it away, on one core: the floor for any analyzer;
  hangscope -j1  `python -m hangscope analyze DIR --out TMP --json --jobs 1`;
  hangscope -jN  the same with --jobs N (N = usable cores: the default);
  baseline -j1/-jN  with --baseline TREE: the same two runs of another hangscope source tree
               (main before a change, say), PYTHONPATH and working directory set to it;
  torchfrtrace torch 2.13's analyzer, `torchfrtrace DIR -p nccl_trace_rank_` (analysis mode),
               up to --frtrace-max-ranks ranks (beyond, it ran out of memory at 16 GiB).

Dumps are pickled the way c10's Pickler writes real ones (--writer c10, the default:
fixtures/c10_pickle.py) or with the pickle module (--writer python); --version picks the FR
format (2.2 to 2.10), --fmt json writes JSON dumps (2.7 on), --no-timing writes dumps as with
TORCH_NCCL_ENABLE_TIMING off (no duration_ms; synth_fr's write_large). --shape picks one or more
of fixtures/fr_shapes.py's shapes instead (plain data-parallel, 3D-parallel with p2p, long stacks,
without durations or times, FR 2.2 to 2.7, JSON), each with an injected missing rank whose
culprit the result column checks. Tool "split" runs one `--jobs 1` analysis in-process with a CPU-time
counter around each stage and reports the seconds spent reading, unpickling, reducing,
hydrating, matching and rendering; tool "profile" adds `--profile` to this tree's hangscope runs
and tabulates the split they print (the workers' share summed apart).

Wall time from the parent; peak RSS two ways: the largest single process of the tree
(ru_maxrss of os.wait4, which covers the waited-for descendants) and the whole tree (the sum
of every live descendant's RSS, sampled every 50 ms with psutil). Children run under an
address-space limit (--mem-limit-gb) so that a tool that would exhaust the machine fails with
MemoryError instead of taking the box down. With playwright, the report of the -jN run is
opened in headless Chromium (median of 3 fresh pages, navigation to load event).

The parts: fr_gen.py writes and caches the dumps, fr_runners.py runs one tool in a child process
and measures it, fr_children.py is what the floor and split children run, fr_tables.py renders
the tables (and --write-docs); this file is the command line.

Usage:
  python bench/bench_fr.py --work /tmp/hs-bench [--ranks 8,64,256,1024,4096] [--timeout 1800]
                           [--write-docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fr_children import load_only, split  # noqa: E402
from fr_gen import PREFIX, ROOT, ensure_dumps  # noqa: E402
from fr_runners import (  # noqa: E402
    cited_records,
    log_tail,
    parse_profile,
    report_load_s,
    run_child,
    summarize_frtrace,
    summarize_hangscope,
)
from fr_tables import (  # noqa: E402
    fmt_cell,
    machine,
    profile_table,
    ratio_table,
    render_section,
    split_table,
    table,
    write_docs,
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_load_only":
        return load_only(argv[1])
    if argv and argv[0] == "_split":
        return split(argv[1], argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="8,64,256,1024,4096")
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--version", default="2.10")
    ap.add_argument("--writer", default="c10", choices=("c10", "python"),
                    help="c10: pickled the way c10's Pickler writes real dumps (strings memoized "
                    "by value, shared frames); python: the pickle module (slower to unpickle)")
    ap.add_argument("--fmt", default="pickle", choices=("pickle", "json"))
    ap.add_argument("--shape", default=None,
                    help="comma-separated shapes of fixtures/fr_shapes.py (tpdp, dp, 3d, longstack, "
                    "nodur, notimes, v2.2 ... v2.7, json), each with its injected fault; "
                    "replaces --version/--fmt/--no-timing")
    ap.add_argument("--no-timing", action="store_true",
                    help="dumps as with timing off: no duration_ms")
    ap.add_argument("--baseline", default=None,
                    help="a source tree of hangscope (e.g. main before a change) to run beside "
                    "this one, with PYTHONPATH set to it: columns 'baseline --jobs 1/N'")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "hangscope-bench"))
    ap.add_argument("--timeout", type=float, default=1800.0, help="per tool run, seconds")
    ap.add_argument("--mem-limit-gb", type=float, default=16.0)
    ap.add_argument("--tools", default="load,hs1,hsn,frtrace,report,split")
    ap.add_argument("--jobs", type=int, default=None, help="N for hangscope --jobs N "
                    "(default: usable cores)")
    ap.add_argument("--frtrace-max-ranks", type=int, default=1024,
                    help="skip torchfrtrace above this many ranks (it ran out of memory at "
                    "16 GiB at 4096 ranks)")
    ap.add_argument(
        "--frtrace-args",
        default="-p " + PREFIX,
        help="extra torchfrtrace flags (e.g. '-j -p nccl_trace_rank_')",
    )
    ap.add_argument("--write-docs", default=None)
    ap.add_argument("--json-out", default=None, help="also write the raw results as JSON")
    ap.add_argument("--from-json", default=None,
                    help="re-render the table (and --write-docs) from previous --json-out files "
                    "(comma-separated; rows are merged in order)")
    args = ap.parse_args(argv)
    args.argv = argv
    args.jobs_n = args.jobs or len(os.sched_getaffinity(0))
    work = Path(args.work).resolve()
    if str(work).startswith(str(ROOT)):
        ap.error("--work must be outside the repository")
    work.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        rows, m = [], None
        for name in args.from_json.split(","):
            prev = json.loads(Path(name).read_text())
            rows += prev["rows"]
            m = m or prev["machine"]
            args.argv = prev.get("argv", argv)
            args.jobs_n = prev.get("jobs_n", args.jobs_n)
            args.writer = prev.get("writer", "python")
        print(table(rows))
        if args.write_docs:
            write_docs(Path(args.write_docs), render_section(rows, m, args))
        return 0
    tools = set(args.tools.split(","))
    frtrace = shutil.which("torchfrtrace")
    rows = []
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    shapes = args.shape.split(",") if args.shape else [None]
    for shape, n in [(shape, int(x)) for shape in shapes for x in args.ranks.split(",") if x]:
        d, truth, info = ensure_dumps(work, n, args.entries, args.version, args.writer,
                                      args.fmt, not args.no_timing, shape)
        tag = f"{shape}_{n}" if shape else str(n)
        row = {
            "shape": shape,
            "ranks": n,
            "entries": args.entries,
            "bytes": info["bytes"],
            "gen_s": info["gen_s"],
            "truth": {k: truth.get(k) for k in ("kind", "culprit_ranks", "collective")},
        }
        if info["generated"]:
            print(f"[{tag}] generated {info['bytes'] / 1024**2:.0f} MiB in {info['gen_s']:.1f} s",
                  flush=True)
        if "load" in tools:
            row["load"] = run_child([sys.executable, __file__, "_load_only", str(d)],
                                    logs / f"load_{tag}.log", args.timeout, args.mem_limit_gb)
            print(f"[{tag}] floor          {fmt_cell(row['load'])}", flush=True)
        runs = [("hs1", 1, ROOT), ("hsn", args.jobs_n, ROOT)]
        if args.baseline:
            runs = [("base1", 1, Path(args.baseline)), ("basen", args.jobs_n,
                                                        Path(args.baseline)), *runs]
        for key, jobs, tree in runs:
            if key.replace("base", "hs") not in tools:
                continue
            out = work / f"hangscope_out_{tag}_j{jobs}{'_base' if key.startswith('base') else ''}"
            if out.exists():
                shutil.rmtree(out)
            env = {**os.environ, "PYTHONPATH": str(tree)}
            # this tree's runs say where their time went (--profile: a few microseconds a dump)
            profiled = "profile" in tools and not key.startswith("base")
            r = run_child([sys.executable, "-m", "hangscope", "analyze", str(d), "--out", str(out),
                           "--json", "--jobs", str(jobs), *(["--profile"] if profiled else [])],
                          logs / f"{key}_{tag}_j{jobs}.log", args.timeout, args.mem_limit_gb,
                          env=env, cwd=tree)  # python -m puts the cwd first on sys.path
            if profiled:
                row[f"profile_{key}"] = parse_profile(r["log"])
            if key.startswith("base"):
                row[key] = r
                print(f"[{tag}] baseline -j{jobs:<3} {fmt_cell(r)}", flush=True)
                continue
            result = summarize_hangscope(r, out, truth, args.timeout) + cited_records(out)
            if (out / "verdict.json").exists() or r["timed_out"]:
                row[key] = r
            if key == "hsn" or "hsn" not in tools:
                row["hangscope_result"] = result
            print(f"[{tag}] hangscope -j{jobs:<3} {fmt_cell(row.get(key))}  {result}", flush=True)
            if key == "hsn" and "report" in tools:
                row["report_load_s"] = report_load_s(out / "report.html")
                print(f"[{tag}] report opens   {row['report_load_s']}", flush=True)
        if "split" in tools:
            out = work / f"hangscope_split_{tag}"
            if out.exists():
                shutil.rmtree(out)
            r = run_child([sys.executable, __file__, "_split", str(d), str(out)],
                          logs / f"split_{tag}.log", args.timeout, args.mem_limit_gb)
            lines = [ln for ln in log_tail(r["log"]).splitlines() if ln.startswith("SPLIT ")]
            row["split"] = json.loads(lines[-1][6:]) if lines else None
            print(f"[{tag}] split          {row['split']}", flush=True)
        if "frtrace" in tools:
            if frtrace is None:
                row["frtrace_result"] = "not available (torchfrtrace not on PATH)"
            elif n > args.frtrace_max_ranks:
                row["frtrace_result"] = (f"skipped above {args.frtrace_max_ranks} ranks (ran out "
                                         "of memory at 16 GiB at 4096 x 2000)")
            else:
                r = run_child([frtrace, str(d), *args.frtrace_args.split()],
                              logs / f"frtrace_{tag}.log", args.timeout, args.mem_limit_gb)
                row["frtrace"] = r
                row["frtrace_result"] = summarize_frtrace(r, truth, args.timeout)
                print(f"[{tag}] torchfrtrace   {fmt_cell(r)}  {row['frtrace_result']}", flush=True)
        rows.append(row)
        if args.json_out:  # after every size: a long run that is cut short keeps its rows
            Path(args.json_out).write_text(json.dumps(
                {"machine": machine(), "rows": rows, "argv": argv, "jobs_n": args.jobs_n,
                 "writer": args.writer},
                indent=2, default=str))
    m = machine()
    print()
    print(table(rows))
    print()
    print(ratio_table(rows))
    print()
    print(split_table(rows))
    print()
    print(profile_table(rows))
    if args.write_docs:
        write_docs(Path(args.write_docs), render_section(rows, m, args))
        print(f"\nwrote {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
