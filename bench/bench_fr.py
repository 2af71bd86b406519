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
hydrating, matching and rendering.

Wall time from the parent; peak RSS two ways: the largest single process of the tree
(ru_maxrss of os.wait4, which covers the waited-for descendants) and the whole tree (the sum
of every live descendant's RSS, sampled every 50 ms with psutil). Children run under an
address-space limit (--mem-limit-gb) so that a tool that would exhaust the machine fails with
MemoryError instead of taking the box down. With playwright, the report of the -jN run is
opened in headless Chromium (median of 3 fresh pages, navigation to load event).

Usage:
  python bench/bench_fr.py --work /tmp/hs-bench [--ranks 8,64,256,1024,4096] [--timeout 1800]
                           [--write-docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import pickle
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PREFIX = "nccl_trace_rank_"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


# ------------------------------------------------------------------ child: load only


def _load_only(d: str) -> int:
    n_files = n_entries = 0
    for name in sorted(os.listdir(d)):
        if not name.startswith(PREFIX):
            continue
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        if name.endswith(".json"):
            obj = json.loads(data)
        else:
            # the fastest way Python reads a pickle. (Until issue 21's third step this was
            # _NoGlobals(io.BytesIO(data)).load(): on a stream without peek() the C unpickler
            # calls read() once per opcode, which made this floor 2-4x too slow.)
            obj = pickle.loads(data)
        n_entries += len(obj.get("entries", ()))
        n_files += 1
        del obj, data
    print(f"load-only: {n_files} files, {n_entries} entries")
    return 0


# ------------------------------------------------------------------ child: time split

# (label, module, attribute): CPU seconds spent inside, one --jobs 1 run in one process
_SPLIT = (
    ("reading", "hangscope.sources.flight_recorder", "_read_bounded"),
    ("unpickle", "hangscope.sources.flight_recorder", "_decode"),
    ("reduce", "hangscope.sources.fr_digest", "_Reducer.digest"),
    ("load total", "hangscope.sources.load", "load_paths"),
    ("analysis", "hangscope.pipeline", "analyze_evidence"),
    ("render (verdict, html)", "hangscope.pipeline", "write_outputs"),
    ("total", "hangscope.pipeline", "analyze_paths"),
)


def _split(d: str, out: str) -> int:
    """Run `hangscope analyze d --jobs 1` in this process with a CPU-time counter around each
    stage (no profiler: the counters cost microseconds per dump) and print where the time went.
    "hydrate" is the parent's share of loading (load total less reading, unpickling and
    reducing); "match" the analysis less the dumps it reads again for the report."""
    import importlib

    from hangscope.cli import main as hs_main

    got = {label: 0.0 for label, _m, _a in _SPLIT}
    depth = {label: 0 for label, _m, _a in _SPLIT}

    def timed(label, fn):
        def wrapper(*args, **kwargs):
            if depth[label]:
                return fn(*args, **kwargs)
            depth[label] += 1
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                got[label] += time.process_time() - start
                depth[label] -= 1
        return wrapper

    for label, module, attr in _SPLIT:
        owner = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, timed(label, getattr(owner, name)))
    from hangscope.sources import load

    loaded = {}
    load_paths = load.load_paths

    def snapshot(*args, **kwargs):
        try:
            return load_paths(*args, **kwargs)
        finally:
            loaded.update(got)

    load.load_paths = snapshot
    try:
        hs_main(["analyze", d, "--out", out, "--json", "--jobs", "1"])
    except SystemExit:
        pass
    again = sum(got[k] - loaded.get(k, 0.0) for k in ("reading", "unpickle", "reduce"))
    got = {k: loaded.get(k, v) if k in ("reading", "unpickle", "reduce") else v
           for k, v in got.items()}
    got["hydrate"] = got["load total"] - got["reading"] - got["unpickle"] - got["reduce"]
    got["match (analysis)"] = got.pop("analysis") - got["render (verdict, html)"] - again
    got["read again for the report"] = again
    print("SPLIT " + json.dumps(got))
    return 0


# ------------------------------------------------------------------ measuring children


def _tree_rss(pid: int, cmd: list[str]) -> int:
    """Bytes resident in pid and all its descendants now (0 once it is gone, and 0 before it
    has exec'd cmd: a child between fork and exec still counts the parent's pages)."""
    import psutil

    try:
        root = psutil.Process(pid)
        if root.cmdline() != cmd:
            return 0
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_child(cmd: list[str], log: Path, timeout: float, mem_limit_gb: float, env=None,
              cwd: Path = ROOT) -> dict:
    """Run cmd with stdout+stderr to log; return wall, peak RSS (MiB: largest process, and the
    whole tree, sampled), rc, timed_out.

    The tool runs under /usr/bin/time, which reports the largest ru_maxrss among the processes it
    waited for. Not os.wait4 on a child of this script: Linux carries the hiwater RSS of the
    address space a process had before exec (this script's, after fork or vfork) into its
    ru_maxrss, so every tool would report at least this script's size. The address-space limit
    is set right after the start."""
    limit = int(mem_limit_gb * 1024**3)
    rss_file = Path(str(log) + ".maxrss")
    rss_file.unlink(missing_ok=True)
    full = ["/usr/bin/time", "-f", "%U %S %M", "-o", str(rss_file), *cmd]
    t0 = time.monotonic()
    tree_peak = 0
    with open(log, "wb") as out:
        p = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                             env=env, cwd=str(cwd))
        if limit > 0:
            try:
                resource.prlimit(p.pid, resource.RLIMIT_AS, (limit, limit))
            except (OSError, ValueError):
                pass
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            tree_peak = max(tree_peak, _tree_rss(p.pid, full))
            if time.monotonic() - t0 > timeout:
                timed_out = True
                os.killpg(p.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.05)
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    p.returncode = rc
    try:
        user, system, maxrss = rss_file.read_text().split()[-3:]
        largest, cpu = int(maxrss) / 1024, float(user) + float(system)
    except (OSError, ValueError, IndexError):
        largest, cpu = 0.0, None  # killed: time wrote nothing
    return {
        "wall_s": wall,
        "cpu_s": cpu,  # user + system of the tool and the children it waited for
        "rss_mib": largest,
        "tree_mib": max(tree_peak / 1024**2, largest),
        "rc": rc,
        "timed_out": timed_out,
        "log": str(log),
    }


