"""Running one tool in a child process and measuring it (wall time, CPU seconds, peak RSS of the
process tree), and reading what it answered."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_rss(pid: int, cmd: list[str]) -> int:
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
            tree_peak = max(tree_peak, tree_rss(p.pid, full))
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


def log_tail(path: str, n: int = 4000) -> str:
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - n))
        return f.read().decode("utf-8", "replace")


def summarize_frtrace(res: dict, truth: dict, timeout: float) -> str:
    if res["timed_out"]:
        return f"timed out after {timeout:.0f} s"
    tail = log_tail(res["log"])
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
        tail = log_tail(res["log"], 600).strip().splitlines()
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


def cited_records(out: Path) -> str:
    try:
        v = json.loads((out / "verdict.json").read_text())
    except (OSError, ValueError):
        return ""
    cites = [e for f in v.get("findings", []) for e in f.get("evidence", [])
             if "[record " in e.get("detail", "")]
    return f"; cites {len(cites)} FR records" if cites else "; cites no FR record"


def parse_profile(log: str) -> dict[str, list[float]] | None:
    """What ``hangscope analyze --profile`` printed: per phase, [wall, cpu] of the analyzing
    process, then [wall, cpu] summed over the workers where it had any."""
    rows: dict[str, list[float]] = {}
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return None
    if "profile of this run" not in text:
        return None
    for line in text[text.index("profile of this run"):].splitlines()[2:]:
        parts = line.split()
        if not parts:
            break
        try:
            values = [float(p) for p in parts[1:5] if p.replace(".", "", 1).lstrip("-").isdigit()]
        except ValueError:
            break
        rows[parts[0]] = values
        if parts[0] == "total":
            break
    return rows
