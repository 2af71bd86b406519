"""The wait graph keeps only the edges reachability needs, and concludes what all pairs would.

The reference everywhere is the graph the analysis used to build: every class that waits joined
to every class it waits on (``all_pairs``, the same build with ``add_wait``'s ``direct`` ignored).
Speed is measured by ``bench/bench_report.py --no-synth``, not asserted here.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from contextlib import contextmanager

import networkx as nx
import pytest
from report_factories import staircase_evidence

from hangscope.analysis import waitgraph
from hangscope.analysis.correlate import build_picture
from hangscope.analysis.engine import analyze
from hangscope.analysis.rank_state import RankStackState
from hangscope.analysis.stacks import ThreadActivity
from hangscope.analysis.verdict import Kind, Verdict
from hangscope.analysis.waitgraph import WaitGraph, WaitReason, build_wait_graph
from hangscope.model import FrDump, FrEntry, JobEvidence, ProcessGroupInfo
from hangscope.report.svg import wait_graph_svg


@contextmanager
def all_pairs() -> Iterator[None]:
    """Build wait graphs the old way: class edges to every rank waited on."""
    original = WaitGraph.add_wait

    def add_wait(self, reason, waiting, waited_on, direct=None):
        original(self, reason, waiting, waited_on)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WaitGraph, "add_wait", add_wait)
        yield


def op(rank: int, rid: int, pg: str, seq: int, name: str = "all_reduce", done: bool = True,
       peer: int | None = None, p2p_seq: int = 0) -> FrEntry:
    p2p = peer is not None
    return FrEntry(record_id=rid, pg_name=pg, pg_desc=f"pg{pg}", collective_seq_id=0 if p2p else seq,
                   p2p_seq_id=p2p_seq, op=name, backend="nccl", is_p2p=p2p,
                   state="completed" if done else "started", completed=done,
                   input_sizes=((4,),), input_dtypes=("Float",), output_sizes=((4,),),
                   output_dtypes=("Float",), peer=peer)


def job(groups: dict[str, tuple[int, ...]], history: dict[int, list[tuple]]) -> JobEvidence:
    """``history[rank]``: (pg, seq, name, done[, peer, p2p_seq]) rows in issue order; a rank
    missing from it has no dump."""
    world = len(groups["0"])
    ev = JobEvidence(world_size=world, inputs=["synthetic"])
    info = {name: ProcessGroupInfo(name, f"pg{name}", members) for name, members in groups.items()}
    for rank in range(world):
        ev.rank(rank)
        if rank not in history:
            continue
        rows = [op(rank, rid, *row) for rid, row in enumerate(history[rank])]
        ev.ranks[rank].fr = FrDump(rank=rank, path=f"nccl_trace_rank_{rank}", version="2.10",
                                   backend="nccl", process_groups=info, pg_status={}, entries=rows)
    return ev


def random_job(rng: random.Random) -> JobEvidence:
    """Groups, lagging ranks, ranks that entered ops past the one they block in, p2p waits and
    ranks without a dump, mixed at random."""
    world = rng.randint(3, 12)
    groups = {"0": tuple(range(world))}
    for name in ("1", "2")[: rng.randint(0, 2)]:
        groups[name] = tuple(sorted(rng.sample(range(world), rng.randint(2, world))))
    history: dict[int, list[tuple]] = {}
    for rank in range(world):
        if rng.random() < 0.15:
            continue
        rows: list[tuple] = []
        for name, members in groups.items():
            if rank not in members:
                continue
            done = rng.randint(0, 6)
            rows += [(name, seq, "all_reduce", True) for seq in range(1, done + 1)]
            if rng.random() < 0.6:
                rows.append((name, done + 1, rng.choice(["all_reduce", "all_gather"]), False))
                if rng.random() < 0.25:  # async: entered a later one too
                    rows += [(name, done + k, "all_reduce", False) for k in (2, 3)[:rng.randint(1, 2)]]
            if rng.random() < 0.2:
                peer = rng.randrange(len(members))
                rows.append((name, 0, rng.choice(["send", "recv"]), False, peer, rng.randint(1, 2)))
        history[rank] = rows
    return job(groups, history)


def closure(graph: WaitGraph) -> set[tuple[str, str]]:
    return set(nx.transitive_closure(graph.graph, reflexive=False).edges)


def both(ev: JobEvidence) -> tuple[WaitGraph, WaitGraph]:
    picture = build_picture(ev)
    reduced = build_wait_graph(picture)
    with all_pairs():
        full = build_wait_graph(build_picture(ev))
    return reduced, full


def verdicts(ev: JobEvidence) -> tuple[Verdict, Verdict]:
    reduced, _ = analyze(ev)
    with all_pairs():
        full, _ = analyze(ev)
    return reduced, full


class TestSameConclusions:
    @pytest.mark.parametrize("seed", range(150))
    def test_random_jobs_keep_reachability_sinks_cycles_and_verdict(self, seed):
        # GIVEN a random mix of lagging, async, p2p and dumpless ranks in up to three groups
        ev = random_job(random.Random(seed))
        # WHEN the graph is built with and without the reduction
        reduced, full = both(ev)
        # THEN it is a subgraph of the old one with the same reachability and rank-level waits
        assert set(reduced.graph.edges) <= set(full.graph.edges)
        assert closure(reduced) == closure(full)
        assert reduced.sinks() == full.sinks()
        assert reduced.cycles() == full.cycles()
        assert reduced.waits == full.waits
        # AND every reason still labels some edge
        def labelled(g):
            return {r for _, _, data in g.graph.edges(data=True) for r in data["reasons"]}
        assert labelled(reduced) == labelled(full)
        # AND the verdict is the same, word for word
        new, old = verdicts(ev)
        assert new.to_json() == old.to_json()

    def test_a_staircase_of_300_ranks_names_the_same_culprit_with_linear_edges(self):
        # GIVEN rank r finished seq r and waits in seq r + 1: 300 classes, each waiting on all below
        ev = staircase_evidence(300)
        # WHEN
        reduced, full = both(ev)
        new, old = verdicts(ev)
        # THEN one edge per step instead of one per pair, the same sink and the same finding
        assert full.graph.number_of_edges() == 300 * 299 // 2
        assert reduced.graph.number_of_edges() == 299
        assert reduced.sinks() == full.sinks() == [reduced.class_of[0]]
        assert reduced.cycles() == full.cycles() == []
        assert closure(reduced) == closure(full)
        assert new.to_json() == old.to_json()
        assert new.root.kind is Kind.MISSING_RANK and new.root.culprit_ranks == [0]
        assert new.root.waiting_ranks == list(range(1, 300))

    @pytest.mark.parametrize("world", [50, 100, 200, 400])
    def test_staircase_edges_grow_linearly(self, world):
        graph = build_wait_graph(build_picture(staircase_evidence(world)))
        assert len(graph.members) == world
        assert graph.graph.number_of_edges() == world - 1

    def test_a_cycle_closed_through_a_whole_staircase_is_still_one_deadlock(self):
        # GIVEN a 200-rank staircase on pg 0, and rank 0 (its bottom) blocked in pg 1 on the top
        # rank, which never entered pg 1: every class waits on every other, through the chain
        world = 200
        ev = staircase_evidence(world)
        ev.ranks[0].fr.entries.append(op(0, 10_000, "1", 1, done=False))
        for rank in range(world):
            ev.ranks[rank].fr.process_groups["1"] = ProcessGroupInfo("1", "pair", (0, world - 1))
        # WHEN
        reduced, full = both(ev)
        new, old = verdicts(ev)
        # THEN the one cycle holds all 200 classes, as with all pairs, and it is the root cause
        assert reduced.graph.number_of_edges() == world
        assert reduced.cycles() == full.cycles()
        assert len(reduced.cycles()) == 1 and len(reduced.cycles()[0]) == world
        assert new.to_json() == old.to_json()
        assert new.root.kind is Kind.PG_ORDER_DEADLOCK
        assert new.root.culprit_ranks == list(range(world))

    def test_a_p2p_ring_of_256_ranks_is_a_p2p_deadlock(self):
        # GIVEN every rank blocked in a send to the next one (NCCL records p2p)
        world = 256
        history = {r: [("0", 0, "send", False, (r + 1) % world, 1)] for r in range(world)}
        ev = job({"0": tuple(range(world))}, history)
        # WHEN
        verdict, ctx = analyze(ev)
        # THEN one cycle through every rank, named as a p2p deadlock
        assert [len(c) for c in ctx.graph.cycles()] == [world]
        assert verdict.root.kind is Kind.P2P_DEADLOCK
        assert verdict.root.culprit_ranks == list(range(world))


class TestGraphPieces:
    def test_mutual_wait_matches_one_wait_per_rank(self):
        # GIVEN classes of one and of several ranks, all blocked in recv (seen in stacks)
        members = {"a": [0], "b": [1, 2], "c": [3], "d": [4, 5, 6]}
        reason = WaitReason("stack-p2p", "", "", -1, "recv")

        def fresh() -> WaitGraph:
            return WaitGraph(class_of={r: c for c, rs in members.items() for r in rs},
                             members=members, states=dict.fromkeys(members, ""))
        ranks = [0, 1, 2, 3, 4, 5, 6]
        one_call, per_rank = fresh(), fresh()
        # WHEN
        one_call.add_mutual_wait(reason, ranks)
        for rank in ranks:
            per_rank.add_wait(reason, [rank], [r for r in ranks if r != rank])
        # THEN the same edges (a class of one rank gets no self-loop) and the same rank waits
        assert set(one_call.graph.edges) == set(per_rank.graph.edges)
        assert ("a", "a") not in one_call.graph.edges and ("b", "b") in one_call.graph.edges
        assert one_call.waits == per_rank.waits

    def test_stack_p2p_deadlock_from_stacks_alone(self):
        # GIVEN 64 ranks without dumps whose main threads all sit in recv
        recv = ThreadActivity(kind="p2p", op="recv", frame=None, user_frame=None)
        stacks = {r: RankStackState(rank=r, main=recv, main_frames=()) for r in range(64)}
        ev = JobEvidence(world_size=64, inputs=["synthetic"])
        # WHEN
        graph = build_wait_graph(build_picture(ev), stacks)
        # THEN one class, waiting on itself: a cycle, and every rank waits on the 63 others
        assert graph.cycles() == [[graph.class_of[0]]]
        (waiting, waited_on), = graph.waits.values()
        assert waiting == waited_on == set(range(64))

    def test_waiting_on_is_the_union_of_ancestors(self):
        graph = build_wait_graph(build_picture(staircase_evidence(30)))
        targets = {graph.class_of[3], graph.class_of[10]}
        expected = set().union(*(nx.ancestors(graph.graph, t) for t in targets)) - targets
        assert graph.waiting_on(targets) == expected


class TestPicture:
    def test_drawn_classes_linked_only_through_hidden_ones_get_dotted_arrows(self):
        # GIVEN a staircase whose even steps hold two ranks and odd steps one: the drawing keeps
        # the bigger classes, and each reaches the next one drawn only through a hidden step
        history, rank, steps = {}, 0, 60
        for step in range(steps):
            for _ in range(2 if step % 2 == 0 and step else 1):
                history[rank] = [("0", s, "all_reduce", True) for s in range(1, step + 1)]
                history[rank].append(("0", step + 1, "all_reduce", False))
                rank += 1
        ev = job({"0": tuple(range(rank))}, history)
        verdict, ctx = analyze(ev)
        # WHEN
        svg = str(wait_graph_svg(ctx.graph, verdict, max_nodes=10))
        # THEN all ten drawn classes are joined by arrows, the ones through hidden steps dotted
        drawn = {g for g in svg.split('<g class="node') if "data-cls" in g}
        assert len(drawn) == 10
        arrows = svg.count('<g class="edge')
        assert arrows == 9
        assert svg.count('stroke-dasharray="2 4"') == 9
        assert "waits, through classes not drawn, on: all_reduce" in svg
        assert verdict.root.culprit_ranks == [0]


@contextmanager
def no_hubs() -> Iterator[None]:
    """Build wait graphs with direct class edges however many classes wait on however many."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(waitgraph, "HUB_MIN_CLASSES", 10**9)
        yield


