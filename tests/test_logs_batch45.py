"""Rules from blind batch 45's first look, on wordings other than the case it was written for,
each with a log that must not trip it: a person's condensed head over many ranks' copies of one
watchdog line ("[Rank 1-7] Watchdog caught ...") is each of those ranks' timeout."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, write_paste

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log
from hangscope.sources.logs.cues import scan_cues

_WATCHDOG = ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, "
             "OpType=_ALLGATHER_BASE, NumelIn=4096, NumelOut=65536, Timeout(ms)=1800000) ran for "
             "1800042 milliseconds before timing out.")


_write = write_paste


def _timeouts(path: Path) -> list[int | None]:
    return [e.rank for e in scan_log(str(path)) if e.kind == "nccl_watchdog_timeout"]


def test_a_condensed_range_of_ranks_is_each_ranks_timeout(tmp_path: Path) -> None:
    # GIVEN a write-up's summary of 16 ranks' watchdog lines, rank 8 left out of it
    text = f"[Rank 0-7] {_WATCHDOG}\n[Ranks 9-15] {_WATCHDOG}\n"
    path = _write(tmp_path / "a", text)
    # THEN every rank of both ranges timed out, and the one no range names is the culprit
    assert _timeouts(path) == [*range(8), *range(9, 16)]
    verdict = analyze(load_paths([str(path)], LoadOptions())[0])[0]
    assert kind_and_culprits(verdict) == ("missing_rank", [8])


def test_a_single_rank_or_a_range_no_one_writes_is_not_expanded(tmp_path: Path) -> None:
    # torch's own head names one rank; a backwards or an absurd range is no summary of ranks
    assert _timeouts(_write(tmp_path / "a", f"[Rank 3] {_WATCHDOG}\n")) == [3]
    assert _timeouts(_write(tmp_path / "b", f"[Rank 7-1] {_WATCHDOG}\n")) != list(range(1, 8))
    assert len(_timeouts(_write(tmp_path / "c", f"[Rank 0-99999] {_WATCHDOG}\n"))) == 1


def test_a_counter_of_stragglers_that_reads_none_is_no_slow_cue(tmp_path: Path) -> None:
    # GIVEN a run's epoch lines with its straggler counter at none (batch 45: a baseline run of a
    # straggler-experiment repository read as a straggler from the counter's name)
    lines = [f"[Epoch {e:03d}] train_loss={1.0 / (e + 1):.4f} epoch_time=47.{e}s "
             f"step_time=0.13 straggle_events=none" for e in range(6)]
    path = _write(tmp_path / "a", "\n".join(lines) + "\n")
    verdict = analyze(load_paths([str(path)], LoadOptions())[0])[0]
    assert verdict.root is None or verdict.root.kind.value != "straggler"
    # AND the same counter with events in it is still a word about slow ranks
    slow = "\n".join(line.replace("straggle_events=none", f"straggle_events={700 + i}")
                     for i, line in enumerate(lines)) + "\n"
    cues = scan_cues(str(_write(tmp_path / "b", slow)))
    assert any(e.fields.get("cue") == "slow-words" for e in cues)


def test_a_bar_drawn_on_its_own_line_after_a_ranks_warning_is_no_continuation(
        tmp_path: Path) -> None:
    # GIVEN a rank's warning, then tqdm's bar drawn on lines of its own (its padded percentage
    # indents it), as a paste shows a bar whose carriage returns became line ends
    text = ("[rank0]:[W330 02:38:51.149050472 reducer.cpp:1500] Warning: find_unused_parameters="
            "True was specified in DDP constructor, but did not find any unused parameters\n"
            "\n"
            "  0%|          | 1/801 [00:28<6:20:52, 28.57s/it]\n"
            "  0%|          | 2/801 [00:56<6:18:07, 28.39s/it]\n")
    path = _write(tmp_path / "a", text)
    # THEN the bar is its own stream, which moved: training is under way, nothing failed
    verdict = analyze(load_paths([str(path)], LoadOptions())[0])[0]
    assert verdict.status.value == "healthy", [f.summary for f in verdict.findings]
    # AND an indented line under a rank's report is still that report's continuation
    from hangscope.sources.logs.tail import tail_lines
    report = text.split("\n", 1)[0] + "\n    frame #0: c10::Error::Error() + 0x88\n"
    read = tail_lines(str(_write(tmp_path / "b", report)))
    assert read is not None and read[3] == {1}
    read = tail_lines(str(path))
    assert read is not None and read[3] == set()
