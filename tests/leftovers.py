"""No test leaves a thread or a process running behind it, and the session cannot hang at exit.

A pytest plugin, loaded by tests/conftest.py (which imports its fixture and hooks):

* after each test, a thread the test started that is still alive (and not a daemon), or a child
  process of this pytest process that the test started and that still runs, fails the test, with
  the thread's stack or the process's command line. Such a thread is joined at interpreter exit
  (``concurrent.futures`` joins its workers too), so one that never ends holds the whole run
  after its last test, with the summary unwritten; a process left running outlives the suite.
* at the end of the session, if a thread that is no daemon is still alive, every thread's stack
  is written to stderr, and a watchdog ends the process (exit status 1) if it has not exited
  ``EXIT_GRACE_S`` later: CI then shows where it hung instead of a run that never returns.

Module- and session-scoped fixtures (a hung job several tests attach to, the browser) start
before the first test's snapshot and stop after the last test's check, so they are not counted;
a child such a fixture owns but a test starts is declared with :func:`outlives_the_test`.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from types import FrameType

import pytest

GRACE_S = 3.0  # a thread or child may take this long to finish after its test returned
EXIT_GRACE_S = float(os.environ.get("LEFTOVERS_EXIT_GRACE_S", "120"))  # (tests set it lower)


_KEPT: set[int] = set()


def outlives_the_test(pid: int) -> None:
    """Say that a child a test starts belongs to a longer-lived fixture, which stops it (a SLURM
    node's daemon restarted by a test, stopped with the module's cluster)."""
    _KEPT.add(pid)


def _threads() -> set[threading.Thread]:
    """Live threads that would hold the interpreter's exit: no daemons, no idle pool workers
    (``concurrent.futures`` wakes and ends those at exit; asyncio's default executor keeps some)."""
    frames = sys._current_frames()
    return {t for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and t.is_alive()
            and not _idle_pool_worker(frames.get(t.ident or -1))}


def _idle_pool_worker(frame: FrameType | None) -> bool:
    return frame is not None and frame.f_code.co_name == "_worker" and \
        frame.f_code.co_filename.endswith(os.path.join("concurrent", "futures", "thread.py"))


def _children() -> set[int]:
    """Live direct children of this process (from /proc, cheap enough to read per test)."""
    pids: set[int] = set()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as handle:
                pids.update(int(p) for p in handle.read().split())
        except (OSError, ValueError):
            continue
    return {pid for pid in pids if pid not in _KEPT and _running(pid)}


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except OSError:
        return "?"


def _stack(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or -1)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)\n"


@pytest.fixture(autouse=True)
def _nothing_left_running() -> Iterator[None]:
    threads, children = _threads(), _children()
    yield
    deadline = time.monotonic() + GRACE_S
    while True:
        new_threads = _threads() - threads
        new_children = _children() - children
        if not (new_threads or new_children) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    # name each child before stopping it: a killed child's cmdline reads empty once it is a zombie
    commands = {pid: _cmdline(pid) for pid in sorted(new_children)}
    for pid in commands:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    problems = [f"thread {t.name!r} still running:\n{_stack(t)}" for t in new_threads]
    problems += [f"child process {pid} still running (killed now): {command}"
                 for pid, command in commands.items()]
    if problems:
        pytest.fail("the test left behind:\n" + "\n".join(problems), pytrace=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    left = _threads()
    if not left:
        return
    names = ", ".join(sorted(t.name for t in left))
    sys.stderr.write(f"\nleftovers: threads still running at the end of the session: {names}\n")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    sys.stdout.flush()
    faulthandler.dump_traceback_later(EXIT_GRACE_S, exit=True, file=sys.stderr)
