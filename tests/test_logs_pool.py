"""Rank logs read by worker processes (``sources/logs/pool.py``) give the very evidence, and so
the verdict, that one process reading them in order gives; a file that cannot be read is one
problem line either way."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import pool

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
# rank logs of different families and ranks, one job's folder as a user would point at it
FILES = ["watchdog_torch23.log", "recorded_gloo_connection_closed.log",
         "recorded_elastic_sigkill.log", "lightning_rank_prefixed.log", "desync_report.log",
         "recorded_cuda_oom_rank_prefix.log"]


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    for name in FILES:
        shutil.copy(LOGS / name, folder / name)
    return folder


def _everything(folder: Path, jobs: int):  # type: ignore[no-untyped-def]
    evidence, report = load_paths([str(folder)], LoadOptions(jobs=jobs))
    events = {rank: ev.logs for rank, ev in evidence.ranks.items()}
    return events, evidence.unattributed_logs, report, analyze(evidence)[0]


def test_workers_give_the_evidence_and_verdict_one_process_gives(tmp_path, monkeypatch) -> None:
    folder = _folder(tmp_path)
    # GIVEN the pool used whatever the size (the fixtures are small)
    monkeypatch.setattr(pool, "POOL_FROM_BYTES", 0)
    seen = []
    real = pool.ProcessPoolExecutor

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs.get("max_workers"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pool, "ProcessPoolExecutor", counting)
    # WHEN read by two workers and by this process alone
    by_two = _everything(folder, jobs=2)
    assert seen == [2]
    by_one = _everything(folder, jobs=1)
    assert seen == [2]  # (one job: no pool)
    # THEN the same events, filed the same way, the same files read and problems, one verdict
    assert by_two[0] == by_one[0] and by_two[1] == by_one[1]
    assert by_two[2].loaded == by_one[2].loaded and by_two[2].problems == by_one[2].problems
    assert by_two[3].to_json() == by_one[3].to_json()


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_log_that_cannot_be_read_is_one_problem_line(tmp_path, monkeypatch, jobs) -> None:
    monkeypatch.setattr(pool, "POOL_FROM_BYTES", 0)
    bad = tmp_path / "rank3.log"  # listed, then gone before it was read (rotated away)
    good = tmp_path / "rank0.log"
    shutil.copy(LOGS / "watchdog_torch23.log", good)
    results = list(pool.scan_files([str(bad), str(good)], jobs))
    assert [path for path, _, _ in results] == [str(bad), str(good)]
    assert results[0][1] == [] and results[0][2] is not None
    assert results[0][2].startswith(str(bad)) and "\n" not in results[0][2]
    assert results[1][1] and results[1][2] is None


@pytest.mark.parametrize("bundle", ["checkpoint_ragged_log", "straggler_slow_read",
                                    "watch_quiet_rank_outlived"])
def test_a_bundles_logs_scanned_by_workers_are_filed_as_one_process_files_them(
        bundle, monkeypatch) -> None:
    root = str(LOGS.parent / "bundles" / bundle)

    def everything():  # type: ignore[no-untyped-def]
        evidence, report = load_paths([root], LoadOptions())
        events = {rank: [(e.kind, e.path, e.line_no, e.message) for e in ev.logs]
                  for rank, ev in evidence.ranks.items()}
        loose = [(e.kind, e.path, e.line_no, e.message) for e in evidence.unattributed_logs]
        return events, loose, report.problems, analyze(evidence)[0].to_json()

    # GIVEN a bundle whose manifest files logs under their ranks and under the job, read once
    # by one process and once by two workers (the pool used whatever the size)
    monkeypatch.setattr(pool, "POOL_FROM_BYTES", 1 << 40)
    by_one = everything()
    monkeypatch.setattr(pool, "POOL_FROM_BYTES", 0)
    calls: list[int] = []
    real = pool.ProcessPoolExecutor

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pool, "ProcessPoolExecutor", counting)
    by_two = everything()
    # THEN the pool ran, and every rank holds the same events in the same order, the same
    # problems, the same verdict
    assert calls and by_one[0]
    assert by_two == by_one
