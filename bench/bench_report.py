#!/usr/bin/env python3
"""Benchmark: size of the HTML report and its load time in a real headless Chromium.

Scenarios (each: analysis -> payload -> page -> browser):

  model-4096   4096 ranks built from hangscope.model objects (tests/report_factories.py):
               40 FR entries per rank, one py-spy sample per rank, rank 2051 missing;
  staircase    the wait graph's worst case (``staircase_evidence``): rank r finished seq r and
               waits in seq r + 1, so every rank is a class of its own and waits on all below;
  synth-N      fixtures/synth_fr.py ``write_large`` NCCL dumps (default group + tp groups of 8
               + dp groups), N ranks x --entries entries, loaded by the real loader.

For each: HTML bytes, embedded JSON bytes, payload build and page render seconds (Python), and in
Chromium (/usr/bin/chromium via playwright, file://, median of --repeat fresh pages) the time from
navigation start to the load event and to the culprit being drawn.

Usage:
  python bench/bench_report.py [--synth-ranks 4096] [--entries 200] [--fr-dir DIR]
                               [--work /tmp/hs-bench-report] [--repeat 5]
                               [--staircase-ranks 4096] [--no-synth] [--no-browser]

``--no-browser`` leaves out the Chromium columns (no playwright needed), ``--no-synth`` the
synth row (its dumps take minutes to write and load): ``--no-synth --no-browser`` times the
analysis and the report of the model-built scenarios in a few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def render(result, path):
    from hangscope.report.html import render_html
    from hangscope.report.payload import build_payload

    t = time.perf_counter()
    build_payload(result)
    payload_s = time.perf_counter() - t
    t = time.perf_counter()
    html = render_html(result)
    render_s = time.perf_counter() - t
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(html)
    data = re.search(r'<script id="report-data" type="application/json">(.*?)</script>', html, re.S)
    return {"html_bytes": len(html.encode()), "json_bytes": len(data.group(1).encode()),
            "payload_s": payload_s, "render_s": render_s,
            "classes": len(result.context.graph.members)}


def browser_times(path, repeat):
    from playwright.sync_api import sync_playwright

    loads, culprits = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for _ in range(repeat):
            page = browser.new_page()
            page.goto("file://" + os.path.abspath(path), wait_until="load")
            page.locator("#facts dd").first.wait_for()
            nav = page.evaluate("JSON.stringify(performance.getEntriesByType('navigation')[0])")
            loads.append(json.loads(nav)["loadEventEnd"] / 1000)
            culprits.append(page.evaluate("performance.now()") / 1000)
            page.close()
        browser.close()
    return statistics.median(loads), statistics.median(culprits)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--synth-ranks", type=int, default=4096)
    ap.add_argument("--entries", type=int, default=200)
    ap.add_argument("--fr-dir", help="existing write_large output to reuse")
    ap.add_argument("--work", default="/tmp/hs-bench-report")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--staircase-ranks", type=int, default=4096)
    ap.add_argument("--no-synth", action="store_true", help="leave out the synth row")
    ap.add_argument("--no-browser", action="store_true", help="leave out the Chromium columns")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)

    from report_factories import large_evidence, staircase_evidence

    from hangscope.options import LoadOptions, OutputOptions
    from hangscope.pipeline import analyze_evidence
    from hangscope.sources.load import load_paths

    rows = []
    t = time.perf_counter()
    result = analyze_evidence(large_evidence(), OutputOptions(write_html=False), None)
    analysis = time.perf_counter() - t
    rows.append(("model-4096 (40 FR entries/rank, py-spy stacks)", 4096, analysis,
                 os.path.join(args.work, "model-4096.html"), result))

    n = args.staircase_ranks
    evidence = staircase_evidence(n)
    t = time.perf_counter()
    result = analyze_evidence(evidence, OutputOptions(write_html=False), None)
    analysis = time.perf_counter() - t
    rows.append((f"staircase (every rank its own class, {result.context.graph.graph.number_of_edges()}"
                 " class edges)", n, analysis, os.path.join(args.work, "staircase.html"), result))

    if not args.no_synth:
        fr_dir = args.fr_dir or os.path.join(args.work, f"synth-{args.synth_ranks}x{args.entries}")
        if not os.path.isdir(fr_dir):
            sys.path.insert(0, os.path.join(ROOT, "fixtures"))
            import synth_fr

            synth_fr.write_large(fr_dir, args.synth_ranks, entries=args.entries)
        t = time.perf_counter()
        evidence, _ = load_paths([fr_dir], LoadOptions())
        result = analyze_evidence(evidence, OutputOptions(write_html=False), None)
        analysis = time.perf_counter() - t
        entries = max(len(r.fr.entries) for r in evidence.ranks.values() if r.fr)
        rows.append((f"synth write_large ({entries} FR entries/rank)", len(evidence.ranks),
                     analysis, os.path.join(args.work, "synth.html"), result))

    print("| scenario | ranks | classes | load+analyze s | payload s | render s | HTML | "
          "JSON in it | Chromium load event | culprit drawn |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, ranks, analysis, path, result in rows:
        m = render(result, path)
        load, drawn = (None, None) if args.no_browser else browser_times(path, args.repeat)
        browser = ("- | -" if load is None else f"{load:.2f} s | {drawn:.2f} s")
        print(f"| {name} | {ranks} | {m['classes']} | {analysis:.2f} | {m['payload_s']:.2f} | "
              f"{m['render_s']:.2f} | {m['html_bytes'] / 1e3:.0f} kB | "
              f"{m['json_bytes'] / 1e3:.0f} kB | {browser} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
