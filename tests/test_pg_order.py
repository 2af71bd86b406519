"""A process-group ordering deadlock names the rank(s) whose order of groups differs from the other
members' (majority of the members of both groups, from their FR history); a tie says so.

Synthetic dumps for the precise cases, and the recordings of two real gloo jobs:
``uneven_shard_eval`` (rank 3 of 4 evaluates on the metrics group while ranks 0-2 all_reduce the
next step's gradients) and ``pg_order_deadlock`` (two ranks, one against one)."""

from __future__ import annotations

import json
from pathlib import Path

from hangscope.analysis.correlate import build_picture
from hangscope.analysis.engine import analyze
from hangscope.analysis.pg_order import order_verdict
from hangscope.analysis.verdict import Kind, Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

from frdumps import history, make_dump, make_entry, write_dumps

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"
A, B = ("1", "A"), ("2", "B")


def _verdict(paths: list[Path]):
    evidence, _ = load_paths([str(p) for p in paths], LoadOptions())
    verdict, _ = analyze(evidence)
    return verdict


def _dumps_verdict(tmp_path, dumps):
    write_dumps(str(tmp_path / "d"), dumps)
    return _verdict([tmp_path / "d"])


def _rank(first: tuple[str, str], pending: tuple[str, str] | None = None,
          also: tuple[str, str] | None = None) -> list[dict]:
    """Two healthy all_reduces on A and on B (seq 1, 2), then seq 3 of ``first`` (pending unless
    ``pending`` names the other group), and optionally seq 3 of ``also`` after it."""
    entries = history(2, pg=A) + history(2, pg=B, start_record=2)
    entries.append(make_entry(4, seq=3, pg=first, state="started"))
    if also is not None:
        entries.append(make_entry(5, seq=3, pg=also, state="started"))
    return entries


def _groups(members: list[int]) -> dict[str, tuple[str, list[int]]]:
    world = max(members) + 1
    return {"0": ("default_pg", list(range(world))), "1": ("A", members), "2": ("B", members)}


def test_the_rank_with_the_odd_order_is_the_culprit(tmp_path) -> None:
    # GIVEN groups A and B over ranks 0-3; ranks 0, 1, 3 issue A's seq 3 first, rank 2 B's
    groups = _groups([0, 1, 2, 3])
    dumps = {r: make_dump(_rank(A), 4, groups) for r in (0, 1, 3)}
    dumps[2] = make_dump(_rank(B), 4, groups)
    # WHEN analyzing the dumps
    root = _dumps_verdict(tmp_path, dumps).root
    # THEN the finding is an ordering deadlock naming rank 2 alone, and the others wait
    assert root.kind is Kind.PG_ORDER_DEADLOCK
    assert (root.culprit_ranks, root.waiting_ranks) == ([2], [0, 1, 3])
    assert root.confidence >= 0.85
    assert (root.collective.pg, root.collective.seq) == ("2", 3)
    assert "the majority, 3 of 4" in root.summary
    assert "rank 2 entered all_reduce seq 3 on pg 2 (B) first" in root.summary


def test_a_rank_that_issued_both_votes_by_record_order(tmp_path) -> None:
    # GIVEN rank 2 issued B's seq 3 and then A's seq 3 (async: both recorded), ranks 0,1 only A's
    groups = _groups([0, 1, 2])
    dumps = {r: make_dump(_rank(A), 3, groups) for r in (0, 1)}
    dumps[2] = make_dump(_rank(B, also=A), 3, groups)
    write_dumps(str(tmp_path / "d"), dumps)
    evidence, _ = load_paths([str(tmp_path / "d")], LoadOptions())
    # WHEN the members' orders of the two groups are compared
    order = order_verdict(build_picture(evidence), [0, 1, 2])
    # THEN rank 2, whose record ids put B first, is the one out of order
    assert order.culprits == [2] and not order.tie
    assert [(v.first.group.name, v.majority, v.minority) for v in order.votes] == \
        [("1", [0, 1], [2])]


