import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# No test leaves a thread or process running, and the run cannot hang at exit (see the module).
from leftovers import _nothing_left_running, pytest_unconfigure  # noqa: E402, F401

# Every verdict.json a test writes must validate against the shipped schema (see the module).
from verdict_schema import (  # noqa: E402, F401
    pytest_runtest_teardown,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
