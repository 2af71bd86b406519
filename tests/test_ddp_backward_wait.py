"""A rank blocked in DDP's backward waits in its gradient all_reduce: the native dump names
``c10d::Reducer::finalize_backward``, and attach takes that dump for one rank per distinct stack,
so the ranks with the same Python stack share what it named.

The bundle is what attach left of a blind live job (fixtures/blind_jobs/jobs36/node_env_eval_skew,
session 28): two torchrun "nodes" with different evaluation settings; ranks 2 and 3 enter
validation's all_gather_object at step 30 while ranks 0 and 1 go on to the next step's backward."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.analysis.rank_state import rank_states
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

BUNDLE = Path(__file__).resolve().parent.parent / "fixtures" / "bundles" / \
    "ddp_backward_vs_eval_gather"


def test_ranks_in_ddp_backward_wait_in_all_reduce_and_mismatch_the_gather() -> None:
    # GIVEN the bundle: a --native dump of rank 0 only (rank 1's Python stack is the same)
    evidence, _ = load_paths([str(BUNDLE)], LoadOptions())
    natives = {rank: any(f.native for s in ev.samples for t in s.threads for f in t.frames)
               for rank, ev in evidence.ranks.items()}
    assert natives == {0: True, 1: False, 2: False, 3: False}
    # THEN ranks 0 and 1 both wait in the all_reduce DDP's backward ends in
    states = rank_states(evidence)
    for rank in (0, 1):
        main = states[rank].main
        assert main is not None and (main.kind, main.op) == ("collective", "all_reduce"), rank
        assert main.frame is not None and "Reducer::finalize_backward" in main.frame.name
    # AND the ranks in two different collectives are a mismatch, not a rank missing from one
    verdict, _ = analyze(evidence)
    first = verdict.findings[0]
    assert first.kind.value == "collective_mismatch"
    assert sorted(first.culprit_ranks) in ([0, 1], [2, 3]) and "no majority" in first.summary
