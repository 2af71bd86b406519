"""A straggler slow on its own input, not on compute: it waits in a read while the others wait for
it in all_reduce, and every sample looks like a rank stuck in a read. What tells it moves is that
the collectives keep completing (the waiters' main threads block and wake: voluntary context
switches); the same picture with waiters that never wake is a hang."""

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

BUNDLE = Path(__file__).resolve().parent.parent / "fixtures" / "bundles" / "straggler_slow_read"
CULPRIT = 2


def _verdict(path: Path):  # type: ignore[no-untyped-def]
    evidence, _ = load_paths([str(path)], LoadOptions())
    return analyze(evidence)[0]


def _rewrite_proc(bundle: Path, ranks: set[int], change) -> None:  # type: ignore[no-untyped-def]
    for rank in ranks:
        for path in (bundle / "ranks" / str(rank)).glob("proc-*.json"):
            data = json.loads(path.read_text())
            for state in data["states"]:
                change(state, data["states"][0])
            path.write_text(json.dumps(data))


def test_the_bundle_of_a_rank_slow_on_its_reads_reads_slow() -> None:
    # GIVEN attach's bundle of slow_read_straggler (fixtures/jobs): rank 2 in os.read in all 4
    # samples, ranks 0, 1 and 3 in all_reduce in all 4, every rank at ~1% of a core, every main
    # thread waking 7-11 times a second
    verdict = _verdict(BUNDLE)
    # THEN slow: rank 2 the straggler, waiting on its own input, the waiters' wake-ups cited
    assert verdict.status.value == "slow", verdict.findings
    root = verdict.findings[0]
    assert (root.kind.value, root.culprit_ranks) == ("straggler", [CULPRIT]), root.summary
    assert "waiting on its own input" in root.summary
    assert "read_record" in str(root.measures["hot_frame"])
    assert float(root.measures["waiters_switches_per_s"]) >= 1.0
    assert any(e.source == "proc" and "voluntary context switches" in e.detail
               for e in root.evidence)


def test_the_same_picture_with_waiters_that_never_wake_is_a_hang(tmp_path) -> None:
    # GIVEN the same bundle, but the waiting ranks' main threads did not wake once between the
    # first and the last look: their all_reduce never completed
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)

    def frozen(state: dict, first: dict) -> None:  # type: ignore[type-arg]
        state["voluntary_switches"] = first["voluntary_switches"]

    _rewrite_proc(bundle, {0, 1, 3}, frozen)
    verdict = _verdict(bundle)
    # THEN a hang, rank 2 (stuck in its read) the rank they wait on; no straggler
    assert verdict.status.value == "hang", verdict.findings
    assert all(f.kind.value != "straggler" for f in verdict.findings)
    assert verdict.findings[0].culprit_ranks == [CULPRIT], verdict.findings[0].summary


def test_wake_ups_of_nccl_blocking_wait_are_polls_not_progress(tmp_path) -> None:
    # GIVEN the same bundle, where the waiting ranks ran with TORCH_NCCL_BLOCKING_WAIT=1
    # (ProcessGroupNCCL then polls its work every 10 ms: a hung collective wakes 100 times a
    # second)
    bundle = tmp_path / "bundle"
    shutil.copytree(BUNDLE, bundle)
    for rank in (0, 1, 3):
        path = bundle / "ranks" / str(rank) / "runtime.json"
        data = json.loads(path.read_text())
        data["env"]["TORCH_NCCL_BLOCKING_WAIT"] = "1"
        path.write_text(json.dumps(data))
    verdict = _verdict(bundle)
    # THEN their wake-ups prove nothing: rank 2 is what they wait on, not a straggler
    assert all(f.kind.value != "straggler" for f in verdict.findings), verdict.findings
    assert verdict.findings and verdict.findings[0].culprit_ranks == [CULPRIT]


@pytest.mark.parametrize("bundle", ["straggler_slow_shard_ddp", "straggler_slow_shard_arriving",
                                    "straggler_slow_shard_loaded"])
def test_a_ddp_rank_slow_on_its_shard_reads_slow_where_the_others_wait_inside_backward(
        bundle: str) -> None:
    # GIVEN attach's bundles of the blind live job slow_shard_rank (fixtures/blind_jobs/jobs36):
    # six DDP ranks; rank 4's DataLoader reads its shard 4x slower (in its read in 7 of 8
    # samples); the others mostly inside loss.backward() (DDP's all_reduce, a C call their
    # Python stacks do not name), now and then in their own faster reads; all wake ~8 times a
    # second. In the second, the last look caught rank 4 arrived in the all_reduce; the third
    # was taken on a crowded machine, where the others too were often in their (slowed) reads
    # (one in 5 of 8 samples) and the native dump caught one of them elsewhere.
    verdict = _verdict(BUNDLE.parent / bundle)
    # THEN slow, rank 4 the straggler; no DataLoader stall, nobody missing
    assert verdict.status.value == "slow", verdict.findings
    root = verdict.findings[0]
    assert (root.kind.value, root.culprit_ranks) == ("straggler", [4]), root.summary
    assert "_read_row_group" in str(root.measures["hot_frame"])


@pytest.mark.live
def test_attach_names_a_rank_slow_on_its_reads_a_straggler(tmp_path) -> None:
    pytest.importorskip("torch")
    if shutil.which("py-spy") is None:
        pytest.skip("py-spy not installed")
    from fixtures.jobrunner import running_job

    # GIVEN a job whose rank 2 reads its records from storage that takes 0.5 s to answer each read
    with running_job("slow_read_straggler", ready_dir=tmp_path / "ready") as job:
        time.sleep(1.0)
        # WHEN attaching with default options
        code = main(["attach", "--pid-group", str(job.pgid), "--out", str(tmp_path / "out"),
                     "--force"])
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    # THEN slow, not hung: rank 2 the straggler
    assert (verdict["status"], code) == ("slow", ExitCode.NO_HANG), verdict["findings"]
    root = verdict["findings"][0]
    assert (root["kind"], root["culprit_ranks"]) == ("straggler", [CULPRIT]), root["summary"]


def test_a_healthy_two_rank_job_sampled_five_times_names_no_straggler() -> None:
    # GIVEN attach's bundle of the blind live job healthy_cifar_ddp (jobs36): two DDP ranks with
    # DataLoader workers; rank 1 in its DataLoader wait in 4 of 5 samples, rank 0 in 2 of 5, both
    # moving; neither waits on the other in most samples
    verdict = _verdict(BUNDLE.parent / "healthy_two_ranks_dataloader")
    # THEN no straggler: five samples cannot tell 4 of 5 from 2 of 5
    assert all(f.kind.value != "straggler" for f in verdict.findings), verdict.findings
    assert verdict.status.value == "healthy", verdict.findings
