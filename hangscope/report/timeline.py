"""The last collectives per process group, one row per rank class, as an SVG timeline.

Each bar is one flight-recorder entry of the class's representative rank: from when it started
(else when it was enqueued, ``time_created_ns``) to when it completed. An op that never completed
runs to the newest time the group's dumps know and is drawn red: that is where the ranks stand.
gloo records only enqueue times, so its completed ops are ticks at their enqueue time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from hangscope.model import FrEntry
from hangscope.ranges import format_ranks

if TYPE_CHECKING:
    from hangscope.result import Result

WIDTH, LABEL_W, ROW_H, HEAD_H = 960, 170, 18, 34
MAX_GROUPS, MAX_ROWS, LAST = 6, 8, 20
ROLE_ORDER = {"culprit": 0, "waiting": 1, "ok": 2, "unknown": 3}


def _t(text: object) -> str:
    return str(escape(str(text)))


def _span(ms: float) -> str:
    return f"{ms / 1000:.3g} s" if ms >= 1000 else f"{ms:.3g} ms"


def timeline_svg(result: Result, text: Callable[[str], str] = str) -> Markup | None:
    """None when no dump carries times."""
    picture = result.context.picture
    graph = result.context.graph
    roles = {c.id: c.role for c in result.verdict.rank_classes}
    root = result.verdict.findings[0].collective if result.verdict.findings else None
    classes = sorted(graph.members.items(),
                     key=lambda kv: (ROLE_ORDER.get(roles.get(kv[0], ""), 4), kv[1][0]))
    groups = sorted(picture.groups.values(),
                    key=lambda g: (root is None or g.name != root.pg,
                                   not any(v.pending for v in g.ranks.values()), g.name))
    blocks: list[tuple[str, list[tuple[str, str, list[FrEntry]]]]] = []
    for group in groups:
        rows = []
        for cid, members in classes:
            rep = next((r for r in members if r in group.ranks), None)
            if rep is None:
                continue
            entries = sorted((e for e in picture.dumps[rep].entries
                              if e.pg_name == group.name and e.time_created_ns is not None),
                             key=lambda e: e.record_id)[-LAST:]
            if entries:
                rows.append((roles.get(cid, "unknown"), format_ranks(members), entries))
            if len(rows) == MAX_ROWS:
                break
        if rows:
            blocks.append((group.label, rows))
        if len(blocks) == MAX_GROUPS:
            break
    if not blocks:
        return None
    out: list[str] = []
    y = 8
    for label, rows in blocks:
        y = _block(out, y, text(label), rows, text)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" viewBox="0 0 {WIDTH} {y}" '
            f'width="{WIDTH}" height="{y}" role="img" aria-label="collective timeline">')
    return Markup("\n".join([head, *out, "</svg>"]))


def _block(out: list[str], y: int, label: str, rows: list[tuple[str, str, list[FrEntry]]],
           text: Callable[[str], str]) -> int:
    times = [t for _, _, entries in rows for e in entries
             for t in (e.time_created_ns, e.time_started_ns, e.time_completed_ns) if t is not None]
    t0, t1 = min(times), max(times)
    span = max(t1 - t0, 1_000)
    now = t1 + span // 12  # "still running": pending ops reach past the newest known time
    span = now - t0
    plot = WIDTH - LABEL_W - 16

    def x(ns: int) -> float:
        return LABEL_W + (ns - t0) / span * plot

    out.append(f'<text x="4" y="{y + 14}" font-size="13" font-weight="700" fill="#1d1d1f">'
               f'pg {_t(label)}</text>')
    out.append(f'<text x="{WIDTH - 8}" y="{y + 14}" font-size="11" fill="#666" '
               f'text-anchor="end">last {LAST} ops per class; window {_t(_span(span / 1e6))}'
               '</text>')
    y += HEAD_H - 12
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        xx = LABEL_W + frac * plot
        anchor = "start" if frac == 0 else "end" if frac == 1 else "middle"
        out.append(f'<line x1="{xx:.1f}" y1="{y}" x2="{xx:.1f}" y2="{y + len(rows) * ROW_H}" '
                   'stroke="#e3e3e3"/>')
        out.append(f'<text x="{xx:.1f}" y="{y + len(rows) * ROW_H + 11}" font-size="10" '
                   f'fill="#777" text-anchor="{anchor}">+{_t(_span(frac * span / 1e6))}</text>')
    for role, ranks, entries in rows:
        color = "#c62828" if role == "culprit" else "#333"
        out.append(f'<text x="4" y="{y + 13}" font-size="11.5" fill="{color}">'
                   f'{_t(("ranks " if "," in ranks or "-" in ranks else "rank ") + ranks[:22])}'
                   '</text>')
        for i, e in enumerate(entries):
            start = e.time_started_ns or e.time_created_ns or t0
            if e.completed is False:
                end, fill, state = now, "#e53935", "pending (never completed)"
            else:  # without a completion time, a tick: the next op's enqueue time may be far
                end = e.time_completed_ns or start
                fill, state = "#4f86d1", "completed" if e.completed else "state unknown"
            x0, x1 = x(start), max(x(end), x(start) + 3)
            tip = (f"ranks {ranks}: {text(e.op)} {'p2p ' if e.is_p2p else ''}seq {e.seq} "
                   f"(record {e.record_id}), {state}; enqueued at "
                   f"+{_span(((e.time_created_ns or t0) - t0) / 1e6)}")
            out.append(f'<rect x="{x0:.1f}" y="{y + 3}" width="{x1 - x0:.1f}" '
                       f'height="{ROW_H - 6}" fill="{fill}" stroke="#fff" stroke-width="0.5">'
                       f"<title>{_t(tip)}</title></rect>")
        y += ROW_H
    return y + 24
