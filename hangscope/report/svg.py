"""SVG pictures for the report, drawn in Python so they are deterministic and testable.

- :func:`wait_graph_svg`: the class-level wait graph. Nodes are rank classes, an arrow A -> B
  reads "A waits on B". Layered: classes that wait sit on top, the culprits at the bottom, the
  members of a cycle side by side in one row. At most ``max_nodes`` classes are drawn (culprits
  and cycles first), the rest are counted in a "+N more classes" note. A drawn class that waits
  on another only through classes not drawn gets a dotted arrow to it (the wait graph keeps
  only the edges reachability needs, so such paths are common when classes are many).
- :func:`hangscope.report.timeline.timeline_svg` draws the last collectives per group.

Every label goes through :func:`markupsafe.escape` before it becomes markup; the result is
:class:`markupsafe.Markup` only after that.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
from markupsafe import Markup, escape

from hangscope.analysis.verdict import Verdict
from hangscope.analysis.waitgraph import WaitGraph, WaitReason
from hangscope.ranges import format_ranks

NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN, ARC = 250, 70, 64, 84, 24, 40
MAX_PER_ROW = 5
MAX_NODES = 24
FILL = {"culprit": "#fde7e6", "waiting": "#e8f0fe", "ok": "#eef6ee", "unknown": "#f3f3f3"}
STROKE = {"culprit": "#c62828", "waiting": "#1f5fbf", "ok": "#3b7d3b", "unknown": "#8a8a8a"}


@dataclass(slots=True)
class _Node:
    cid: str
    ranks: list[int]
    role: str
    state: str
    x: float = 0.0
    y: float = 0.0


def _t(text: object) -> str:
    return str(escape(str(text)))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _cut_middle(text: str, limit: int) -> str:
    """``text`` in ``limit`` characters with its middle left out: a trailing ``file.py:123``
    is kept whole (where it fits), since the place is what a reader looks for."""
    if len(text) <= limit:
        return text
    last = text.rsplit(" ", 1)[-1]
    tail = min(len(last), limit - 8) if re.search(r":\d+\)?$", last) else limit // 2
    tail = max(tail, limit // 3)
    return text[: limit - tail - 1] + "\u2026" + text[-tail:]


def _wrap(text: str, width: int = 40, lines: int = 2) -> list[str]:
    """Up to ``lines`` lines of at most ``width`` characters, cut at spaces, the last with
    its middle left out when the text goes on (its end, often a file:line, is kept; the
    box's tooltip has the whole)."""
    out: list[str] = []
    rest = text.strip()
    while len(rest) > width and len(out) < lines - 1:
        cut = rest.rfind(" ", 0, width + 1)
        cut = cut if cut > width // 2 else width
        out.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        out.append(_cut_middle(rest, width))
    return out


def reason_label(reason: WaitReason) -> str:
    parts = [reason.op]
    if reason.seq is not None and reason.seq >= 0:
        parts.append(f"{'p2p ' if reason.kind == 'p2p' else ''}#{reason.seq}")
    if reason.pg_desc or reason.pg:
        parts.append(f"pg {reason.pg_desc or reason.pg}")
    return " ".join(parts)


def wait_graph_svg(graph: WaitGraph, verdict: Verdict, text: Callable[[str], str] = str,
                   max_nodes: int = MAX_NODES) -> Markup:
    """The wait graph as inline SVG markup; ``text`` is applied to every label (redaction)."""
    roles = {cls.id: cls.role for cls in verdict.rank_classes}
    root_culprits = set(verdict.findings[0].culprit_ranks) if verdict.findings else set()
    in_cycle = {c for cycle in graph.cycles() for c in cycle}
    nodes = {cid: _Node(cid, members, roles.get(cid, "unknown"), graph.states.get(cid, ""))
             for cid, members in graph.members.items()}
    finding_src, finding_dst = _finding_classes(graph, verdict)
    g = graph.graph

    def priority(cid: str) -> tuple[object, ...]:
        n = nodes[cid]
        linked = (cid in g and g.degree(cid) > 0) or cid in finding_src or cid in finding_dst
        return (root_culprits.isdisjoint(n.ranks), cid not in in_cycle, n.role != "culprit",
                not linked, -len(n.ranks), n.ranks[0])

    shown = sorted(nodes, key=priority)[:max_nodes]
    visible = set(shown)
    hidden = [c for c in nodes if c not in visible]
    edges, through = _visible_edges(g, shown, graph.hubs)
    edges = _reduce(edges)
    label = verdict.findings[0].kind.value.replace("_", " ") if verdict.findings else ""
    # The root finding's wait, dashed, where the picture does not state it: no arrow (a mismatch,
    # both sides pending) or a direct wait folded into a longer path by _reduce. Where the wait
    # graph itself goes through a chain of classes (a staircase), the drawn chain says it.
    drawn = nx.DiGraph(list(edges))
    implied = {(a, b): [label] for a in sorted(finding_src & visible)
               for b in sorted(finding_dst & visible)
               if a != b and (a, b) not in edges and (g.has_edge(a, b) or not (
                   a in drawn and b in drawn and nx.has_path(drawn, a, b)))}
    through &= set(edges)
    rows = _layers(shown, edges, implied, nodes, in_cycle)
    width, height = _place(rows, nodes)
    note_h = 22 if hidden else 0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="waitgraph" role="img" '
           f'viewBox="0 0 {width:.0f} {height + note_h:.0f}" width="{width:.0f}" '
           f'height="{height + note_h:.0f}" aria-label="wait graph">',
           '<title>Wait graph: an arrow A \u2192 B means ranks A wait on ranks B</title>',
           '<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
           'markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
           'fill="#555"/></marker><marker id="arr-red" viewBox="0 0 10 10" refX="9" refY="5" '
           'markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path '
           'd="M0,0 L10,5 L0,10 z" fill="#c62828"/></marker></defs>']
    for (src, dst), labels in sorted({**implied, **edges}.items()):
        cyc = src in in_cycle and dst in in_cycle
        style = "implied" if (src, dst) in implied else "through" if (src, dst) in through else ""
        out.append(_edge(nodes[src], nodes[dst], labels, cyc, style, text))
    out.extend(_node(nodes[cid], text) for cid in shown)
    if hidden:
        count = sum(len(nodes[c].ranks) for c in hidden)
        out.append(f'<text class="more" x="{MARGIN}" y="{height + 12:.0f}" font-size="12" '
                   f'fill="#555">+{len(hidden)} more classes ({count} ranks) not drawn; '
                   f'see the rank table</text>')
    out.append("</svg>")
    return Markup("\n".join(out))