def _tail(path: str, n: int = 4000) -> str:
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - n))
        return f.read().decode("utf-8", "replace")


def _head(path: str, n: int = 6000) -> str:
    with open(path, "rb") as f:
        return f.read(n).decode("utf-8", "replace")


def summarize_frtrace(res: dict, truth: dict, timeout: float) -> str:
    if res["timed_out"]:
        return f"timed out after {timeout:.0f} s"
    tail = _tail(res["log"])
    if "Traceback (most recent call last)" in tail or res["rc"] != 0:
        last = [ln for ln in tail.strip().splitlines() if ln.strip()][-1:] or ["?"]
        what = "MemoryError" if "MemoryError" in tail else last[0].strip()[:160]
        return f"crashed (rc={res['rc']}): {what}"
    culprit = (truth.get("culprit_ranks") or [None])[0]
    reports, group = [], None
    with open(res["log"], encoding="utf-8", errors="replace") as f:
        for ln in f:
            if ln.startswith("group info:"):
                group = ln.split(":", 1)[1].strip()
            elif ln.startswith("missing ranks:") or ln.startswith("error msg:"):
                reports.append((group, ln.strip()))
    if culprit is None:
        return "ok: no mismatch reported" if not reports else f"ok: {len(reports)} false reports"
    if not reports:
        return "ok: culprit not reported"
    exact = [g for g, ln in reports if ln == f"missing ranks: {{{culprit}}}"]
    first = f"{reports[0][0]} {reports[0][1]}"
    return f"ok: {len(reports)} reports, first `{first[:60]}`; " + (
        f"culprit alone reported on {', '.join(exact[:3])}"
        if exact
        else "culprit never named alone"
    )


def summarize_hangscope(res: dict, out_dir: Path, truth: dict, timeout: float) -> str:
    if res["timed_out"]:
        return f"timed out after {timeout:.0f} s"
    vpath = out_dir / "verdict.json"
    if not vpath.exists():
        tail = _tail(res["log"], 600).strip().splitlines()
        return f"not available (rc={res['rc']}: {tail[-1][:120] if tail else 'no output'})"
    try:
        v = json.loads(vpath.read_text())
        f0 = (v.get("findings") or [{}])[0]
        got = f0.get("culprit_ranks")
        ok = got == truth.get("culprit_ranks")
        return f"rc={res['rc']}: {v.get('status')} / {f0.get('kind')} culprit={got}" + (
            " (correct)" if ok else f" (expected {truth.get('culprit_ranks')})"
        )
    except Exception as e:  # noqa: BLE001
        return f"verdict unreadable: {e}"


# ------------------------------------------------------------------ dumps (cached)


