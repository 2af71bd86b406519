"""hangscope.collect.pyspy against the real py-spy and real processes (root, ~5 s)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hangscope.collect import pyspy as collect  # noqa: E402
from hangscope.collect.pyspy import (  # noqa: E402
    DumpResult,
    PySpyMissing,
    classify_stderr,
    dump_once,
    find_pyspy,
    sample_many,
    summarize_stderr,
)
from hangscope.errors import UsageError  # noqa: E402

from fixtures.stacks.spawn import blocked_process, dump_until, stop  # noqa: E402

ERRORS = ROOT / "fixtures" / "stacks" / "recorded" / "errors"

pytestmark = pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A folder the ``nobody`` user can enter (pytest's tmp_path lives under a 0700 dir)."""
    path = Path(tempfile.mkdtemp(prefix="hangscope-pyspy-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _main_top(result: DumpResult) -> str | None:
    """Innermost frame name of the main thread, skipping unsymbolised native addresses."""
    if result.sample is None:
        return None
    main = next((t for t in result.sample.threads if t.is_main), None)
    names = [f.name for f in main.frames if not f.name.startswith("0x")] if main else []
    return names[0] if names else None


class TestFindPyspy:
    def test_finds_an_executable(self) -> None:
        found = find_pyspy()
        assert os.access(found, os.X_OK)
        assert "shims" not in found.split(os.sep) or not os.path.exists(
            os.path.join(os.path.dirname(sys.executable), "py-spy"))

    def test_missing_gives_one_clear_error(self, monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
        monkeypatch.setenv("PATH", str(tmp_path))
        monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
        with pytest.raises(PySpyMissing, match="py-spy not found"):
            find_pyspy()


class TestDumpOnce:
    def test_ok_keeps_raw_json_and_parses_it(self, tmp_path: Path) -> None:
        # GIVEN a process whose main thread blocks on a lock another thread holds
        with blocked_process("rlock", tmp_path) as proc:
            before = time.time()
            # WHEN
            result = dump_until(proc.pid, lambda r: _main_top(r) == "mode_rlock")
            # THEN
            assert result.status == "ok", result.detail
            assert before <= result.taken_at <= time.time()
            raw = json.loads(result.raw)
            assert {t["thread_name"] for t in raw} == {"MainThread", "holder"}
            assert result.sample is not None and result.sample.pid == proc.pid
            names = {t.name: t for t in result.sample.threads}
            assert names["MainThread"].is_main and not names["holder"].is_main
            assert names["MainThread"].frames[0].name == "mode_rlock"

    def test_native(self, tmp_path: Path) -> None:
        with blocked_process("lock", tmp_path) as proc:
            result = dump_until(proc.pid, lambda r: _main_top(r) == "PyThread_acquire_lock_timed",
                                native=True)
            assert result.ok, result.detail
            assert result.sample is not None
            frames = result.sample.threads[0].frames
            named = [(f.native, f.name) for f in frames if not f.name.startswith("0x")]
            # the acquire's C frames, then the job's Python frame that called it (pyenv's
            # python3 names lock_PyThread_acquire_lock between them; Debian's, built without
            # symbols for its static functions, shows only the exported one)
            assert named[0] == (True, "PyThread_acquire_lock_timed")
            assert (False, "mode_lock") in named[1:]

    def test_nonblocking(self, tmp_path: Path) -> None:
        with blocked_process("lock", tmp_path) as proc:
            dump_until(proc.pid, lambda r: _main_top(r) == "mode_lock")
            result = dump_once(proc.pid, nonblocking=True)
            assert result.ok, result.detail
            assert result.sample is not None
            assert result.sample.threads[0].frames[0].name == "mode_lock"

    def test_native_with_nonblocking_is_a_usage_error(self) -> None:
        # py-spy itself refuses: "Can't get native stack traces with the --nonblocking option."
        with pytest.raises(UsageError, match="native or nonblocking"):
            dump_once(os.getpid(), native=True, nonblocking=True)
        with pytest.raises(UsageError):
            sample_many([os.getpid()], native=True, nonblocking=True)

    def test_process_gone(self) -> None:
        proc = subprocess.Popen(["true"])
        proc.wait()
        result = dump_once(proc.pid)
        assert result.status == "process_gone"
        assert str(proc.pid) in result.detail

    def test_not_python_is_failed_with_pyspy_reason(self) -> None:
        proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
        try:
            result = dump_once(proc.pid)
        finally:
            stop([proc])  # type: ignore[list-item]
        assert result.status == "failed"
        assert result.detail == "Failed to find python version from target process"

    def test_permission_denied_when_pyspy_runs_as_another_user(self, tmp_path: Path,
                                                                public_dir: Path) -> None:
        # GIVEN py-spy running as nobody against a root process
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("setpriv not installed")
        binary = public_dir / "py-spy-real"
        shutil.copy(os.path.realpath(find_pyspy()), binary)
        binary.chmod(0o755)
        wrapper = _script(public_dir / "py-spy",
                          f'exec {setpriv} --reuid=65534 --regid=65534 --clear-groups '
                          f'{binary} "$@"\n')
        with blocked_process("sleep", tmp_path) as proc:
            # WHEN
            result = dump_once(proc.pid, pyspy=wrapper)
            # THEN the target is untouched and the failure is named
            assert result.status == "permission_denied", result
            assert psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED

    def test_timeout_kills_pyspy_not_the_target(self, tmp_path: Path) -> None:
        # GIVEN a py-spy stand-in that never answers (real py-spy cannot be made to hang)
        pidfile = tmp_path / "child.pid"
        fake = _script(tmp_path / "py-spy", f'echo $$ > {pidfile}\nexec sleep 60\n')
        with blocked_process("event", tmp_path) as proc:
            start = time.monotonic()
            # WHEN
            result = dump_once(proc.pid, timeout=0.5, pyspy=fake)
            # THEN
            assert result.status == "timeout"
            assert time.monotonic() - start < 3
            child = int(pidfile.read_text())
            assert not psutil.pid_exists(child) or \
                psutil.Process(child).status() == psutil.STATUS_ZOMBIE
            assert psutil.Process(proc.pid).status() not in (psutil.STATUS_STOPPED,
                                                             psutil.STATUS_ZOMBIE)

    def test_unrunnable_pyspy_is_failed(self, tmp_path: Path) -> None:
        with blocked_process("event", tmp_path) as proc:
            result = dump_once(proc.pid, pyspy=str(tmp_path / "nope"))
        assert result.status == "failed" and "cannot run py-spy" in result.detail


class TestClassification:
    @pytest.mark.parametrize("name, expected", [
        ("permission_denied", "permission_denied"),
        ("not_python", "failed"),
        ("no_such_pid", "failed"),  # gone is decided by psutil before the text is read
    ])
    def test_recorded_stderr(self, name: str, expected: str) -> None:
        stderr = (ERRORS / f"{name}.stderr").read_text()
        assert classify_stderr(stderr) == expected

    @pytest.mark.parametrize("text, expected", [
        ("Error: ...\nCaused by:\n    0: Operation not permitted (os error 1)\n",
         "permission_denied"),
        ("Error: x\nCaused by:\n    0: No such process (os error 3)\n", "process_gone"),
        ("", "failed"),
    ])
    def test_other_texts(self, text: str, expected: str) -> None:
        assert classify_stderr(text) == expected

    def test_summary_is_one_line_without_backtrace(self) -> None:
        stderr = (ERRORS / "no_such_pid.stderr").read_text() + \
            "\nStack backtrace:\n   0: anyhow::error\n   1: py_spy::main\n"
        summary = summarize_stderr(stderr)
        assert "\n" not in summary and "anyhow" not in summary
        assert summary == ("Failed to get process executable name. Check that the process is "
                           "running. (No such file or directory (os error 2))")

    def test_layered_classification_prefers_process_state(self) -> None:
        proc = subprocess.Popen(["true"])
        proc.wait()
        status, _ = collect.classify_failure(proc.pid, 1, "Permission Denied: whatever")
        assert status == "process_gone"


class TestSampleMany:
    def test_rounds_parallel_and_gone_pids(self, tmp_path: Path) -> None:
        # GIVEN two live processes, a pid that does not exist, and one that dies after round 1
        gone = subprocess.Popen(["true"])
        gone.wait()
        with blocked_process("event", tmp_path) as first, \
                blocked_process("queue", tmp_path) as second, \
                blocked_process("sleep", tmp_path) as dying:
            timer = threading.Timer(0.25, os.killpg, (dying.pid, signal.SIGKILL))
            timer.start()
            try:
                # WHEN
                results = sample_many([first.pid, second.pid, gone.pid, dying.pid],
                                      samples=3, interval=0.5, max_workers=2)
            finally:
                timer.cancel()
        # THEN
        for pid in (first.pid, second.pid):
            assert [r.status for r in results[pid]] == ["ok"] * 3
            times = [r.taken_at for r in results[pid]]
            assert 0.35 < times[1] - times[0] < 0.9 and 0.35 < times[2] - times[1] < 0.9
        assert [r.status for r in results[gone.pid]] == ["process_gone"]
        assert [r.status for r in results[dying.pid]] == ["ok", "process_gone"]

    def test_empty(self) -> None:
        assert sample_many([]) == {}
