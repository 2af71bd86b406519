"""A live job whose size mismatch makes gloo fail (not hang): run it, let it fail by itself, and
analyze what it left, with default options, through the real entry point.

``running_job`` stops every process group of the job in its ``finally``, also when the test fails.
"""

from __future__ import annotations

import json

import pytest

from hangscope.cli import main
from hangscope.errors import ExitCode

torch = pytest.importorskip("torch")
from fixtures.jobrunner import SCENARIOS, running_job  # noqa: E402

pytestmark = [pytest.mark.live]


def test_failed_size_mismatch_names_the_ragged_rank_not_the_first_to_die(tmp_path) -> None:
    # GIVEN eval_class_counts: rank 2's confusion matrix has one class more; gloo aborts rank 1
    truth = SCENARIOS["eval_class_counts"]
    fr = tmp_path / "fr"
    with running_job("eval_class_counts", ready_dir=tmp_path / "ready", workdir=tmp_path / "job",
                     env={"HANGSCOPE_FR_DUMP_DIR": str(fr)}) as job:
        # WHEN the job fails by itself
        code = job.wait(timeout=120)
        assert code not in (None, 0), job.output_tail()
    # AND its dumps, rank logs and launcher output are analyzed with default options
    out = tmp_path / "out"
    rc = main(["analyze", str(fr / "pickle"), str(job.log_dir), str(job.output_path),
               "--out", str(out)])
    verdict = json.loads((out / "verdict.json").read_text())
    # THEN the size mismatch is the root cause and names the ragged rank
    root = verdict["findings"][0]
    assert rc == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        [(f["kind"], f["culprit_ranks"], f["summary"][:200]) for f in verdict["findings"]]
    assert root["collective"]["seq"] == truth.collective["seq"]
    assert verdict["status"] == truth.verdict_status == "crashed"
    assert "failed rather than hung" in root["summary"]
