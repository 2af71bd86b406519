"""Live attach on jobs that hang (or slow down) for a reason beyond collectives, and on a healthy
job that must keep training unharmed. Every job is stopped by its process groups in
``running_job``'s ``finally``, also when a test fails."""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from procs.procutil import free_port, started

from hangscope.cli import main
from hangscope.errors import ExitCode

torch = pytest.importorskip("torch")
from fixtures.jobrunner import SCENARIOS, running_job  # noqa: E402

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")]


def attach(job, out, *extra: str) -> tuple[int, dict]:
    args = ["attach", "--pid-group", str(job.pgid), "--out", str(out), "--force", *extra]
    code = main(args)
    return code, json.loads((out / "verdict.json").read_text())


@pytest.mark.parametrize("scenario", ["rank_died", "dataloader_stall", "python_deadlock",
                                      "init_hang"])
def test_attach_names_the_reason(tmp_path, scenario) -> None:
    truth = SCENARIOS[scenario]
    with running_job(scenario, ready_dir=tmp_path / "ready") as job:
        time.sleep(1.0)  # let every rank settle into its wait
        code, verdict = attach(job, tmp_path / "out", "--samples", "2", "--interval", "0.5")
    root = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        root["summary"]


@pytest.mark.parametrize("scenario", ["straggler", "ddp_imbalanced"])
def test_a_straggler_is_slow_not_hung_with_default_options(tmp_path, scenario) -> None:
    # GIVEN a job where one rank computes several times longer per step (ddp_imbalanced: the
    # others wait for it inside loss.backward(), where their stacks look like its own)
    truth = SCENARIOS[scenario]
    with running_job(scenario, ready_dir=tmp_path / "ready") as job:
        time.sleep(1.0)
        # WHEN attaching with default options
        code, verdict = attach(job, tmp_path / "out")
    # THEN slow, not hung: the straggler, with how much slower it computes
    seen = [(c["ranks"], c["role"], c.get("state")) for c in verdict["rank_classes"]]
    assert verdict["status"] == "slow", (verdict["status"], verdict["findings"], seen)
    assert code == ExitCode.NO_HANG
    root = verdict["findings"][0]
    assert (root["kind"], root["culprit_ranks"]) == ("straggler", truth.culprit_ranks)
    assert "not deadlocked" in root["summary"]
    assert root["measures"]["slowdown"] >= 1.5, root["summary"]
    assert root["measures"]["hot_frame"], root["summary"]


def test_a_dead_helper_thread_is_the_cause_not_a_dead_rank(tmp_path) -> None:
    # GIVEN rank 2's prefetch thread died (zlib.error) and its DataLoader starves
    with running_job("prefetch_thread_died", ready_dir=tmp_path / "ready") as job:
        time.sleep(1.0)
        # WHEN attaching with default options, while the process lives on
        code, verdict = attach(job, tmp_path / "out")
    # THEN the DataLoader wait is the finding and the thread's death its cause, no rank_died
    root = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == ("dataloader_stall", [2]), root["summary"]
    assert "thread 'prefetch' of rank 2 died earlier (zlib.error" in root["summary"]
    assert any(e["source"] == "log" and e["detail"].startswith("thread died")
               for e in root["evidence"])
    assert all(f["kind"] != "rank_died" for f in verdict["findings"])


def test_a_rank_gone_before_the_look_is_named_dead_by_the_helper_it_left(tmp_path) -> None:
    # GIVEN a Popen-launched gloo job whose rank 2 segfaulted after forking a helper: the helper,
    # handed to init, holds rank 2's sockets, so ranks 0 and 1 wait in all_reduce with no error
    ready = tmp_path / "ready"
    script = Path(__file__).parent / "procs" / "crash_leaves_helper.py"
    with started([str(script), str(ready), str(free_port())], ready, timeout=90.0) as job:
        assert job.ready["rank2_exit"] == -signal.SIGSEGV
        # WHEN attached by the launcher's process group, where no process of rank 2 is left
        code = main(["attach", "--pid-group", str(job.pid), "--out", str(tmp_path / "out"),
                     "--force", "--samples", "2", "--interval", "0.5"])
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    # THEN rank 2 died, told by the helper it left behind, and the others wait for it
    root = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"], root["waiting_ranks"]) == (
        "rank_died", [2], [0, 1]), root["summary"]
    told = [e["detail"] for e in root["evidence"] if e["source"] == "proc"]
    assert told and f"pid {job.ready['helper']}" in told[0] and "has exited" in told[0], told