def test_a_tie_names_both_sides_with_lower_confidence(tmp_path) -> None:
    # GIVEN ranks 0,1 issue A first and ranks 2,3 B first: two against two
    groups = _groups([0, 1, 2, 3])
    dumps = {r: make_dump(_rank(A if r < 2 else B), 4, groups) for r in range(4)}
    root = _dumps_verdict(tmp_path, dumps).root
    # THEN every rank is named, the summary says there is no majority, confidence is lower
    assert root.kind is Kind.PG_ORDER_DEADLOCK
    assert root.culprit_ranks == [0, 1, 2, 3]
    assert "2 against 2" in root.summary and "no majority" in root.summary
    assert root.confidence < 0.7


def test_ranks_blocked_elsewhere_do_not_vote(tmp_path) -> None:
    # GIVEN ranks 0,1 issue A first, rank 2 B first, and rank 3 (a member of both) is still
    # behind at seq 2 of both groups: it entered neither frontier collective
    groups = _groups([0, 1, 2, 3])
    dumps = {r: make_dump(_rank(A), 4, groups) for r in (0, 1)}
    dumps[2] = make_dump(_rank(B), 4, groups)
    dumps[3] = make_dump(history(2, pg=A) + history(2, pg=B, start_record=2), 4, groups)
    root = next(f for f in _dumps_verdict(tmp_path, dumps).findings
                if f.kind is Kind.PG_ORDER_DEADLOCK)
    # THEN rank 2 is the odd one, two against one; rank 3 is not counted either way
    assert 2 in root.culprit_ranks and not {0, 1} & set(root.culprit_ranks)
    assert "the majority, 2 of 3" in root.summary


def test_recorded_uneven_shards_name_the_rank_that_evaluated_early() -> None:
    # GIVEN the FR dumps a real gloo job left (rank 3 ran out of data one step early)
    folder = RECORDED / "uneven_shard_eval"
    for form in ("pickle", "json"):
        # WHEN analyzing them alone
        verdict = _verdict([folder / "fr" / form])
        root = verdict.root
        # THEN rank 3, which issued the metrics group's collective first, is the culprit
        assert root.kind is Kind.PG_ORDER_DEADLOCK, root.summary
        assert (root.culprit_ranks, root.waiting_ranks) == ([3], [0, 1, 2])
        assert (root.collective.pg, root.collective.seq, root.collective.op) == \
            ("1", 2, "all_reduce")
        assert "pg 1 (metrics)" in root.summary and "pg 0 (default_pg)" in root.summary
        assert {item.rank for item in root.evidence} >= {0, 3}


def test_recorded_uneven_shards_everything_left_behind() -> None:
    folder = RECORDED / "uneven_shard_eval"
    verdict = _verdict([folder / "fr" / "pickle", folder / "stacks", folder / "logs"])
    assert verdict.status is Status.HANG
    assert (verdict.root.kind, verdict.root.culprit_ranks) == (Kind.PG_ORDER_DEADLOCK, [3])


def test_recorded_one_against_one_is_a_tie() -> None:
    # GIVEN pg_order_deadlock: rank 0 entered dp_replicate first, rank 1 dp_shard first
    root = _verdict([RECORDED / "pg_order_deadlock" / "fr" / "pickle"]).root
    # THEN both are named, and the summary says that nothing tells which order is intended
    assert root.kind is Kind.PG_ORDER_DEADLOCK
    assert root.culprit_ranks == [0, 1]
    assert "1 against 1" in root.summary and "either may be the one to fix" in root.summary
    assert root.confidence < 0.7


def test_stacks_alone_with_no_majority_say_what_they_cannot_tell() -> None:
    # GIVEN only the py-spy stacks of pg_order_deadlock: ranks 0 and 1 in all_reduce from two
    # call sites, one each, ranks 2 and 3 in the default group's
    verdict = _verdict([RECORDED / "pg_order_deadlock" / "stacks"])
    # THEN no culprit is invented, and a gap says what only FR dumps could tell
    assert not any(f.culprit_ranks for f in verdict.findings)
    note = next(g for g in verdict.evidence_gaps if "names no process group" in g)
    assert "ordering deadlock" in note and "TORCH_FR_BUFFER_SIZE" in note
    assert "would have the odd order" not in note