def _visible_edges(g: nx.DiGraph, shown: list[str], hubs: set[str] | frozenset[str] = frozenset()
                   ) -> tuple[dict[tuple[str, str], list[str]], set[tuple[str, str]]]:
    """Arrows between drawn classes: their own edges, and (A, B) where A reaches B only through
    classes not drawn, labelled with A's first step. The second set names the latter. A wait
    through a hub (many classes on many, see ``waitgraph``) is drawn as the direct wait it is.

    Only hidden classes that a drawn class leads into are looked at, in one pass over their
    condensed subgraph with a bit per drawn class: not one search per drawn class.
    """
    bit = {cid: 1 << i for i, cid in enumerate(shown)}
    region: set[str] = set()
    todo = [d for c in shown if c in g for d in g.succ[c] if d not in bit]
    while todo:
        cid = todo.pop()
        if cid not in region:
            region.add(cid)
            todo.extend(d for d in g.succ[cid] if d not in bit and d not in region)
    dag = nx.condensation(g.subgraph(region))
    reach: dict[int, int] = {}
    for comp in reversed(list(nx.topological_sort(dag))):
        mask = 0
        for cid in dag.nodes[comp]["members"]:
            mask |= sum(bit[d] for d in g.succ[cid] if d in bit)
        for nxt in dag.successors(comp):
            mask |= reach[nxt]
        reach[comp] = mask
    mapping = dag.graph["mapping"]
    edges: dict[tuple[str, str], list[str]] = {}
    through: dict[tuple[str, str], list[str]] = {}
    for src in shown:
        if src not in g:
            continue
        for dst, data in g.succ[src].items():
            labels = [reason_label(r) for r in data.get("reasons", [])]
            if dst in bit:
                edges[(src, dst)] = labels
                continue
            if dst in hubs:
                for end in g.succ[dst]:
                    if end in bit and end != src:
                        have = edges.setdefault((src, end), [])
                        have.extend(x for x in labels if x not in have)
            mask = reach[mapping[dst]]
            for end in shown:
                if mask & bit[end] and end != src:
                    have = through.setdefault((src, end), [])
                    have.extend(x for x in labels if x not in have)
    through = {pair: labels for pair, labels in through.items() if pair not in edges}
    return {**edges, **through}, set(through)


