"""A rank that printed the *before* of a call and never its *after* (the user's own marks).

Rule ``before-without-after``: the logs hold a user's marks around a call (``sources/logs/
marks.py``: ``before 1 ...`` / ``after 0``, ``rank 3 before barrier``); some ranks printed both
the before and the after of the same call (the same label), and some printed the before as their
last mark of it and no progress after. Basis: the call returned on the ranks that printed its
after; the others are still inside it, so they are the ones it hangs on (a collective or setup
call that returned on some ranks and not on others is waiting for what only the stuck ranks
lack). The kind is ``init_hang`` when the marked call is process-group setup (its lines name
``init_process_group``, an ``init_method``, a backend or a rendezvous), else ``missing_rank``.
0.55: a print may be lost (buffered stdout of a process killed later), and a rank's after may be
in a log not given.
"""

from __future__ import annotations

import re

from hangscope.analysis.context import Context
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase

_SETUP = re.compile(r"init_process_group|init_method|rendezvous|\bbackend\b|\binit\b|"
                    r"world_size|new_group|MASTER_ADDR", re.I)


def detect(ctx: Context) -> list[Finding]:
    marks = [e for r in ctx.evidence.ranks.values() for e in r.logs if e.kind == "user_mark"]
    marks += [e for e in ctx.evidence.unattributed_logs if e.kind == "user_mark"]
    progress = [e for r in ctx.evidence.ranks.values() for e in r.logs if e.kind == "progress"]
    by_label: dict[str, list[LogEvent]] = {}
    for event in sorted(marks, key=lambda e: (e.time is None, e.time or 0.0, e.path, e.line_no)):
        by_label.setdefault(str(event.fields.get("label", "")), []).append(event)
    findings = []
    for label, events in by_label.items():
        last: dict[int, LogEvent] = {}
        passed: set[int] = set()
        for event in events:
            if event.rank is None:
                continue
            last[event.rank] = event
            if event.fields.get("mark") == "after":
                passed.add(event.rank)
        stuck = sorted(r for r, e in last.items() if e.fields.get("mark") == "before"
                       and r not in passed and not _went_on(e, progress))
        if not stuck or not passed:
            continue
        befores = [last[r] for r in stuck]
        setup = any(_SETUP.search(str(e.fields.get("text", ""))) for e in events) \
            or bool(_SETUP.search(label))
        call = f"'{label}'" if label else "the call they marked"
        what = "process-group setup " + call if setup else call
        summary = (f"rule before-without-after: {ranks_phrase(stuck)} printed the before of "
                   f"{what} and never its after, while {ranks_phrase(sorted(passed))} printed "
                   f"both: the call returned there and not on {ranks_phrase(stuck)}, which "
                   f"{'are' if len(stuck) > 1 else 'is'} still inside it")
        cited = befores[:4] + [last[r] for r in sorted(passed)][:2]
        evidence = [EvidenceItem("log", e.rank, str(e.fields.get("text", e.message)), e.where())
                    for e in cited]
        findings.append(Finding(kind=Kind.INIT_HANG if setup else Kind.MISSING_RANK,
                                culprit_ranks=stuck, waiting_ranks=sorted(passed),
                                confidence=0.55, summary=summary, evidence=evidence,
                                measures={"rule": "before-without-after"}))
    return findings


def _went_on(mark: LogEvent, progress: list[LogEvent]) -> bool:
    """The rank logged progress after its before: it got past the call."""
    for step in progress:
        if step.rank != mark.rank:
            continue
        if step.time is not None and mark.time is not None:
            if step.time > mark.time:
                return True
        elif step.path == mark.path and step.line_no > mark.line_no:
            return True
    return False
