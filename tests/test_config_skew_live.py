"""A real gloo job whose ranks differ in one setting: rank 2 of 3 runs with
TORCH_DISTRIBUTED_DEBUG=DETAIL (fixtures/jobs/config_skew.py), which makes it block inside
init_process_group while ranks 0-1 wait in their first all_reduce. No rank prints an error: only
the ranks' environments tell why. Named live (attach), postmortem (analyze of the bundle) and from
two bundles collected apart (as two nodes would) and merged. The job is killed by its process
groups when the module ends, also after a failure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangscope.cli import main
from hangscope.errors import ExitCode

torch = pytest.importorskip("torch")
from fixtures.jobrunner import SCENARIOS, Job, running_job  # noqa: E402

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")]
REPO = Path(__file__).resolve().parent.parent
TRUTH = SCENARIOS["config_skew"]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    with running_job("config_skew", ready_dir=tmp_path_factory.mktemp("ready")) as running:
        assert sorted(running.rank_pids) == [0, 1, 2], running.output_tail()
        time.sleep(1.0)  # let every rank settle into its wait
        yield running


def assert_names_the_setting(verdict: dict) -> None:
    root = verdict["findings"][0]
    assert (root["kind"], root["culprit_ranks"]) == (TRUTH.kind, TRUTH.culprit_ranks), \
        root["summary"]
    assert root["waiting_ranks"] == TRUTH.waiting_ranks
    assert "TORCH_DISTRIBUTED_DEBUG: (unset) (ranks 0,1), DETAIL (rank 2)" in root["summary"]
    cited = [(e["source"], e["rank"], e["detail"]) for e in root["evidence"]]
    assert ("config", 2, "TORCH_DISTRIBUTED_DEBUG DETAIL (rank 2)") in cited
    assert any(src == "py-spy" and rank == 2 and "init_process_group" in detail
               for src, rank, detail in cited), cited
    (diff,) = [d for d in verdict["config_differences"]
               if d["key"] == "env:TORCH_DISTRIBUTED_DEBUG"]
    assert [(g["value"], g["ranks"]) for g in diff["groups"]] == [("(unset)", [0, 1]),
                                                                  ("DETAIL", [2])]
    # the ranks' own identity and per-rank settings are never a difference
    keys = {d["key"] for d in verdict["config_differences"]}
    assert not keys & {"env:RANK", "env:LOCAL_RANK", "env:MASTER_PORT", "env:CUDA_VISIBLE_DEVICES"}


def test_attach_then_analyze_name_the_odd_setting(job: Job, tmp_path: Path) -> None:
    # WHEN attaching to the live job
    out = tmp_path / "live"
    code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out), "--force",
                 "--samples", "2", "--interval", "0.5", "--quiet"])
    live = json.loads((out / "verdict.json").read_text())
    # THEN rank 2 is named with the setting only it has, from its runtime record
    assert code == ExitCode.HANG_FOUND
    assert_names_the_setting(live)
    record = json.loads((out / "bundle" / "ranks" / "2" / "runtime.json").read_text())
    assert record["env"]["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert record["torch_version"] == torch.__version__
    assert "RANK" not in record["env"] and "PATH" not in record["env"]
    # AND the bundle alone, postmortem, says the same
    again = tmp_path / "postmortem"
    assert main(["analyze", str(out / "bundle"), "--out", str(again), "--quiet"]) \
        == ExitCode.HANG_FOUND
    postmortem = json.loads((again / "verdict.json").read_text())
    assert_names_the_setting(postmortem)
    assert "What differs between ranks" in (again / "report.html").read_text()


def test_bundles_of_two_nodes_merge_and_still_differ(job: Job, tmp_path: Path) -> None:
    def collect(ranks: list[int], out: Path) -> None:
        pids = [arg for rank in ranks for arg in ("--pid", str(job.rank_pids[rank]))]
        done = subprocess.run([sys.executable, "-m", "hangscope", "collect", *pids,
                               "--out", str(out), "--quiet"], cwd=REPO, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr

    collect([0, 1], tmp_path / "node-a")
    collect([2], tmp_path / "node-b")
    out = tmp_path / "merged"
    assert main(["analyze", str(tmp_path / "node-a"), str(tmp_path / "node-b"), "--out",
                 str(out), "--quiet"]) == ExitCode.HANG_FOUND
    assert_names_the_setting(json.loads((out / "verdict.json").read_text()))
