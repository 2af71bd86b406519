"""Render the sample reports in ``reports/`` from the committed fixtures, plus an index page.

    python -m reports.regenerate            # rewrite reports/*.html
    python -m reports.regenerate --check    # exit 1 when a committed report is stale

Inputs are given relative to the repository root and the analysis runs from there, so the
pages hold no absolute temporary paths; rendering is deterministic (no timestamps), so a stale
report shows up as a byte difference (``tests/test_report_samples.py``).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "reports")


@contextmanager
def _in_root() -> Iterator[None]:
    before = os.getcwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(before)


def samples() -> list[tuple[str, list[str]]]:
    """(report name, input paths relative to the repo root) for every fixture."""
    found: list[tuple[str, list[str]]] = []
    with _in_root():
        for base in sorted(glob.glob("fixtures/recorded/*/")):
            base = base.rstrip("/")
            inputs = [p for p in (os.path.join(base, "fr", "pickle"), os.path.join(base, "logs"),
                                  os.path.join(base, "runtime"))
                      if os.path.isdir(p)]
            inputs += sorted(glob.glob(os.path.join(base, "stacks", "*.json")))
            if inputs:
                found.append((f"recorded-{os.path.basename(base)}", inputs))
        for folder in sorted(glob.glob("fixtures/nccl/*/")):
            folder = folder.rstrip("/")
            found.append((f"nccl-{os.path.basename(folder)}", [folder]))
        skew = sorted(glob.glob("fixtures/logs/config_skew/nccl_version_skew_rank*.log"))
        if skew:  # built logs: two ranks on different NCCL builds and networks
            found.append(("logs-config_skew", skew))
    return found


def render_all(out_dir: str = OUT) -> list[str]:
    """Write every sample report and the index into ``out_dir``; returns the files written."""
    from hangscope.options import LoadOptions, OutputOptions
    from hangscope.pipeline import analyze_evidence
    from hangscope.ranges import format_ranks
    from hangscope.report.html import write_index, write_report
    from hangscope.sources.load import load_paths

    os.makedirs(out_dir, exist_ok=True)
    written, rows = [], []
    with _in_root():
        for name, inputs in samples():
            evidence, _ = load_paths(inputs, LoadOptions())
            result = analyze_evidence(evidence, OutputOptions(write_html=False), None)
            path = os.path.join(out_dir, f"{name}.html")
            written.append(write_report(result, path))
            root = result.verdict.root
            rows.append({"file": f"{name}.html", "name": name,
                         "status": result.verdict.status.value,
                         "culprits": format_ranks(root.culprit_ranks) if root else "",
                         "headline": root.summary if root else "no finding",
                         "source": " ".join(inputs[:2]) + (" ..." if len(inputs) > 2 else "")})
    written.append(write_index(os.path.join(out_dir, "index.html"), rows))
    for name in sorted(set(os.listdir(out_dir)) - {os.path.basename(f) for f in written}):
        if name.endswith(".html"):  # a fixture that is gone: its page goes too
            os.remove(os.path.join(out_dir, name))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.regenerate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    if not args.check:
        files = render_all()
        print(f"wrote {len(files)} files to {os.path.relpath(OUT)}")
        return 0
    import filecmp
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        fresh = render_all(tmp)
        stale = [os.path.basename(f) for f in fresh
                 if not os.path.exists(os.path.join(OUT, os.path.basename(f)))
                 or not filecmp.cmp(f, os.path.join(OUT, os.path.basename(f)), shallow=False)]
    if stale:
        print("stale sample reports (run python -m reports.regenerate): " + ", ".join(stale))
        return 1
    print("sample reports are up to date")
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, ROOT)
    sys.exit(main())
