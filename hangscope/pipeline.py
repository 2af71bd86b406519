"""The one pipeline behind every command: evidence -> verdict -> reports on disk.

Takes typed options and returns values; only ``cli.py`` prints or exits. The analysis and the
report are imported where they are used, not here: ``attach`` gets them ready while py-spy works,
in a forked child where it can (see ``analyzer_process``), since on a small job the imports cost
more than the stack dumps.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import time
from typing import TYPE_CHECKING

from hangscope.errors import UsageError
from hangscope.options import AttachOptions, LoadOptions, OutputOptions
from hangscope.result import Result, Summary

if TYPE_CHECKING:
    from hangscope.analyzer_process import Answer
    from hangscope.collect.attach import CollectSummary
    from hangscope.model import JobEvidence
    from hangscope.progress import Progress

__all__ = ["OutputOptions", "Result", "Summary", "analyze_evidence", "analyze_paths",
           "prepare_analysis", "run_analyze", "run_attach", "run_collect", "run_report",
           "write_outputs"]

# With --timeout, attach keeps this share of it (at least ANALYSIS_MIN_S, at most
# ANALYSIS_MAX_S) for analyzing what it collected and writing the report.
ANALYSIS_SHARE = 0.25
ANALYSIS_MIN_S = 1.0
ANALYSIS_MAX_S = 15.0


def default_out_dir() -> str:
    """A new folder named by the time, made here so that it is ours: two runs in the same second
    (a runbook's retry, two terminals) get ``-2``, ``-3``... instead of refusing each other."""
    base = os.path.abspath(time.strftime("hangscope-%Y%m%d-%H%M%S"))
    for n in range(1, 1000):
        candidate = base if n == 1 else f"{base}-{n}"
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        return candidate
    raise UsageError(f"{base}: 999 output folders this second already; pass --out")


def prepare_out_dir(options: OutputOptions) -> str:
    """Validate ``--out`` before any work: refuse to mix a new run into an old one."""
    out = os.path.abspath(options.out_dir or default_out_dir())
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise UsageError(f"{out}: --out exists and is not a directory")
        if os.listdir(out) and not options.force:
            raise UsageError(f"{out}: --out is not empty (pass --force to overwrite)")
    return out


def run_analyze(paths: list[str], load: LoadOptions, output: OutputOptions) -> Summary:
    """``hangscope analyze``; with ``output.profile``, the summary says where the time went
    (``hangscope.timing``)."""
    if not output.profile:
        return _run_analyze(paths, load, output)
    from hangscope import timing

    with timing.profiling() as profile:
        summary = _run_analyze(paths, load, output)
    summary.profile = profile
    return summary


def _run_analyze(paths: list[str], load: LoadOptions, output: OutputOptions) -> Summary:
    started = time.monotonic()
    out = prepare_out_dir(output)
    try:
        result = analyze_paths(paths, load, output, out)
    except BaseException:
        if not output.out_dir:  # bad input: leave no empty default folder behind
            with contextlib.suppress(OSError):
                os.rmdir(out)
        raise
    result.seconds = time.monotonic() - started
    return result.summary()


def run_attach(attach: AttachOptions, load: LoadOptions, output: OutputOptions, *,
               progress: Progress | None = None) -> Summary:
    """Collect into ``OUT/bundle`` first, then run exactly what ``analyze OUT/bundle`` runs.

    With ``attach.timeout`` the collection ends early enough to leave the analysis its share
    (ANALYSIS_SHARE) of the time: a collection cut short is analyzed as it is, and the verdict's
    evidence gaps say what was cut."""
    from hangscope.analyzer_process import AnalyzerProcess
    from hangscope.bundle import clear_old_bundle

    started = time.monotonic()
    deadline = None
    if attach.timeout is not None:
        reserve = min(ANALYSIS_MAX_S, max(ANALYSIS_MIN_S, ANALYSIS_SHARE * attach.timeout))
        deadline = started + max(0.0, attach.timeout - reserve)
    out = prepare_out_dir(output)
    bundle_dir = os.path.join(out, "bundle")
    clear_old_bundle(bundle_dir)
    analyzer = AnalyzerProcess.start(lambda: prepare_analysis(write_html=True), analyze_answer)
    try:
        from hangscope.collect.attach import collect

        try:
            collected = collect(attach, bundle_dir, meanwhile=None if analyzer else
                                lambda: prepare_analysis(output.write_html),
                                deadline=deadline, progress=progress)
        finally:
            if progress is not None:
                progress.finish()
        answer = analyzer.finish(bundle_dir, out, load, output) if analyzer else None
    finally:
        if analyzer:
            analyzer.cancel()  # after finish(): nothing left to do
    if answer is None:
        summary = analyze_paths([bundle_dir], load, output, out).summary()
    else:
        summary = Summary(answer.verdict, out, answer.files, answer.input_problems)
    summary.collect_tally = collected.tally()
    summary.seconds = time.monotonic() - started
    return summary


def run_collect(attach: AttachOptions, bundle_dir: str, *, force: bool = False,
                progress: Progress | None = None) -> CollectSummary:
    """Collect on this node into ``bundle_dir`` and analyze nothing (``hangscope collect``).

    The bundle is what ``attach`` writes to OUT/bundle; ``analyze`` merges several of them (one
    per node) by global rank. ``attach.timeout`` bounds the whole collection. Raises
    CollectError when nothing could be collected (the manifest, if written, says what was
    tried)."""
    from hangscope.bundle import clear_old_bundle
    from hangscope.errors import CollectError

    started = time.monotonic()
    bundle_dir = os.path.abspath(bundle_dir)
    if os.path.lexists(bundle_dir):
        if not os.path.isdir(bundle_dir) or os.path.islink(bundle_dir):
            raise UsageError(f"{bundle_dir}: --out exists and is not a directory")
        if os.listdir(bundle_dir):
            if not force:
                raise UsageError(f"{bundle_dir}: --out is not empty (pass --force to replace "
                                 "the bundle there)")
            clear_old_bundle(bundle_dir)
    deadline = None if attach.timeout is None else started + attach.timeout
    from hangscope.collect.attach import collect

    try:
        collected = collect(attach, bundle_dir, deadline=deadline, progress=progress)
    finally:
        if progress is not None:
            progress.finish()
    if not collected.files:
        why = "; ".join(collected.gaps[:2]) or "no source gave anything"
        raise CollectError(f"{bundle_dir}: nothing collected ({why})")
    return collected


def analyze_answer(bundle_dir: str, out: str, load: LoadOptions, output: OutputOptions) -> Answer:
    """What the forked analyzer runs on its orders and sends back."""
    from hangscope.analyzer_process import Answer

    summary = analyze_paths([bundle_dir], load, output, out).summary()
    return Answer(summary.verdict, summary.files, summary.input_problems)


def analyze_paths(paths: list[str], load: LoadOptions, output: OutputOptions,
                  out: str | None) -> Result:
    """Load the evidence and analyze it; with ``out``, write verdict.json (and the report)
    there. What ``analyze``, ``report`` and ``attach`` (on its bundle) all run."""
    from hangscope.sources.load import load_paths

    evidence, report = load_paths(paths, load)
    result = analyze_evidence(evidence, output, out)
    result.load_report = report
    return result


def run_report(paths: list[str], load: LoadOptions, redact: bool = True) -> Result:
    """Analyze again from saved evidence (a bundle), writing nothing: the caller renders."""
    started = time.monotonic()
    result = analyze_paths(paths, load, OutputOptions(write_html=False, redact=redact), None)
    result.seconds = time.monotonic() - started
    return result


def analyze_evidence(evidence: JobEvidence, output: OutputOptions, out: str | None) -> Result:
    from hangscope.analysis.engine import analyze

    verdict, ctx = analyze(evidence)
    if output.redact:  # before anything is written or printed: verdict.json travels in tickets
        from hangscope.redact import redact_all

        verdict = redact_all(verdict)
    result = Result(verdict=verdict, context=ctx, evidence=evidence, out_dir=out)
    if out is not None:
        from hangscope import timing

        with timing.phase("render"):
            result.files = write_outputs(result, output, out)
    return result


def write_outputs(result: Result, output: OutputOptions, out: str) -> list[str]:
    os.makedirs(out, exist_ok=True)
    written = []
    verdict_path = os.path.join(out, "verdict.json")
    with open(verdict_path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(result.verdict.to_json(), handle, indent=2, sort_keys=False)
        handle.write("\n")
    os.replace(verdict_path + ".tmp", verdict_path)
    written.append(verdict_path)
    if output.write_html:
        from hangscope.report.html import write_report

        written.append(write_report(result, os.path.join(out, "report.html"),
                                    redact=output.redact))
    return written


def prepare_analysis(write_html: bool) -> None:
    """Import the loaders, the analysis and the report, and compile the report's template, while
    the collectors wait on py-spy.

    On a small job this work (networkx and jinja2 among it) costs more than the stack dumps.
    A failure is ignored here: it happens again, and raises, where the module is used.
    """
    collecting = gc.isenabled()
    gc.disable()  # imports make many objects and no cycles worth a collection
    try:
        import hangscope.analysis.engine
        import hangscope.sources.load  # noqa: F401
        if write_html:
            from hangscope.report.html import prepare

            prepare()
    except Exception:  # noqa: BLE001, S110 - re-raised by the real use later
        pass
    finally:
        if collecting:
            gc.enable()
