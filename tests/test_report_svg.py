"""The wait graph and timeline SVGs: escaping, layout and the node cap."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from report_factories import HOSTILE, HOSTILE_ATTR, evidence, large_evidence, result_of

from hangscope.analysis.verdict import Finding, Kind, RankClass, Status, Verdict
from hangscope.analysis.waitgraph import WaitGraph, WaitReason
from hangscope.report.svg import wait_graph_svg
from hangscope.report.timeline import timeline_svg

NS = {"s": "http://www.w3.org/2000/svg"}


def node_boxes(svg: str) -> dict[str, tuple[float, float]]:
    root = ET.fromstring(svg)
    out = {}
    for g in root.iterfind("s:g", NS):
        if "node" in g.get("class", ""):
            rect = g.find("s:rect", NS)
            out[g.get("data-cls")] = (float(rect.get("x")), float(rect.get("y")))
    return out


def graph_of(members: dict[str, list[int]], states: dict[str, str],
             edges: list[tuple[str, str]]) -> WaitGraph:
    graph = WaitGraph(class_of={r: c for c, rs in members.items() for r in rs},
                      members=members, states=states)
    for cid in members:
        graph.graph.add_node(cid)
    for src, dst in edges:
        graph.add_wait(WaitReason("collective", "0", "default_pg", 7, "all_reduce"),
                       members[src], members[dst])
    return graph


def verdict_of(classes: dict[str, str], culprits: list[int], waiting: list[int]) -> Verdict:
    finding = Finding(Kind.MISSING_RANK, culprits, waiting, 0.9, "x", [])
    return Verdict(Status.HANG, 4, [0, 1, 2, 3], [], [finding],
                   rank_classes=[RankClass(c, [], "", role) for c, role in classes.items()])


class TestWaitGraph:
    def test_hostile_labels_are_escaped_and_the_svg_parses(self):
        # GIVEN a class state made of markup
        graph = graph_of({"c0": [0, 1], "c1": [2]}, {"c0": HOSTILE, "c1": HOSTILE_ATTR},
                         [("c0", "c1")])
        svg = str(wait_graph_svg(graph, verdict_of({"c0": "waiting", "c1": "culprit"}, [2], [0, 1])))
        # THEN no tag or attribute escapes, and the SVG is well-formed XML
        assert "<img" not in svg and "<script" not in svg.lower().replace("<title>", "")
        assert "&lt;img" in svg
        ET.fromstring(svg)

    def test_culprits_sit_below_the_ranks_that_wait_on_them(self):
        graph = graph_of({"c0": [0, 1, 3], "c1": [2]}, {"c0": "w", "c1": "c"}, [("c0", "c1")])
        boxes = node_boxes(str(wait_graph_svg(graph, verdict_of(
            {"c0": "waiting", "c1": "culprit"}, [2], [0, 1, 3]))))
        assert boxes["c1"][1] > boxes["c0"][1]

    def test_a_cycle_shares_one_row_and_is_drawn_red(self):
        graph = graph_of({"c0": [0], "c1": [1], "c2": [2, 3]}, {c: c for c in ("c0", "c1", "c2")},
                         [("c0", "c1"), ("c1", "c0"), ("c2", "c0"), ("c2", "c1")])
        svg = str(wait_graph_svg(graph, verdict_of(
            {"c0": "culprit", "c1": "culprit", "c2": "waiting"}, [0, 1], [2, 3])))
        boxes = node_boxes(svg)
        assert boxes["c0"][1] == boxes["c1"][1] > boxes["c2"][1]
        assert svg.count('class="edge cycle"') == 2

    def test_a_mismatch_without_fr_edge_gets_a_dashed_finding_edge(self):
        graph = graph_of({"c0": [0, 1, 2], "c1": [3]}, {"c0": "w", "c1": "c"}, [])
        svg = str(wait_graph_svg(graph, verdict_of({"c0": "waiting", "c1": "culprit"}, [3], [0, 1, 2])))
        assert 'stroke-dasharray="6 4"' in svg
        boxes = node_boxes(svg)
        assert boxes["c1"][1] > boxes["c0"][1]

    def test_a_finding_wait_the_drawn_chain_already_shows_gets_no_dashed_edge(self):
        # GIVEN c2 waits on c1, c1 on the culprit c0, and no direct c2 -> c0 edge (a staircase)
        graph = graph_of({"c0": [0], "c1": [1], "c2": [2]}, {c: c for c in ("c0", "c1", "c2")},
                         [("c2", "c1"), ("c1", "c0")])
        svg = str(wait_graph_svg(graph, verdict_of(
            {"c0": "culprit", "c1": "waiting", "c2": "waiting"}, [0], [1, 2])))
        # THEN the chain is the picture: two solid arrows, nothing dashed
        assert svg.count('<g class="edge') == 2
        assert 'stroke-dasharray="6 4"' not in svg

    def test_a_direct_finding_wait_folded_by_the_reduction_stays_dashed(self):
        # GIVEN c2 waits on c0 directly and also through c1: the drawing drops c2 -> c0
        graph = graph_of({"c0": [0], "c1": [1], "c2": [2]}, {c: c for c in ("c0", "c1", "c2")},
                         [("c2", "c1"), ("c1", "c0"), ("c2", "c0")])
        svg = str(wait_graph_svg(graph, verdict_of(
            {"c0": "culprit", "c1": "waiting", "c2": "waiting"}, [0], [1, 2])))
        # THEN the finding's own wait comes back dashed
        assert svg.count('<g class="edge') == 3
        assert svg.count('stroke-dasharray="6 4"') == 1

    def test_many_classes_are_capped_with_a_note(self):
        members = {f"c{i}": [i] for i in range(40)}
        graph = graph_of(members, dict.fromkeys(members, "behind"),
                         [(f"c{i}", "c0") for i in range(1, 40)])
        classes = dict.fromkeys(members, "waiting") | {"c0": "culprit"}
        svg = str(wait_graph_svg(graph, verdict_of(classes, [0], list(range(1, 40))), max_nodes=10))
        assert len(node_boxes(svg)) == 10
        assert "+30 more classes (30 ranks)" in svg
        assert "c0" in node_boxes(svg)  # the culprit is always drawn

    def test_output_is_deterministic(self):
        result = result_of(evidence())
        first = wait_graph_svg(result.context.graph, result.verdict)
        assert first == wait_graph_svg(result.context.graph, result.verdict)

    def test_redaction_function_applies_to_labels(self):
        graph = graph_of({"c0": [0], "c1": [1]}, {"c0": "token=abc123", "c1": "x"}, [("c0", "c1")])
        svg = str(wait_graph_svg(graph, verdict_of({"c0": "waiting", "c1": "culprit"}, [1], [0]),
                                 text=lambda s: s.replace("abc123", "[REDACTED]")))
        assert "abc123" not in svg


class TestTimeline:
    def test_pending_op_is_red_and_labels_escaped(self):
        svg = str(timeline_svg(result_of(evidence(hostile=True))))
        ET.fromstring(svg)
        assert 'fill="#e53935"' in svg
        assert "<img" not in svg

    def test_timeline_rows_are_classes_not_ranks(self):
        svg = str(timeline_svg(result_of(large_evidence(world=512, culprit=7, entries=10))))
        rows = re.findall(r'<text x="4" y="[\d.]+" font-size="11.5"', svg)
        assert len(rows) == 2
