"""The cross-rank wait graph: an edge A -> B means "A cannot proceed until B acts".

Nodes are equivalence classes of ranks with identical state (LLNL STAT's trick), not ranks, so
that 4096 ranks waiting on one straggler make two nodes and one edge, and a picture of the graph
stays readable. Every edge keeps the reasons behind it (group, seq, op), which findings cite.

Edges come from:
- collectives: a rank blocked in seq N of group P waits on every member of P that has not
  entered N, or is blocked in an earlier seq of P (a member without a dump counts as not entered:
  absent evidence is not progress);
- p2p (NCCL dumps; gloo records none): a rank blocked in send/recv waits on its peer unless the
  peer is blocked in the matching recv/send towards it;
- stacks (:func:`add_stack_waits`) and log observations (``analysis/log_waits.py``), added
  through :meth:`WaitGraph.add_wait`; a rank known only from its logs is a class of its own
  state ("timed out in ALLREDUCE #808 ..."), cited with its file:line.

Class edges are only those reachability needs. The ranks behind seq N include those behind any
lower blocked seq M; where every rank blocked in M is itself behind N, the classes at N get edges
only to the ranks between M and N and reach the rest through the classes at M
(:func:`_stand_ins`). Sinks, cycles and who waits on whom, directly or not, are those of the
all-pairs graph, with edges linear in the classes instead of quadratic: a staircase of 4096
ranks, each one seq ahead of the next, is 4095 edges, not 8.4M. Where many classes wait for one
reason on many others (2048 x 2048 would be 4.2M edges, all needed), the wait goes through one
hidden hub node instead: every waiting class -> hub -> every class waited on, the same
reachability in a sum of edges, not a product. Hubs are no class: sinks, cycles and
``waiting_on`` never name one. Every reason still labels an edge, and :attr:`WaitGraph.waits`
keeps every rank pair, per reason, for findings to cite.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import networkx as nx

from hangscope.analysis.correlate import GroupView, Picture
from hangscope.analysis.observations import log_state
from hangscope.analysis.rank_state import RankStackState
from hangscope.model import FrEntry
from hangscope.ranges import format_ranks
from hangscope.sources.fr_lazy import latest_entry

HUB_MIN_CLASSES = 8  # a wait among fewer classes on either side keeps its direct edges


@dataclass(frozen=True, slots=True)
class WaitReason:
    kind: str  # "collective" | "p2p" (from FR); "stack-*" (from stacks); "log-*" (from logs)
    pg: str
    pg_desc: str
    seq: int
    op: str
    numbering: str = "fr"  # whose sequence numbers ``seq`` counts in (see analysis.observations)
    scope: str = ""  # the line of a report that names no group: keeps two reports' waits apart


@dataclass(slots=True)
class WaitGraph:
    """Rank-state classes and the waits between them."""

    class_of: dict[int, str]  # rank -> class id
    members: dict[str, list[int]]  # class id -> ranks
    states: dict[str, str]  # class id -> one-line state
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)
    # rank-level edges, kept only per (reason): waiting ranks -> ranks waited on
    waits: dict[WaitReason, tuple[set[int], set[int]]] = field(default_factory=dict)
    hubs: set[str] = field(default_factory=set)  # hidden nodes that stand for many-to-many waits

    def add_wait(self, reason: WaitReason, waiting: Iterable[int], waited_on: Iterable[int],
                 direct: Iterable[int] | None = None) -> None:
        """``waiting`` ranks wait on ``waited_on`` ranks for ``reason``.

        :attr:`waits` gets both sets whole. The class graph gets an edge from every class of
        ``waiting`` to every class of ``direct``, which is all of ``waited_on`` unless given: a
        caller passes a part of ``waited_on`` only where the finished graph leads from those
        classes to the rest, so that reachability is that of the all-pairs edges.
        """
        waiting, waited_on = set(waiting), set(waited_on)
        if not waiting or not waited_on:
            return
        have = self.waits.setdefault(reason, (set(), set()))
        have[0].update(waiting)
        have[1].update(waited_on)
        targets = dict.fromkeys(self.class_of[r] for r in (waited_on if direct is None else direct))
        sources = dict.fromkeys(self.class_of[r] for r in waiting)
        if len(sources) >= HUB_MIN_CLASSES and len(targets) >= HUB_MIN_CLASSES:
            self._through_hub(reason, sources, targets)
            return
        for src in sources:
            for dst in targets:
                self._edge(src, dst, reason)

    def _through_hub(self, reason: WaitReason, sources: Iterable[str],
                     targets: Iterable[str]) -> None:
        hub = f"~hub{len(self.hubs)}"
        self.hubs.add(hub)
        self.graph.add_node(hub, hub=True)
        for src in sources:
            self._edge(src, hub, reason)
        for dst in targets:
            self._edge(hub, dst, reason)

    def add_mutual_wait(self, reason: WaitReason, ranks: Sequence[int]) -> None:
        """Every one of ``ranks`` waits on every other one (one call, not one per rank: the
        pairs are quadratic in the ranks, the class edges only in the classes among them)."""
        if len(ranks) < 2:
            return
        have = self.waits.setdefault(reason, (set(), set()))
        have[0].update(ranks)
        have[1].update(ranks)
        count = Counter(self.class_of[r] for r in ranks)
        if len(count) >= HUB_MIN_CLASSES:
            # through a hub a class of one rank reaches itself, but with this many classes it
            # is in their cycle anyway: the same cycles as the direct edges
            self._through_hub(reason, count, count)
            return
        for src in count:
            for dst in count:
                if src != dst or count[src] > 1:  # a class of one rank does not wait on itself
                    self._edge(src, dst, reason)

    def _edge(self, src: str, dst: str, reason: WaitReason) -> None:
        data = self.graph.get_edge_data(src, dst)
        if data is None:
            self.graph.add_edge(src, dst, reasons=[reason])
        elif reason not in data["reasons"]:
            data["reasons"].append(reason)

    def ranks_of(self, classes: Iterable[str]) -> list[int]:
        return sorted(r for c in classes for r in self.members[c])

    def sinks(self) -> list[str]:
        """Classes others wait on that wait on nobody: the candidates for root cause."""
        return [n for n in self.graph if self.graph.in_degree(n) and not self.graph.out_degree(n)
                and n not in self.hubs]

    def cycles(self) -> list[list[str]]:
        """Strongly connected sets of classes that wait on each other (deadlocks). A class alone
        with a hub waits on itself through it, as through a self-loop."""
        found = []
        for component in nx.strongly_connected_components(self.graph):
            first = next(iter(component))
            if len(component) > 1 or self.graph.has_edge(first, first):
                nodes = sorted(c for c in component if c not in self.hubs)
                if nodes:
                    found.append(nodes)
        return found

    def reasons_among(self, classes: Iterable[str]) -> list[WaitReason]:
        """The reasons of the waits from any of ``classes`` to any of them, hubs seen through."""
        nodes = set(classes)
        found: list[WaitReason] = []
        for src in sorted(c for c in nodes if c in self.graph):
            for dst, data in self.graph.succ[src].items():
                if dst in nodes or (dst in self.hubs
                                    and not nodes.isdisjoint(self.graph.succ[dst])):
                    found.extend(r for r in data["reasons"] if r not in found)
        return found

    def waiting_on(self, classes: Iterable[str]) -> set[str]:
        """Classes that wait on any of ``classes``, directly or through others (not those)."""
        targets = set(classes)
        found: set[str] = set()
        todo = [c for c in targets if c in self.graph]
        pred = self.graph.pred
        while todo:
            for src in pred[todo.pop()]:
                if src not in found:
                    found.add(src)
                    todo.append(src)
        return found - targets - self.hubs


def _rank_key(picture: Picture, stacks: dict[int, RankStackState], rank: int,
              hung: dict[str, int | None], ends: dict[int, str]) -> tuple[object, ...]:
    if rank not in picture.dumps:
        state = stacks.get(rank)
        if state is None:
            seen = picture.observed(rank)
            if not seen and rank in ends:
                return ("log-end", ends[rank])
            return ("log", log_state(seen)) if seen else ("no-evidence",)
        main = state.main
        peer = (state.p2p.op, state.p2p.peer) if state.p2p is not None else None
        # progress too: a rank caught entering the collective its peers sit in, after seconds
        # on the CPU, is not in their state
        return ("stack", state.gone, state.main_finished, main.kind if main else None,
                main.op if main else None, main.user_frame if main else None, peer,
                state.progress)
    parts: list[tuple[object, ...]] = []
    for name, group in picture.groups.items():
        if rank not in group.members:
            continue
        view = group.ranks.get(rank)
        tag = group.desc or name
        if view is None:
            continue
        if view.pending is not None:
            pending = view.pending
            parts.append((tag, "waiting", pending.collective_seq_id, pending.op,
                          pending.input_sizes, pending.input_dtypes))
        elif hung[name] is not None and view.last_seq < (hung[name] or 0):
            parts.append((tag, "behind", view.last_seq))
        parts.extend((tag, "p2p", e.op, e.peer, e.p2p_seq_id) for e in view.p2p_pending)
        if group.history_of(rank):  # its history differs from other members' (a mismatch)
            parts.append((tag, "history", group.history_of(rank)))
    wait = stacks[rank].p2p if rank in stacks else None
    if wait is not None and wait.peer is not None:  # gloo: a p2p wait only the stack shows
        parts.append(("stack-p2p", wait.op or wait.call, wait.peer))
    return tuple(sorted(parts, key=repr))


def _describe(picture: Picture, stacks: dict[int, RankStackState], rank: int,
              ends: dict[int, str]) -> str:
    if rank not in picture.dumps:
        state = stacks.get(rank)
        if state is not None:
            return state.describe()
        seen = picture.observed(rank)
        return f"{log_state(seen)} [{seen[0].where}]" if seen else ends.get(rank, "no evidence")
    pending = picture.pending_ops(rank)
    if pending:
        group, entry = pending[0]
        where = f"{entry.op} {'p2p ' if entry.is_p2p else ''}seq {entry.seq} on pg {group.label}"
        more = f" (+{len(pending) - 1} more pending)" if len(pending) > 1 else ""
        return f"waiting in {where}{more}"
    last = _last_entry(picture, rank)
    wait = stacks[rank].p2p if rank in stacks else None
    also = f"; its stack {wait.clause()}" if wait is not None and wait.peer is not None else ""
    if last is None:
        return "no collective recorded" + also
    return (f"not in a collective; last completed {last.op} seq {last.seq} on pg "
            f"{picture.groups[last.pg_name].label}{also}")


def _last_entry(picture: Picture, rank: int) -> FrEntry | None:
    dump = picture.dumps.get(rank)
    return latest_entry(dump) if dump is not None else None


def hung_seqs(picture: Picture) -> dict[str, int | None]:
    """Per group, the lowest collective seq some member is blocked in (None: nobody waits)."""
    hung: dict[str, int | None] = {}
    for name, group in picture.groups.items():
        pending = [v.pending.collective_seq_id for v in group.ranks.values() if v.pending]
        hung[name] = min(pending) if pending else None
    return hung


def build_wait_graph(picture: Picture, stacks: dict[int, RankStackState] | None = None,
                     log_ends: dict[int, str] | None = None) -> WaitGraph:
    """``log_ends``: for ranks known only from logs, how their logs end (a class each)."""
    stacks = stacks or {}
    ends = log_ends or {}
    ranks = sorted(set(range(picture.world_size)) | set(picture.dumps) | set(stacks))
    hung = hung_seqs(picture)
    keys: dict[tuple[object, ...], str] = {}
    class_of: dict[int, str] = {}
    members: dict[str, list[int]] = defaultdict(list)
    for rank in ranks:
        key = _rank_key(picture, stacks, rank, hung, ends)
        cid = keys.get(key)
        if cid is None:
            cid = keys[key] = f"c{len(keys)}"
        class_of[rank] = cid
        members[cid].append(rank)
    states = {cid: _describe(picture, stacks, ranks_[0], ends)
              for cid, ranks_ in members.items()}
    graph = WaitGraph(class_of=class_of, members=dict(members), states=states)
    for cid, ranks_ in members.items():
        graph.graph.add_node(cid, ranks=format_ranks(ranks_), state=states[cid])
    for group in picture.groups.values():
        _add_collective_waits(graph, group, picture)
        _add_p2p_waits(graph, group)
    add_stack_waits(graph, picture, stacks)
    return graph


def _add_collective_waits(graph: WaitGraph, group: GroupView, picture: Picture) -> None:
    """Each rank blocked in seq N waits on the members whose last seq is below N, and on the
    members without a dump; class edges go only as far as :func:`_stand_ins` allows."""
    waiting_at: dict[int, list[int]] = defaultdict(list)
    ops: dict[int, str] = {}
    for view in group.ranks.values():
        if view.pending is not None:
            seq = view.pending.collective_seq_id
            waiting_at[seq].append(view.rank)
            ops.setdefault(seq, view.pending.op)
    if not waiting_at:
        return
    # how far each member got: a member stuck in an earlier seq cannot join a later one, even
    # if (NCCL) it enqueued it already
    views = sorted(group.ranks.values(), key=lambda v: v.entered)
    lasts = [v.entered for v in views]
    by_last = [v.rank for v in views]
    no_dump = [r for r in group.members if r not in picture.dumps]
    stand_in = _stand_ins(group, waiting_at)
    for seq, waiting in waiting_at.items():
        stop = bisect_left(lasts, seq)
        lower = stand_in.get(seq)
        direct = None if lower is None else by_last[bisect_left(lasts, lower):stop]
        reason = WaitReason("collective", group.name, group.desc, seq, ops[seq])
        graph.add_wait(reason, waiting, by_last[:stop] + no_dump, direct)


def _stand_ins(group: GroupView, waiting_at: dict[int, list[int]]) -> dict[int, int]:
    """For a blocked seq N, the highest blocked seq M < N whose blocked ranks are all behind N
    (entered nothing past N - 1), where there is one.

    Then every rank at N waits on every rank at M, and every rank at M reaches every rank behind
    M (directly, or through a stand-in of its own: induction on the seq). So the ranks at N need
    direct edges only to the ranks whose last seq is in [M, N), the ranks at M among them. Every
    edge left out is implied by a path of edges kept, and every edge kept is an all-pairs edge,
    so reachability is unchanged, and with it sinks, cycles and ancestors. The highest M leaves
    out the most, as the ranks behind M only grow with M. One pass in seq order: a heap keyed
    on the highest seq M's ranks entered lets M out once N is past it.
    """
    reach = {seq: max(group.ranks[r].entered for r in ranks) for seq, ranks in waiting_at.items()}
    entered: list[tuple[int, int]] = []  # (highest seq its ranks entered, blocked seq), a heap
    best: int | None = None
    found: dict[int, int] = {}
    for seq in sorted(waiting_at):
        while entered and entered[0][0] < seq:
            lower = heapq.heappop(entered)[1]
            best = lower if best is None else max(best, lower)
        if best is not None:
            found[seq] = best
        heapq.heappush(entered, (reach[seq], seq))
    return found


def _add_p2p_waits(graph: WaitGraph, group: GroupView) -> None:
    blocked: dict[int, list[FrEntry]] = {r: v.p2p_pending for r, v in group.ranks.items()
                                         if v.p2p_pending}
    for rank, entries in blocked.items():
        entry = entries[0]
        if entry.peer is None:
            continue
        peer = group.global_rank(entry.peer)
        if peer is None:
            continue
        wanted = "recv" if entry.op == "send" else "send"
        peer_entries = blocked.get(peer, [])
        if any(e.op == wanted and (e.peer is None or group.global_rank(e.peer) == rank)
               for e in peer_entries):  # a recv from any source (peer None) takes any send
            continue  # matched pair in flight: not a wait on the peer's behaviour
        reason = WaitReason("p2p", group.name, group.desc, entry.p2p_seq_id, entry.op)
        graph.add_wait(reason, [rank], [peer])


def add_stack_waits(graph: WaitGraph, picture: Picture,
                    stacks: dict[int, RankStackState]) -> None:
    """Waits seen in stacks, for ranks whose FR dumps do not already place them.

    A rank whose main thread sits in a collective waits on every rank that is elsewhere (not in
    a collective, p2p op or init): the group and seq are unknown from a stack, so the reason has
    seq -1. A rank blocked in a p2p op whose peer its frames tell (``RankStackState.p2p``) waits
    on that peer, unless the peer is blocked in the matching op towards it (a pair in flight);
    these rank -> peer edges make the cycle of a pipeline deadlock of any length. Ranks blocked in
    p2p recv (or all in send) with no peer known and no rank in the matching op wait on each
    other: the cycle a p2p deadlock of two makes.
    """
    unplaced = {r: s for r, s in stacks.items() if r not in picture.dumps or
                (not picture.pending_ops(r) and s.main is not None and s.main.kind == "p2p")}
    if not unplaced:
        return
    in_collective: dict[str, list[int]] = {}
    in_p2p: dict[str, list[int]] = {}
    in_init: list[int] = []
    elsewhere: list[int] = []
    for rank, state in stacks.items():
        main = state.main
        if state.gone or state.main_finished or main is None:
            elsewhere.append(rank)
        elif main.kind == "collective" and rank in unplaced:
            if state.progress != "moving":  # a rank that gets past its collectives waits on no one
                in_collective.setdefault(main.op or "?", []).append(rank)
        elif main.kind == "p2p":
            in_p2p.setdefault(main.op or "?", []).append(rank)
        elif main.kind == "init":
            if state.progress != "moving":
                in_init.append(rank)
        elif main.kind != "collective":
            elsewhere.append(rank)
    # ranks with no evidence at all are "elsewhere" as far as anyone can tell
    known = set(stacks) | set(picture.dumps) | picture.observed_in_collective()
    elsewhere += [r for r in graph.class_of if r not in known]
    p2p_ranks = [r for ranks in in_p2p.values() for r in ranks]
    for op, waiting in in_collective.items():
        reason = WaitReason("stack-collective", "", "", -1, op)
        graph.add_wait(reason, waiting, elsewhere + p2p_ranks)
    if in_init:
        graph.add_wait(WaitReason("stack-init", "", "", -1, "init_process_group"), in_init,
                       elsewhere)
    directed = _add_peer_waits(graph, stacks, p2p_ranks, pairs_by_tag(picture, stacks))
    unknown = [r for r in p2p_ranks if r not in directed]
    ops = {op.removeprefix("i") for op, ranks in in_p2p.items() if set(ranks) - directed}
    if len(unknown) >= 2 and len(ops) == 1:
        # everyone blocked in recv (or everyone in send): nobody will post the other side
        graph.add_mutual_wait(WaitReason("stack-p2p", "", "", -1, next(iter(ops))), unknown)


def pairs_by_tag(picture: Picture, stacks: dict[int, RankStackState]) -> bool:
    """Whether the job's backend pairs a send with a receive by tag: gloo and MPI do, NCCL has no
    tags (known from a flight-recorder dump, or a native frame of ProcessGroupNCCL)."""
    return "nccl" not in picture.backends and not any(
        "ProcessGroupNCCL" in frame.name for state in stacks.values()
        for frame in state.main_frames if frame.native)


def _unmatched(mine: RankStackState, theirs: RankStackState, by_tag: bool = True) -> bool:
    """Rule ``facing-p2p-unmatched``: a send and the receive it faces that cannot be one
    transfer: their tags differ where the backend pairs them by tag (gloo, MPI; ``by_tag``: no
    sign of NCCL, which has no tags), or both ranks stayed in them, still, over every sample (a
    posted pair completes in milliseconds). Each then waits on the other: a p2p deadlock between
    the two."""
    a, b = mine.p2p, theirs.p2p
    if a is None or b is None:
        return False
    if by_tag and a.tag is not None and b.tag is not None and a.tag != b.tag:
        return True
    return mine.progress == theirs.progress == "stuck" and min(mine.samples, theirs.samples) >= 2


def _add_peer_waits(graph: WaitGraph, stacks: dict[int, RankStackState],
                    p2p_ranks: list[int], by_tag: bool = True) -> set[int]:
    """rank -> peer edges of the p2p ranks whose peer is known; returns those ranks."""
    directed: set[int] = set()
    for rank in p2p_ranks:
        wait = stacks[rank].p2p
        if wait is None or wait.peer is None or wait.peer == rank \
                or wait.peer not in graph.class_of:
            continue
        directed.add(rank)
        theirs = stacks[wait.peer].p2p if wait.peer in stacks else None
        if theirs is not None and theirs.peer == rank and None not in (theirs.op, wait.op) \
                and theirs.op != wait.op \
                and not _unmatched(stacks[rank], stacks[wait.peer], by_tag):
            continue  # a send and its recv both posted: in flight, not a wait on the peer
        graph.add_wait(WaitReason("stack-p2p", "", "", -1, wait.op or wait.call), [rank],
                       [wait.peer])
    return directed
