"""Errors as symptoms: gloo's "Received data size doesn't match expected size" aborts a rank whose
own tensor is right; the culprit is the rank whose tensor differs (FR sizes, or the sizes the ranks'
own logs state), never the rank that raised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.analysis.majority import odd_ones_out
from hangscope.analysis.verdict import Kind, Status
from hangscope.cli import main
from hangscope.errors import ExitCode
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs.sizes import scan_sizes

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"
ENFORCE = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
           "  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
           "pair.cc:456] op.preamble.length <= op.nbytes. 256 vs 248. Received data size doesn't "
           "match expected size. Is there a distributed collective mismatch in your code?\n")


def _verdict(*paths: Path):
    evidence, _ = load_paths([str(p) for p in paths], LoadOptions())
    return analyze(evidence)[0]


@pytest.mark.parametrize("values, expected", [
    ({0: 31, 1: 31, 2: 32, 3: 31}, (31, [0, 1, 3], [2])),
    ({0: "a", 1: "b", 2: "a"}, ("a", [0, 2], [1])),
    ({0: 1, 1: 2}, None),  # two ranks: no majority
    ({0: 1, 1: 1, 2: 2, 3: 2}, None),  # a tie
    ({0: 1, 1: 2, 2: 3}, None),  # all differ
    ({0: 5, 1: 5, 2: 5}, None),  # all agree
], ids=["one-odd", "strings", "two", "tie", "all-differ", "agree"])
def test_odd_ones_out_needs_a_strict_majority(values, expected) -> None:
    found = odd_ones_out(values)
    assert (None if found is None else (found.value, found.majority, found.odd)) == expected


@pytest.mark.parametrize("scenario, culprit", [("vocab_shard_mismatch", [2]),
                                               ("size_mismatch", [1])])
def test_the_ranks_logs_alone_name_the_rank_whose_size_differs(scenario, culprit) -> None:
    # GIVEN only the logs a gloo job left after a size mismatch aborted another rank
    verdict = _verdict(RECORDED / scenario / "logs")
    # THEN a size mismatch of the odd rank, not the rank that aborted, and the job crashed
    root = verdict.findings[0]
    assert (root.kind, root.culprit_ranks) == (Kind.SIZE_MISMATCH, culprit), root.summary
    assert "symptom" in root.summary
    assert verdict.status is Status.CRASHED
    assert any(f.kind is Kind.RANK_DIED for f in verdict.findings[1:])


def test_the_flight_recorder_names_it_when_the_logs_cannot() -> None:
    verdict = _verdict(RECORDED / "vocab_shard_mismatch" / "fr" / "pickle",
                       RECORDED / "vocab_shard_mismatch" / "logs")
    root = verdict.findings[0]
    assert (root.kind, root.culprit_ranks) == (Kind.SIZE_MISMATCH, [2]), root.summary
    assert (root.collective.pg, root.collective.seq) == ("0", 2)
    assert sum(f.kind is Kind.SIZE_MISMATCH for f in verdict.findings) == 1  # FR's, not twice


def test_an_error_with_no_sizes_anywhere_names_no_culprit_rather_than_the_victim(
        tmp_path) -> None:
    # GIVEN one rank's stderr with the enforce failure and the others' plain peer errors
    for rank in range(3):
        text = ENFORCE if rank == 1 else (
            "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534]"
            " Connection closed by peer [127.0.0.1]:4242\n")
        (tmp_path / f"rank{rank}.stderr.log").write_text(text)
    root = _verdict(tmp_path).findings[0]
    # THEN a size mismatch with no culprit, the raising rank named as a victim
    assert (root.kind, root.culprit_ranks) == (Kind.SIZE_MISMATCH, []), root.summary
    assert "rank 1 aborted" in root.summary and "victim" in root.summary


def test_size_lines_ignore_the_ranks_own_number_and_tracebacks(tmp_path) -> None:
    path = tmp_path / "launcher.log"
    path.write_text("".join(
        f"[default{r}]:[rank{r}] vocabulary: {31 + (r == 2)} tokens\n"
        f'[default{r}]:  File "/job/train_vocab.py", line {10 + r}, in main\n' for r in range(3)))
    events = scan_sizes(str(path))
    assert sorted((e.fields["local_rank"], e.fields["template"], e.fields["values"])
                  for e in events) == [(r, "[rank#] vocabulary: # tokens", str(31 + (r == 2)))
                                       for r in range(3)]


torch = pytest.importorskip("torch")
from fixtures.jobrunner import SCENARIOS, running_job  # noqa: E402


@pytest.mark.live
def test_a_live_vocab_mismatch_names_the_rank_with_the_extra_word(tmp_path) -> None:
    # GIVEN the job run as a user runs it: no FR dump file (gloo writes none by itself)
    truth = SCENARIOS["vocab_shard_mismatch"]
    with running_job("vocab_shard_mismatch", ready_dir=tmp_path / "ready",
                     workdir=tmp_path / "job") as job:
        # WHEN it fails by itself
        code = job.wait(timeout=120)
        assert code not in (None, 0), job.output_tail()
    # AND what it left (the ranks' logs and the launcher's output) is analyzed
    out = tmp_path / "out"
    rc = main(["analyze", str(job.log_dir), str(job.output_path), "--out", str(out), "--quiet"])
    verdict = json.loads((out / "verdict.json").read_text())
    # THEN the rank whose vocabulary differs, whichever rank gloo aborted
    root = verdict["findings"][0]
    assert rc == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        [(f["kind"], f["culprit_ranks"], f["summary"][:200]) for f in verdict["findings"]]
    assert verdict["status"] == "crashed"


def _stacks_in(tmp_path, ops: dict[int, str]) -> Path:
    stacks = tmp_path / "stacks.txt"
    stacks.write_text("".join(
        f'[rank{r}]:Thread {100 + r} (idle): "MainThread"\n'
        f"[rank{r}]:    {op} (torch/distributed/distributed_c10d.py:2501)\n"
        f"[rank{r}]:    train (job.py:40)\n" for r, op in ops.items()))
    return stacks


@pytest.mark.parametrize("ops, culprits, clear", [
    ({0: "all_reduce", 1: "all_reduce", 2: "all_gather"}, [2], True),
    ({0: "all_reduce", 1: "all_gather", 2: "all_reduce", 3: "broadcast"}, [1, 3], False),
], ids=["one-of-three", "two-of-four-split"])
def test_stacks_in_different_collectives_pick_the_odd_side_by_majority(tmp_path, ops, culprits,
                                                                      clear) -> None:
    root = _verdict(_stacks_in(tmp_path, ops)).findings[0]
    assert (root.kind, root.culprit_ranks) == (Kind.COLLECTIVE_MISMATCH, culprits), root.summary
    assert ("no majority" in root.summary) is not clear
