"""Sizes the ranks' own logs state, compared across ranks (``sources/logs/sizes.py`` finds them).

A line every rank prints from one template (``vocabulary: # tokens``) with a number on one rank
that the majority does not print is where that rank built something of another size. Read only
where an error says that sizes differed (``detectors/mismatch_error.py``): numbers that differ per
rank by design are common in logs.
"""

from __future__ import annotations

from dataclasses import dataclass

from hangscope.analysis.log_causes import rank_events
from hangscope.analysis.majority import odd_ones_out
from hangscope.model import JobEvidence, LogEvent


@dataclass(frozen=True, slots=True)
class SizeDiff:
    template: str
    majority_values: str
    majority: list[int]
    odd: list[int]
    lines: dict[int, LogEvent]  # one line per rank


def size_diffs(evidence: JobEvidence) -> list[SizeDiff]:
    """Templates where a majority of the ranks that logged them agree and a minority does not;
    the most widely logged first, then the latest in the log."""
    by_template: dict[str, dict[int, LogEvent]] = {}
    for rank, event in rank_events(evidence):
        if event.kind == "size_line":
            template = str(event.fields.get("template", ""))
            by_template.setdefault(template, {}).setdefault(rank, event)
    found = []
    for template, lines in by_template.items():
        if len(lines) < 3:
            continue  # two ranks have no majority
        odd = odd_ones_out({r: str(e.fields.get("values", "")) for r, e in lines.items()})
        if odd is not None:
            found.append(SizeDiff(template, odd.value, odd.majority, odd.odd, lines))
    found.sort(key=lambda d: (-len(d.lines), -max(e.line_no for e in d.lines.values())))
    return found
