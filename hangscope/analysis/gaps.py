"""Evidence gaps as a person reads them: one line per cause with its ranks, caveats only where
they apply.

Collectors and loaders note gaps rank by rank ("rank 3: no flight-recorder dump at
/tmp/nccl_trace_rank_3"); on a job of 8 ranks that is 8 lines saying one thing. Lines that say the
same of several ranks, once the rank's own number in a path (``nccl_trace_rank_3``,
``rank3.log``) and its pid are set aside, become one: "ranks 0-7: no flight-recorder dump at
/tmp/nccl_trace_rank_*". Lines about the culprits come first: they matter most to the verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hangscope.analysis.context import Context
from hangscope.analysis.stacks import P2P_OPS
from hangscope.analysis.verdict import Finding, Kind
from hangscope.ranges import format_ranks

GLOO_P2P_NOTE = ("gloo's flight recorder does not record send/recv: point-to-point waits are "
                 "invisible in these dumps (stacks show them)")
_RANK_LINE = re.compile(r"^rank (?P<rank>\d+)(?: \(pid \d+\))?: (?P<text>.+)$", re.S)


def group_gaps(gaps: Iterable[str], culprits: Iterable[int] = ()) -> list[str]:
    """``gaps`` with exact repeats dropped and per-rank lines of one cause merged; the lines
    that name a culprit rank first, the others in their order."""
    order: list[str] = []  # keys in first-seen order
    ranks: dict[str, list[int]] = {}
    texts: dict[str, str] = {}  # key -> the line as said of its first rank
    for gap in gaps:
        m = _RANK_LINE.match(gap)
        rank = int(m["rank"]) if m is not None else -1
        text = m["text"] if m is not None else gap
        while m is not None and text.startswith(f"rank {rank}: "):  # said twice by a bundle
            gap = text
            text = text[len(f"rank {rank}: "):]
        key = gap if m is None else f"\0{_shape(text, rank)}"
        if key not in ranks:
            order.append(key)
            ranks[key] = []
            texts[key] = gap
        if m is not None and rank not in ranks[key]:
            ranks[key].append(rank)
    wanted = set(culprits)
    lines: list[tuple[bool, str]] = []
    for key in order:
        held = ranks[key]
        if len(held) > 1:
            line = f"ranks {format_ranks(held)}: {key[1:]}"
        else:
            line = texts[key]
        lines.append((not wanted.intersection(held), line))
    return [line for _, line in sorted(lines, key=lambda item: item[0])]


def _shape(text: str, rank: int) -> str:
    """The line with the rank's own number in names and paths shown as ``*``."""
    return re.sub(rf"(?<=[A-Za-z_/-]){rank}(?!\d)", "*", text)


def p2p_caveat(ctx: Context, findings: list[Finding]) -> str | None:
    """The gloo send/recv caveat, where point-to-point may be involved: gloo dumps, and a stack
    in a send/recv, a p2p finding, or nothing else that explains the wait (no culprit and no
    stacks). Where a finding already says a culprit may sit in a send/recv, it is not repeated."""
    if "gloo" not in ctx.picture.backends:
        return None
    in_p2p = any(thread.op in P2P_OPS for state in ctx.stacks.values()
                 for thread in state.threads)
    p2p_finding = any(f.kind == Kind.P2P_DEADLOCK for f in findings)
    unexplained = not any(f.culprit_ranks for f in findings) and not ctx.stacks
    return GLOO_P2P_NOTE if in_p2p or p2p_finding or unexplained else None
