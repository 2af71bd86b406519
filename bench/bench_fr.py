#!/usr/bin/env python3
"""Benchmark: analyzing N ranks x 2000 NCCL flight-recorder entries.

For each N (default 8,64,512,4096) the script builds (once, cached under --work) the
benchmark layout of fixtures/synth_fr.py (default group + tp groups of 8 + dp groups,
ring buffer of 2000 entries per rank, one tp rank missing from the last tp all_reduce),
then times, each in its own child process, side by side:

  load-only   a child that reads every dump with a restricted unpickler (find_class
              refuses everything) and throws it away: the floor for any analyzer;
  torchfrtrace  torch 2.13's analyzer, `torchfrtrace DIR -p nccl_trace_rank_`
              (analysis mode; `-j` only prints the raw entries, and needs `tabulate`);
  hangscope   `python -m hangscope analyze DIR --out TMP --json`.

Wall time and peak RSS come from os.wait4() on each child (ru_maxrss of that child).
Children run under an address-space limit (--mem-limit-gb) so that a tool that would
exhaust the machine fails with MemoryError instead of taking the box down.

Usage:
  python bench/bench_fr.py --work /tmp/hs-bench [--ranks 8,64,512] [--timeout 1800]
                           [--write-docs docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import io
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


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


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
            obj = _NoGlobals(io.BytesIO(data)).load()
        n_entries += len(obj.get("entries", ()))
        n_files += 1
        del obj, data
    print(f"load-only: {n_files} files, {n_entries} entries")
    return 0


# ------------------------------------------------------------------ measuring children


def run_child(cmd: list[str], log: Path, timeout: float, mem_limit_gb: float, env=None) -> dict:
    """Run cmd with stdout+stderr to log; return wall, peak RSS (MiB), rc, timed_out."""
    limit = int(mem_limit_gb * 1024**3)

    def pre():
        os.setsid()
        if limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    t0 = time.monotonic()
    with open(log, "wb") as out:
        p = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=pre, env=env, cwd=str(ROOT)
        )
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                timed_out = True
                os.killpg(p.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.05)
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    p.returncode = rc
    return {
        "wall_s": wall,
        "rss_mib": ru.ru_maxrss / 1024,
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


def ensure_dumps(work: Path, n: int, entries: int, version: str) -> tuple[Path, dict, dict]:
    from fixtures import synth_fr

    d = work / f"fr_{n}x{entries}_v{version}"
    truth_p = d / "expected.json"
    info = {"generated": False, "gen_s": None}
    if truth_p.exists() and len(list(d.glob(PREFIX + "*"))) == n:
        truth = json.loads(truth_p.read_text())
    else:
        if d.exists():
            shutil.rmtree(d)
        t0 = time.monotonic()
        truth = synth_fr.write_large(d, n, entries, version, progress=n >= 1024)
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
    return f"{r['wall_s']:.2f} s / {r['rss_mib']:.0f} MiB"


def table(rows: list[dict]) -> str:
    out = [
        "| ranks x entries | dumps on disk | load-only (wall / peak RSS) | torchfrtrace (wall / peak RSS) "
        "| torchfrtrace result | hangscope analyze (wall / peak RSS) | hangscope result |",
        "|---|---|---|---|---|---|---|",
    ]
    out.extend(
        f"| {r['ranks']} x {r['entries']} | {r['bytes'] / 1024**2:.0f} MiB | {fmt_cell(r.get('load'))} "
        f"| {fmt_cell(r.get('frtrace'))} | {r.get('frtrace_result', '-')} | {fmt_cell(r.get('hangscope'))} "
        f"| {r.get('hangscope_result', 'pending')} |"
        for r in rows
    )
    return "\n".join(out)


def render_section(rows: list[dict], m: dict, args) -> str:
    return "\n".join(
        [
            BEGIN,
            f"Measured {m['date']} on {m['cores']} cores ({m['cpu']}), {m['mem_gib']} GiB RAM, "
            f"Linux {m['kernel']}, Python {m['python']}, torch {m['torch']}. "
            f"FR format {args.version}, pickle. Each tool in its own child process; wall time and peak RSS "
            f"from `os.wait4`; children limited to {args.mem_limit_gb:g} GiB address space; "
            f"torchfrtrace timeout {args.timeout:g} s. Command: `python bench/bench_fr.py {' '.join(args.argv)}`.",
            "",
            table(rows),
            END,
        ]
    )


def write_docs(path: Path, section: str) -> None:
    if path.exists() and BEGIN in path.read_text():
        txt = path.read_text()
        a, b = txt.index(BEGIN), txt.index(END) + len(END)
        path.write_text(txt[:a] + section + txt[b:])
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# Benchmarks\n\n" + section + "\n")


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_load_only":
        return _load_only(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="8,64,512,4096")
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--version", default="2.10")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "hangscope-bench"))
    ap.add_argument("--timeout", type=float, default=1800.0, help="per tool run, seconds")
    ap.add_argument("--mem-limit-gb", type=float, default=16.0)
    ap.add_argument("--tools", default="load,frtrace,hangscope")
    ap.add_argument(
        "--frtrace-args",
        default="-p " + PREFIX,
        help="extra torchfrtrace flags (e.g. '-j -p nccl_trace_rank_')",
    )
    ap.add_argument("--write-docs", default=None)
    ap.add_argument("--json-out", default=None, help="also write the raw results as JSON")
    ap.add_argument(
        "--from-json",
        default=None,
        help="re-render the table (and --write-docs) from a previous --json-out, "
        "re-reading the tools' logs",
    )
    args = ap.parse_args(argv)
    args.argv = argv
    work = Path(args.work).resolve()
    if str(work).startswith(str(ROOT)):
        ap.error("--work must be outside the repository")
    work.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        prev = json.loads(Path(args.from_json).read_text())
        rows, m = prev["rows"], prev["machine"]
        for r in rows:
            if r.get("frtrace"):
                r["frtrace_result"] = summarize_frtrace(r["frtrace"], r["truth"], args.timeout)
        args.argv = prev.get("argv", argv)
        print(table(rows))
        if args.write_docs:
            write_docs(Path(args.write_docs), render_section(rows, m, args))
        return 0
    tools = set(args.tools.split(","))
    frtrace = shutil.which("torchfrtrace")
    rows = []
    for n in [int(x) for x in args.ranks.split(",") if x]:
        d, truth, info = ensure_dumps(work, n, args.entries, args.version)
        row = {
            "ranks": n,
            "entries": args.entries,
            "bytes": info["bytes"],
            "gen_s": info["gen_s"],
            "truth": {k: truth.get(k) for k in ("kind", "culprit_ranks", "collective")},
        }
        if info["generated"]:
            print(
                f"[{n}] generated {info['bytes'] / 1024**2:.0f} MiB in {info['gen_s']:.1f} s",
                flush=True,
            )
        logs = work / "logs"
        logs.mkdir(exist_ok=True)
        if "load" in tools:
            row["load"] = run_child(
                [sys.executable, __file__, "_load_only", str(d)],
                logs / f"load_{n}.log",
                args.timeout,
                args.mem_limit_gb,
            )
            print(f"[{n}] load-only      {fmt_cell(row['load'])}", flush=True)
        if "frtrace" in tools:
            if frtrace is None:
                row["frtrace_result"] = "not available (torchfrtrace not on PATH)"
            else:
                r = run_child(
                    [frtrace, str(d), *args.frtrace_args.split()],
                    logs / f"frtrace_{n}.log",
                    args.timeout,
                    args.mem_limit_gb,
                )
                row["frtrace"] = r
                row["frtrace_result"] = summarize_frtrace(r, truth, args.timeout)
                print(f"[{n}] torchfrtrace   {fmt_cell(r)}  {row['frtrace_result']}", flush=True)
        if "hangscope" in tools:
            out = work / f"hangscope_out_{n}"
            if out.exists():
                shutil.rmtree(out)
            r = run_child(
                [sys.executable, "-m", "hangscope", "analyze", str(d), "--out", str(out), "--json"],
                logs / f"hangscope_{n}.log",
                args.timeout,
                args.mem_limit_gb,
            )
            row["hangscope_result"] = summarize_hangscope(r, out, truth, args.timeout)
            if (out / "verdict.json").exists() or r["timed_out"]:
                row["hangscope"] = r
            print(
                f"[{n}] hangscope      {fmt_cell(row.get('hangscope'))}  {row['hangscope_result']}",
                flush=True,
            )
        rows.append(row)
    m = machine()
    print()
    print(table(rows))
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps({"machine": m, "rows": rows, "argv": argv}, indent=2, default=str)
        )
    if args.write_docs:
        write_docs(Path(args.write_docs), render_section(rows, m, args))
        print(f"\nwrote {args.write_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