def test_a_rank_its_launcher_has_not_reaped_is_numbered_and_named_dead(tmp_path) -> None:
    # GIVEN a plain Popen job (RANK/WORLD_SIZE only) whose rank 2 raised before joining: its
    # launcher waits on rank 0 first, so rank 2 is a zombie with no environment to number it,
    # and ranks 0, 1 and 3 wait in init_process_group
    ready = tmp_path / "ready"
    script = Path(__file__).parent / "procs" / "crash_left_unreaped.py"
    with started([str(script), str(ready), str(free_port())], ready, timeout=90.0) as job:
        zombie = job.ready["ranks"][2]
        # WHEN attached by the launcher's process group
        code = main(["attach", "--pid-group", str(job.pid), "--out", str(tmp_path / "out"),
                     "--force", "--samples", "2", "--interval", "0.5"])
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    # THEN the zombie is rank 2 (the one number no live rank holds), dead with exit code 1,
    # and the others wait for it
    root = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"], root["waiting_ranks"]) == (
        "rank_died", [2], [0, 1, 3]), root["summary"]
    told = [e["detail"] for e in root["evidence"] if e["source"] == "proc"]
    assert told and f"pid {zombie} status Z, exit code 1" in told[0], told


def test_a_rank_writing_a_slow_checkpoint_is_busy_not_stuck(tmp_path) -> None:
    # GIVEN rank 0 copying a checkpoint to a slow volume (sleeping between fsync'd chunks, one
    # frame, 1% CPU) while ranks 1 and 2 wait for it in a barrier
    ready = tmp_path / "ready"
    script = Path(__file__).parent / "procs" / "slow_checkpoint.py"
    with started([str(script), str(ready), str(free_port())], ready, timeout=90.0) as job:
        # WHEN attached by the launcher's process group
        code = main(["attach", "--pid-group", str(job.pid), "--out", str(tmp_path / "out"),
                     "--force"])
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    # THEN the bytes its main thread writes say rank 0 moves: the job is slow while the write
    # lasts, not hung on a rank that is elsewhere
    root = verdict["findings"][0]
    assert (verdict["status"], code) == ("slow", ExitCode.NO_HANG), root["summary"]
    assert (root["kind"], root["culprit_ranks"], root["waiting_ranks"]) == (
        "straggler", [0], [1, 2]), root["summary"]
    assert "KiB/s read+written" in root["summary"], root["summary"]


def test_healthy_training_is_healthy_with_default_options(tmp_path) -> None:
    with running_job("healthy_training", ready_dir=tmp_path / "ready") as job:
        time.sleep(1.0)
        code, verdict = attach(job, tmp_path / "out")
    assert (verdict["status"], code) == ("healthy", ExitCode.NO_HANG), verdict["findings"]


def _final_loss(text: str) -> str:
    found = re.findall(r"final loss (\d+\.\d+)", text)
    assert found, text[-2000:]
    return found[-1]


def _train(tmp_path, name: str, attaches: int, steps: int = 1_000_000
           ) -> tuple[str, int, list[dict]]:
    """Train ``steps`` steps, or, when attaching ``attaches`` times, until the attaches are done;
    the final loss, the steps trained and the verdicts. The job waits for the attaches however
    slow the machine is: nothing depends on how many fit in a time window."""
    verdicts = []
    stop = tmp_path / f"{name}-stop"
    env = {"HANGSCOPE_TRAIN_STEPS": str(steps)}
    if attaches:
        env["HANGSCOPE_TRAIN_STOP_FILE"] = str(stop)
    with running_job("healthy_training", ready_dir=tmp_path / f"{name}-ready", env=env) as job:
        for index in range(attaches):
            assert job.poll() is None, job.output_tail()
            out = tmp_path / f"{name}-{index}"
            main(["attach", "--pid-group", str(job.pgid), "--out", str(out), "--samples", "2",
                  "--interval", "0.2"])
            verdicts.append(json.loads((out / "verdict.json").read_text()))
        stop.touch()
        assert job.wait(timeout=240) == 0, job.output_tail()
        text = job.output_path.read_text(errors="replace")
    trained = re.findall(r"trained (\d+) steps", text)
    assert trained, text[-2000:]
    return _final_loss(text), int(trained[-1]), verdicts


def test_healthy_job_is_healthy_and_unharmed_by_20_attaches(tmp_path) -> None:
    # GIVEN a deterministic training run, attached to 20 times, then stopped at a step
    observed, trained, verdicts = _train(tmp_path, "watched", attaches=20)
    # WHEN the same run trains exactly as many steps without being looked at
    baseline, baseline_steps, _ = _train(tmp_path, "plain", attaches=0, steps=trained)
    # THEN it finished normally with the same final loss, and hangscope called it healthy
    assert (observed, trained) == (baseline, baseline_steps)
    assert len(verdicts) == 20
    assert all(v["status"] == "healthy" for v in verdicts), \
        [(v["status"], v["findings"][:1]) for v in verdicts if v["status"] != "healthy"]
