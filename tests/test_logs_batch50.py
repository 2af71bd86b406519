"""Rules from blind batch 50's and blind live jobs 43's first looks, on wordings other than the
cases they were written for, each with input that must not trip it: the FR analyzer's missing set
quoted in prose; a rank that skipped a non-finite step alone while the stacks split; a round of
prints where the odd rank said the round's line in another shape."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, verdict_of, write_paste

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log
from hangscope.sources.logs.step_skips import scan_step_skips

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"
SPLIT_STACKS = RECORDED / "uneven_shard_eval" / "stacks"  # ranks 0-2 at one call site, 3 another
OTHER_OP_STACKS = RECORDED / "collective_mismatch" / "stacks"  # ranks 0-2 in all_reduce, 3 all_gather


# --- the FR analyzer's "missing ranks: {..}" quoted in a sentence ------------------------------

def test_fr_analyzers_missing_set_quoted_in_prose_names_the_rank(tmp_path: Path) -> None:
    # GIVEN an issue's account of fr_trace's output: the collective and the missing set in one
    # sentence, in Markdown
    text = ("The analyzer was clear this time:\n"
            "- `fr_trace` says: collective `nccl:reduce_scatter_tensor_coalesced` on pg 3, "
            "**missing ranks: {5, 6}**, state=scheduled on the others.\n"
            "We restarted the job after 10 minutes.\n")
    verdict = verdict_of(tmp_path / "a", text)
    # THEN ranks 5 and 6 are the ones the others wait for, in that collective
    assert kind_and_culprits(verdict) == ("missing_rank", [5, 6])
    assert verdict.root.collective.op == "reduce_scatter_tensor_coalesced"


def test_the_analyzers_own_report_block_is_read_once(tmp_path: Path) -> None:
    # GIVEN the analyzer's own block: its "missing ranks:" line heads a line of the report
    text = ("Not all ranks joining collective: sequence number: 31117\n"
            "group info: 0:default_pg\n"
            "collective: nccl:all_reduce\n"
            "missing ranks: {3}\n"
            "world size: 4\n")
    path = write_paste(tmp_path / "b", text)
    reports = [e for e in scan_log(str(path)) if e.kind == "stall_report"]
    # THEN one report (the block's), not a second from the quoted-set reading
    assert [(e.fields["missing"], e.fields.get("seq")) for e in reports] == [("3", 31117)]


def test_a_set_of_ranks_in_other_words_is_no_missing_set(tmp_path: Path) -> None:
    # GIVEN prose naming a set of ranks without the analyzer's words, and Horovod's bracket form
    text = ("ranks {0, 1} finished their epoch, we are missing rank output for {2}\n"
            "the missing ranks: 2 and 3 came back later\n")
    path = write_paste(tmp_path / "c", text)
    # THEN no stall report
    assert not [e for e in scan_log(str(path)) if e.kind == "stall_report"]


# --- a non-finite step skipped by one rank ------------------------------------------------------

def test_skip_lines_in_several_wordings_are_read_with_their_rank(tmp_path: Path) -> None:
    text = ("2026-01-02 10:00:01,100 [rank2] WARNING non-finite loss at step 4, skipping update\n"
            "rank 1: loss is nan, skipping batch 1183\n"
            "[RANK 3] Skipping step 52 due to inf/nan gradients\n"
            "rank 0: step 52 skipped: grad norm is inf\n"
            "[rank5] | WARNING: ran out of memory, skipping batch\n"
            "[07:04:39][rank4] batch 12: OOM with padded length 60014, skipping batch\n")
    path = write_paste(tmp_path / "a", text)
    found = sorted((e.rank, e.fields["what"], e.fields["reason"]) for e in scan_step_skips(str(path)))
    assert found == [(0, "step", "inf"), (1, "batch", "nan"), (2, "update", "non-finite"),
                     (3, "step", "inf"), (4, "batch", "oom"), (5, "batch", "oom")]


def test_skips_that_are_no_non_finite_skip_are_not_read(tmp_path: Path) -> None:
    # GIVEN skips for other reasons and non-finite words without a skip
    text = ("rank 0: skipping batch 12 (empty after filtering)\n"
            "rank 1: loss is nan at step 5\n"
            "[rank2] resuming: skipping 1200 batches already seen\n"
            "rank 3: step=100, skipped=0, lr=[0.0001]\n")
    path = write_paste(tmp_path / "b", text)
    assert scan_step_skips(str(path)) == []


def _stacks_and_log(folder: Path, text: str, stacks: Path = SPLIT_STACKS):  # type: ignore[no-untyped-def]
    log = write_paste(folder, text, "train.log")
    evidence, _ = load_paths([str(stacks), str(log)], LoadOptions())
    return analyze(evidence)[0]


def test_the_odd_call_site_rank_that_skipped_a_nan_step_alone_ran_another_collective(
        tmp_path: Path) -> None:
    # GIVEN stacks where rank 3 sits in all_reduce from another call site than ranks 0-2, and
    # rank 3's log saying it skipped its update on a NaN loss
    text = ("[rank0] step 40 loss 2.113\n[rank1] step 40 loss 2.120\n[rank2] step 40 loss 2.098\n"
            "[rank3] step 40 loss nan -- non-finite loss, skipping the optimizer step\n")
    verdict = _stacks_and_log(tmp_path / "a", text)
    # THEN a collective mismatch of rank 3, the skip line cited
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks, root.measures.get("rule")) == (
        "collective_mismatch", [3], "one-sided-skip")
    assert any("skipping the optimizer step" in e.detail for e in root.evidence)


def test_a_skip_every_rank_took_leaves_the_ordering_reading(tmp_path: Path) -> None:
    # GIVEN the same stacks and fp16 overflow skips printed by ranks 0 and 3 (the loss scaler:
    # every rank skips together, here a majority rank among them)
    text = "".join(f"[deepspeed] OVERFLOW! Rank {r} Skipping step. Attempted loss scale: 65536, "
                   "reducing to 32768\n" for r in (0, 3))
    verdict = _stacks_and_log(tmp_path / "b", text)
    # THEN the call-site reading stands (an ordering deadlock, rank 3 at the odd place)
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks) == ("pg_order_deadlock", [3])
    assert root.measures.get("rule") != "one-sided-skip"


def test_the_rank_in_another_collective_that_skipped_a_batch_on_oom_is_that_ranks_oom(
        tmp_path: Path) -> None:
    # GIVEN stacks where rank 3 sits in all_gather while ranks 0-2 sit in all_reduce, and rank
    # 3's log saying it caught an OOM and skipped the batch (fairseq's wording)
    text = ("[rank0] | epoch 003:    120 / 800 loss=3.1\n"
            "[rank3] | WARNING: ran out of memory, skipping batch\n")
    verdict = _stacks_and_log(tmp_path / "a", text, OTHER_OP_STACKS)
    # THEN rank 3's OOM is the cause, the collective split and the skip line cited
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks, root.measures.get("rule")) == (
        "rank_oom", [3], "one-sided-skip")
    assert "out-of-memory" in root.summary and "all_gather" in root.summary
    assert verdict.status.value == "hang"  # the rank caught its OOM and lives on, waiting
    # without the skip line, the split is the mismatch it was
    verdict = _stacks_and_log(tmp_path / "b", "[rank0] | epoch 003:    120 / 800 loss=3.1\n",
                              OTHER_OP_STACKS)
    assert (verdict.root.kind.value, verdict.root.culprit_ranks) == ("collective_mismatch", [3])


# --- a round of prints where one rank said the line differently --------------------------------

def _round(rank: int, experts: str, order: str) -> str:
    return f"2026-01-02 10:00:0{rank},000 [rank{rank}] local experts [{experts}], bucket order {order}\n"


def test_the_rank_that_printed_the_rounds_line_in_another_shape_ran_another_plan(
        tmp_path: Path) -> None:
    # GIVEN five ranks' plan lines, four alike and rank 3's with two experts and the order reversed
    text = "".join(_round(r, str(r), "[('dense', 337), ('experts', 248)]") for r in (0, 1, 2, 4))
    text += _round(3, "3, 5", "[('experts', 496), ('dense', 337)]")
    verdict = verdict_of(tmp_path / "a", text)
    # THEN rank 3 is the odd one out of a mismatch, both lines cited, not a missing rank
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks, root.measures["rule"]) == (
        "collective_mismatch", [3], "odd-line-in-round")
    assert "('experts', 496)" in root.evidence[0].detail and root.evidence[0].rank == 3


def test_a_rank_that_said_something_else_is_still_absent_from_the_round(tmp_path: Path) -> None:
    # GIVEN the four alike and rank 3 printing another statement, not the round's
    text = "".join(_round(r, str(r), "[('dense', 337), ('experts', 248)]") for r in (0, 1, 2, 4))
    text += "2026-01-02 10:00:03,000 [rank3] saving shard 3 of the checkpoint\n"
    verdict = verdict_of(tmp_path / "b", text)
    # THEN the round reads as before: rank 3 did not reach the spot
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks, root.measures["rule"]) == (
        "missing_rank", [3], "absent-from-round")


# --- per-rank sizes a person wrote out ----------------------------------------------------------

def test_sizes_written_out_per_rank_name_the_odd_rank(tmp_path: Path) -> None:
    # GIVEN a summary of many watchdog lines, in bullets, ranks as a range and a list
    text = ("All ranks time out in SeqNum=881 (ALLGATHER). What they posted:\n"
            "- ranks 0-5, 7 -> NumelIn 262144\n"
            "- rank 6: NumelIn=262208\n")
    verdict = verdict_of(tmp_path / "a", text)
    # THEN a size mismatch of rank 6, both lines cited
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks, root.measures["rule"]) == (
        "collective_mismatch", [6], "stated-sizes")
    assert len(root.evidence) == 2


def test_a_table_of_sizes_with_no_majority_names_no_culprit(tmp_path: Path) -> None:
    # GIVEN a Markdown table of NumelOut for two ranks that differ
    text = ("| Rank | NumelOut |\n|---|---|\n| 0 | 4096 |\n| 1 | 8192 |\n")
    verdict = verdict_of(tmp_path / "b", text)
    # THEN a size mismatch, no side picked
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks) == ("collective_mismatch", [])
    assert "NumelOut=4096" in root.summary and "NumelOut=8192" in root.summary


def test_sizes_that_agree_or_are_torchs_own_lines_are_no_stated_mismatch(tmp_path: Path) -> None:
    # GIVEN a table whose sizes agree, then torch's own watchdog lines (the watchdog parser's)
    text = ("| ranks | NumelIn |\n|---|---|\n| 0-3 | 1024 |\n| 4-7 | 1024 |\n\n"
            "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=100, NumelOut=100, "
            "Timeout(ms)=600000) ran for 600006 milliseconds before timing out.\n")
    verdict = verdict_of(tmp_path / "c", text)
    # THEN no stated-sizes finding
    assert all(f.measures.get("rule") != "stated-sizes" for f in verdict.findings)


def test_a_rank_whose_stack_is_outside_any_collective_keeps_the_stacks_reading(
        tmp_path: Path) -> None:
    # GIVEN the launcher's shared log of missing_rank's job (every rank prints where it will
    # hang: rank 2 "slow_checkpoint_write", the others "all_reduce") and the job's stacks, rank 2
    # in a sleep inside slow_checkpoint_write and ranks 0, 1, 3 in all_reduce
    text = "".join(f"[rank{r}] hang point: {'slow_checkpoint_write' if r == 2 else 'all_reduce'}\n"
                   for r in (0, 1, 3, 2))
    verdict = _stacks_and_log(tmp_path / "a", text, RECORDED / "missing_rank" / "stacks")
    # THEN rank 2 is missing from the others' collective: its odd line is no other plan
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks) == ("missing_rank", [2])
    assert all(f.measures.get("rule") != "odd-line-in-round" for f in verdict.findings)
