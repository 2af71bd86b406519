"""``hangscope attach --slurm-job`` on a real SLURM cluster (tests/slurm_cluster.py) running a
torch job whose ranks span two virtual nodes and hang with the culprit on the second one.

The job is fixtures/slurm/torchrun_2nodes.sbatch running fixtures/jobs/missing_rank.py with 2
ranks per node: ranks 0-1 on n1, 2-3 on n2; rank 2 (the culprit) never enters the all_reduce.
Every test cancels its job and the module's cluster teardown kills whatever is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangscope.errors import ExitCode

pytest.importorskip("torch")
from slurm_cluster import Cluster, free_ports, slurm_fixture, wait_for  # noqa: E402, F401

from fixtures.jobrunner import SCENARIOS  # noqa: E402

pytestmark = [pytest.mark.live, pytest.mark.slurm]

REPO = Path(__file__).resolve().parent.parent
SBATCH = REPO / "fixtures" / "slurm" / "torchrun_2nodes.sbatch"
JOB = REPO / "fixtures" / "jobs" / "missing_rank.py"


@pytest.fixture
def hung_job(slurm: Cluster, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The 4-rank job, submitted, every rank at its hang point; cancelled afterwards."""
    ready = tmp_path / "ready"
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_ports(1)[0]),
           "PYTHON": sys.executable, "HANGSCOPE_READY_DIR": str(ready),
           "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    job_id = slurm.sbatch(SBATCH, str(JOB), "2", env=env, workdir=tmp_path)
    try:
        names = {f"rank{rank}" for rank in range(4)}
        wait_for(lambda: names <= {p.name for p in ready.glob("rank*")}, 90,
                 lambda: f"ready: {sorted(p.name for p in ready.glob('rank*'))} "
                         f"job {slurm.job_state(job_id)}\n{slurm.logs()}")
        yield job_id, tmp_path
    finally:
        slurm.kill_job(job_id)


def attach(slurm: Cluster, job_id: str, out: Path, timeout: float) -> tuple[int, dict, str, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "hangscope", "attach", "--slurm-job", job_id,
                           "--out", str(out), "--timeout", f"{timeout:g}", "--samples", "2",
                           "--interval", "0.5"],
                          env=slurm.env, capture_output=True, text=True, timeout=timeout + 60,
                          cwd=REPO)
    seconds = time.monotonic() - started
    verdict_path = out / "verdict.json"
    assert verdict_path.exists(), f"rc {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.returncode, json.loads(verdict_path.read_text()), done.stdout + done.stderr, \
        seconds


def test_attach_slurm_job_names_the_culprit_across_nodes(slurm: Cluster, hung_job) -> None:
    # GIVEN a job hung with its ranks on two nodes and the culprit on n2
    job_id, tmp = hung_job
    truth = SCENARIOS["missing_rank"]
    # WHEN attaching to the job by its SLURM id
    code, verdict, output, _ = attach(slurm, job_id, tmp / "out", timeout=60)
    # THEN every node sent a bundle and the merged verdict names the culprit
    assert sorted(p.name for p in (tmp / "out" / "bundles").iterdir()
                  if not p.name.startswith(".")) == ["n1", "n2"], output
    assert code == ExitCode.HANG_FOUND, output
    root = verdict["findings"][0]
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), output
    assert verdict["ranks_seen"] == [0, 1, 2, 3]
    assert not any("did not answer" in gap or "sent no bundle" in gap
                   for gap in verdict["evidence_gaps"])


def test_attach_slurm_job_with_a_dead_node_is_partial_and_bounded(slurm: Cluster, hung_job
                                                                  ) -> None:
    # GIVEN the same hung job, and n2's slurmd killed (its ranks keep running, unreachable)
    job_id, tmp = hung_job
    slurm.stop_node("n2")
    try:
        # WHEN attaching with a 20 s bound
        code, verdict, output, seconds = attach(slurm, job_id, tmp / "out", timeout=20)
    finally:
        slurm.restart_node("n2")
    # THEN hangscope answers within the bound (plus analysis), from n1's ranks only
    assert seconds < 20 + 15, output
    assert verdict["ranks_seen"] == [0, 1]
    assert verdict["ranks_missing"] == [2, 3]
    # AND the verdict says which node is missing and which ranks that leaves out
    gaps = [gap for gap in verdict["evidence_gaps"] if gap.startswith("node n2 ")]
    assert gaps and "ranks 2,3 missing" in gaps[0], verdict["evidence_gaps"]
    assert code in (ExitCode.HANG_FOUND, ExitCode.INCONCLUSIVE), output
    assert "1 of 2 nodes collected (missing: n2)" in output


def test_watch_slurm_job_fires_and_collects_on_every_node(slurm: Cluster, hung_job) -> None:
    # GIVEN the hung two-node job (every rank already sits in its collective)
    job_id, tmp = hung_job
    out = tmp / "watch"
    # WHEN watching it by its SLURM id with a short --stall
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "hangscope", "watch", "--slurm-job", job_id,
                           "--stall", "3", "--timeout", "60", "--out", str(out)],
                          env=slurm.env, capture_output=True, text=True, timeout=150, cwd=REPO)
    took = time.monotonic() - started
    # THEN it fires on no progress, collects on both nodes and names the culprit on n2
    output = done.stdout + done.stderr
    assert done.returncode == ExitCode.HANG_FOUND, output
    assert "no progress for" in done.stderr, output
    assert sorted(p.name for p in (out / "bundles").iterdir()
                  if not p.name.startswith(".")) == ["n1", "n2"], output
    verdict = json.loads((out / "verdict.json").read_text())
    root = verdict["findings"][0]
    assert root["culprit_ranks"] == SCENARIOS["missing_rank"].culprit_ranks, output
    assert took < 3 + 60, output
