# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Straggler detectors' reports: a tool that already compared the ranks' speed says who is slow.

NVIDIA Resiliency Extension's straggler detector (used by NeMo, Megatron-Bridge and a PTL
callback) prints per-rank scores, 1.0 for the best, under a header per measure, and a warning
naming the ranks below its threshold::

    GPU relative performance:
      Rank=0 Node=22ca9bdcfc9a Score=0.95
      Rank=1 Node=22ca9bdcfc9a Score=1.00
    STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected ranks: {76, 13}
    STRAGGLER DETECTION WARNING: Some GPUs performance dropped. Affected ranks: [162, 79]

(the scores may sit under ``Worst performing 5/512 ranks:`` / ``Best performing ...`` sub-heads).
FlagScale's straggler report says ``=== Straggler Report at Step 10 ===`` then ``No stragglers
detected.`` when it found none. Megatron-LM's ``StragglerDetector`` (megatron/core/utils.py,
README_STRAGGLER.md) prints, on rank 0, each measure's minimum and maximum over the ranks with the
rank that had it::

    [2024-03-14 23:07:56] | MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | MnPwr/Rnk: ...

(Rtt: the time per iteration in the traced ops); read as two scores, the fastest rank's 1.0 and
the slowest's its share of that time (measure ``round-trip``).

Events: ``straggler_report`` (fields ``verdict``: ``found`` with ``ranks`` and ``measure``, or
``none``) and ``gpu_perf_scores`` (``measure``, ``scores``: ``rank:score,...``). The report's own
line is no rank's: the events carry no rank (the reporting process is not the subject).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

MAX_SCORES = 4096
THRESHOLD = 0.7  # NVRx's default for both measures (gpu_relative/individual_perf_threshold)
_WARNING = re.compile(r"STRAGGLER DETECTION WARNING: Some GPUs (?P<what>have worse relative performance|performance dropped)\. "
                      r"Affected ranks: [\[{(](?P<ranks>[\d,\s]*)[\]})]")
_HEADER = re.compile(r"GPU (?P<measure>relative|individual) performance:\s*$")
_SCORE = re.compile(r"^\s*Rank=(?P<rank>\d+)\s+(?:Node=\S+\s+)?Score=(?P<score>\d+(?:\.\d+)?)")
_SUBHEAD = re.compile(r"^\s*(?:Worst|Best) performing \d+/\d+ ranks:\s*$")
_NONE = re.compile(r"\bNo stragglers? (?:were )?(?:detected|found)\b", re.IGNORECASE)


def warning(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _WARNING.search(line.body)
    if m is None:
        return []
    ranks = sorted({int(r) for r in re.findall(r"\d+", m.group("ranks"))})
    measure = "relative" if "relative" in m.group("what") else "individual"
    return [make_event("straggler_report", line, ctx, "warning",
                       {"verdict": "found", "ranks": ",".join(map(str, ranks)), "measure": measure},
                       rank=None, rank_source="")]


def none_found(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    if _NONE.search(line.body) is None:
        return []
    return [make_event("straggler_report", line, ctx, "info", {"verdict": "none"},
                       rank=None, rank_source="")]


def scores(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A ``GPU ... performance:`` header and the ``Rank=N ... Score=S`` lines under it."""
    m = _HEADER.search(line.body)
    if m is None:
        return []
    found: dict[int, float] = {}
    for following in follow.lines():
        if _SUBHEAD.match(following.body):
            follow.consume(following.line_no)
            continue
        s = _SCORE.match(following.body)
        if s is None or len(found) >= MAX_SCORES:
            break
        found[int(s.group("rank"))] = float(s.group("score"))
        follow.consume(following.line_no)
    if not found:
        return []
    return [_scores_event(line, ctx, m.group("measure"), found)]


def _scores_event(line: Line, ctx: Context, measure: str, found: dict[int, float]) -> LogEvent:
    text = ",".join(f"{rank}:{score:g}" for rank, score in sorted(found.items()))
    return make_event("gpu_perf_scores", line, ctx, "info", {"measure": measure, "scores": text},
                      rank=None, rank_source="")


_RTT = re.compile(r"\bMnRtt/Rnk: (?P<mn>\d+(?:\.\d+)?)ms/(?P<mn_rank>\d+) \| "
                  r"MxRtt/Rnk: (?P<mx>\d+(?:\.\d+)?)ms/(?P<mx_rank>\d+)")


def megatron_rtt(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """Megatron's min/max round-trip line as the two ranks' scores (module docstring)."""
    m = _RTT.search(line.body)
    if m is None:
        return []
    fastest, slowest = float(m.group("mn")), float(m.group("mx"))
    mn_rank, mx_rank = int(m.group("mn_rank")), int(m.group("mx_rank"))
    if mn_rank == mx_rank or fastest <= 0 or slowest < fastest:
        return []
    return [_scores_event(line, ctx, "round-trip", {mn_rank: 1.0, mx_rank: fastest / slowest})]


def parse_scores(text: object) -> dict[int, float]:
    """``gpu_perf_scores``' ``scores`` field back as {rank: score}."""
    out: dict[int, float] = {}
    for part in str(text or "").split(","):
        rank, _, score = part.partition(":")
        try:
            out[int(rank)] = float(score)
        except ValueError:
            continue
    return out


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"STRAGGLER DETECTION WARNING", warning),
    (b"gglers detected", none_found),
    (b"ggler detected", none_found),
    (b"gglers found", none_found),
    (b"GPU relative performance:", scores),
    (b"GPU individual performance:", scores),
    (b"MxRtt/Rnk:", megatron_rtt),
]
