"""straggler, from a straggler detector's own report (``sources/logs/perf_reports.py``).

Rules, named in ``measures["rule"]``:

* ``straggler-report`` (0.75): the detector warned and named the ranks below its threshold
  (NVRx's ``STRAGGLER DETECTION WARNING ... Affected ranks: {...}``). Basis: the tool measured
  every rank's kernels against the others' and its own history; it is the better judge of speed
  than anything a log line's timing gives.
* ``low-perf-score`` (0.6): no warning, but the printed per-rank scores (1.0 = best) put some ranks
  under ``THRESHOLD`` (NVRx's default threshold for both measures), the others above it.

A report that found nobody slow is not a finding: ``log_health.logs_report_clean`` reads it as
a healthy run where nothing else failed. A straggler still moves, so neither rule explains a
hang that other evidence shows; they rank below the detectors of waits and deaths.
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.verdict import Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase
from hangscope.sources.logs.perf_reports import THRESHOLD, parse_scores

MAX_CITED = 4


def detect(ctx: Context) -> list[Finding]:
    return _warned(ctx) or _low_scores(ctx)


def _warned(ctx: Context) -> list[Finding]:
    warned = [e for e in ctx.log_events("straggler_report") if e.fields.get("verdict") == "found"]
    ranks = sorted({int(r) for e in warned for r in str(e.fields.get("ranks", "")).split(",")
                    if r.strip().isdigit()})
    if not ranks:
        return []
    measures = sorted({str(e.fields.get("measure")) for e in warned})
    summary = (f"the job's straggler detector flagged {ranks_phrase(ranks)} as slower than the "
               f"rest ({' and '.join(measures)} performance below its threshold): the job runs "
               "at the pace of its slowest rank")
    return [Finding(kind=Kind.STRAGGLER, culprit_ranks=ranks, waiting_ranks=[], confidence=0.75,
                    summary=summary, evidence=[log_evidence(e) for e in warned[:MAX_CITED]],
                    measures={"rule": "straggler-report"})]


def _low_scores(ctx: Context) -> list[Finding]:
    reports = ctx.log_events("gpu_perf_scores")
    low: dict[int, float] = {}
    cited: list[LogEvent] = []
    for event in reports:
        scores = parse_scores(event.fields.get("scores"))
        below = {r: s for r, s in scores.items() if s < THRESHOLD}
        if below and len(below) < len(scores):
            for rank, score in below.items():
                low[rank] = min(score, low.get(rank, score))
            cited.append(event)
    if not low:
        return []
    ranks = sorted(low)
    worst = ", ".join(f"rank {r} {low[r]:.2f}" for r in ranks[:8])
    summary = (f"the straggler detector's scores (1.0 = the best rank) put {ranks_phrase(ranks)} "
               f"under {THRESHOLD} ({worst}) while the others score above it")
    return [Finding(kind=Kind.STRAGGLER, culprit_ranks=ranks, waiting_ranks=[], confidence=0.6,
                    summary=summary, evidence=[log_evidence(e) for e in cited[:MAX_CITED]],
                    measures={"rule": "low-perf-score"})]
