"""The in-job probe on real gloo jobs started with HANGSCOPE_PROBE=1 and no flight-recorder dump
file: attach gets each rank's FR trace from its probe and names the culprit; the probe never
changes what training computes; it leaves no socket behind, also when a rank blocked in a
collective is sent SIGTERM. Every job is stopped by its process groups in ``finally``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hangscope.bundle import load_bundle
from hangscope.cli import main
from hangscope.collect.probe import ask
from hangscope.errors import ExitCode
from hangscope.model import JobEvidence

torch = pytest.importorskip("torch")
from probe_env import REPO, probe_env, sockets_in, wait_sockets  # noqa: E402

from fixtures.jobrunner import SCENARIOS, Job, free_port, running_job, wait_for  # noqa: E402

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")]


def _verdict(out: Path) -> dict:
    return json.loads((out / "verdict.json").read_text())


@pytest.mark.parametrize("scenario", ["pg_order_deadlock", "collective_mismatch", "missing_rank"])
def test_attach_names_the_culprit_from_the_probes_fr_traces(scenario: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a hung job with the probe on and no FR dump file anywhere
    truth = SCENARIOS[scenario]
    env = probe_env(tmp_path)
    out = tmp_path / "out"
    with running_job(scenario, ready_dir=tmp_path / "ready", env=env) as job:
        wait_sockets(tmp_path / "sockets", job.rank_pids.values())
        time.sleep(1.0)  # the ready file is written just before the blocking call
        # WHEN attaching with default options
        code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out)])
    # THEN the culprit is named from the probes' FR traces, which the bundle keeps
    verdict = _verdict(out)
    root = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        root["summary"]
    assert root["waiting_ranks"] == truth.waiting_ranks
    assert f"in-job probe answered in {truth.nproc}" in capsys.readouterr().out
    fr_cited = [e for e in root["evidence"] if e["source"] == "flight_recorder"]
    assert fr_cited and all("probe-fr.json" in e["detail"] + e["where"] for e in fr_cited)
    for rank in range(truth.nproc):
        files = sorted(p.name for p in (out / "bundle" / "ranks" / str(rank)).iterdir())
        assert "probe.json" in files and "probe-fr.json" in files
    # AND analyze BUNDLE reproduces the verdict
    again = tmp_path / "again"
    assert main(["analyze", str(out / "bundle"), "--out", str(again)]) == code
    redo = _verdict(again)["findings"][0]
    assert (redo["kind"], redo["culprit_ranks"], redo["collective"]) == \
        (root["kind"], root["culprit_ranks"], root["collective"])


def test_no_probe_leaves_the_ordering_deadlock_unnamed(tmp_path: Path) -> None:
    # GIVEN the same ordering deadlock with the probe on in every rank
    env = probe_env(tmp_path)
    out = tmp_path / "out"
    with running_job("pg_order_deadlock", ready_dir=tmp_path / "ready", env=env) as job:
        wait_sockets(tmp_path / "sockets", job.rank_pids.values())
        time.sleep(1.0)
        # WHEN attach is told not to ask the probes
        code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out), "--no-probe"])
    # THEN nothing came from them, and stacks alone cannot name the culprit
    assert not list((out / "bundle").rglob("probe*.json"))
    findings = _verdict(out)["findings"]
    assert code != ExitCode.HANG_FOUND or findings[0]["kind"] != "pg_order_deadlock"


def test_probe_answers_where_ptrace_is_denied(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an ordering deadlock with the probe on, and no rank that may be traced (as in a
    # container without CAP_SYS_PTRACE: the access check is what says so, here replaced)
    from hangscope.collect import permissions

    def denied(pids, readers=None):  # noqa: ANN001, ANN202 - the signature of check_access
        return {pid: permissions.AccessProblem(pid, "ptrace denied (test)", "") for pid in pids}

    monkeypatch.setattr(permissions, "check_access", denied)
    env = probe_env(tmp_path)
    out = tmp_path / "out"
    with running_job("pg_order_deadlock", ready_dir=tmp_path / "ready", env=env) as job:
        wait_sockets(tmp_path / "sockets", job.rank_pids.values())
        time.sleep(1.0)
        # WHEN attaching
        code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out)])
    # THEN attach still names the culprits, from the probes alone: their FR traces and stacks
    root = _verdict(out)["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == ("pg_order_deadlock", [0, 1]), root["summary"]
    assert not list((out / "bundle").rglob("stacks-*.json"))
    # AND the probes' stacks are the ranks' stack samples, which the analysis reads
    evidence, problems = JobEvidence(), []
    load_bundle(str(out / "bundle"), evidence, problems)
    for rank in (0, 1):
        (sample,) = evidence.rank(rank).samples
        main_thread = next(t for t in sample.threads if t.is_main)
        assert sample.source == "probe"
        assert any(f.name == "sync_groups" for f in main_thread.frames)


# ---------------------------------------------------------------------------------------------
# training: bit-identical with and without the probe


def _train(tmp: Path, env: dict[str, str], asks: int = 0, steps: int = 400) -> tuple[str, list]:
    """Run tests/procs/probe_training.py under torchrun; with ``asks``, ask each rank's probe that
    many times while it trains. Returns (param sha256, answers)."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    release = tmp / "asked"  # the ranks wait for it before their last step (asks only)
    full = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                TORCH_FR_BUFFER_SIZE="2000", PYTHONUNBUFFERED="1",
                HANGSCOPE_READY_DIR=str(tmp / "ready"), HANGSCOPE_TRAIN_STEPS=str(steps), **env)
    if asks:
        full["HANGSCOPE_HOLD_FILE"] = str(release)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(port),
           str(REPO / "tests" / "procs" / "probe_training.py")]
    output = tmp / "torchrun.log"
    with open(output, "wb") as sink:
        launcher = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=full,
                                    cwd=REPO, start_new_session=True,
                                    stdin=subprocess.DEVNULL)
    job = Job("probe_training", 2, launcher, output, tmp)
    answers: list = []
    try:
        wait_for(job, [tmp / "ready" / f"rank{r}" for r in range(2)], 120, "training")
        if asks:
            wait_sockets(tmp / "sockets", job.rank_pids.values())
            for _ in range(asks):
                for pid in job.rank_pids.values():
                    header, _, fr = ask(str(tmp / "sockets" / f"{pid}.sock"), timeout_s=10)
                    answers.append((header, len(fr)))
            release.touch()  # every ask met a rank still training: let them finish
        assert job.wait(240) == 0, job.output_tail()
    finally:
        job.stop()
    found = re.search(r"param sha256 ([0-9a-f]{64})", output.read_text())
    assert found, job.output_tail()
    return found.group(1), answers


