"""The bounded parallel runner under every fan-out (SLURM, ssh, kubectl): clients past the
deadline are stopped together, not one grace period after another, and an interrupted fan-out
leaves no client running. Every process a test starts is killed by pid, also on failure."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from hangscope.cluster.runner import NodeResult, Step, run_steps, stopped


def _steps(tmp_path: Path, scripts: dict[str, str]) -> list[Step]:
    return [Step(name, str(tmp_path / name), ["sh", "-c", script], str(tmp_path / f"{name}.out"),
                 str(tmp_path / f"{name}.out")) for name, script in scripts.items()]


def _pid_file_steps(tmp_path: Path, names: list[str], tail: str) -> list[Step]:
    return _steps(tmp_path, {n: f"echo $$ > {tmp_path / n}.pid; {tail}" for n in names})


def _pids(tmp_path: Path, names: list[str]) -> list[int]:
    deadline = time.monotonic() + 10
    while not all((tmp_path / f"{n}.pid").exists() for n in names):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return [int((tmp_path / f"{n}.pid").read_text()) for n in names]


def _alive(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    return False


def test_steps_past_the_deadline_are_stopped_together(tmp_path: Path) -> None:
    # GIVEN three steps that ignore SIGTERM and one that ends at once
    names = ["a", "b", "c"]
    steps = [*_pid_file_steps(tmp_path, names, "trap '' TERM; sleep 30 & wait; sleep 30"),
             *_steps(tmp_path, {"quick": "exit 3"})]

    def finish(step: Step, code: int | None, seconds: float, why: str) -> NodeResult:
        if code is None:
            return stopped(step, why, seconds)
        return NodeResult(step.node, step.bundle, "failed", f"exit {code}", seconds)

    # WHEN they run with a 1 s bound
    started = time.monotonic()
    try:
        results = run_steps(steps, 1.0, finish, started=started)
    finally:
        pids = _pids(tmp_path, names)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    took = time.monotonic() - started
    # THEN the three are cut at once (one 3 s grace for all, not one each), in order, and dead
    assert [(r.node, r.status) for r in results] == [
        ("a", "timeout"), ("b", "timeout"), ("c", "timeout"), ("quick", "failed")]
    assert results[0].detail == "did not answer within 1 s"
    assert took < 1 + 3 + 2, took
    assert not [pid for pid in pids if _alive(pid)]


def test_an_interrupted_fanout_stops_every_client(tmp_path: Path) -> None:
    # GIVEN two long steps, and a finish that fails on the first result (as a SIGINT would)
    names = ["slow1", "slow2"]
    steps = [*_steps(tmp_path, {"first": "sleep 0.5"}),
             *_pid_file_steps(tmp_path, names, "exec sleep 30")]

    def finish(step: Step, code: int | None, seconds: float, why: str) -> NodeResult:
        raise KeyboardInterrupt

    # WHEN it is interrupted
    with pytest.raises(KeyboardInterrupt):
        run_steps(steps, 60.0, finish, started=time.monotonic())
    # THEN no client is left running
    pids = _pids(tmp_path, names)
    try:
        assert not [pid for pid in pids if _alive(pid)]
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_client_that_floods_its_output_is_cut(tmp_path: Path) -> None:
    # GIVEN a client that writes without end, to stderr (its stdout is the bundle stream)
    step = Step("flood", str(tmp_path / "flood"), ["sh", "-c", "yes >&2"],
                str(tmp_path / "flood.tar"), str(tmp_path / "flood.log"))
    # WHEN run with a 1 MiB output limit and a 60 s bound
    started = time.monotonic()
    [result] = run_steps([step], 60.0, lambda s, c, t, why: stopped(s, why, t),
                         started=started, max_output=1 << 20)
    # THEN it is cut long before the bound, as a failure that says why
    assert (result.status, result.detail) == ("failed", "sent more than 1 MiB")
    assert time.monotonic() - started < 10
    assert (tmp_path / "flood.log").stat().st_size < 1 << 30
