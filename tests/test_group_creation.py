"""A hang inside process-group creation (new_group leaves no FR entry): the stacks say who is
inside it and who is not, and the odd side is the culprit, live and from the bundle."""

from __future__ import annotations

import shutil
import time

import pytest
from live_jobs import attach_quietly, bundle_verdict_moved_away, copy_of_jobs

from hangscope.errors import ExitCode

torch = pytest.importorskip("torch")
from fixtures.jobrunner import JOBS_DIR, SCENARIOS, running_job  # noqa: E402

pytestmark = [pytest.mark.live,
              pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")]


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def _settled(pids: list[int], timeout: float = 60.0) -> None:
    """Until no rank gains CPU over half a second: group creation imports and connects first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = [_cpu_seconds(p) for p in pids]
        time.sleep(0.5)
        if all(_cpu_seconds(p) - b < 0.03 for p, b in zip(pids, before, strict=True)):
            return
    raise AssertionError("the ranks never settled")


def test_a_rank_that_skips_new_group_is_named_with_who_is_inside(tmp_path) -> None:
    # GIVEN eval_group_subset: ranks 0, 1 inside new_group, rank 2 skipped it and waits in the
    # next all_reduce; run from a copy of the scripts
    jobs = copy_of_jobs(tmp_path, JOBS_DIR)
    truth = SCENARIOS["eval_group_subset"]
    out = tmp_path / "out"
    with running_job("eval_group_subset", ready_dir=tmp_path / "ready", jobs_dir=jobs) as job:
        _settled(list(job.rank_pids.values()))
        # WHEN attached live with default options
        code, verdict = attach_quietly(job.pgid, out)
    live = verdict["findings"][0]
    # THEN init_hang on rank 2, saying ranks 0 and 1 are inside new_group
    assert code == ExitCode.HANG_FOUND
    assert (live["kind"], live["culprit_ranks"], live["waiting_ranks"]) == (
        truth.kind, truth.culprit_ranks, truth.waiting_ranks), live["summary"]
    assert live["summary"].startswith("ranks 0,1 are inside new_group"), live["summary"]
    assert "rank 2 is not in it" in live["summary"]
    # AND the bundle alone, with the job's scripts moved away, says the same
    root = bundle_verdict_moved_away(out, jobs).findings[0]
    assert (root.kind.value, root.culprit_ranks, root.waiting_ranks) == (
        live["kind"], live["culprit_ranks"], live["waiting_ranks"])