def class_closure(graph: WaitGraph) -> set[tuple[str, str]]:
    """Who reaches whom among classes (hubs walked through, never named)."""
    closed = nx.transitive_closure(graph.graph, reflexive=False)
    return {(a, b) for a, b in closed.edges if a not in graph.hubs and b not in graph.hubs}


def many_on_many(laggards: int, waiting: int) -> JobEvidence:
    """Rank i < ``laggards`` completed seqs 1..i and waits nowhere (a class each); every other
    rank completed 1..laggards and blocks in seq laggards + 1 with its own buffer size (a class
    each): every waiting class waits on every laggard class, for one reason."""
    world = laggards + waiting
    history: dict[int, list[tuple]] = {r: [("0", s, "all_reduce", True) for s in range(1, r + 1)]
                                       for r in range(laggards)}
    for rank in range(laggards, world):
        history[rank] = [("0", s, "all_reduce", True) for s in range(1, laggards + 1)]
        history[rank].append(("0", laggards + 1, "all_reduce", False))
    ev = job({"0": tuple(range(world))}, history)
    for rank in range(laggards, world):
        pending = ev.ranks[rank].fr.entries[-1]
        ev.ranks[rank].fr.entries[-1] = dataclasses.replace(
            pending, input_sizes=((rank,),), output_sizes=((rank,),))
    return ev