def test_training_is_bit_identical_with_the_probe_asked_20_times(tmp_path: Path) -> None:
    # GIVEN the same training without the probe, with it, and with it asked 20 times per rank
    plain, _ = _train(tmp_path / "plain", probe_env(tmp_path / "plain", on=False))
    quiet, _ = _train(tmp_path / "quiet", probe_env(tmp_path / "quiet"))
    asked, answers = _train(tmp_path / "asked", probe_env(tmp_path / "asked"), asks=20)
    # THEN the trained parameters are the same bits
    assert plain == quiet == asked
    # AND the probe answered all 40 times, mid-training, with its DataLoader's two workers
    assert len(answers) == 40
    assert all(fr_bytes > 0 and header["fr"]["bytes"] == fr_bytes for header, fr_bytes in answers)
    loaders = [h["dataloader"] for h, _ in answers if h["dataloader"]]
    assert loaders and all(len(d[0]["worker_pids"]) == 2 for d in loaders)
    # AND no socket is left once the job exited by itself (ranks, launcher, forked workers)
    for run in ("quiet", "asked"):
        assert sockets_in(tmp_path / run / "sockets") == []


# ---------------------------------------------------------------------------------------------
# SIGTERM


def test_sigterm_to_a_rank_blocked_in_a_collective_removes_its_socket(tmp_path: Path) -> None:
    # GIVEN a hung job with the probe on; rank 0 is blocked in all_reduce (in C, GIL released)
    env = probe_env(tmp_path)
    sockets = tmp_path / "sockets"
    with running_job("missing_rank", ready_dir=tmp_path / "ready", env=env) as job:
        wait_sockets(sockets, job.rank_pids.values())
        time.sleep(1.0)
        victim = job.rank_pids[0]
        # WHEN it gets SIGTERM
        os.kill(victim, signal.SIGTERM)
        # THEN it dies at once, as with SIGTERM's default action, and its socket is gone
        gone, _ = psutil.wait_procs([psutil.Process(victim)], timeout=10)
        assert gone, "the rank outlived SIGTERM"
        assert not (sockets / f"{victim}.sock").exists()
        # AND torchrun sees a rank killed by SIGTERM, stops the others, and none leaves a socket
        assert job.wait(90) is not None, job.output_tail()
        assert re.search(r"(Signal 15|SIGTERM|exitcode\s*:\s*-15)", job.output_tail(20000)), \
            job.output_tail()
    assert sockets_in(sockets) == []
