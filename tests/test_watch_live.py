"""``hangscope watch`` on real gloo jobs: it fires on a job that trains and then hangs (right
culprit, exit 3, within --stall plus the collection), stays quiet on a healthy one (exit 0 at
--timeout), ends promptly on SIGTERM, and names a rank SIGKILLed from outside once the whole
job is gone, from the ranks' own logs (no launcher console); none leaves a process behind.

Every process the watch starts inherits a marker in its environment; after each test no live
process may carry it (checked by pid, from /proc/PID/environ), and every one found is killed by
pid in teardown, also when the test failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fixtures.jobrunner import Job, start_job

pytestmark = pytest.mark.live
REPO = Path(__file__).resolve().parent.parent
MARK = "HANGSCOPE_WATCH_TEST_MARK"


def marked(mark: str) -> list[int]:
    """Pids of live processes whose environment carries ``MARK=mark`` (the watch and its
    children: py-spy, the analyzer)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(MARK) == mark and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
    return found


class Watch:
    def __init__(self, args: list[str], out: Path) -> None:
        self.mark = uuid.uuid4().hex
        self.out = out
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hangscope", "watch", *args, "--out", str(out)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, MARK: self.mark}, start_new_session=True)

    def wait(self, timeout: float) -> tuple[int, str, str, float]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err, time.monotonic() - self.started

    def kill_all(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate(timeout=10)
        for pid in marked(self.mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def job_and_watch(scenario: str, env: dict[str, str], args: list[str], out: Path,
                  first_line: bytes) -> Iterator[tuple[Job, Watch]]:
    job = start_job(scenario, env=env, workdir=out.parent / "job")
    watch: Watch | None = None
    try:
        deadline = time.monotonic() + 90
        while first_line not in job.output_path.read_bytes():
            assert job.poll() is None, job.output_tail()
            assert time.monotonic() < deadline, f"no {first_line!r}:\n{job.output_tail()}"
            time.sleep(0.1)
        watch = Watch(["--pid-group", str(job.pgid), *args], out)
        yield job, watch
    finally:
        if watch is not None:
            watch.kill_all()
        job.stop()


def hang_time(job: Job, timeout: float = 120) -> float:
    """When the last rank printed its hang point (the job's output file's mtime at that line
    is not kept: we poll for it while the watch runs). Fails, never waits forever, if the job
    ends or does not get there."""
    deadline = time.monotonic() + timeout
    while b"hang point: next_batch" not in job.output_path.read_bytes():
        assert job.poll() is None, f"the job ended before its hang point:\n{job.output_tail()}"
        assert time.monotonic() < deadline, f"no hang point in {timeout:g}s:\n{job.output_tail()}"
        time.sleep(0.05)
    return time.monotonic()


def test_watch_fires_on_a_job_that_trains_then_hangs(tmp_path: Path) -> None:
    stall = 5.0
    with job_and_watch("train_then_hang", {"HANGSCOPE_HANG_AFTER": "15"},
                       ["--stall", str(stall), "--timeout", "120"], tmp_path / "out",
                       b"step 1 ") as (job, watch):
        hung_at = hang_time(job)
        assert watch.proc.poll() is None, "watch fired before the job hung"
        rc, out, err, _ = watch.wait(timeout=150)
        took = time.monotonic() - hung_at
        assert rc == 3, (out, err)
        verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
        assert verdict["findings"][0]["culprit_ranks"] == [1], out
        assert "no progress for" in err
        # stall + one collection (~2-5 s here) + one check interval + a loaded 2-core box
        assert took < stall + 25, f"verdict {took:.1f}s after the hang"
        assert (tmp_path / "out" / "report.html").is_file()
        assert marked(watch.mark) == []
        assert job.poll() is None  # watch never harms the job


def test_watch_stays_quiet_on_a_healthy_job_and_exits_0_at_timeout(tmp_path: Path) -> None:
    with job_and_watch("healthy_training", {"HANGSCOPE_TRAIN_STEPS": "100000"},
                       ["--stall", "3", "--timeout", "8"], tmp_path / "out",
                       b"step 50 ") as (job, watch):
        rc, out, err, took = watch.wait(timeout=60)
        assert rc == 0, (out, err)
        assert out.count("\n") == 1 and "no stall in 8s" in out, out
        assert 8 <= took < 8 + 15
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
        assert marked(watch.mark) == []
        assert job.poll() is None


def test_sigterm_ends_a_running_watch_promptly_and_leaves_nothing(tmp_path: Path) -> None:
    with job_and_watch("train_then_hang", {"HANGSCOPE_HANG_AFTER": "100000"},
                       ["--stall", "30", "--interval", "0.2", "--timeout", "120"],
                       tmp_path / "out", b"step 1 ") as (_job, watch):
        time.sleep(4)  # several checks, stack samples among them (every 3rd check)
        assert watch.proc.poll() is None
        sent = time.monotonic()
        watch.proc.send_signal(signal.SIGTERM)
        rc, _out, err, _ = watch.wait(timeout=20)
        assert rc == 143, err
        assert time.monotonic() - sent < 5
        assert "stopped by SIGTERM" in err
        assert marked(watch.mark) == []


def test_watch_names_a_rank_killed_from_outside_once_the_job_is_gone(tmp_path: Path) -> None:
    # GIVEN a DDP job whose rank 1 gets SIGKILLed mid-training (no traceback, no dump), started
    # with nobody keeping the launcher's console: only the ranks' own logs in torchrun's
    # --log-dir. The others fail within milliseconds and exit, too fast to attach to
    job = start_job("killed_mid_training", env={"HANGSCOPE_KILL_AFTER_S": "12"},
                    workdir=tmp_path / "job", launcher_output=False)
    watch: Watch | None = None
    try:
        deadline = time.monotonic() + 90
        while not any(b"step 5/" in p.read_bytes() for p in job.log_dir.rglob("stdout.log")):
            assert job.poll() is None and time.monotonic() < deadline, "no step 5"
            time.sleep(0.1)
        watch = Watch(["--pid-group", str(job.pgid), "--stall", "60", "--timeout", "120"],
                      tmp_path / "out")
        # WHEN watch, started while it trained, sees every rank gone
        rc, out, err, _ = watch.wait(timeout=150)
        # THEN it analyzes the rank logs it followed and names the killed rank from where its
        # log stopped, not the ranks that reported losing it
        assert rc == 3, (out, err)
        assert "every rank exited while watched" in err
        verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
        root = verdict["findings"][0]
        assert (root["kind"], root["culprit_ranks"]) == ("rank_died", [1]), out
        assert not any("launcher" in item["where"] for item in root["evidence"]), root
        assert marked(watch.mark) == []
    finally:
        if watch is not None:
            watch.kill_all()
        job.stop()
