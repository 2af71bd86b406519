"""The time a live collection may take (``--timeout``), shared by its collectors.

Every collector asks the budget before a step that can take long (a round of stack samples, a
flight-recorder trigger, a NCCL RAS query), caps that step's own timeout at the time left, and
records what it did not do (``cut``). The caller waits for the collectors only until the
deadline, writes what it has and says what was cut short; a collector still running then has
at most one capped step to finish, and whatever it writes after the manifest is dropped.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

from hangscope.progress import Progress

MARGIN_S = 0.25  # kept back for writing the manifest
MIN_STEP_S = 0.2  # a step shorter than this is not worth starting


@dataclass(slots=True)
class Budget:
    """``deadline`` is a ``time.monotonic()`` instant, None for no limit; ``limit_s`` is the
    user's ``--timeout``, for messages."""

    deadline: float | None = None
    limit_s: float | None = None
    progress: Progress | None = None
    cuts: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def left(self) -> float:
        """Seconds left before the manifest must be written (inf without a limit)."""
        if self.deadline is None:
            return math.inf
        return self.deadline - MARGIN_S - time.monotonic()

    def room_for(self, seconds: float) -> bool:
        return self.left() >= max(seconds, MIN_STEP_S)

    def cap(self, seconds: float, steps: int = 1) -> float:
        """A step's timeout: ``seconds``, or less so that ``steps`` of them in a row still end
        before the deadline (never below MIN_STEP_S)."""
        left = self.left()
        if math.isinf(left):
            return seconds
        return max(MIN_STEP_S, min(seconds, left / max(1, steps)))

    def cut(self, what: str) -> None:
        with self._lock:
            if what not in self.cuts:
                self.cuts.append(what)

    def report(self, part: str, text: str) -> None:
        if self.progress is not None:
            self.progress.update(part, text)

    def describe(self) -> str:
        return f"--timeout {self.limit_s:g}s" if self.limit_s is not None else "the time limit"
