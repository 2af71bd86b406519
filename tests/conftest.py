import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# Every verdict.json a test writes must validate against the shipped schema (see the module).
from verdict_schema import (  # noqa: E402, F401
    pytest_runtest_teardown,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
