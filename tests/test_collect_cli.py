"""``hangscope collect`` on a real hung gloo job, then ``analyze`` over the bundles.

One missing_rank job (4 ranks; rank 2 never enters the all_reduce) serves the module: two
collections, each of half the ranks (as two nodes would collect theirs), merge into the verdict
that one attach gives; the CLI's manners (--quiet, --force, --timeout, a duplicate rank) are
checked on the same job. The job is killed by its process groups when the module ends, also
after a failure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangscope.bundle import MANIFEST
from hangscope.errors import ExitCode

from fixtures.jobrunner import SCENARIOS, Job, running_job

pytestmark = pytest.mark.live
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def hung(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    ready = tmp_path_factory.mktemp("ready")
    with running_job("missing_rank", ready_dir=ready) as job:
        assert sorted(job.rank_pids) == [0, 1, 2, 3], job.output_tail()
        yield job


def hangscope(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hangscope", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def pids(job: Job, ranks: list[int]) -> list[str]:
    return [arg for rank in ranks for arg in ("--pid", str(job.rank_pids[rank]))]


def collect(job: Job, ranks: list[int], out: Path, *extra: str
            ) -> subprocess.CompletedProcess[str]:
    return hangscope("collect", *pids(job, ranks), "--samples", "1", "--out", str(out), *extra)


def test_two_collections_merge_into_the_verdict_of_the_whole_job(hung: Job, tmp_path: Path
                                                                 ) -> None:
    first = collect(hung, [0, 1], tmp_path / "a")
    second = collect(hung, [2, 3], tmp_path / "b")
    for done in (first, second):
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Wrote "), done.stdout
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert sorted(manifest["ranks"]) == ["0", "1"]
    assert manifest["host"] and manifest["node"]
    assert manifest["local_world_size"] == 4 and manifest["group_rank"] == 0
    assert manifest.get("job_id") != "none"  # torchrun's placeholder run id is no job id
    assert manifest["clock"]["wall_start"] <= manifest["clock"]["wall_end"]
    assert manifest["partial"] is False
    done = hangscope("analyze", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                     str(tmp_path / "out"))
    assert done.returncode == ExitCode.HANG_FOUND, done.stdout + done.stderr
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    truth = SCENARIOS["missing_rank"]
    root = verdict["findings"][0]
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks)
    assert verdict["ranks_seen"] == [0, 1, 2, 3] and verdict["ranks_missing"] == []


def test_half_the_ranks_say_which_are_missing(hung: Job, tmp_path: Path) -> None:
    assert collect(hung, [0, 1], tmp_path / "a").returncode == 0
    done = hangscope("analyze", str(tmp_path / "a"), "--json", "--quiet", "--out",
                     str(tmp_path / "out"))
    verdict = json.loads(done.stdout)
    assert verdict["ranks_missing"] == [2, 3]
    assert done.stderr == ""


def test_a_rank_collected_twice_is_refused_in_one_line(hung: Job, tmp_path: Path) -> None:
    assert collect(hung, [0, 1], tmp_path / "a").returncode == 0
    assert collect(hung, [1, 2], tmp_path / "b").returncode == 0
    done = hangscope("analyze", str(tmp_path / "a"), str(tmp_path / "b"), "--out",
                     str(tmp_path / "out"))
    assert done.returncode == ExitCode.BAD_INPUT, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "both hold rank 1" in lines[0], done.stderr
    assert str(tmp_path / "a") in lines[0] and str(tmp_path / "b") in lines[0]


def test_quiet_prints_nothing_and_force_replaces(hung: Job, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    done = collect(hung, [3], out, "--quiet")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    again = collect(hung, [3], out)
    assert again.returncode == ExitCode.BAD_INPUT and "--force" in again.stderr
    forced = collect(hung, [0], out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert sorted(json.loads((out / MANIFEST).read_text())["ranks"]) == ["0"]


def test_timeout_cuts_the_collection_short_and_says_so(hung: Job, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    started = time.monotonic()
    done = hangscope("collect", "--pid-group", str(hung.pgid), "--samples", "6",
                     "--interval", "1", "--timeout", "2.5", "--out", str(out))
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["partial"] is True
    assert any("stack samples" in cut for cut in manifest["cut_short"]), manifest["cut_short"]
    assert "cut short" in done.stdout
    # the bound holds for the collection; python start-up and imports come on top
    assert manifest["job"]["collect_seconds"] <= 2.5, manifest["job"]
    assert took < 2.5 + 10
    verdict = hangscope("analyze", str(out), "--json", "--quiet", "--out",
                        str(tmp_path / "out"))
    gaps = json.loads(verdict.stdout)["evidence_gaps"]
    assert any("collection cut short by --timeout 2.5s" in gap for gap in gaps), gaps


def test_nothing_to_collect_exits_4_in_one_line(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        done = hangscope("collect", "--pid", str(sleeper.pid), "--out", str(tmp_path / "b"))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == ExitCode.COULD_NOT_COLLECT, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    shutil.rmtree(tmp_path / "b", ignore_errors=True)
