"""How much parallel work this process may do: the cores it may run on, and whether forking
worker processes is safe right now. Shared by the collectors' thread pools and the readers'
process pools, so that they agree."""

from __future__ import annotations

import os
import threading


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether a forked worker would be sound: a fork keeps only the forking thread, so a lock
    another thread held (logging's, an allocator's) would stay locked in the child forever."""
    return hasattr(os, "fork") and threading.active_count() <= 1
