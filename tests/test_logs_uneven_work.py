"""Rule uneven-work: ranks that say they run different numbers of batches or steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs.work_counts import scan_work_counts


def _verdict(tmp_path: Path, lines: list[str]):
    log = tmp_path / "job.log"
    log.write_text("\n".join([*lines, ""]))
    verdict, _ = analyze(load_paths([str(log)], LoadOptions())[0])
    return verdict


def test_the_rank_with_another_count_is_named(tmp_path: Path) -> None:
    # GIVEN a user's prints of each rank's batch count (microsoft/DeepSpeed#2223's wording)
    verdict = _verdict(tmp_path, ["Rank = 0, Number of batches 4", "Rank = 1 Number of batches 4",
                                  "Rank = 2, Number of batches 8", "Rank = 3, Number of batches 4"])
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("collective_mismatch", [2])
    assert first.measures["rule"] == "uneven-work" and "rank 2: 8" in first.summary


def test_two_ranks_name_the_one_with_more_steps(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, ["[rank0]: num_batches: 1250", "[rank1]: num_batches: 1251"])
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("collective_mismatch", [1])


def test_even_counts_are_nothing(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, [f"[rank{r}]: steps per epoch: 311" for r in range(4)])
    assert all(f.measures.get("rule") != "uneven-work" for f in verdict.findings)


@pytest.mark.parametrize(("text", "what", "value"), [
    ("rank 3 len(train_loader)=980", "len(train_loader)", 980),
    ("steps per epoch: 311", "steps", 311),
    ("Number of iterations is 42", "iterations", 42),
    ("and the number of batches are: 64", "batches", 64),
])
def test_wordings_of_a_count(tmp_path: Path, text: str, what: str, value: int) -> None:
    log = tmp_path / "a.log"
    log.write_text(text + "\n")
    (event,) = scan_work_counts(str(log))
    assert (event.fields["what"], event.fields["value"]) == (what, value)


def test_one_print_per_process_with_no_rank_and_an_odd_count_is_uneven(tmp_path: Path) -> None:
    # GIVEN one line per process, no rank in them: six processes on one data set, one on another
    lines = [f"loader {kind} (id {100 + i}) number of batches: {n}" for i, (kind, n) in
             enumerate([("webtext", 310)] * 3 + [("code", 1204)] + [("webtext", 310)] * 3)]
    verdict = _verdict(tmp_path, ["epoch 0 starting", *lines, "epoch 0 step 0"])
    first = verdict.findings[0]
    # THEN the counts disagree: a mismatch, no rank named
    assert (first.kind.value, first.culprit_ranks) == ("collective_mismatch", [])
    assert first.measures.get("form") == "unnamed" and "1204" in first.summary


@pytest.mark.parametrize("lines", [
    # one process's loaders one after another: no majority
    ["num_batches: 1000", "num_batches: 120", "num_batches: 80", "num_batches: 40"],
    # too few lines in a row to be one per process
    ["num_batches: 310", "num_batches: 310", "num_batches: 1204"],
    # the same count printed apart, between other lines
    ["num_batches: 310", "step 1", "step 2", "num_batches: 310", "step 3", "step 4",
     "num_batches: 1204", "step 5", "step 6", "num_batches: 310"],
])
def test_rank_less_counts_not_one_print_per_process_are_nothing(tmp_path: Path,
                                                                  lines: list[str]) -> None:
    verdict = _verdict(tmp_path, lines)
    assert all(f.measures.get("rule") != "uneven-work" for f in verdict.findings)
