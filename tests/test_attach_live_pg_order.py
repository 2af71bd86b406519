"""Live attach, default options, on a real gloo job deadlocked across two process groups
(``uneven_shard_eval``: rank 3 runs out of data one step early and all_reduces its eval metrics on
the metrics group while ranks 0-2 all_reduce gradients on the default group). The job writes its
own flight-recorder dumps where its environment says (gloo has no dump pipe); attach finds them.
The job is stopped by its process groups in ``running_job``'s ``finally``, also when a test fails.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from hangscope.cli import main
from hangscope.errors import ExitCode

torch = pytest.importorskip("torch")
from fixtures.jobrunner import SCENARIOS, running_job  # noqa: E402

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")]


def _wait_file(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.1)


def test_attach_names_the_rank_whose_group_order_differs(tmp_path) -> None:
    # GIVEN the job hung across its two groups, with the FR dumps its ranks wrote
    truth = SCENARIOS["uneven_shard_eval"]
    dumps = tmp_path / "fr"
    env = {"HANGSCOPE_FR_DUMP_DIR": str(dumps),
           "TORCH_FR_DUMP_TEMP_FILE": f"{dumps}/pickle/nccl_trace_rank_"}
    out = tmp_path / "out"
    with running_job("uneven_shard_eval", ready_dir=tmp_path / "ready", env=env) as job:
        for rank in range(truth.nproc):
            _wait_file(dumps / "pickle" / f"nccl_trace_rank_{rank}")
        # WHEN attaching with default options
        code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out)])
    verdict = json.loads((out / "verdict.json").read_text())
    # THEN the ordering deadlock names rank 3 alone, on the collective it entered out of order
    root = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        root["summary"]
    assert root["waiting_ranks"] == truth.waiting_ranks
    assert root["collective"]["pg"] == truth.collective["pg"]
    assert root["collective"]["seq"] == truth.collective["seq"]
    assert any(item["source"] == "flight_recorder" for item in root["evidence"])


def test_attach_without_dumps_names_the_rank_at_the_odd_call_site(tmp_path) -> None:
    # GIVEN the same job, with no flight-recorder dumps anywhere (gloo has no dump pipe)
    out = tmp_path / "out"
    with running_job("uneven_shard_eval", ready_dir=tmp_path / "ready") as job:
        # WHEN attaching with default options once every rank is stuck
        code = main(["attach", "--pid-group", str(job.pgid), "--out", str(out)])
    verdict = json.loads((out / "verdict.json").read_text())
    # THEN the stacks alone name rank 3, the one rank all_reducing from evaluate
    root = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == ("pg_order_deadlock", [3]), \
        (root["summary"], verdict["rank_classes"])
    assert "from evaluate" in root["summary"]