def ensure_dumps(work: Path, n: int, entries: int, version: str,
                 writer: str = "c10", fmt: str = "pickle",
                 timing: bool = True, shape: str | None = None) -> tuple[Path, dict, dict]:
    """The dumps of one row, written once (cached under work): with ``shape``, one of
    fixtures/fr_shapes.py's SHAPES; else the tp x dp layout in the given version and form."""
    from fixtures import fr_shapes, synth_fr

    if shape is not None:
        d = work / f"fr_{shape}_{n}x{entries}_{writer}"
    else:
        d = work / (f"fr_{n}x{entries}_v{version}_{writer}" + ("_json" if fmt == "json" else "")
                    + ("" if timing else "_untimed"))
    truth_p = d / "expected.json"
    info = {"generated": False, "gen_s": None}
    if truth_p.exists() and len(list(d.glob(PREFIX + "*"))) == n:
        truth = json.loads(truth_p.read_text())
    else:
        if d.exists():
            shutil.rmtree(d)
        t0 = time.monotonic()
        if shape is not None:
            truth = fr_shapes.write(d, shape, n, entries, writer)
        else:
            truth = synth_fr.write_large(d, n, entries, version, fmt, progress=n >= 1024,
                                          writer=writer, timing=timing)
        info = {"generated": True, "gen_s": time.monotonic() - t0}
    info["bytes"] = sum(p.stat().st_size for p in d.glob(PREFIX + "*"))
    return d, truth, info


# ------------------------------------------------------------------ report


def machine() -> dict:
    cpu = "?"
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch  # noqa: F401

        tv = torch.__version__
    except Exception:  # noqa: BLE001
        tv = "not installed"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": round(mem, 1),
        "python": platform.python_version(),
        "torch": tv,
        "date": _dt.date.today().isoformat(),
        "kernel": platform.release(),
    }


def fmt_cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if r.get("timed_out"):
        return f"> {r['wall_s']:.0f} s"
    tree = r.get("tree_mib", r["rss_mib"])
    cpu = f" (cpu {r['cpu_s']:.1f} s)" if r.get("cpu_s") is not None else ""
    return f"{r['wall_s']:.2f} s{cpu} / {tree:.0f} MiB"


def _ratio(a: dict | None, b: dict | None) -> str:
    if not a or not b or a.get("timed_out") or b.get("timed_out") or a.get("rc", 0) not in (0, 3) \
            or b.get("rc", 0) not in (0, 3):
        return "-"
    return f"{a['wall_s'] / b['wall_s']:.2f}x"


def _label(r: dict) -> str:
    return (f"{r['shape']}: " if r.get("shape") else "") + f"{r['ranks']} x {r['entries']}"


def table(rows: list[dict]) -> str:
    base = any("basen" in r or "base1" in r for r in rows)
    out = [
        "| ranks x entries | dumps on disk | floor: load and drop, 1 process "
        + ("| baseline --jobs 1 | baseline --jobs N | baseline N / floor " if base else "")
        + "| hangscope --jobs 1 "
        "| hangscope --jobs N | jobs N / floor | torchfrtrace | torchfrtrace / jobs N "
        "| hangscope result | torchfrtrace result | report opens in |",
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if base else ""),
    ]
    for r in rows:
        report = r.get("report_load_s")
        based = (f"| {fmt_cell(r.get('base1'))} | {fmt_cell(r.get('basen'))} "
                 f"| {_ratio(r.get('basen'), r.get('load'))} ") if base else ""
        out.append(
            f"| {_label(r)} | {r['bytes'] / 1024**2:.0f} MiB "
            f"| {fmt_cell(r.get('load'))} {based}| {fmt_cell(r.get('hs1'))} "
            f"| {fmt_cell(r.get('hsn'))} "
            f"| {_ratio(r.get('hsn'), r.get('load'))} | {fmt_cell(r.get('frtrace'))} "
            f"| {_ratio(r.get('frtrace'), r.get('hsn'))} | {r.get('hangscope_result', '-')} "
            f"| {r.get('frtrace_result', '-')} "
            f"| {f'{report:.2f} s' if isinstance(report, float) else report or '-'} |"
        )
    return "\n".join(out)


SPLIT_COLS = ("reading", "unpickle", "reduce", "hydrate", "match (analysis)",
              "read again for the report", "render (verdict, html)", "total")


def _cpu_ratio(a: dict | None, b: dict | None) -> str:
    if not a or not b or not a.get("cpu_s") or not b.get("cpu_s"):
        return "-"
    return f"{a['cpu_s'] / b['cpu_s']:.2f}x"


def ratio_table(rows: list[dict]) -> str:
    """Each tool against the floor of the same row: wall time, and CPU seconds (which a
    shared machine inflates less)."""
    base = any("basen" in r or "base1" in r for r in rows)
    cols = [("hs1", "--jobs 1"), ("hsn", "--jobs N")]
    if base:
        cols = [("base1", "baseline --jobs 1"), ("basen", "baseline --jobs N"), *cols]
    out = ["| row | " + " | ".join(f"{name}: wall / floor | cpu / floor cpu" for _k, name in cols)
           + " | result |", "|---|" + "---|---|" * len(cols) + "---|"]
    out.extend(f"| {_label(r)} | " + " | ".join(
        f"{_ratio(r.get(k), r.get('load'))} | {_cpu_ratio(r.get(k), r.get('load'))}"
        for k, _n in cols) + f" | {r.get('hangscope_result', '-')} |" for r in rows)
    return "\n".join(out)