def test_stacks_alone_with_a_majority_name_the_rank_at_the_odd_call_site() -> None:
    # GIVEN only the py-spy stacks of uneven_shard_eval: ranks 0-2 in all_reduce from
    # average_gradients, rank 3 from evaluate, all stuck
    verdict = _verdict([RECORDED / "uneven_shard_eval" / "stacks"])
    # THEN rank 3 is the likely odd one of an ordering deadlock, with the basis and a modest
    # confidence (a stack names no group), and the summary says what would confirm it
    root = verdict.root
    assert (root.kind, root.culprit_ranks, root.waiting_ranks) == (
        Kind.PG_ORDER_DEADLOCK, [3], [0, 1, 2])
    assert root.confidence <= 0.5
    assert "from evaluate" in root.summary and "TORCH_FR_BUFFER_SIZE" in root.summary


def test_one_rank_elsewhere_is_not_an_odd_call_site() -> None:
    # GIVEN the same stacks without rank 0's: a world of 4 with a rank unseen
    verdict = _verdict([p for p in (RECORDED / "uneven_shard_eval" / "stacks").iterdir()
                        if not p.name.startswith("rank0")])
    # THEN no call-site culprit: the unseen rank may be the one the others wait for
    assert not any(f.kind is Kind.PG_ORDER_DEADLOCK for f in verdict.findings)


def _spy_frame(name: str, filename: str, line: int) -> dict:
    short = filename.split("site-packages/")[-1]
    return {"name": name, "filename": filename, "module": None, "short_filename": short,
            "line": line, "locals": None, "is_entry": False, "is_shim_entry": False}


_TORCH = "/usr/lib/python3/site-packages/torch/"
_JOB = "/srv/train/adapters.py"


def _write_stacks(folder: Path, paths: dict[int, list[tuple[str, int]]]) -> Path:
    """One py-spy JSON dump per rank: its main thread in torch's all_reduce, called from the
    job's ``sync`` helper (line 124), which ``paths[rank]`` (outward) reached."""
    folder.mkdir(parents=True)
    for rank, outer in paths.items():
        frames = [_spy_frame("all_reduce", _TORCH + "distributed/distributed_c10d.py", 3252),
                  _spy_frame("_exception_logger.<locals>.wrapper",
                             _TORCH + "distributed/c10d_logger.py", 83),
                  _spy_frame("GradSync.sync", _JOB, 124)]
        for name, line in outer:
            if name.startswith("torch."):
                frames.append(_spy_frame(name[6:], _TORCH + "autograd/graph.py", line))
            else:
                frames.append(_spy_frame(name, _JOB, line))
        dump = [{"pid": 100 + rank, "thread_id": 1, "thread_name": "MainThread",
                 "os_thread_id": 100 + rank, "active": False, "owns_gil": False,
                 "frames": frames}]
        (folder / f"rank{rank}.json").write_text(json.dumps(dump))
    return folder


_AT_END = [("GradSync.finish", 139), ("train_step", 210), ("main", 300)]
_IN_HOOK = [("GradSync.on_adapter_grad", 135), ("torch._engine_run_backward", 829),
            ("train_step", 204), ("main", 300)]


def test_one_helper_line_reached_along_different_paths_is_an_ordering_deadlock(
        tmp_path) -> None:
    # GIVEN every rank stuck in all_reduce at one line of a sync helper: ranks 0, 2, 3 called it
    # at the step's end, rank 1 from a gradient hook inside backward (another group's sync)
    folder = _write_stacks(tmp_path / "stacks", {0: _AT_END, 1: _IN_HOOK, 2: _AT_END,
                                                 3: _AT_END})
    verdict = _verdict([folder])
    # THEN the ranks stand at different points of the program: rank 1, the odd path, is named,
    # and the summary says where the paths part
    root = verdict.root
    assert (root.kind, root.culprit_ranks, root.waiting_ranks) == (
        Kind.PG_ORDER_DEADLOCK, [1], [0, 2, 3])
    assert "via GradSync.on_adapter_grad" in root.summary
    assert "via GradSync.finish" in root.summary


def test_one_helper_line_reached_along_one_path_is_no_ordering_deadlock(tmp_path) -> None:
    # GIVEN the same line reached the same way by every rank (one collective, stuck for
    # another reason: a transport stall, say)
    folder = _write_stacks(tmp_path / "stacks", dict.fromkeys(range(4), _AT_END))
    verdict = _verdict([folder])
    # THEN no ordering deadlock is read into it
    assert not any(f.kind is Kind.PG_ORDER_DEADLOCK for f in verdict.findings)
