"""A straggler from the step times the ranks' own logs print (sources/logs/progress.py's timing
fields, detectors/straggler_logs.py), on logs written the way training loops print them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Kind, Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs.progress import TIMING_SAMPLES, parse_timing, scan_progress


@pytest.mark.parametrize(("line", "expected"), [
    ("[rank2] step 60 loss 0.0001 step_time 67ms compute 55ms", ("compute", 55.0, "ms")),
    ("step 3 fwd_bwd=0.21s data_time=0.01", ("fwd_bwd", 210.0, "ms")),
    ("iter 100 | time: 0.52s", ("time", 520.0, "ms")),
    ("Epoch: [0][ 10/500]\tTime  0.123 ( 0.150)\tData  0.001 ( 0.002)", ("time", 0.123, "")),
    (" iteration      100/   10000 | elapsed time per iteration (ms): 1234.5 |",
     ("step_time", 1234.5, "ms")),
    ("step 7 forward 12.5 ms backward 30 ms", ("forward", 12.5, "ms")),
    ("step 5 time 12:03:44 loss 2.0", None),  # a clock, not a duration
    ("step 5 max_step_time 9 recompute 4ms", None),  # inside other names
    ("step 4 loss 2.0", None),
])
def test_the_most_specific_step_time_of_a_line(line: str, expected: object) -> None:
    assert parse_timing(line) == expected


def write_logs(root: Path, compute: dict[int, list[float]], fmt: str = "compute {v:g}ms"
               ) -> list[str]:
    paths = []
    for rank, values in compute.items():
        path = root / f"rank{rank}.stdout.log"
        path.write_text("".join(f"[rank{rank}] step {10 * i} loss 0.5 step_time 70ms "
                                + fmt.format(v=v) + "\n" for i, v in enumerate(values)))
        paths.append(str(path))
    return paths


def test_a_rank_whose_median_step_time_is_twice_the_others_is_named(tmp_path: Path) -> None:
    # GIVEN four ranks' logs; rank 3 computes ~3x as long per step as the others
    paths = write_logs(tmp_path, {0: [10, 12, 11, 30, 10], 1: [9, 9, 10, 11, 9],
                                  2: [12, 11, 13, 12, 12], 3: [33, 31, 35, 30, 32]})
    evidence, _ = load_paths(paths, LoadOptions())
    verdict, _ = analyze(evidence)
    # THEN slow, rank 3, scored against the fastest rank's median, citing the logs
    assert verdict.status is Status.SLOW
    root = verdict.findings[0]
    assert (root.kind, root.culprit_ranks, root.waiting_ranks) == (Kind.STRAGGLER, [3],
                                                                   [0, 1, 2])
    assert root.measures == {"slowdown": round(32 / 9, 2), "fastest_rank": 1,
                             "timing": "compute"}
    assert root.confidence == 0.6
    assert root.evidence[0].rank == 3 and root.evidence[0].where.endswith("rank3.stdout.log:5")
    assert "compute 32 ms per step against 9-12 ms for ranks 0-2" in root.summary


def test_equal_step_times_of_synchronous_training_say_nothing(tmp_path: Path) -> None:
    paths = write_logs(tmp_path, {r: [70, 71, 69] for r in range(4)}, fmt="iter_time {v:g}ms")
    evidence, _ = load_paths(paths, LoadOptions())
    verdict, _ = analyze(evidence)
    assert not any(f.kind is Kind.STRAGGLER for f in verdict.findings)


@pytest.mark.parametrize("compute", [
    {0: [10, 10, 10], 1: [11, 11, 11], 2: [30, 30, 30], 3: [31, 31, 31]},  # half the job
    {0: [10, 10, 10], 1: [14, 14, 14], 2: [19, 19, 19], 3: [25, 25, 25]},  # a continuum
    {0: [10, 10], 1: [10, 10], 2: [10, 10], 3: [40, 40]},  # too few lines
])
def test_no_straggler_without_a_clear_minority(tmp_path: Path,
                                               compute: dict[int, list[float]]) -> None:
    evidence, _ = load_paths(write_logs(tmp_path, compute), LoadOptions())
    verdict, _ = analyze(evidence)
    assert not any(f.kind is Kind.STRAGGLER for f in verdict.findings)


def test_only_the_same_key_and_unit_are_compared(tmp_path: Path) -> None:
    write_logs(tmp_path, {0: [10, 10, 10], 1: [10, 10, 10]})
    write_logs(tmp_path, {2: [0.04, 0.04, 0.04]}, fmt="compute {v:g}")  # unitless: apart
    evidence, _ = load_paths([str(tmp_path)], LoadOptions())
    verdict, _ = analyze(evidence)
    assert not any(f.kind is Kind.STRAGGLER for f in verdict.findings)


def test_a_stream_keeps_the_median_of_its_latest_lines(tmp_path: Path) -> None:
    path = tmp_path / "launcher.log"
    lines = [f"[default{r}]:step {i} compute {100 if i < 10 else 10 + r}ms\n"
             for i in range(10 + TIMING_SAMPLES) for r in range(2)]
    path.write_text("".join(lines))
    events = {e.fields["local_rank"]: e.fields for e in scan_progress(str(path)) if e.kind == "progress"}
    assert events[0]["timing_value"] == 10 and events[1]["timing_value"] == 11
    assert events[0]["timing_samples"] == TIMING_SAMPLES
    assert events[0]["timing_first_line"] == 2 * 10 + 1  # the oldest line kept


def test_a_log_straggler_never_clears_a_hang_the_stacks_show(tmp_path: Path) -> None:
    # GIVEN logs where rank 1 was slow, and one stack per rank taken later: rank 1 sits in
    # a lock, the others in all_reduce (a hang read from stacks alone)
    paths = write_logs(tmp_path, {0: [10, 10, 10], 1: [40, 40, 40], 2: [10, 11, 10],
                                  3: [11, 10, 10]})
    stacks = tmp_path / "stacks.txt"
    text = []
    for rank in range(4):
        where = ("wait (threading.py:320)\n    acquire (job.py:10)" if rank == 1 else
                 "all_reduce (torch/distributed/distributed_c10d.py:2501)")
        text.append(f"[rank{rank}]:Thread 100 (idle): \"MainThread\"\n[rank{rank}]:    "
                    + where.replace("\n", f"\n[rank{rank}]:") + f"\n[rank{rank}]:    "
                    "train (job.py:40)\n")
    stacks.write_text("".join(text))
    evidence, _ = load_paths([*paths, str(stacks)], LoadOptions())
    verdict, _ = analyze(evidence)
    # THEN the hang is still the verdict; the logs' straggler stays as a second finding
    assert verdict.status is Status.HANG, verdict.findings
    root = verdict.findings[0]
    # (rank 1's stack is a lock wait whose holder no stack shows: read as a lock it never gets)
    assert (root.kind, root.culprit_ranks) == (Kind.PYTHON_DEADLOCK, [1])
    assert root.waiting_ranks == [0, 2, 3]
    assert [(f.kind, f.culprit_ranks) for f in verdict.findings[1:]] == [(Kind.STRAGGLER, [1])]


def _one_log(tmp_path: Path, times: list[float]) -> object:
    log = tmp_path / "train.log"
    log.write_text("".join(f"02/09/2022 12:13:25 - INFO - Epoch: 1/30, Step: {i + 1}/951, "
                           f"Loss: 3.25, Time/step: {t}\n" for i, t in enumerate(times)))
    verdict, _ = analyze(load_paths([str(log)], LoadOptions())[0])
    return verdict


def test_steps_that_stall_and_resume_are_a_straggler_with_no_name(tmp_path: Path) -> None:
    # GIVEN a loop's own step times that alternate between ~45 s and ~4.5 s (first: warm-up)
    verdict = _one_log(tmp_path, [1466.6, 67.3, 48.2, 4.5, 44.2, 4.8, 45.0, 4.6, 43.9, 4.7, 44.8])
    root = verdict.root
    # THEN rule step-time-swings: a straggler, no rank named
    assert root is not None and root.kind is Kind.STRAGGLER and root.culprit_ranks == []
    assert root.measures["rule"] == "step-time-swings"


def test_even_step_times_do_not_swing(tmp_path: Path) -> None:
    verdict = _one_log(tmp_path, [30.0, 4.5, 4.6, 4.4, 4.7, 4.5, 4.6, 4.5, 4.6])
    assert all(f.measures.get("rule") != "step-time-swings" for f in verdict.findings)