class TestHubs:
    def test_many_classes_on_many_go_through_one_hub_with_the_same_conclusions(self):
        # GIVEN 40 waiting classes, each waiting on the same 40 lagging classes
        ev = many_on_many(40, 40)
        # WHEN the graph is built with a hub and with all 1600 direct edges
        hubbed = build_wait_graph(build_picture(ev))
        with no_hubs():
            direct = build_wait_graph(build_picture(ev))
            old, _ = analyze(ev)
        new, ctx = analyze(ev)
        # THEN 80 edges through one hub instead of 1600, and nothing else differs
        assert direct.graph.number_of_edges() == 40 * 40 and not direct.hubs
        assert len(hubbed.hubs) == 1 and hubbed.graph.number_of_edges() == 80
        assert class_closure(hubbed) == class_closure(direct)
        assert hubbed.sinks() == direct.sinks() and len(hubbed.sinks()) == 40
        assert hubbed.cycles() == direct.cycles() == []
        assert hubbed.waits == direct.waits
        lagging = {hubbed.class_of[r] for r in range(40)}
        assert hubbed.waiting_on(lagging) == direct.waiting_on(lagging)
        assert new.to_json() == old.to_json()
        assert sorted(new.root.culprit_ranks) == list(range(40))

    def test_a_hub_is_never_drawn_and_its_waits_are_drawn_direct(self):
        ev = many_on_many(8, 8)
        verdict, ctx = analyze(ev)
        assert ctx.graph.hubs
        svg = str(wait_graph_svg(ctx.graph, verdict))
        with no_hubs():
            verdict_direct, ctx_direct = analyze(ev)
        assert svg == str(wait_graph_svg(ctx_direct.graph, verdict_direct))
        assert "~hub" not in svg

    def test_a_mutual_wait_of_many_classes_is_one_cycle_through_a_hub(self):
        members = {f"c{i}": [i] for i in range(12)}
        reason = WaitReason("stack-p2p", "", "", -1, "recv")
        graph = WaitGraph(class_of={r: c for c, rs in members.items() for r in rs},
                          members=members, states=dict.fromkeys(members, ""))
        graph.add_mutual_wait(reason, list(range(12)))
        assert graph.hubs and graph.graph.number_of_edges() == 24
        assert graph.cycles() == [sorted(members)]
        assert graph.reasons_among(members) == [reason]
        assert graph.sinks() == [] and graph.waiting_on(["c0"]) == set(members) - {"c0"}

    def test_a_class_on_both_sides_of_a_hub_waits_on_itself_as_with_direct_edges(self):
        members = {f"c{i}": [i] for i in range(16)}
        reason = WaitReason("collective", "0", "", 5, "all_reduce")

        def build() -> WaitGraph:
            graph = WaitGraph(class_of={r: c for c, rs in members.items() for r in rs},
                              members=members, states=dict.fromkeys(members, ""))
            graph.add_wait(reason, range(0, 8), range(7, 16))  # rank 7 on both sides
            return graph

        hubbed = build()
        with no_hubs():
            direct = build()
        assert hubbed.hubs and not direct.hubs
        assert hubbed.cycles() == direct.cycles() == [["c7"]]
        assert hubbed.reasons_among(["c7"]) == [reason]
        assert class_closure(hubbed) == class_closure(direct)
