"""The one-screen terminal summary. Functions yield lines; ``cli.py`` prints them."""

from __future__ import annotations

from collections.abc import Iterator

from hangscope.analysis.verdict import Finding, Status, Verdict
from hangscope.ranges import format_ranks, ranks_phrase
from hangscope.report.config_table import format_differences

MAX_CLASSES = 12
MAX_EVIDENCE = 6


def format_verdict(verdict: Verdict, color: bool = False) -> Iterator[str]:
    yield _style(f"hangscope: {verdict.status.value.upper()}", _status_color(verdict.status), color)
    world = f"world size {verdict.world_size}" if verdict.world_size else "world size unknown"
    seen = f"evidence from {ranks_phrase(verdict.ranks_seen)}" if verdict.ranks_seen \
        else "no rank's evidence"
    line = f"{world}; {seen}"
    if verdict.ranks_missing:
        line += f"; no evidence from {ranks_phrase(verdict.ranks_missing)}"
    yield line
    if verdict.findings:
        yield ""
        yield from format_finding(verdict.findings[0], root=True, color=color)
        for finding in verdict.findings[1:]:
            yield ""
            yield from format_finding(finding, root=False, color=color)
    if verdict.rank_classes:
        yield ""
        yield "Rank groups (ranks with identical state):"
        for cls in verdict.rank_classes[:MAX_CLASSES]:
            yield f"  {format_ranks(cls.ranks):>20}  [{cls.role}] {cls.state}"
        if len(verdict.rank_classes) > MAX_CLASSES:
            yield f"  ... {len(verdict.rank_classes) - MAX_CLASSES} more groups in verdict.json"
    if verdict.gpus:
        yield ""
        yield "GPUs:"
        for rank, gpu in sorted(verdict.gpus.items())[:MAX_CLASSES]:
            yield f"  rank {rank:>5}  {gpu}"
        if len(verdict.gpus) > MAX_CLASSES:
            yield f"  ... {len(verdict.gpus) - MAX_CLASSES} more in verdict.json"
    yield from format_differences(verdict)
    if verdict.evidence_gaps:
        yield ""
        yield "Evidence gaps:"
        for gap in verdict.evidence_gaps[:10]:
            yield f"  - {gap}"
        if len(verdict.evidence_gaps) > 10:
            yield f"  - ... {len(verdict.evidence_gaps) - 10} more in verdict.json"


def format_finding(finding: Finding, root: bool, color: bool = False) -> Iterator[str]:
    label = "ROOT CAUSE" if root else "also"
    head = (f"{label}: {finding.kind.value}  culprit rank(s) "
            f"{format_ranks(finding.culprit_ranks) or '?'}  (confidence {finding.confidence:.2f})")
    yield _style(head, "red" if root else "yellow", color, bold=root)
    if finding.collective is not None:
        c = finding.collective
        if c.pg is None:
            yield f"  collective: {c.op} (group and seq unknown: no flight-recorder dump)"
        else:
            desc = f" ({c.pg_desc})" if c.pg_desc else ""
            yield f"  collective: pg {c.pg}{desc}, seq {c.seq}, {c.op}"
    yield f"  {finding.summary}"
    for item in finding.evidence[:MAX_EVIDENCE]:
        where = f"  @ {item.where}" if item.where else ""
        rank = f"rank {item.rank}: " if item.rank is not None else ""
        yield f"    [{item.source}] {rank}{item.detail}{where}"
    if len(finding.evidence) > MAX_EVIDENCE:
        yield f"    ... {len(finding.evidence) - MAX_EVIDENCE} more in verdict.json"


def _status_color(status: Status) -> str:
    return {Status.HANG: "red", Status.CRASHED: "red", Status.SLOW: "yellow",
            Status.HEALTHY: "green"}.get(status, "yellow")


def _style(text: str, fg: str, color: bool, bold: bool = True) -> str:
    if not color:
        return text
    import click

    return click.style(text, fg=fg, bold=bold)
