"""Rank sets as people read them: ``0-511,513-1023``."""

from __future__ import annotations

from collections.abc import Iterable


def format_ranks(ranks: Iterable[int]) -> str:
    """Compress sorted unique ranks into comma-separated ranges; ``""`` for none."""
    ordered = sorted(set(ranks))
    if not ordered:
        return ""
    parts: list[str] = []
    start = prev = ordered[0]
    for rank in ordered[1:]:
        if rank == prev + 1:
            prev = rank
            continue
        parts.append(_span(start, prev))
        start = prev = rank
    parts.append(_span(start, prev))
    return ",".join(parts)


def is_block(ranks: list[int]) -> bool:
    """Sorted unique ranks that run without a gap (``[4, 5, 6]``): how ranks go to nodes and
    launches."""
    return ranks[-1] - ranks[0] == len(ranks) - 1


def ranks_phrase(ranks: Iterable[int]) -> str:
    """``rank 3`` or ``ranks 0-2,5``: the subject of a finding's sentence."""
    ordered = sorted(set(ranks))
    return f"rank{'s' if len(ordered) > 1 else ''} {format_ranks(ordered)}"


def ranks_do(ranks: Iterable[int], verb: str) -> str:
    """``rank 3 waits`` or ``ranks 0-2 wait``: a subject and its verb that agree."""
    ordered = sorted(set(ranks))
    return f"{ranks_phrase(ordered)} {verb}{'s' if len(ordered) == 1 else ''}"


def _span(start: int, end: int) -> str:
    if start == end:
        return str(start)
    if end == start + 1:
        return f"{start},{end}"
    return f"{start}-{end}"


def parse_ranks(text: str) -> list[int]:
    """Inverse of :func:`format_ranks`; raises ValueError on malformed text."""
    ranks: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        if sep:
            start, end = int(lo), int(hi)
            if end < start:
                raise ValueError(f"bad rank range {part!r}")
            ranks.update(range(start, end + 1))
        else:
            ranks.add(int(lo))
    return sorted(ranks)