def _reduce(edges: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    """Drop arrows another path already implies (A->C when A->B->C), when there is no cycle:
    ranks that wait on a whole staircase of classes would otherwise draw a thicket."""
    dag = nx.DiGraph(list(edges))
    if len(edges) < 3 or not nx.is_directed_acyclic_graph(dag):
        return edges
    keep = set(nx.transitive_reduction(dag).edges)
    return {pair: labels for pair, labels in edges.items() if pair in keep}


def _finding_classes(graph: WaitGraph, verdict: Verdict) -> tuple[set[str], set[str]]:
    """Classes of the root finding's waiting and culprit ranks: the finding states a wait that
    the FR graph may lack (a mismatch, where both sides are pending), drawn dashed."""
    if not verdict.findings:
        return set(), set()
    root = verdict.findings[0]
    return ({graph.class_of[r] for r in root.waiting_ranks if r in graph.class_of},
            {graph.class_of[r] for r in root.culprit_ranks if r in graph.class_of})


def _layers(shown: list[str], edges: dict[tuple[str, str], list[str]],
            implied: dict[tuple[str, str], list[str]], nodes: dict[str, _Node],
            in_cycle: set[str]) -> list[list[str]]:
    """Rows top to bottom. A class's row is its height above the sinks of the condensed graph
    (so culprits, which wait on nobody, land at the bottom and a cycle shares one row)."""
    sub = nx.DiGraph()
    sub.add_nodes_from(shown)
    sub.add_edges_from(p for p in {**edges, **implied} if p[0] in sub and p[1] in sub)
    comps = sorted((sorted(c) for c in nx.strongly_connected_components(sub)),
                   key=lambda c: nodes[c[0]].ranks[0])
    comp_of = {cid: i for i, comp in enumerate(comps) for cid in comp}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(comps)))
    dag.add_edges_from((comp_of[a], comp_of[b]) for a, b in sub.edges if comp_of[a] != comp_of[b])
    height: dict[int, int] = {}
    for comp in reversed(list(nx.topological_sort(dag))):
        height[comp] = 1 + max((height[s] for s in dag.successors(comp)), default=-1)
    top = max(height.values(), default=0)
    level: dict[str, int] = {}
    for cid in shown:
        if sub.degree(cid) == 0:  # no wait known: waiting/ok on top, culprits at the bottom
            level[cid] = 0 if nodes[cid].role == "culprit" else max(top, 1)
        else:
            level[cid] = height[comp_of[cid]]
    rows: list[list[str]] = []
    placed: dict[str, float] = {}
    for lvl in range(max(level.values(), default=0) + 1):  # bottom row first
        row = [c for c in shown if level[c] == lvl]

        def key(cid: str) -> tuple[object, ...]:
            below = [placed[s] for s in sub.successors(cid) if s in placed]
            bary = sum(below) / len(below) if below else float("inf")
            return (comp_of[cid] if cid in in_cycle else -1, bary, nodes[cid].ranks[0])

        row.sort(key=key)
        for i, cid in enumerate(row):
            placed[cid] = i - (len(row) - 1) / 2
        chunks = [row[i:i + MAX_PER_ROW] for i in range(0, len(row), MAX_PER_ROW)]
        rows = list(reversed(chunks)) + rows if chunks else rows
    return rows


def _place(rows: list[list[str]], nodes: dict[str, _Node]) -> tuple[float, float]:
    widest = max((len(r) for r in rows), default=1)
    width = 2 * MARGIN + widest * NODE_W + (widest - 1) * GAP_X
    for i, row in enumerate(rows):
        row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
        x0 = (width - row_w) / 2
        for j, cid in enumerate(row):
            nodes[cid].x = x0 + j * (NODE_W + GAP_X)
            nodes[cid].y = MARGIN + 14 + i * (NODE_H + GAP_Y)
    height = MARGIN * 2 + 14 + ARC + len(rows) * NODE_H + max(0, len(rows) - 1) * GAP_Y
    return width, height


