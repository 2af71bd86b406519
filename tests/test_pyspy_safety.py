"""A py-spy that is killed or wedged mid-dump never leaves a rank stopped.

Real processes throughout: a Python target with a few threads in deep stacks, the real py-spy,
and (for the case the real py-spy is too careful to produce) a stand-in tracer that attaches
with PTRACE_ATTACH and stalls before it waits, as a py-spy wedged between its attach and its
wait would. Every process a test starts is SIGKILLed by its process group at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from hangscope.collect import permissions, pyspy, stopped

TARGET = textwrap.dedent("""
    import sys, threading, time
    def deep(n):
        if n == 0:
            while True:
                sum(range(2000))
                time.sleep(0.001)
        return deep(n - 1)
    for _ in range(6):
        threading.Thread(target=deep, args=(60,), daemon=True).start()
    print("ready", flush=True)
    while True:
        time.sleep(0.2)
""")

# Attaches like an old-style tracer (PTRACE_ATTACH sends each thread SIGSTOP) and stalls before
# its waitpid: when it is killed, the SIGSTOP it sent lands on a thread nobody traces any more.
STAND_IN = textwrap.dedent("""
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    pid = int(sys.argv[sys.argv.index("--pid") + 1])
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        if libc.ptrace(16, tid, None, None) != 0:  # PTRACE_ATTACH
            sys.exit(f"attach {tid}: errno {ctypes.get_errno()}")
    time.sleep(120)
