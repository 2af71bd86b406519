"""The leftovers plugin (tests/leftovers.py) fails a test that leaves a thread or a process
running, and leaves alone what it should: run on small test files in a pytest subprocess."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent

INNER = textwrap.dedent('''
    import subprocess, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor

    import pytest
    from leftovers import outlives_the_test

    KEPT = []

    def test_thread_left_running():
        threading.Thread(target=threading.Event().wait, name="forgotten").start()  # forever

    def test_child_left_running():
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def test_child_a_fixture_owns():
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        outlives_the_test(proc.pid)
        KEPT.append(proc)

    def test_daemon_thread_and_idle_pool_worker_and_a_waited_child():
        threading.Thread(target=time.sleep, args=(8,), daemon=True).start()
        pool = ThreadPoolExecutor(max_workers=1)
        pool.submit(time.sleep, 0).result()  # the worker stays, idle, until exit
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    def test_thread_that_ends_soon_after():
        threading.Thread(target=time.sleep, args=(0.3,)).start()

    def test_zz_stop_the_kept_child():
        for proc in KEPT:
            proc.kill()
            proc.wait()
''')


def test_leftovers_are_failed_by_name_and_the_rest_pass(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN tests that leave a thread (waiting forever) and a child process running, and tests
    # whose threads and children are no leftovers
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                          "from leftovers import _nothing_left_running, pytest_unconfigure\n")
    pytester.makepyfile(test_inner=INNER)
    # WHEN run, with the watchdog at the end of the session set to 2 s
    monkeypatch.setenv("LEFTOVERS_EXIT_GRACE_S", "2")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    # THEN the two leftovers fail their tests by name, the others pass
    text = result.stdout.str()
    assert "6 passed, 2 errors" in text, text
    assert "ERROR at teardown of test_thread_left_running" in text
    assert "thread 'forgotten' still running" in text
    assert "ERROR at teardown of test_child_left_running" in text
    assert "still running (killed now)" in text and "time.sleep(60)" in text
    # AND the run does not hang on the forgotten thread: its stack is written, and the
    # watchdog ends the process
    err = result.stderr.str()
    assert "threads still running at the end of the session: forgotten" in err, err
    assert "Timeout (0:00:02)!" in err and result.ret != 0
