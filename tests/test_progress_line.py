"""The progress line is drawn whole on a terminal that reports no width (0 columns)."""

from __future__ import annotations

import os
import pty
import time

from hangscope.progress import TerminalProgress


def test_a_terminal_of_zero_columns_gets_the_whole_line() -> None:
    leader, follower = pty.openpty()  # a fresh pty reports 0 rows and 0 columns
    try:
        assert os.get_terminal_size(follower).columns == 0
        with os.fdopen(os.dup(follower), "w") as stream:
            progress = TerminalProgress(stream, title="collecting", delay=0.0, period=0.05)
            progress.update("stacks", "3 of 4 ranks")
            time.sleep(0.3)
            progress.finish()
        drawn = os.read(leader, 65536).decode(errors="replace")
    finally:
        os.close(leader)
        os.close(follower)
    assert "3 of 4 ranks" in drawn, drawn