""")

DEADLINE = 15.0


def _poll(predicate: object, what: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.0005)


@contextlib.contextmanager
def started(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def target() -> Iterator[int]:
    with started([sys.executable, "-c", TARGET]) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        problem = permissions.diagnose(proc.pid)
        if problem is not None:
            pytest.skip(f"cannot ptrace here: {problem.line()}")
        try:
            yield proc.pid
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process dies of SIGKILL too


@pytest.fixture
def stand_in(tmp_path: Path) -> str:
    path = tmp_path / "stalling-tracer"
    path.write_text(f"#!{sys.executable}\n{STAND_IN}")
    path.chmod(0o755)
    return str(path)


def running(pid: int) -> bool:
    return not stopped.is_stopped(pid) and stopped.tracer_pid(pid) == 0


def catch_mid_dump(pid: int, pool: ThreadPoolExecutor, timeout: float
                   ) -> tuple[Future[pyspy.DumpResult], int]:
    """Start a real py-spy dump of ``pid`` and freeze py-spy (SIGSTOP) while it holds the
    target in tracing stop. Retries the rare dump that ends before we see its tracer."""
    for _ in range(20):
        future = pool.submit(pyspy.dump_once, pid, timeout=timeout, native=True)
        tracer = 0
        while not future.done():
            tracer = stopped.tracer_pid(pid) or 0
            if tracer:
                break
        if not tracer:
            future.result()
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(tracer, signal.SIGSTOP)
        time.sleep(0.05)
        if stopped.tracer_pid(pid) == tracer and stopped.proc_state(pid) == "t":
            assert "py-spy" in psutil.Process(tracer).name()
            return future, tracer
        with contextlib.suppress(ProcessLookupError):
            os.kill(tracer, signal.SIGCONT)  # it had let go already: let it finish
        future.result(timeout=timeout + 10)
    raise AssertionError("never caught py-spy in the middle of a dump in 20 tries")


@pytest.mark.live
class TestKilledOrWedgedPySpy:
    def test_pyspy_killed_mid_dump_leaves_the_rank_running(self, target: int) -> None:
        # GIVEN a real py-spy frozen while it holds every thread of the rank
        with ThreadPoolExecutor(max_workers=1) as pool:
            future, tracer = catch_mid_dump(target, pool, timeout=20)
            assert stopped.is_stopped(target)
            # WHEN py-spy is killed in the middle of the dump
            os.kill(tracer, signal.SIGKILL)
            result = future.result(timeout=30)
        # THEN the dump failed, said why, and the rank runs with no tracer
        assert result.status == "failed" and "SIGKILL" in result.detail, result
        _poll(lambda: running(target), "the target to run")
        assert stopped.tracer_pid(target) == 0

    def test_wedged_pyspy_is_killed_at_the_deadline(self, target: int) -> None:
        # GIVEN a real py-spy that is wedged (stopped) while it holds the rank
        with ThreadPoolExecutor(max_workers=1) as pool:
            future, tracer = catch_mid_dump(target, pool, timeout=2)
            # WHEN the dump's deadline passes
            result = future.result(timeout=30)
        # THEN hangscope killed py-spy and the rank runs
        assert result.status == "timeout", result
        assert not psutil.pid_exists(tracer) or psutil.Process(tracer).status() == "zombie"
        assert running(target)

    def test_rank_left_stopped_is_resumed_with_sigcont(self, target: int, stand_in: str
                                                       ) -> None:
        # GIVEN a tracer that attaches and stalls before it waits
        # WHEN it is killed at the deadline, its SIGSTOPs land with nobody tracing
        result = pyspy.dump_once(target, timeout=1.5, pyspy=stand_in)
        # THEN hangscope found the rank stopped, resumed it, and said so
        assert result.status == "timeout", result
        assert "was left stopped by a py-spy killed at its 1.5s deadline" in result.target_note
        assert result.target_note.endswith("resumed with SIGCONT")
        assert result.target_note in result.detail
        assert running(target)
        # AND without hangscope's SIGCONT the same tracer does leave it stopped
        with started([stand_in, "--pid", str(target)]) as tracer:
            _poll(lambda: stopped.tracer_pid(target) == tracer.pid, "the stand-in to attach")
            os.killpg(tracer.pid, signal.SIGKILL)
            tracer.wait(timeout=10)
        _poll(lambda: stopped.proc_state(target) == "T", "the orphaned SIGSTOP to land")
        assert stopped.tracer_pid(target) == 0
        note = stopped.resume_if_left_stopped(target, "S", "a test's tracer")
        assert note.endswith("resumed with SIGCONT") and running(target)

    @pytest.mark.parametrize("tracer", ["py-spy", "stand-in"])
    def test_rank_stopped_on_purpose_stays_stopped(self, target: int, stand_in: str,
                                                   tracer: str) -> None:
        # GIVEN a rank that a user stopped before the dump
        os.kill(target, signal.SIGSTOP)
        _poll(lambda: stopped.proc_state(target) == "T", "the target to stop")
        # WHEN a dump fails or times out on it
        result = pyspy.dump_once(target, timeout=1.5,
                                 pyspy=stand_in if tracer == "stand-in" else None)
        # THEN hangscope does not resume it, and says it was stopped before
        assert not result.ok
        time.sleep(0.2)
        assert stopped.proc_state(target) == "T"
        assert "already stopped before the dump" in result.target_note, result


class TestProcState:
    def test_state_of_a_process_whose_name_has_parentheses_and_spaces(self, tmp_path: Path
                                                                      ) -> None:
        # GIVEN a sleeping process named ") S (x"
        with started([sys.executable, "-c",
                      "import ctypes, time; ctypes.CDLL(None).prctl(15, b') T (x', 0, 0, 0); "
                      "print('ready', flush=True); time.sleep(60)"]) as proc:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
            assert psutil.Process(proc.pid).name() == ") T (x"
            # THEN its state is read after the last parenthesis
            _poll(lambda: stopped.proc_state(proc.pid) == "S", "the process to sleep")
            assert stopped.tracer_pid(proc.pid) == 0

    def test_gone_process_has_no_state(self) -> None:
        with started([sys.executable, "-c", "pass"]) as proc:
            proc.wait(timeout=10)
        assert stopped.proc_state(proc.pid) is None
        assert stopped.resume_if_left_stopped(proc.pid, "S", "x", settle=0.01) == ""


class TestPtraceRefusedNamesTheFix:
    @staticmethod
    def readers(scope: int) -> permissions.Readers:
        return permissions.Readers(
            pid_exists=lambda pid: True, signal0=lambda pid: None, euid=lambda: 1000,
            ptrace_scope=lambda: scope, cap_eff=lambda: 0, in_container=lambda: False,
            is_descendant=lambda pid: False, target_uid=lambda pid: 1000)

    def test_scope1_offers_root_sysctl_and_prctl(self) -> None:
        problem = permissions.diagnose(1234, self.readers(1))
        assert problem is not None
        assert "ptrace_scope is 1" in problem.cause and "parent" in problem.cause
        for fix in ("sudo -E", "kernel.yama.ptrace_scope=0",
                    "prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)"):
            assert fix in problem.fix

    def test_scope2_needs_cap_sys_ptrace_or_a_lower_scope(self) -> None:
        problem = permissions.diagnose(1234, self.readers(2))
        assert problem is not None and "CAP_SYS_PTRACE" in problem.cause
        assert "CAP_SYS_PTRACE" in problem.fix and "ptrace_scope=0" in problem.fix

    def test_help_paragraph_names_every_fix(self) -> None:
        for words in ("sudo -E", "ptrace_scope=0", "--cap-add=SYS_PTRACE", "SYS_PTRACE]",
                      "PR_SET_PTRACER_ANY"):
            assert words in permissions.PTRACE_HELP
