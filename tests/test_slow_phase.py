"""A healthy job with a slow periodic phase (rank 0 checkpoints while the others wait in a barrier)
is healthy or slow, never a hang: live, however the samples fall, and from what it left behind,
also with its scripts moved away."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.cli import main
from hangscope.errors import ExitCode
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"
_JOB_PATH = "/fixtures/jobs/"


@pytest.mark.parametrize("scenario, culprit, frame", [
    ("periodic_checkpoint", [0], "save_checkpoint"), ("python_loop_straggler", [2], "features")])
def test_saved_stacks_and_logs_of_a_slow_phase_are_not_a_hang(tmp_path, scenario, culprit,
                                                              frame) -> None:
    # GIVEN recorded stacks (one snapshot, taken while one rank computed and the others waited
    # for it) and logs, with the paths to the job's scripts leading nowhere
    for part in ("stacks", "logs"):
        shutil.copytree(RECORDED / scenario / part, tmp_path / part)
        for path in (tmp_path / part).iterdir():
            text = path.read_text(errors="replace")
            path.write_text(text.replace(_JOB_PATH, "/moved-away/jobs/"))
    # WHEN analyzed
    evidence, _ = load_paths([str(tmp_path / "stacks"), str(tmp_path / "logs")], LoadOptions())
    verdict = analyze(evidence)[0]
    # THEN slow, the busy rank named with where it computes; not a hang
    assert verdict.status.value in ("healthy", "slow"), verdict.findings
    assert all(f.kind.value != "missing_rank" for f in verdict.findings)
    if verdict.findings:
        root = verdict.findings[0]
        assert (root.kind.value, root.culprit_ranks) == ("straggler", culprit), root.summary
        assert frame in root.summary


def _drop_last_line_of(path: Path, prefix: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if line.startswith(prefix))
    path.write_text("".join(lines[:last] + lines[last + 1:]))


def test_a_running_jobs_log_cut_mid_round_is_no_missing_rank_beside_its_stacks(tmp_path) -> None:
    # GIVEN the checkpointing job's stacks, and its logs as collected from the running job:
    # ranks 0, 1 and 3 have printed step 90, rank 2 not yet (its line is a moment away)
    for part in ("stacks", "logs"):
        shutil.copytree(RECORDED / "periodic_checkpoint" / part, tmp_path / part)
    _drop_last_line_of(tmp_path / "logs" / "rank2.stdout.log", "[rank2] step")
    _drop_last_line_of(tmp_path / "logs" / "torchrun.log", "[default2]:[rank2] step")
    # WHEN the logs are analyzed alone, rule stream-behind reads rank 2 as the one behind
    alone, _ = load_paths([str(tmp_path / "logs")], LoadOptions())
    assert [f.measures.get("rule") for f in analyze(alone)[0].findings] == ["stream-behind"]
    # THEN with the stacks, which show where rank 2 is, the log's tail names nobody: slow, the
    # checkpointing rank the straggler, and no missing rank (rule live-over-log-tail)
    evidence, _ = load_paths([str(tmp_path / "stacks"), str(tmp_path / "logs")], LoadOptions())
    verdict = analyze(evidence)[0]
    assert verdict.status.value in ("healthy", "slow"), verdict.findings
    assert all(f.kind.value != "missing_rank" for f in verdict.findings), verdict.findings


BUNDLE = Path(__file__).resolve().parent.parent / "fixtures" / "bundles" / "checkpoint_ragged_log"


def test_the_bundle_of_a_live_look_at_a_checkpoint_reads_slow_with_no_missing_rank(
        tmp_path) -> None:
    # GIVEN the bundle an attach wrote during the checkpoint, whose torchrun log ends with the
    # ranks a line apart (rank 2's step 119 before rank 1's step 118)
    evidence, _ = load_paths([str(BUNDLE)], LoadOptions())
    verdict = analyze(evidence)[0]
    # THEN slow, rank 0 (the one checkpointing) the straggler, and nobody missing
    assert verdict.status.value == "slow", verdict.findings
    assert [(f.kind.value, f.culprit_ranks) for f in verdict.findings] == [("straggler", [0])]


ARRIVING = BUNDLE.parent / "straggler_caught_arriving"


def test_the_bundle_of_a_straggler_caught_joining_its_peers_reads_slow() -> None:
    # GIVEN the bundle of the live test below when it failed under a CPU load: rank 2 in its
    # features loop at 96% of a core in 7 of 8 samples, in the all_reduce in the last one;
    # ranks 0 and 1 in that all_reduce in all 8, at 1% (never caught between two steps)
    evidence, _ = load_paths([str(ARRIVING)], LoadOptions())
    verdict = analyze(evidence)[0]
    # THEN slow, rank 2 the straggler (it was read inconclusive: every rank "in all_reduce")
    assert verdict.status.value == "slow", verdict.findings
    assert [(f.kind.value, f.culprit_ranks) for f in verdict.findings] == [("straggler", [2])]


def test_a_probe_round_without_a_sampled_rank_in_a_moving_job_names_nobody_missing(
        tmp_path) -> None:
    # GIVEN the same bundle with a round of probe prints that lacks rank 2 (collected a moment
    # before rank 2 printed its line)
    shutil.copytree(BUNDLE, tmp_path / "bundle")
    launcher = tmp_path / "bundle" / "job" / "launcher.log"
    with launcher.open("a") as log:
        log.writelines(f"rank {rank} entering the barrier\n" for rank in (0, 1, 3))
    # WHEN the log is read alone, rule absent-from-round names rank 2 as missing
    alone, _ = load_paths([str(launcher)], LoadOptions())
    assert [(f.measures.get("rule"), f.culprit_ranks) for f in analyze(alone)[0].findings] \
        == [("absent-from-round", [2])]
    # THEN with the samples, which saw every rank move and rank 2 in the barrier, the log's tail
    # names nobody (rule live-over-log-tail)
    evidence, _ = load_paths([str(tmp_path / "bundle")], LoadOptions())
    verdict = analyze(evidence)[0]
    assert [(f.kind.value, f.culprit_ranks) for f in verdict.findings] == [("straggler", [0])]
    assert verdict.status.value == "slow"


@pytest.mark.parametrize("scenario", ["periodic_checkpoint", "train_then_hang"])
def test_logs_alone_that_advance_read_healthy_and_say_what_they_cannot_show(scenario) -> None:
    # GIVEN only the ranks' logs: steps advancing on every rank, no error (a healthy job stopped
    # from outside, and one that trained and then hung after its last line, alike)
    evidence, _ = load_paths([str(RECORDED / scenario / "logs")], LoadOptions())
    verdict = analyze(evidence)[0]
    # THEN healthy as far as logs can tell (rule logs-advance), and the note says the limit: a
    # hang that began after the last line leaves no trace in a log, and what would show it
    # (train_then_hang is that limit: its stacks and dumps, analyzed with the logs, show the hang)
    assert verdict.status.value == "healthy", verdict.findings
    note = next(gap for gap in verdict.evidence_gaps if gap.startswith("rule logs-advance"))
    assert "cannot show a hang that began after their last line" in note
    assert "attach" in note


def test_the_same_logs_with_the_stacks_and_dumps_show_the_hang() -> None:
    # GIVEN train_then_hang's logs together with the stacks and FR dumps taken while it hung
    evidence, _ = load_paths([str(RECORDED / "train_then_hang")], LoadOptions())
    verdict = analyze(evidence)[0]
    # THEN the logs' advance does not clear it: the hang is the verdict
    assert verdict.status.value == "hang", verdict.evidence_gaps


torch = pytest.importorskip("torch")
from fixtures.jobrunner import running_job  # noqa: E402


def _during_checkpoint(job, step: int = 119, timeout: float = 120.0) -> None:
    """Until the ranks have logged the step before a checkpoint (the 3rd: steps 119 -> 120)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f"step {step} loss" in job.output_path.read_text(errors="replace"):
            return
        time.sleep(0.02)
    raise AssertionError(job.output_tail())


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
@pytest.mark.parametrize("options", [(), ("--samples", "2", "--interval", "0.5",
                                          "--max-samples", "2")],
                         ids=["default", "two-samples-inside-the-checkpoint"])
