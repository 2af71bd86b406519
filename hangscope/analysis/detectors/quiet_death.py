"""rank_died (or missing_rank) from logs alone: a rank whose log stops with no error while the
others report that they lost a peer.

Signal (``analysis/log_progress.py``): no rank's log shows a failure of its own, some ranks' logs
end in lost-peer reports (gloo "Connection closed/reset by peer", watchdog or gloo timeouts), and
one rank's (or a few ranks') log just stops; its last progress line (step, iteration, epoch, tqdm
bar) behind theirs and its last timestamp before their reports make it likelier. A closed
connection says the peer process went away: ``rank_died``, as a SIGKILL from outside (the kernel's
OOM killer) leaves no traceback. Timeouts alone cannot tell a dead rank from a hung one:
``missing_rank``, and the summary says both. Cites: the quiet rank's last progress line and last
line, and each reporter's first report. Confidence 0.6 (closed) or 0.5 (timeouts), +0.05 for each
of: progress behind, log ended earlier, a single suspect; never above 0.75: absence of a line is
weaker than a line. False positives: a rank whose stderr was not collected; a rank that finished
(or was stopped) normally while the others failed for their own reasons. Where /proc states
say which went first (``watch``), a quiet rank seen gone only after another is no suspect.
"""

from __future__ import annotations

import dataclasses
import time

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import describe
from hangscope.analysis.log_progress import (
    QuietReading,
    describe_progress,
    lost_phrase,
    quiet_ranks,
)
from hangscope.analysis.rank_state import died_first
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase
from hangscope.sources.logs.common import one_line

MAX_CONFIDENCE = 0.75
CONFIRM = ("To confirm: the launcher's log (exit code -9, 'Signal 9 (SIGKILL)'), `dmesg` or "
           "`journalctl -k` ('Out of memory: Killed process <pid>'), or the scheduler's exit code "
           "for that rank")


def detect(ctx: Context) -> list[Finding]:
    reading = quiet_ranks(ctx.evidence)
    if reading is None:
        return []
    # a suspect /proc saw gone, but only after another rank had gone, did not die first: it
    # waited on the dead one without a word and was torn down with the rest (watch)
    outlived = [r for r in reading.quiet if (state := ctx.stacks.get(r)) is not None
                and state.gone and not died_first(ctx.stacks, r)]
    if outlived and any(r not in outlived for r in reading.quiet):
        reading = dataclasses.replace(reading, quiet=[r for r in reading.quiet
                                                      if r not in outlived])
    base = 0.6 if reading.closed else 0.5
    confidence = base + 0.05 * (reading.behind + reading.earlier + (len(reading.quiet) == 1))
    return [Finding(kind=Kind.RANK_DIED if reading.closed else Kind.MISSING_RANK,
                    culprit_ranks=reading.quiet, waiting_ranks=reading.reporters,
                    confidence=min(confidence, MAX_CONFIDENCE), summary=_summary(reading),
                    evidence=_evidence(reading))]


def _summary(reading: QuietReading) -> str:
    who = ranks_phrase(reading.quiet)
    first = reading.logs[reading.quiet[0]]
    at = [describe_progress(first.progress)] if first.progress else []
    if first.last_time is not None:
        at.append(f"last line at {_clock(first.last_time)}")
    where = f" ({', '.join(at)})" if at else ""
    others = ranks_phrase(reading.reporters)
    went_on = sorted({describe_progress(reading.logs[r].progress) for r in reading.reporters
                      if reading.logs[r].progress is not None})
    further = f" (to {', '.join(went_on)})" if went_on else ""
    said = _excerpt(next(e for r in reading.reporters for e in reading.logs[r].lost_peer))
    verb = "stops" if len(reading.quiet) == 1 else "stop"
    head = (f"{who}'s log {verb}{where} with no error, while {others} went on{further} and then "
            f"reported losing a peer ('{said}')")
    support = f"; {' and '.join(reading.measured)}" if reading.measured else ""
    if reading.closed:
        return (f"{head}: {who} most likely died, killed from outside (SIGKILL, as the kernel's "
                f"OOM killer sends), which leaves no traceback{support}. {CONFIRM}")
    return (f"{head}: {who} either died without a trace (SIGKILL, the OOM killer) or hangs "
            f"outside the collective, and timeouts cannot tell which{support}. Its stacks "
            f"(hangscope attach) or the launcher's log would tell")


def _evidence(reading: QuietReading) -> list[EvidenceItem]:
    items = []
    for rank in reading.quiet:
        log = reading.logs[rank]
        if log.progress is not None:
            items.append(EvidenceItem("log", rank, "last progress line: "
                                      + one_line(log.progress.message, 160),
                                      log.progress.where()))
        items.extend(EvidenceItem("log", rank, "its log ends: " + one_line(end.message, 160),
                                  end.where()) for end in log.ends
                     if log.progress is None or end.where() != log.progress.where())
    for rank in reading.reporters[:4]:
        log = reading.logs[rank]
        after = f" after {describe_progress(log.progress)}" if log.progress else ""
        report = log.lost_peer[0]
        items.append(EvidenceItem("log", rank, f"reported losing a peer{after}: "
                                  f"{_excerpt(report, 160)}", report.where()))
    return items


def _excerpt(event: LogEvent, limit: int = 80) -> str:
    """The report from the words that say what happened (not the source path before them)."""
    text = describe(event, 2000)
    start = text.find(lost_phrase(event))
    if start > 0:
        text = text[start:]
        stop = text.find(". ")
        text = text[:stop] if stop > 0 else text
    return one_line(text, limit)


def _clock(stamp: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(stamp)) + f".{int(stamp % 1 * 1000):03d}"