def _node(n: _Node, text: Callable[[str], str]) -> str:
    ranks = format_ranks(n.ranks)
    count = f"{len(n.ranks)} rank{'s' if len(n.ranks) > 1 else ''}"
    room = int((NODE_W - 24 - 6.2 * (len(count) + 2)) / 8.4) - 6  # bold 14px vs 11px glyphs
    head = f"rank{'s' if len(n.ranks) > 1 else ''} {_cut(ranks, max(room, 8))}"
    state = text(n.state)
    tip = f"{n.role}: ranks {ranks} ({count})\n{state}"
    dash = ' stroke-dasharray="5 3"' if n.role == "unknown" else ""
    width = 3 if n.role == "culprit" else 1.5
    badge = ""
    if n.role == "culprit":
        badge = (f'<rect x="{n.x + NODE_W - 74:.0f}" y="{n.y - 9:.0f}" width="66" height="18" '
                 'rx="9" fill="#c62828"/>'
                 f'<text x="{n.x + NODE_W - 41:.0f}" y="{n.y + 4:.0f}" font-size="11" '
                 'font-weight="700" fill="#fff" text-anchor="middle">CULPRIT</text>')
    return (f'<g class="node role-{_t(n.role)}" data-cls="{_t(n.cid)}" tabindex="0">'
            f"<title>{_t(tip)}</title>"
            f'<rect x="{n.x:.0f}" y="{n.y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="7" '
            f'fill="{FILL.get(n.role, FILL["unknown"])}" '
            f'stroke="{STROKE.get(n.role, STROKE["unknown"])}" stroke-width="{width}"{dash}/>'
            f'<text x="{n.x + 10:.0f}" y="{n.y + 22:.0f}" font-size="14" font-weight="700" '
            f'fill="#1d1d1f">{_t(head)} <tspan font-weight="400" fill="#666" font-size="11">'
            f"({_t(count)})</tspan></text>"
            + "".join(f'<text x="{n.x + 10:.0f}" y="{n.y + 41 + 15 * i:.0f}" font-size="11.5" '
                      f'fill="#333">{_t(line)}</text>' for i, line in enumerate(_wrap(state)))
            + f"{badge}</g>")


def _edge(a: _Node, b: _Node, labels: list[str], cycle: bool, style: str,
          text: Callable[[str], str]) -> str:
    """``style``: "" (an edge of the graph), "implied" (stated by the root finding: dashed) or
    "through" (a path through classes not drawn: dotted)."""
    color = "#c62828" if cycle else "#555"
    marker = "arr-red" if cycle else "arr"
    cx_a, cx_b = a.x + NODE_W / 2, b.x + NODE_W / 2
    show_label = True
    if abs(a.y - b.y) < 1:  # same row (a cycle): neighbours face each other, others arc below
        right = cx_a < cx_b
        if abs(cx_a - cx_b) <= NODE_W + GAP_X + 1:
            y = a.y + NODE_H * (0.36 if right else 0.64)
            x0, x1 = (a.x + NODE_W, b.x) if right else (a.x, b.x + NODE_W)
            path = f"M{x0:.0f},{y:.0f} L{x1:.0f},{y:.0f}"
            show_label = False  # no room between the boxes: the tooltip carries it
            lx = ly = 0.0
        else:
            y0, bend = a.y + NODE_H, a.y + NODE_H + ARC
            path = (f"M{cx_a:.0f},{y0:.0f} C{cx_a:.0f},{bend:.0f} {cx_b:.0f},{bend:.0f} "
                    f"{cx_b:.0f},{y0:.0f}")
            lx, ly = (cx_a + cx_b) / 2, y0 + ARC * 0.75 + 4
    else:
        down = a.y < b.y
        y0 = a.y + NODE_H if down else a.y
        y1 = b.y if down else b.y + NODE_H
        mid = (y0 + y1) / 2
        path = (f"M{cx_a:.0f},{y0:.0f} C{cx_a:.0f},{mid:.0f} {cx_b:.0f},{mid:.0f} "
                f"{cx_b:.0f},{y1:.0f}")
        # label nearer the target, where edges from one source have spread apart
        lx, ly = cx_a + 0.72 * (cx_b - cx_a), y0 + 0.62 * (y1 - y0)
    label = text(labels[0]) + (f" +{len(labels) - 1}" if len(labels) > 1 else "") if labels else ""
    lead = "waits, through classes not drawn, on: " if style == "through" else "waits on: "
    tip = lead + "; ".join(text(x) for x in labels)
    dash = {"implied": ' stroke-dasharray="6 4"', "through": ' stroke-dasharray="2 4"'}
    dash_attr = dash.get(style, "")
    return (f'<g class="edge{" cycle" if cycle else ""}"><title>{_t(tip)}</title>'
            f'<path d="{path}" fill="none" stroke="{color}" stroke-width="{2.2 if cycle else 1.6}"'
            f'{dash_attr} marker-end="url(#{marker})"/>'
            + (f'<text x="{lx:.0f}" y="{ly:.0f}" font-size="11" fill="{color}" '
               'text-anchor="middle" stroke="#fcfcfc" stroke-width="4" paint-order="stroke" '
               f'class="elabel">{_t(_cut(label, 40))}</text>' if show_label and label else "")
            + "</g>")
