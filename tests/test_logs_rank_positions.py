"""Rule split-positions: a prose summary of the ranks' stacks with ranks in different collectives."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs.rank_positions import scan_rank_positions
from hangscope.sources.logs.tail import logical_tail

# how sglang's developers describe a hang from py-spy (frames as py-spy prints them)
FENCED = """TP0 stuck forever in:
```
all_reduce (torch/distributed/distributed_c10d.py:3075)
  _all_reduce_attn_groups (hiradix_cache.py:196)
```
while TP1-3 had already moved on to the next loop iteration, waiting in:
```
broadcast (torch/distributed/distributed_c10d.py:2974)
  broadcast_pyobj (utils/common.py:1437)
```
"""
ARROWS = """- TP0: `all_reduce → writing_check → check_hicache_events`
- TP1-3: `broadcast → broadcast_pyobj → recv_requests` (next iteration)
"""
WORDS = "rank 5 is stuck in all_gather while ranks 0-4 and ranks 6-7 wait in barrier\n"


def _positions(tmp_path: Path, text: str) -> dict[int, str]:
    log = tmp_path / "paste.txt"
    log.write_text(text)
    return {e.rank: str(e.fields["op"]) for e in scan_rank_positions(str(log), logical_tail(str(log)))
            if e.rank is not None}


@pytest.mark.parametrize(("text", "expected"), [
    (FENCED, {0: "allreduce", 1: "broadcast", 2: "broadcast", 3: "broadcast"}),
    (ARROWS, {0: "allreduce", 1: "broadcast", 2: "broadcast", 3: "broadcast"}),
    (WORDS, {5: "allgather", **dict.fromkeys((0, 1, 2, 3, 4, 6, 7), "barrier")}),
], ids=["fenced", "arrows", "words"])
def test_each_rank_gets_the_collective_its_summary_names(tmp_path: Path, text: str,
                                                          expected: dict[int, str]) -> None:
    assert _positions(tmp_path, text) == expected


def test_lines_that_name_a_rank_and_no_stack_are_nothing(tmp_path: Path) -> None:
    assert _positions(tmp_path, "rank 0 loss 1.2 after all_reduce of grads\n"
                                "if rank == 0:\n    dist.broadcast(t, src=0)\n") == {}


def test_the_smaller_side_is_named(tmp_path: Path) -> None:
    log = tmp_path / "paste.txt"
    log.write_text(FENCED)
    verdict, _ = analyze(load_paths([str(log)], LoadOptions())[0])
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("collective_mismatch", [0])
    assert first.measures["rule"] == "split-positions"
