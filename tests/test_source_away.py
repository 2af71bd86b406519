"""Postmortem away from the job: the job's source files are not at the paths its stacks name.

A py-spy dump without ``--native`` ends at the job's line for a C call made from the job's code;
on the job's machine that line (``with self.stats_lock:``) says the thread waits on a lock. A
bundle therefore carries the lines its stacks cite (read at collection), and raw py-spy dumps are
read without the source (function names, wchan, the other threads' shape).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from live_jobs import attach_quietly, bundle_verdict_moved_away, copy_of_jobs

from hangscope.analysis.engine import analyze
from hangscope.errors import ExitCode
from hangscope.model import JobEvidence
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.source_lines import load_source_lines

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
RECORDED = sorted(p for p in (ROOT / "recorded").iterdir() if (p / "expected.json").exists())
# the absolute folder the recorded stacks name for the job's scripts (where they were recorded)
_JOB_PATH = re.compile(r"/[\w./-]*?/fixtures/jobs/")


def _truth(folder: Path) -> dict:
    return json.loads((folder / "expected.json").read_text())


def _moved_away(folder: Path, into: Path) -> list[Path]:
    """Copy the recorded evidence, with every path to the job's scripts pointing at a folder that
    does not exist (as on the machine the evidence was copied to), without the source lines a
    recording carries (raw py-spy dumps carry none)."""
    gone = into / "moved-away" / "jobs"
    parts = []
    for part in ("fr/pickle", "stacks", "logs", "os", "runtime"):
        if not (folder / part).exists():
            continue
        dest = into / part
        shutil.copytree(folder / part, dest, ignore=shutil.ignore_patterns("source-lines.json"))
        for path in dest.rglob("*"):
            if path.is_file() and part != "fr/pickle":
                text = path.read_text(errors="surrogateescape")
                path.write_text(_JOB_PATH.sub(f"{gone}/", text), errors="surrogateescape")
        parts.append(dest)
    assert not gone.exists()
    return parts


def _verdict(paths: list[Path]):
    evidence, _ = load_paths([str(p) for p in paths], LoadOptions())
    verdict, _ = analyze(evidence)
    return verdict


WITH_STACKS = [p for p in RECORDED if (p / "stacks").exists()
               and _truth(p).get("outcome") in ("hang", "error")]


@pytest.mark.parametrize("folder", WITH_STACKS, ids=lambda p: p.name)
def test_recorded_evidence_names_the_root_cause_without_the_source(tmp_path, folder) -> None:
    # GIVEN a recorded job's stacks, logs and FR dumps whose source paths lead nowhere
    truth = _truth(folder)
    parts = _moved_away(folder, tmp_path)
    # WHEN analyzed
    verdict = _verdict(parts)
    # THEN the same root cause as where the source is readable
    if truth["kind"] is None:
        assert verdict.status.value in ("healthy", "slow")
        return
    root = verdict.findings[0]
    assert (root.kind.value, root.culprit_ranks) == (truth["kind"], truth["culprit_ranks"]), \
        root.summary


@pytest.mark.parametrize("form", ["json", "txt"])
def test_raw_pyspy_dumps_of_a_lock_inversion_name_it_without_the_source(tmp_path, form) -> None:
    # GIVEN only the py-spy dumps of the python_deadlock job, sources unreachable
    stacks = _moved_away(ROOT / "recorded" / "python_deadlock", tmp_path)[1]
    for other in stacks.glob(f"*.{'txt' if form == 'json' else 'json'}"):
        other.unlink()
    # WHEN analyzed
    root = _verdict([stacks]).findings[0]
    # THEN the lock inversion of rank 0, from the other thread's shape, with less confidence
    assert (root.kind.value, root.culprit_ranks) == ("python_deadlock", [0]), root.summary
    assert "metrics-flusher" in root.summary
    assert root.confidence <= 0.75


def test_a_bad_source_lines_file_is_one_problem_naming_it(tmp_path) -> None:
    path = tmp_path / "source-lines.json"
    path.write_text('{"schema": "something else"}')
    problems: list[str] = []
    evidence = JobEvidence()
    load_source_lines(str(path), 0, evidence, problems)
    assert problems == [f"{path}: not a hangscope.source_lines/1 file"]
    assert evidence.source_lines == {}


torch = pytest.importorskip("torch")
from fixtures.jobrunner import JOBS_DIR, SCENARIOS, running_job  # noqa: E402


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
def test_a_bundle_carries_the_lines_its_verdict_needs(tmp_path) -> None:
    # GIVEN the lock-inversion job running from its own copy of the fixture scripts
    jobs = copy_of_jobs(tmp_path, JOBS_DIR)
    truth = SCENARIOS["python_deadlock"]
    out = tmp_path / "out"
    with running_job("python_deadlock", ready_dir=tmp_path / "ready", jobs_dir=jobs) as job:
        time.sleep(1.0)
        # WHEN attached live
        code, verdict = attach_quietly(job.pgid, out, "--samples", "2", "--interval", "0.5")
    live = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (live["kind"], live["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        live["summary"]
    carried = sorted((out / "bundle").glob("ranks/0/source-lines-*.json"))
    assert carried, "no source lines in the bundle"
    # AND the job's scripts are then moved away, as on the machine a bundle is sent to
    # THEN the bundle alone gives the same verdict, from the lines it carries
    root = bundle_verdict_moved_away(out, jobs).findings[0]
    assert (root.kind.value, root.culprit_ranks) == (truth.kind, truth.culprit_ranks), \
        root.summary
    assert "source line: with self.stats_lock" in root.summary, root.summary
    assert root.confidence == 0.9
    # AND without those lines, the bundle's raw py-spy records still name it
    for path in (out / "bundle").glob("ranks/*/source-lines-*.json"):
        path.write_text('{"schema": "hangscope.source_lines/1", "files": {}}')
    evidence, _ = load_paths([str(out / "bundle")], LoadOptions())
    root = analyze(evidence)[0].findings[0]
    assert (root.kind.value, root.culprit_ranks) == (truth.kind, truth.culprit_ranks), \
        root.summary
    assert "source line" not in root.summary
