"""hangscope attach on real hung gloo jobs, through the real entry point.

Each test starts a fixture job from fixtures/jobs (torchrun, gloo, CPU), waits until every rank
is inside its hang, attaches with real py-spy, and stops the job by its process groups in
``running_job``'s ``finally``, also when the test fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from hangscope.cli import main
from hangscope.errors import ExitCode

torch = pytest.importorskip("torch")
from fixtures.jobrunner import SCENARIOS, running_job  # noqa: E402

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")]


def attach(job, out, *extra: str) -> tuple[int, dict]:
    code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out), "--samples", "2",
                 "--interval", "0.5", *extra])
    return code, json.loads((out / "verdict.json").read_text())


@pytest.mark.parametrize("scenario", ["missing_rank", "collective_mismatch", "p2p_deadlock"])
def test_attach_from_stacks_names_the_culprit(tmp_path, scenario) -> None:
    # GIVEN a hung job that writes no flight-recorder dumps (the usual case on gloo)
    truth = SCENARIOS[scenario]
    with running_job(scenario, ready_dir=tmp_path / "ready") as job:
        # WHEN attaching to the launcher's process group
        code, verdict = attach(job, tmp_path / "out")
    # THEN the kind and culprits match the ground truth, from stacks alone
    assert code == ExitCode.HANG_FOUND
    root = verdict["findings"][0]
    assert root["kind"] == truth.kind
    assert root["culprit_ranks"] == truth.culprit_ranks
    assert verdict["ranks_seen"] == list(range(truth.nproc))
    assert any(item["source"] == "py-spy" for item in root["evidence"])


def test_attach_with_flight_recorder_names_group_and_seq(tmp_path) -> None:
    dumps = tmp_path / "fr"
    env = {"HANGSCOPE_FR_DUMP_DIR": str(dumps),
           "TORCH_FR_DUMP_TEMP_FILE": f"{dumps}/pickle/nccl_trace_rank_"}
    with running_job("missing_rank", ready_dir=tmp_path / "ready", env=env) as job:
        for rank in range(4):  # the job's own dump thread writes them once it hangs
            _wait_file(dumps / "pickle" / f"nccl_trace_rank_{rank}")
        code, verdict = attach(job, tmp_path / "out")
    root = verdict["findings"][0]
    assert (code, root["kind"], root["culprit_ranks"]) == (3, "missing_rank", [2])
    assert root["collective"]["seq"] == 10 and root["collective"]["pg"] == "0"
    sources = {item["source"] for item in root["evidence"]}
    assert {"flight_recorder", "py-spy"} <= sources
    # AND the bundle alone reproduces the verdict later
    again = subprocess.run([sys.executable, "-m", "hangscope", "analyze",
                            str(tmp_path / "out" / "bundle"), "--out", str(tmp_path / "again"),
                            "--json"], capture_output=True, text=True, timeout=120)
    replay = json.loads(again.stdout)
    assert replay["findings"][0]["culprit_ranks"] == [2]
    assert replay["findings"][0]["kind"] == "missing_rank"
    assert replay["findings"][0]["collective"] == root["collective"]


def test_attach_to_nothing_says_what_it_searched(tmp_path, capsys) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               start_new_session=True)
    try:
        code = main(["attach", "--pid", str(sleeper.pid), "--out", str(tmp_path / "o")])
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
    assert code == ExitCode.COULD_NOT_COLLECT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"pid {sleeper.pid}" in err[0] and "RANK" in err[0]


def _wait_file(path, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.1)