def test_a_live_look_during_the_checkpoint_is_not_a_hang(tmp_path, options) -> None:
    out = tmp_path / "out"
    with running_job("periodic_checkpoint", ready_dir=tmp_path / "ready",
                     env={"RESULTS_DIR": str(tmp_path / "results")}) as job:
        _during_checkpoint(job)
        # WHEN attached while rank 0 checkpoints and the others wait in the barrier
        code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out), "--force",
                     "--quiet", *options])
    verdict = json.loads((out / "verdict.json").read_text())
    # THEN healthy or slow, and no page
    assert verdict["status"] in ("healthy", "slow"), verdict["findings"]
    assert code == ExitCode.NO_HANG
    assert all(f["kind"] != "missing_rank" for f in verdict["findings"]), verdict["findings"]


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
def test_a_rank_in_a_much_slower_python_loop_is_a_straggler(tmp_path) -> None:
    # GIVEN python_loop_straggler: rank 2 computes its features in a Python loop for most of
    # each step while ranks 0 and 1 sit idle in the all_reduce (a busy machine shrinks every
    # rank's CPU, so the ranks are compared with each other)
    out = tmp_path / "out"
    with running_job("python_loop_straggler", ready_dir=tmp_path / "ready") as job:
        time.sleep(1.0)
        code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out), "--force",
                     "--quiet"])
    verdict = json.loads((out / "verdict.json").read_text())
    # THEN slow, rank 2 the straggler, no page
    assert (verdict["status"], code) == ("slow", ExitCode.NO_HANG), \
        (verdict["findings"], verdict["rank_classes"])
    root = verdict["findings"][0]
    assert (root["kind"], root["culprit_ranks"]) == ("straggler", [2]), root["summary"]
    # and it cites rank 2's own code: the features loop, or the line of main that calls it
    # (building the long documents), wherever py-spy's samples of it landed
    assert "python_loop_straggler.py" in root["summary"], root["summary"]


def _state(rank: int, kind: str, progress: str, share: float):  # type: ignore[no-untyped-def]
    from hangscope.analysis.rank_state import RankStackState
    from hangscope.analysis.stacks import ThreadActivity
    main_thread = ThreadActivity(kind=kind, op=None, frame=None, user_frame=None)  # type: ignore[arg-type]
    return RankStackState(rank=rank, main=main_thread, main_frames=(), progress=progress,  # type: ignore[arg-type]
                          cpu_share=share, samples=3)


@pytest.mark.parametrize("share, waiters, expected", [
    (0.9, 0.02, True),    # a core of its own
    (0.27, 0.02, True),   # a loaded machine: a quarter of a core, the waiters idle
    (0.27, 0.2, False),   # the waiters burn as much: nothing sets this rank apart
    (0.08, 0.0, False),   # too little CPU to call it busy at all
    (0.27, None, False),  # the waiters' CPU unknown: only the absolute rule
])
def test_a_busy_rank_is_judged_against_the_ranks_that_wait_for_it(share, waiters,
                                                                  expected) -> None:
    from hangscope.analysis.detectors.busy_rank import busy
    assert busy(_state(0, "compute", "moving", share), waiters) is expected
    assert busy(_state(0, "compute", "stuck", share), waiters) is False
