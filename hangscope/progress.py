"""A one-line progress display on a terminal for collections that take more than a moment.

Collectors report what they are at through :class:`Progress` (``update(part, text)``); the
pipeline passes ``None`` when nobody is watching, and the CLI passes a :class:`TerminalProgress`
only when stderr is a terminal and ``--quiet`` is not given. Nothing is drawn for the first
``delay`` seconds, so a quick collection prints nothing extra; after that one line on stderr is
redrawn in place (a spinner, each part's state, the seconds spent and, with a time limit, how
much of it is used) and erased when the collection ends.

The drawing thread starts on the first update, not before: ``attach`` forks its analyzer child
before collecting, and forking is only done while the process runs one thread.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol, TextIO

SPINNER = "|/-\\"
BAR_WIDTH = 12


class Progress(Protocol):
    """What collectors report: ``part`` ("stacks", "flight recorder"...) is at ``text``."""

    def update(self, part: str, text: str) -> None: ...

    def finish(self) -> None: ...


class TerminalProgress:
    """Redraws one status line on ``stream`` every ``period`` s, after ``delay`` s."""

    def __init__(self, stream: TextIO, *, title: str = "collecting", delay: float = 1.0,
                 period: float = 0.1, limit_s: float | None = None) -> None:
        self.stream = stream
        self.title = title
        self.delay = delay
        self.period = period
        self.limit_s = limit_s
        self.parts: dict[str, str] = {}
        self.started = time.monotonic()
        self.drawn = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def update(self, part: str, text: str) -> None:
        with self._lock:
            self.parts[part] = text
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
                self._thread.start()

    def finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            if self.drawn:
                self._write("\r\033[K")
                self.drawn = False

    def line(self, now: float | None = None) -> str:
        """The status line as drawn at ``now`` (monotonic)."""
        spent = (now if now is not None else time.monotonic()) - self.started
        spin = SPINNER[int(spent / self.period) % len(SPINNER)]
        text = f"{spin} hangscope: {self.title}"
        if self.limit_s:
            share = min(1.0, spent / self.limit_s)
            filled = int(round(share * BAR_WIDTH))
            text += f" [{'#' * filled}{'.' * (BAR_WIDTH - filled)}]"
        text += f" {spent:.1f}s"
        if self.limit_s:
            text += f" of {self.limit_s:g}s"
        for part, state in self.parts.items():
            text += f" | {part}: {state}"
        return text

    def _run(self) -> None:
        if self._stop.wait(max(0.0, self.started + self.delay - time.monotonic())):
            return
        while True:
            with self._lock:
                if self._stop.is_set():
                    return
                width = _columns(self.stream)
                self._write("\r" + self.line()[:max(10, width - 1)] + "\033[K")
                self.drawn = True
            if self._stop.wait(self.period):
                return

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: stop drawing, keep collecting
            self._stop.set()


def _columns(stream: TextIO) -> int:
    """The terminal's width; 80 where it says none (0 columns: a serial console, some CI
    runners, a terminal not yet sized) rather than cutting the line to nothing."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 80
    return columns if columns >= 20 else 80
