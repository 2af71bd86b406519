"""The benchmark's tables (markdown), the machine they ran on, and writing them into
docs/benchmarks.md between markers."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


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


PROFILE_COLS = ("read", "unpickle", "reduce", "wait", "hydrate", "match", "detect", "render",
                "other", "total")


def profile_table(rows: list[dict]) -> str:
    """What this tree's runs printed with --profile: CPU seconds per phase of the analyzing
    process, and in brackets the workers' CPU seconds for that phase, summed."""
    out = ["| row | run | " + " | ".join(PROFILE_COLS) + " |",
           "|---|---|" + "---|" * len(PROFILE_COLS)]
    for r in rows:
        for key, run in (("profile_hs1", "--jobs 1"), ("profile_hsn", "--jobs N")):
            prof = r.get(key)
            if not prof:
                continue
            cells = []
            for col in PROFILE_COLS:
                values = prof.get(col, [])
                cell = f"{values[1]:.2f}" if len(values) > 1 else "-"
                if len(values) > 3 and values[3] > 0.005:
                    cell += f" (+{values[3]:.2f})"
                cells.append(cell)
            out.append(f"| {_label(r)} | {run} | " + " | ".join(cells) + " |")
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
            "",
            "CPU seconds per phase that this tree's runs printed with `--profile` (in brackets: "
            "the worker processes' share, summed):",
            "",
            profile_table(rows),
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