def split_table(rows: list[dict]) -> str:
    """Where the CPU time of one `--jobs 1` run goes, seconds."""
    out = ["| ranks x entries | " + " | ".join(SPLIT_COLS) + " |",
           "|---|" + "---|" * len(SPLIT_COLS)]
    for r in rows:
        sp = r.get("split")
        if not sp:
            continue
        out.append(f"| {_label(r)} | "
                   + " | ".join(f"{sp.get(c, 0.0):.2f} s" for c in SPLIT_COLS) + " |")
    return "\n".join(out) if len(out) > 2 else ""


def _markers(writer: str) -> tuple[str, str]:
    """The docs block a writer's results go to (c10-written dumps have their own)."""
    return (BEGIN, END) if writer == "python" else (f"<!-- bench:begin {writer} -->",
                                                    f"<!-- bench:end {writer} -->")


def render_section(rows: list[dict], m: dict, args) -> str:
    begin, end = _markers(getattr(args, "writer", "python"))
    return "\n".join(
        [
            begin,
            f"Measured {m['date']} on {m['cores']} cores ({m['cpu']}), {m['mem_gib']} GiB RAM, "
            f"Linux {m['kernel']}, Python {m['python']}, torch {m['torch']}. "
            f"FR format {args.version}, pickle written like {getattr(args, 'writer', 'python')}. N = {args.jobs_n} (usable cores). Each tool in its "
            "own child process, one after the other; wall time / peak RSS of the whole process "
            "tree (sum over live descendants, sampled every 50 ms; at least the largest process's "
            f"`ru_maxrss`); children limited to {args.mem_limit_gb:g} GiB address space; "
            f"timeout {args.timeout:g} s. Command: `python bench/bench_fr.py {' '.join(args.argv)}`.",
            "",
            table(rows),
            "",
            "CPU-time split of one `hangscope analyze --jobs 1` run in one process (a counter "
            "around each stage, no profiler; hydrate = the parent's share of loading; match = "
            "the analysis less the dumps it reads again for the report and less rendering):",
            "",
            split_table(rows),
            end,
        ]
    )


def write_docs(path: Path, section: str) -> None:
    begin = section.splitlines()[0]
    end = begin.replace("bench:begin", "bench:end")
    if path.exists() and begin in path.read_text():
        txt = path.read_text()
        a, b = txt.index(begin), txt.index(end) + len(end)
        path.write_text(txt[:a] + section + txt[b:])
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# Benchmarks\n\n" + section + "\n")


# ------------------------------------------------------------------ main


def report_load_s(path: Path) -> float | str:
    """Seconds from navigation to the load event of the report in headless Chromium (median of
    3 fresh pages), via bench_report's playwright helper."""
    if not path.exists():
        return "no report"
    try:
        sys.path.insert(0, str(ROOT / "bench"))
        from bench_report import browser_times

        load, _ = browser_times(str(path), 3)
        return float(load)
    except Exception as exc:  # noqa: BLE001 - the table says why
        return f"not measured ({type(exc).__name__})"


def _cited_records(out: Path) -> str:
    try:
        v = json.loads((out / "verdict.json").read_text())
    except (OSError, ValueError):
        return ""
    cites = [e for f in v.get("findings", []) for e in f.get("evidence", [])
             if "[record " in e.get("detail", "")]
    return f"; cites {len(cites)} FR records" if cites else "; cites no FR record"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_load_only":
        return _load_only(argv[1])
    if argv and argv[0] == "_split":
        return _split(argv[1], argv[2])
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
            r = run_child([sys.executable, "-m", "hangscope", "analyze", str(d), "--out", str(out),
                           "--json", "--jobs", str(jobs)],
                          logs / f"{key}_{tag}_j{jobs}.log", args.timeout, args.mem_limit_gb,
                          env=env, cwd=tree)  # python -m puts the cwd first on sys.path
            if key.startswith("base"):
                row[key] = r
                print(f"[{tag}] baseline -j{jobs:<3} {fmt_cell(r)}", flush=True)
                continue
            result = summarize_hangscope(r, out, truth, args.timeout) + _cited_records(out)
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
            lines = [ln for ln in _tail(r["log"]).splitlines() if ln.startswith("SPLIT ")]
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
    if args.write_docs:
        write_docs(Path(args.write_docs), render_section(rows, m, args))
        print(f"\nwrote {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
