"""Shared steps of the live tests that run a fixture job from a copy of its scripts, attach, and
then analyze the bundle with the scripts moved away (as on the machine a bundle is sent to)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Verdict
from hangscope.cli import main
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths


def copy_of_jobs(tmp_path: Path, jobs_dir: Path) -> Path:
    """fixtures/jobs copied to ``tmp_path/job-src``, to run the job from."""
    jobs = tmp_path / "job-src"
    shutil.copytree(jobs_dir, jobs, ignore=shutil.ignore_patterns("__pycache__"))
    return jobs


def attach_quietly(pgid: int, out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """``hangscope attach --pid-group PGID --out OUT --force --quiet EXTRA``: exit code, verdict."""
    code = main(["attach", "--pid-group", str(pgid), "--out", str(out), "--force", "--quiet",
                 *extra])
    return code, json.loads((out / "verdict.json").read_text())


def bundle_verdict_moved_away(out: Path, jobs: Path) -> Verdict:
    """The verdict of ``out/bundle`` after the job's scripts in ``jobs`` are renamed away."""
    jobs.rename(jobs.with_name(jobs.name + "-moved"))
    assert not jobs.exists()
    evidence, _ = load_paths([str(out / "bundle")], LoadOptions())
    return analyze(evidence)[0]
